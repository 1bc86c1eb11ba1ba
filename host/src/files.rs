//! The files and directories the host keeps (the lock and its queue, the store, the
//! log) are private to the user the runtime runs plugins as, root on a node:
//! - created 0700 (directories) and 0600 (files) whatever the umask;
//! - opened without following a symlink, so a planted link cannot make the host write
//!   or create its target;
//! - used only when this user owns them and nobody else can write them (a directory of
//!   ours writable by others would let them swap our files);
//! - not readable by others either: a lock file another user can open, it can flock,
//!   stalling every call on the node. An existing file of ours that others may read
//!   (v0.1 created them under the umask) is made 0600 before use.
//!
//! The compiled-module cache has rules of its own (`module::cache`).

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

pub const DIR_MODE: u32 = 0o700;
pub const FILE_MODE: u32 = 0o600;
const SYMLINK: &str = "is a symbolic link, which wasm-ipam never follows here";

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn refused(path: &Path, why: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!(
            "{} {why}; wasm-ipam uses only paths its own user owns and others cannot write",
            path.display()
        ),
    )
}

/// Whether `meta` (of `path`) is ours and writable by nobody else.
fn check_owned(path: &Path, meta: &fs::Metadata) -> io::Result<()> {
    if meta.uid() != euid() {
        return Err(refused(
            path,
            format!(
                "is owned by uid {}, not by this user (uid {})",
                meta.uid(),
                euid()
            ),
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(refused(
            path,
            format!(
                "is writable by its group or others (mode {:o})",
                meta.mode() & 0o7777
            ),
        ));
    }
    Ok(())
}

/// Creates the directory `path` (and any missing parents) mode 0700, or checks the
/// existing one: a directory (not a symlink to one), ours, writable by nobody else.
pub fn private_dir(path: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(path)?;
    let meta = fs::symlink_metadata(path)?;
    if !meta.is_dir() {
        return Err(refused(path, "is not a directory".into()));
    }
    check_owned(path, &meta)?;
    // Created under a umask that masks the owner's own bits (0o277, say).
    if meta.mode() & 0o700 != 0o700 {
        fs::set_permissions(path, fs::Permissions::from_mode(DIR_MODE))?;
    }
    Ok(())
}

/// Creates the directory a file of ours lives in when it is missing (0700); an
/// existing one may be a shared system directory (`/var/log`) and is left as it is:
/// the file itself is checked when opened.
pub fn parent_dir(file: &Path) -> io::Result<()> {
    match file.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(dir) if !dir.exists() => fs::DirBuilder::new()
            .recursive(true)
            .mode(DIR_MODE)
            .create(dir),
        _ => Ok(()),
    }
}

/// Opens a file of ours with `options`, creating it 0600 if they say so, never
/// through a symlink; refuses one that is not a regular file, not ours, or writable
/// by others, and makes one others could read 0600.
pub fn open(path: &Path, options: &mut OpenOptions) -> io::Result<File> {
    let file = options
        .mode(FILE_MODE)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => refused(path, SYMLINK.into()),
            _ => e,
        })?;
    if check_file_meta(path, &file.metadata()?)? {
        file.set_permissions(fs::Permissions::from_mode(FILE_MODE))?;
    }
    Ok(file)
}

/// Opens the directory `path` to flock it, never through a symlink.
pub fn open_dir(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => refused(path, SYMLINK.into()),
            _ => e,
        })
}

/// Takes an exclusive flock(2) on `file` for a short critical section shared with
/// other calls (not the host-wide lock, which queues): tries until `until`, pausing
/// from 1 ms up to `max_pause` between tries. False if another held it all along.
pub fn lock_until(file: &File, until: Instant, max_pause: Duration) -> io::Result<bool> {
    let mut pause = Duration::from_millis(1);
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(true),
            Err(TryLockError::WouldBlock) => {
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(false);
                }
                std::thread::sleep(pause.min(left));
                pause = (pause * 2).min(max_pause);
            }
            Err(TryLockError::Error(e)) => return Err(e),
        }
    }
}

/// Checks an existing file of ours without opening it (one another library opens,
/// like the store's database): a regular file, not a symlink, ours, writable by
/// nobody else; one others could read is made 0600.
pub fn check_file(path: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() {
        return Err(refused(path, SYMLINK.into()));
    }
    if check_file_meta(path, &meta)? {
        fs::set_permissions(path, fs::Permissions::from_mode(FILE_MODE))?;
    }
    Ok(())
}

/// Refuses a file (`meta`, of `path`) that is not regular, not ours or writable by
/// others; says whether others may read it, so it must be made 0600.
fn check_file_meta(path: &Path, meta: &fs::Metadata) -> io::Result<bool> {
    if !meta.is_file() {
        return Err(refused(path, "is not a regular file".into()));
    }
    check_owned(path, meta)?;
    Ok(meta.mode() & 0o077 != 0)
}

/// Writes `bytes` to `path` through a temporary file in the same directory (made with
/// `mode`, synced, then renamed over `path`), so a reader sees the old file or the new
/// one, never part of one. The temporary is removed if anything fails.
pub fn write_atomically(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let written = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(mode)
        .open(&tmp)
        .and_then(|mut file| file.write_all(bytes).and_then(|()| file.sync_all()))
        .and_then(|()| fs::rename(&tmp, path));
    if written.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    written
}

/// A small record of ours at `path`, kept whole or not at all: `Some` writes it
/// ([`write_atomically`], 0600, its directory made private), `None` removes it (one
/// already absent is no error).
pub fn put_record(path: &Path, bytes: Option<&[u8]>) -> io::Result<()> {
    match bytes {
        Some(bytes) => {
            if let Some(dir) = path.parent() {
                private_dir(dir)?;
            }
            write_atomically(path, bytes, FILE_MODE)
        }
        None => match fs::remove_file(path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
    }
}

/// Makes a rename or a new name in `dir` durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        fs::symlink_metadata(path).unwrap().mode() & 0o7777
    }

    #[test]
    fn created_private() {
        // (Whatever the umask: the integration suite runs the binary under umask 000.)
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("a/b");
        private_dir(&sub).unwrap();
        open(&sub.join("f"), OpenOptions::new().write(true).create(true)).unwrap();
        assert_eq!(mode(&sub), 0o700);
        assert_eq!(mode(&dir.path().join("a")), 0o700);
        assert_eq!(mode(&sub.join("f")), 0o600);
    }

    #[test]
    fn symlinks_are_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let err = open(&link, OpenOptions::new().write(true).create(true)).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert!(!target.exists(), "the dangling link's target was created");
        assert!(check_file(&link).is_err());
        fs::create_dir(dir.path().join("real")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("real"), dir.path().join("dirlink")).unwrap();
        assert!(private_dir(&dir.path().join("dirlink")).is_err());
    }

    #[test]
    fn writable_by_others_is_refused_readable_is_tightened() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().join("shared");
        fs::create_dir(&shared).unwrap();
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o770)).unwrap();
        let err = private_dir(&shared).unwrap_err();
        assert!(
            err.to_string().contains("writable by its group or others"),
            "{err}"
        );

        let file = dir.path().join("f");
        fs::write(&file, "").unwrap();
        fs::set_permissions(&file, fs::Permissions::from_mode(0o666)).unwrap();
        assert!(open(&file, OpenOptions::new().read(true)).is_err());
        fs::set_permissions(&file, fs::Permissions::from_mode(0o644)).unwrap();
        open(&file, OpenOptions::new().read(true)).unwrap();
        assert_eq!(mode(&file), 0o600);
    }
}
