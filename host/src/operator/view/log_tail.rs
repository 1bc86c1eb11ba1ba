//! Reading the log from its end: `stats` wants the recent calls, and reading a log
//! whole would take longer the longer the node has run. The current file, then its
//! renamed ones (`<log>.1`, `<log>.2`, …, see [`crate::log_rotation`]), each from its
//! end backwards in chunks, stopping as soon as the caller has what it needs.

use crate::limits::MAX_LOG_FILES;
use crate::log_rotation::rotated;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

/// Bytes read at a time.
const CHUNK: usize = 64 << 10;
/// A longer line is no line the host writes (they are a few KiB at most): skipped
/// rather than gathered without bound.
const MAX_LINE: usize = 1 << 20;

/// Passes each line of the log `path` and then of its renamed files to `each`, newest
/// first, until `each` returns false or the files end. The current file must exist;
/// renamed ones are read while they do.
pub fn lines_backwards(path: &Path, mut each: impl FnMut(&str) -> bool) -> io::Result<()> {
    let mut file = File::open(path)?;
    for n in 1..=MAX_LOG_FILES + 1 {
        if !file_backwards(&mut file, &mut each)? {
            return Ok(());
        }
        file = match File::open(rotated(path, n)) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
    }
    Ok(())
}

/// One file's lines, last first; false once `each` has said to stop.
fn file_backwards(file: &mut File, each: &mut impl FnMut(&str) -> bool) -> io::Result<bool> {
    let mut end = file.seek(SeekFrom::End(0))?;
    // The start of the line that began before the chunks read so far.
    let mut partial: Vec<u8> = Vec::new();
    let mut chunk = vec![0; CHUNK];
    while end > 0 {
        let start = end.saturating_sub(CHUNK as u64);
        let read = &mut chunk[..(end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(read)?;
        end = start;
        partial.splice(0..0, read.iter().copied());
        // Every line after the chunk's first newline is whole; before it, the line
        // may go on in the chunk before.
        let Some(first) = partial.iter().position(|&b| b == b'\n') else {
            if partial.len() > MAX_LINE {
                partial.clear();
            }
            continue;
        };
        for line in partial[first + 1..].rsplit(|&b| b == b'\n') {
            if !line.is_empty() && !each(&String::from_utf8_lossy(line)) {
                return Ok(false);
            }
        }
        partial.truncate(first);
    }
    Ok(partial.is_empty() || each(&String::from_utf8_lossy(&partial)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_backwards(path: &Path) -> Vec<String> {
        let mut lines = Vec::new();
        lines_backwards(path, |l| {
            lines.push(l.to_string());
            true
        })
        .unwrap();
        lines
    }

    #[test]
    fn lines_come_newest_first_across_chunks_and_renamed_files() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        // Lines that straddle chunk boundaries, one longer than a chunk.
        let old: Vec<String> = (0..3000)
            .map(|i| format!("old {i} {}", "x".repeat(i % 97)))
            .collect();
        let long = "y".repeat(CHUNK + 10);
        let new = ["new 0".to_string(), long.clone(), "new 2".to_string()];
        std::fs::write(rotated(&log, 1), old.join("\n") + "\n").unwrap();
        std::fs::write(&log, new.join("\n") + "\n").unwrap();
        let lines = all_backwards(&log);
        let expected: Vec<String> = new.iter().rev().chain(old.iter().rev()).cloned().collect();
        assert_eq!(lines.len(), expected.len());
        assert!(lines == expected, "lines differ from the files' in reverse");
    }

    #[test]
    fn reading_stops_when_asked() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        std::fs::write(&log, "a\nb\nc").unwrap();
        let mut seen = Vec::new();
        lines_backwards(&log, |l| {
            seen.push(l.to_string());
            seen.len() < 2
        })
        .unwrap();
        // A last line without its newline (being written) is read as it is.
        assert_eq!(seen, ["c", "b"]);
        assert!(lines_backwards(&dir.path().join("missing"), |_| true).is_err());
    }
}
