//! `cni:ipam/log`: guest messages go to the host's log file, never to stdout (which
//! carries the CNI result).

use super::DeadlineExceeded;
use crate::bindings::log::{Host, Level};
use crate::deadline::Deadline;

/// Largest message kept; longer ones are cut so a guest cannot flood the log.
const MAX_MESSAGE_BYTES: usize = 4096;

pub struct GuestLog {
    deadline: Deadline,
}

impl GuestLog {
    pub fn new(deadline: Deadline) -> Self {
        GuestLog { deadline }
    }
}

fn truncated(message: &str) -> &str {
    let mut end = message.len().min(MAX_MESSAGE_BYTES);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    &message[..end]
}

impl Host for GuestLog {
    fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        if self.deadline.expired() {
            return Err(wasmtime::Error::new(DeadlineExceeded));
        }
        let message = truncated(&message);
        match level {
            Level::Trace => tracing::trace!(target: "guest", "{message}"),
            Level::Debug => tracing::debug!(target: "guest", "{message}"),
            Level::Info => tracing::info!(target: "guest", "{message}"),
            Level::Warn => tracing::warn!(target: "guest", "{message}"),
            Level::Error => tracing::error!(target: "guest", "{message}"),
        }
        Ok(())
    }
}
