//! The node's request rate to a cluster store (`qps`, `burst`): a token bucket shared
//! by every call and operator command on the node, as client-go's limiter is shared by
//! one process's requests. Each call is its own process, so the bucket lives in a file
//! in `dataDir` (the tokens, the monotonic time they were counted at, and the boot id
//! that time belongs to: after a reboot the bucket starts full), read and written under
//! flock(2) for each request. Calls take tokens only under the host-wide lock, after
//! the grant, so a wait counts against the post-lock budget; a request that would
//! have to wait past that budget is refused at once (code 11), naming the limiter,
//! instead of waiting in vain.

use crate::error::{CniError, code};
use crate::files;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// Where the kernel names this boot.
const BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";
/// The state's bytes: tokens (f64), monotonic nanoseconds (u64), the boot id.
const STATE_LEN: usize = 16 + 36;

/// The longest pause between looks at the bucket's file lock.
const LOCK_POLL: Duration = Duration::from_millis(5);

pub struct RateLimiter {
    file: File,
    /// The store it limits, as messages name it (`etcd`, `kubernetes`).
    store: &'static str,
    qps: f64,
    burst: f64,
}

impl RateLimiter {
    /// The limiter of `store` whose state is `data_dir/file`.
    pub fn open(
        data_dir: &Path,
        store: &'static str,
        file: &str,
        qps: f64,
        burst: u32,
    ) -> Result<Self, CniError> {
        let fail = |e: std::io::Error| {
            CniError::new(
                code::IO_FAILURE,
                format!("{store} rate limiter: cannot open its state"),
            )
            .with_details(e)
        };
        files::private_dir(data_dir).map_err(fail)?;
        let file = files::open(
            &data_dir.join(file),
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false),
        )
        .map_err(fail)?;
        Ok(RateLimiter {
            file,
            store,
            qps,
            burst: f64::from(burst),
        })
    }

    /// Takes one token, waiting for it if it comes before `until`; returns the wait.
    /// `what` names the request, for the error when the token would come too late.
    pub fn take(&mut self, until: Instant, what: &str) -> Result<Duration, CniError> {
        let started = Instant::now();
        loop {
            let wait = self.try_take(until)?;
            if wait.is_zero() {
                return Ok(started.elapsed());
            }
            if Instant::now() + wait > until {
                return Err(CniError::new(
                    code::TRY_AGAIN_LATER,
                    format!(
                        "{}: the node's rate limiter (qps {}, burst {}) would hold the {what} request {} ms, past the call's remaining budget; nothing was committed",
                        self.store,
                        self.qps,
                        self.burst,
                        wait.as_millis()
                    ),
                ));
            }
            std::thread::sleep(wait);
        }
    }

    /// Takes a token if one is there (zero), else says how long until one is.
    fn try_take(&mut self, until: Instant) -> Result<Duration, CniError> {
        let store = self.store;
        let io_failure = |e| {
            CniError::new(
                code::IO_FAILURE,
                format!("{store} rate limiter: cannot update its state"),
            )
            .with_details(e)
        };
        if !files::lock_until(&self.file, until, LOCK_POLL).map_err(io_failure)? {
            return Err(CniError::new(
                code::TRY_AGAIN_LATER,
                format!(
                    "{store}: the call's budget ran out waiting for the node's rate limiter state"
                ),
            ));
        }
        let result = self.update();
        let unlocked = self.file.unlock();
        let wait = result.map_err(io_failure)?;
        unlocked.map_err(io_failure)?;
        Ok(wait)
    }

    fn update(&mut self) -> std::io::Result<Duration> {
        let mut bytes = [0u8; STATE_LEN];
        self.file.seek(SeekFrom::Start(0))?;
        let mut read = 0;
        while read < STATE_LEN {
            match self.file.read(&mut bytes[read..])? {
                0 => break,
                n => read += n,
            }
        }
        let now = monotonic_nanos();
        let boot = boot_id();
        let (tokens, at) = if read == STATE_LEN && bytes[16..] == boot {
            let tokens = f64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
            let at = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
            (tokens, at)
        } else {
            // No state, a damaged one, or one of an earlier boot, whose monotonic
            // times mean nothing now: a full bucket.
            (self.burst, now)
        };
        // A damaged file holds at most a burst.
        let elapsed = now.saturating_sub(at) as f64 / 1e9;
        let tokens = if tokens.is_finite() { tokens } else { 0.0 };
        let tokens = (tokens + elapsed * self.qps).clamp(0.0, self.burst);
        let (left, wait) = if tokens >= 1.0 {
            (tokens - 1.0, Duration::ZERO)
        } else {
            (tokens, Duration::from_secs_f64((1.0 - tokens) / self.qps))
        };
        bytes[..8].copy_from_slice(&left.to_le_bytes());
        bytes[8..16].copy_from_slice(&now.to_le_bytes());
        bytes[16..].copy_from_slice(&boot);
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(&bytes)?;
        Ok(wait)
    }
}

/// CLOCK_MONOTONIC in nanoseconds: the wall clock can be set back or forward (NTP, an
/// operator), and a bucket counted on it would refill too much or never.
pub(super) fn monotonic_nanos() -> u64 {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut now) };
    (now.tv_sec as u64) * 1_000_000_000 + now.tv_nsec as u64
}

/// This boot's id (36 bytes), or zeros where the kernel does not say.
pub(super) fn boot_id() -> [u8; 36] {
    let mut id = [0u8; 36];
    if let Ok(text) = std::fs::read_to_string(BOOT_ID) {
        let text = text.trim().as_bytes();
        let n = text.len().min(36);
        id[..n].copy_from_slice(&text[..n]);
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate_and_never_past_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let mut limiter = RateLimiter::open(dir.path(), "etcd", "rate", 20.0, 3).unwrap();
        let far = Instant::now() + Duration::from_secs(60);
        for _ in 0..3 {
            assert!(limiter.take(far, "read").unwrap() < Duration::from_millis(20));
        }
        // The bucket is shared through the file: a second limiter sees it empty.
        let mut other = RateLimiter::open(dir.path(), "etcd", "rate", 20.0, 3).unwrap();
        let waited = other.take(far, "read").unwrap();
        assert!(waited >= Duration::from_millis(20), "{waited:?}");
        let soon = Instant::now() + Duration::from_millis(1);
        let err = other.take(soon, "commit").unwrap_err();
        assert_eq!(err.code, code::TRY_AGAIN_LATER);
        assert!(
            err.msg.contains("rate limiter") && err.msg.contains("commit"),
            "{err}"
        );
    }
}

#[cfg(test)]
mod boot_tests {
    use super::*;

    #[test]
    fn a_bucket_of_an_earlier_boot_starts_full() {
        let dir = tempfile::tempdir().unwrap();
        let far = Instant::now() + Duration::from_secs(60);
        let mut limiter = RateLimiter::open(dir.path(), "kubernetes", "rate", 0.001, 2).unwrap();
        limiter.take(far, "read").unwrap();
        limiter.take(far, "read").unwrap();
        // Empty now: the next token is 1000 s away, past the budget.
        let soon = Instant::now() + Duration::from_secs(1);
        let err = limiter.take(soon, "read").unwrap_err();
        assert!(err.msg.starts_with("kubernetes: "), "{err}");
        // The same state written by another boot: full again.
        let path = dir.path().join("rate");
        let mut state = std::fs::read(&path).unwrap();
        assert_eq!(state.len(), STATE_LEN);
        state[16..].copy_from_slice(&[b'x'; 36]);
        std::fs::write(&path, state).unwrap();
        assert!(limiter.take(soon, "read").unwrap() < Duration::from_millis(50));
    }
}
