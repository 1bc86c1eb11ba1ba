//! The node's request rate to etcd (`qps`, `burst`): a token bucket shared by every
//! call on the node. Each call is its own process, so the bucket lives in a file in
//! `dataDir` (tokens and the wall-clock time they were counted at), read and written
//! under flock(2) for each request. A request that would have to wait past the call's
//! budget is refused at once, naming the limiter, instead of waiting in vain.

use crate::error::{CniError, code};
use crate::files;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub const RATE_FILE: &str = "etcd-rate";

/// The longest pause between looks at the bucket's file lock.
const LOCK_POLL: Duration = Duration::from_millis(5);

pub struct RateLimiter {
    file: File,
    qps: f64,
    burst: f64,
}

impl RateLimiter {
    pub fn open(data_dir: &Path, qps: f64, burst: u32) -> Result<Self, CniError> {
        let fail = |e: std::io::Error| {
            CniError::new(code::IO_FAILURE, "etcd rate limiter: cannot open its state")
                .with_details(e)
        };
        files::private_dir(data_dir).map_err(fail)?;
        let file = files::open(
            &data_dir.join(RATE_FILE),
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false),
        )
        .map_err(fail)?;
        Ok(RateLimiter {
            file,
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
                        "etcd: the node's rate limiter (qps {}, burst {}) would hold the {what} request {} ms, past the call's remaining budget; nothing was committed",
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
        let io_failure = |e| {
            CniError::new(
                code::IO_FAILURE,
                "etcd rate limiter: cannot update its state",
            )
            .with_details(e)
        };
        if !files::lock_until(&self.file, until, LOCK_POLL).map_err(io_failure)? {
            return Err(CniError::new(
                code::TRY_AGAIN_LATER,
                "etcd: the call's budget ran out waiting for the node's rate limiter state",
            ));
        }
        let result = self.update();
        let unlocked = self.file.unlock();
        let wait = result.map_err(io_failure)?;
        unlocked.map_err(io_failure)?;
        Ok(wait)
    }

    fn update(&mut self) -> std::io::Result<Duration> {
        let mut bytes = [0u8; 16];
        self.file.seek(SeekFrom::Start(0))?;
        let read = self.file.read(&mut bytes)?;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos() as u64;
        let (tokens, at) = if read == 16 {
            let tokens = f64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
            let at = u64::from_le_bytes(bytes[8..].try_into().expect("8 bytes"));
            (tokens, at)
        } else {
            (self.burst, now)
        };
        // A clock set back refills nothing; a damaged file holds at most a burst.
        let elapsed = now.saturating_sub(at) as f64 / 1e9;
        let tokens = if tokens.is_finite() { tokens } else { 0.0 };
        let tokens = (tokens + elapsed * self.qps).clamp(0.0, self.burst);
        let (left, wait) = if tokens >= 1.0 {
            (tokens - 1.0, Duration::ZERO)
        } else {
            (tokens, Duration::from_secs_f64((1.0 - tokens) / self.qps))
        };
        bytes[..8].copy_from_slice(&left.to_le_bytes());
        bytes[8..].copy_from_slice(&now.to_le_bytes());
        self.file.seek(SeekFrom::Start(0))?;
        self.file.write_all(&bytes)?;
        Ok(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate_and_never_past_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let mut limiter = RateLimiter::open(dir.path(), 20.0, 3).unwrap();
        let far = Instant::now() + Duration::from_secs(60);
        for _ in 0..3 {
            assert!(limiter.take(far, "read").unwrap() < Duration::from_millis(20));
        }
        // The bucket is shared through the file: a second limiter sees it empty.
        let mut other = RateLimiter::open(dir.path(), 20.0, 3).unwrap();
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
