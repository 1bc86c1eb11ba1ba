//! Renaming the log file aside once it is full, so the log stays within
//! (`logFiles` + 1) files over months of calls. Calls append with O_APPEND, each
//! line in one write, and rotate under an flock on a sidecar file (`<log>.lock`), not
//! the host-wide lock: a call writes its last line after releasing that. The names
//! (`<log>.1` newest … `<log>.N` oldest) are shared with `stats`, which reads them
//! back.

use crate::files;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long a call waits for another one's rotation (a few renames) before writing
/// its line to the file it has: a late rotation costs a line over the size, a stuck
/// one must not stall calls.
const ROTATION_WAIT: Duration = Duration::from_secs(2);

/// The `n`th renamed file of the log `path` (1 is the newest).
pub fn rotated(path: &Path, n: u32) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{n}"));
    name.into()
}

fn sidecar(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    name.into()
}

/// Called before each line with the log open as `file`: once the file holds
/// `max_bytes`, renames it aside (keeping `kept` renamed files) unless another call
/// has already, and makes `file` the log at `path` again. A file below the size costs
/// one fstat.
pub fn rotate_if_full(file: &mut File, path: &Path, max_bytes: u64, kept: u32) -> io::Result<()> {
    if file.metadata()?.len() < max_bytes {
        return Ok(());
    }
    let lock = files::open(
        &sidecar(path),
        OpenOptions::new().create(true).truncate(false).write(true),
    )?;
    if !files::lock_until(
        &lock,
        Instant::now() + ROTATION_WAIT,
        Duration::from_millis(10),
    )? {
        return Ok(());
    }
    // Under the sidecar lock, seen again: another call may have renamed our file
    // (and `path` is a new one), or an external logrotate may have truncated it.
    let ours = file.metadata()?;
    let current = match fs::symlink_metadata(path) {
        Ok(meta) => Some(meta),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let still_ours = current.is_some_and(|c| c.dev() == ours.dev() && c.ino() == ours.ino());
    if still_ours && ours.len() >= max_bytes {
        shift(path, kept)?;
    }
    *file = files::open(path, OpenOptions::new().create(true).append(true))?;
    Ok(())
}

/// `<log>.N-1` → `<log>.N` (replacing the oldest) … `<log>` → `<log>.1`. Each rename
/// is atomic, so every line stays in exactly one file, and a call that opened a file
/// before it was renamed appends to it under its new name.
fn shift(path: &Path, kept: u32) -> io::Result<()> {
    for n in (1..kept).rev() {
        match fs::rename(rotated(path, n), rotated(path, n + 1)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            other => other?,
        }
    }
    fs::rename(path, rotated(path, 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn open(path: &Path) -> File {
        files::open(path, OpenOptions::new().create(true).append(true)).unwrap()
    }

    #[test]
    fn a_full_log_is_renamed_aside_and_the_oldest_removed() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        for round in 0..4 {
            let mut file = open(&log);
            rotate_if_full(&mut file, &log, 10, 2).unwrap();
            writeln!(file, "line {round} of twelve").unwrap();
        }
        // Each line filled the file: the next one renamed it aside.
        let read = |p: PathBuf| fs::read_to_string(p).unwrap();
        assert_eq!(read(log.clone()), "line 3 of twelve\n");
        assert_eq!(read(rotated(&log, 1)), "line 2 of twelve\n");
        assert_eq!(read(rotated(&log, 2)), "line 1 of twelve\n");
        assert!(!rotated(&log, 3).exists());
    }

    #[test]
    fn a_file_another_call_renamed_is_not_renamed_again() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let mut late = open(&log);
        writeln!(late, "a full first file").unwrap();
        let mut early = open(&log);
        rotate_if_full(&mut early, &log, 10, 2).unwrap();
        writeln!(early, "second").unwrap();
        // `late` still has the renamed file open: it moves to the new one, which is
        // below the size, and nothing is shifted.
        rotate_if_full(&mut late, &log, 10, 2).unwrap();
        writeln!(late, "third").unwrap();
        assert_eq!(fs::read_to_string(&log).unwrap(), "second\nthird\n");
        assert_eq!(
            fs::read_to_string(rotated(&log, 1)).unwrap(),
            "a full first file\n"
        );
        assert!(!rotated(&log, 2).exists());
    }
}
