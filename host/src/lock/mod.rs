//! The host-wide IPAM lock: flock(2) on one file, like Calico's, so every wasm-ipam
//! call on the node (and any other tool that flocks the same file) is serialised.
//! wasm-ipam calls that must wait queue in arrival order ([`queue`]), so the lock is
//! granted first come, first served rather than in flock's arbitrary order; a call
//! that finds it free with nobody queued just takes the flock.
//!
//! The grant instant is recorded in the guard, because the deadline must start there
//! and nowhere earlier (see [`deadline::Deadline::from_grant`]).

pub mod deadline;
pub mod queue;

use crate::error::{CniError, code};
use crate::files;
use queue::Ticket;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

/// Holding this means holding the lock; dropping it closes the file, which releases it.
#[derive(Debug)]
pub struct LockGuard {
    // Declared (so dropped) before the ticket: the flock goes first, then the next
    // call in the queue may proceed.
    _file: File,
    /// None when granted uncontended, without queueing.
    _ticket: Option<Ticket>,
    granted: Instant,
    granted_wall: SystemTime,
    waited: Duration,
}

impl LockGuard {
    /// Granted now, to a call that started asking at `started`.
    fn granted_now(file: File, ticket: Option<Ticket>, started: Instant) -> Self {
        let granted = Instant::now();
        LockGuard {
            _file: file,
            _ticket: ticket,
            granted,
            granted_wall: SystemTime::now(),
            waited: granted - started,
        }
    }
    /// When the lock was granted (monotonic).
    pub fn granted(&self) -> Instant {
        self.granted
    }
    /// When the lock was granted (wall clock), for timestamps.
    pub fn granted_wall(&self) -> SystemTime {
        self.granted_wall
    }
    /// How long the call waited for the lock.
    pub fn waited(&self) -> Duration {
        self.waited
    }
}

fn open(path: &Path) -> Result<File, CniError> {
    let io_error = |what: &str, e: std::io::Error| {
        CniError::new(
            code::IO_FAILURE,
            format!("cannot {what} lock file {}", path.display()),
        )
        .with_details(e)
    };
    let open = || {
        files::open(
            path,
            OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false),
        )
    };
    // Its directory is made only when missing, which the open says: the usual call
    // spends no system call looking for it.
    match open() {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            files::parent_dir(path).map_err(|e| io_error("create the directory of", e))?;
            open()
        }
        opened => opened,
    }
    .map_err(|e| io_error("open", e))
}

/// Whether a call could use the lock file at `path` (creating it as a call would),
/// without taking the lock: for CNI STATUS, which must answer while calls queue.
pub fn check_usable(path: &Path) -> Result<(), CniError> {
    open(path).map(drop)
}

/// The queue directory that orders waiters for the lock at `lock_file`.
pub fn queue_dir(lock_file: &Path) -> PathBuf {
    let mut name = lock_file.as_os_str().to_owned();
    name.push(".queue");
    PathBuf::from(name)
}

/// How often a waiting call looks whether its caller is still there.
const CALLER_POLL: Duration = Duration::from_millis(100);

/// Takes the lock at `path`, waiting at most `timeout` when given. A timeout is "try
/// again later" (code 11): nothing has been done yet, so nothing changed.
pub fn acquire(path: &Path, timeout: Option<Duration>) -> Result<LockGuard, CniError> {
    match acquire_unless(path, timeout, &|| false)? {
        Some(guard) => Ok(guard),
        None => unreachable!("a wait nobody abandons ends granted or failed"),
    }
}

/// [`acquire`], giving up the wait (`Ok(None)`) as soon as `abandoned()` turns true,
/// which a waiting call looks at every [`CALLER_POLL`].
///
/// Uncontended, the call takes the flock and, finding nobody queued, is done: no
/// ticket, no thread. Otherwise it queues, each step first tried without blocking
/// (take a ticket, find no earlier call still queued, take the flock); only a call
/// that must wait goes on, from where it stopped, with blocking waits on another
/// thread, since flock(2) has no timeout.
pub fn acquire_unless(
    path: &Path,
    timeout: Option<Duration>,
    abandoned: &dyn Fn() -> bool,
) -> Result<Option<LockGuard>, CniError> {
    let started = Instant::now();
    let file = open(path)?;
    let dir = queue_dir(path);
    let failed = |e| lock_failed(path, e);
    if queue::flock(&file, false).map_err(failed)? {
        if queue::nobody_queued(&dir).map_err(failed)? {
            return Ok(Some(LockGuard::granted_now(file, None, started)));
        }
        // Free, but a call is queued for it: taking it now would overtake that call.
        file.unlock().map_err(failed)?;
    }
    let mut ticket = Ticket::join(&dir, false).map_err(failed)?;
    let free = match ticket.as_mut() {
        Some(ticket) => {
            ticket.wait(false).map_err(failed)? && queue::flock(&file, false).map_err(failed)?
        }
        None => false,
    };
    let (ticket, file) = match (ticket, free) {
        (Some(ticket), true) => (ticket, file),
        (ticket, _) => {
            let wait = move || -> std::io::Result<(Ticket, File)> {
                let mut ticket = match ticket {
                    Some(ticket) => ticket,
                    None => Ticket::join(&dir, true)?.expect("a blocking join joins"),
                };
                ticket.wait(true)?;
                file.lock()?;
                Ok((ticket, file))
            };
            match wait_at_most(path, timeout, abandoned, wait)? {
                Some(granted) => granted,
                None => return Ok(None),
            }
        }
    };
    Ok(Some(LockGuard::granted_now(file, Some(ticket), started)))
}

/// Runs the blocking `wait` on another thread (flock(2) has no timeout) and stops
/// listening at `timeout`, or as soon as `abandoned()` (`Ok(None)`). If the grant
/// comes later, the thread's send fails and dropping its ticket and file releases
/// both at once; if the process exits first, so does the kernel.
fn wait_at_most(
    path: &Path,
    timeout: Option<Duration>,
    abandoned: &dyn Fn() -> bool,
    wait: impl FnOnce() -> std::io::Result<(Ticket, File)> + Send + 'static,
) -> Result<Option<(Ticket, File)>, CniError> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(wait());
    });
    let until = timeout.map(|t| Instant::now() + t);
    loop {
        let left = until.map_or(CALLER_POLL, |u| u.saturating_duration_since(Instant::now()));
        match rx.recv_timeout(left.min(CALLER_POLL)) {
            Ok(result) => return result.map(Some).map_err(|e| lock_failed(path, e)),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(lock_failed(
                    path,
                    std::io::Error::other("the waiting thread died"),
                ));
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if abandoned() {
            return Ok(None);
        }
        if let (Some(timeout), Some(until)) = (timeout, until)
            && Instant::now() >= until
        {
            return Err(CniError::new(
                code::TRY_AGAIN_LATER,
                format!(
                    "the host-wide IPAM lock {} was not granted within {:?}; nothing was changed",
                    path.display(),
                    timeout
                ),
            ));
        }
    }
}

fn lock_failed(path: &Path, e: std::io::Error) -> CniError {
    CniError::new(code::IO_FAILURE, format!("cannot lock {}", path.display())).with_details(e)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::flocks::waits_on_flock_of;
    use crate::test_support::waiting::wait_until;

    #[test]
    fn timeout_when_held_then_granted_after_release() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/ipam.lock");
        let held = acquire(&path, None).unwrap();
        let err = acquire(&path, Some(Duration::from_millis(50))).unwrap_err();
        assert_eq!(err.code, 11);
        drop(held);
        acquire(&path, Some(Duration::from_secs(30))).expect("granted once released");
    }

    #[test]
    fn uncontended_the_lock_is_granted_without_queueing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ipam.lock");
        let held = acquire(&path, None).unwrap();
        assert!(held._ticket.is_none(), "granted through the queue");
        assert!(!queue_dir(&path).exists(), "a queue was made");
        // Other tools' plain flock on the lock file is still excluded.
        assert!(File::open(&path).unwrap().try_lock().is_err());
    }

    #[test]
    fn a_free_flock_is_not_taken_past_a_queued_call() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ipam.lock");
        // First in the queue, not yet holding the flock.
        let queued = Ticket::take(&queue_dir(&path)).unwrap();
        let err = acquire(&path, Some(Duration::from_millis(50))).unwrap_err();
        assert_eq!(err.code, 11, "granted past the queued call");
        assert!(
            File::open(&path).unwrap().try_lock().is_ok(),
            "the flock it gave back is free"
        );
        drop(queued);
        acquire(&path, Some(Duration::from_secs(60))).expect("granted once the queue was empty");
    }

    #[test]
    fn a_busy_counter_sends_the_call_down_the_waiting_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ipam.lock");
        drop(Ticket::take(&queue_dir(&path)).unwrap());
        // The lock is held, so the call queues; someone holds the queue's counter, so
        // its non-blocking first pass cannot join.
        let holder = acquire(&path, None).unwrap();
        let tail_path = queue_dir(&path).join("tail");
        let tail = File::open(&tail_path).unwrap();
        tail.lock().unwrap();
        let (tx, rx) = mpsc::channel();
        let waiting = path.clone();
        std::thread::spawn(move || {
            let _ = tx.send(acquire(&waiting, Some(Duration::from_secs(60))));
        });
        wait_until(
            "the call waited on the flock",
            Duration::from_secs(60),
            || waits_on_flock_of(std::process::id(), &tail_path),
        );
        drop(holder);
        assert!(
            rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "granted while the counter was held"
        );
        drop(tail);
        rx.recv_timeout(Duration::from_secs(60))
            .expect("granted once the counter was free")
            .expect("granted, not refused");
    }
}
