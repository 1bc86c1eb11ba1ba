//! `cni:ipam/log`: guest messages go to the host's log file, never to stdout (which
//! carries the CNI result). One call writes at most its log budget (`logLimitKiB`):
//! later messages are dropped and counted in the call's invocation line, so a module
//! cannot fill the node's disk. Messages are held until the attempt's end: one whose
//! commit conflicted in a shared store runs again, and its messages go with its writes
//! (a warning logged once per event stays once).

use super::DeadlineExceeded;
use crate::limits::truncated;
use crate::lock::deadline::Deadline;
use crate::module::bindings::log::{Host, Level};

/// Largest message kept; longer ones are cut.
const MAX_MESSAGE_BYTES: usize = 4096;
/// What a log line costs beyond its message (timestamp, level, target, stream, JSON),
/// counted so a flood of tiny messages spends the budget as fast as the disk fills.
const LINE_OVERHEAD: usize = 160;

pub struct GuestLog {
    deadline: Deadline,
    budget: usize,
    written: usize,
    dropped: u64,
    held: Vec<GuestLine>,
}

/// One message, held until its attempt's outcome is known.
pub struct GuestLine {
    level: Level,
    stream: &'static str,
    message: String,
}

impl GuestLine {
    /// Writes it to the host's log.
    pub fn emit(&self) {
        let (stream, message) = (self.stream, &self.message);
        match self.level {
            Level::Trace => tracing::trace!(target: "guest", stream, "{message}"),
            Level::Debug => tracing::debug!(target: "guest", stream, "{message}"),
            Level::Info => tracing::info!(target: "guest", stream, "{message}"),
            Level::Warn => tracing::warn!(target: "guest", stream, "{message}"),
            Level::Error => tracing::error!(target: "guest", stream, "{message}"),
        }
    }
}

impl GuestLog {
    pub fn new(deadline: Deadline, budget: usize) -> Self {
        GuestLog {
            deadline,
            budget,
            written: 0,
            dropped: 0,
            held: Vec::new(),
        }
    }

    /// The messages kept, for the caller to emit once the attempt is decided.
    pub fn take_lines(&mut self) -> Vec<GuestLine> {
        std::mem::take(&mut self.held)
    }

    /// Messages dropped because the call's log budget was spent.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Keeps `message` from the guest's `stream` if the budget allows, else counts it.
    pub fn write(&mut self, level: Level, stream: &'static str, message: &str) {
        let message = truncated(message, MAX_MESSAGE_BYTES);
        let cost = message.len() + LINE_OVERHEAD;
        if self.written + cost > self.budget {
            self.dropped += 1;
            return;
        }
        self.written += cost;
        self.held.push(GuestLine {
            level,
            stream,
            message: message.to_string(),
        });
    }
}

impl Host for GuestLog {
    fn log(&mut self, level: Level, message: String) -> wasmtime::Result<()> {
        if self.deadline.expired() {
            return Err(wasmtime::Error::new(DeadlineExceeded));
        }
        self.write(level, "log", &message);
        Ok(())
    }
}
