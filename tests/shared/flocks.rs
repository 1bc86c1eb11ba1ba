//! Who holds and who waits for a flock, as /proc/locks shows it, and a lock held as
//! any other tool on the node would hold it: the host's lock tests and the real-binary
//! suites (tests/integration, tests/cri) ask the kernel the same way, written once and
//! included in each by `#[path]`.

use std::fs::File;
use std::path::Path;

/// One flock line of /proc/locks, holder's or waiter's.
struct Flock {
    /// A `->` line: the process is blocked waiting for this lock.
    waiting: bool,
    pid: u32,
    inode: u64,
}

/// The flocks of the whole machine now. A holder's line reads
/// `1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF`; a waiter's has `->` after the
/// number, shifting the other fields by one.
fn flocks() -> Vec<Flock> {
    let locks = std::fs::read_to_string("/proc/locks").expect("/proc/locks is readable");
    locks
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace().skip(1).peekable();
            let waiting = fields.next_if_eq(&"->").is_some();
            let mut fields = fields.skip(3);
            let pid = fields.next()?.parse().ok()?;
            let inode = fields.next()?.rsplit(':').next()?.parse().ok()?;
            Some(Flock {
                waiting,
                pid,
                inode,
            })
        })
        .collect()
}

/// The inode /proc/locks names `file` by, or `None` while it does not exist.
fn inode_of(file: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(file).ok().map(|meta| meta.ino())
}

/// Whether process `pid` is blocked waiting for any flock: a call queued on the lock.
pub fn waits_on_a_flock(pid: u32) -> bool {
    flocks().iter().any(|f| f.waiting && f.pid == pid)
}

/// Whether process `pid` (or a thread of it) is blocked waiting for `file`'s flock.
pub fn waits_on_flock_of(pid: u32, file: &Path) -> bool {
    inode_of(file).is_some_and(|inode| {
        flocks()
            .iter()
            .any(|f| f.waiting && f.pid == pid && f.inode == inode)
    })
}

/// Whether process `pid` holds the flock on `file`.
pub fn holds_flock_of(pid: u32, file: &Path) -> bool {
    inode_of(file).is_some_and(|inode| {
        flocks()
            .iter()
            .any(|f| !f.waiting && f.pid == pid && f.inode == inode)
    })
}

/// Takes `lock_file`'s flock as any other tool may (plain flock(2), making the file
/// and its directory if no call has yet): every call waits until the file is dropped.
pub fn hold_flock(lock_file: &Path) -> File {
    std::fs::create_dir_all(lock_file.parent().expect("a lock file has a directory")).unwrap();
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_file)
        .unwrap();
    file.lock().unwrap();
    file
}
