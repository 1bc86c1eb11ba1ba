//! The host's log file (`ipam.logFile`): JSON lines, one per event, appended with a
//! single write each so concurrent calls interleave whole lines. Guest `log` messages
//! and stdout/stderr land here too; stdout stays reserved for the CNI result. The
//! file is private (0600, see [`crate::files`]): guests' output may hold what only
//! root should read. It is bounded over time by rotation ([`crate::log_rotation`]),
//! checked before every line: a herd of calls that opened the file before it filled
//! would otherwise all append to it. The log is an aid, not part of the answer: a
//! log that cannot be opened or written (a full disk) costs the call one line on
//! stderr, never its result.

use crate::error::{CniError, code};
use crate::files;
use crate::limits::LogRotation;
use crate::log_rotation;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use tracing_subscriber::fmt::MakeWriter;

/// Sends this process's log events to `path`, rotated as `rotation` says; if it
/// cannot be opened, says so on stderr and the call goes on unlogged.
pub fn init(path: &Path, rotation: LogRotation) {
    let file = files::parent_dir(path)
        .and_then(|()| files::open(path, OpenOptions::new().create(true).append(true)));
    let file = match file {
        Ok(file) => file,
        Err(e) => return unlogged(path, "cannot open", &e),
    };
    // A second init in one process (as in unit tests) keeps the first subscriber.
    let _ = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_max_level(tracing::Level::DEBUG)
        // A failed write is reported once, by the writer, not once per event.
        .log_internal_errors(false)
        .with_writer(RotatingLog {
            path: path.to_path_buf(),
            rotation,
            file: Mutex::new(file),
        })
        .try_init();
}

/// The first failure to open, rotate or write the log, on stderr (which the runtime
/// keeps, unlike stdout's result); later ones are not repeated.
fn unlogged(path: &Path, what: &str, e: &io::Error) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if SAID.swap(true, Ordering::Relaxed) {
        return;
    }
    let error = CniError::new(
        code::IO_FAILURE,
        format!("{what} log file {}", path.display()),
    )
    .with_details(e);
    // Not eprintln!: a closed stderr must not panic the call either.
    let _ = writeln!(
        io::stderr(),
        "wasm-ipam: {error}; the call goes on without its log lines"
    );
}

struct RotatingLog {
    path: PathBuf,
    rotation: LogRotation,
    file: Mutex<File>,
}

/// One event's line: tracing formats the event whole, then writes it through this.
struct Line<'a> {
    path: &'a Path,
    file: MutexGuard<'a, File>,
}

impl<'a> MakeWriter<'a> for RotatingLog {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Line<'a> {
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let LogRotation { max_bytes, kept } = self.rotation;
        if let Err(e) = log_rotation::rotate_if_full(&mut file, &self.path, max_bytes, kept) {
            // The line goes to the file this call has, if it still can.
            unlogged(&self.path, "cannot rotate", &e);
        }
        Line {
            path: &self.path,
            file,
        }
    }
}

impl Write for Line<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file
            .write(buf)
            .inspect_err(|e| unlogged(self.path, "cannot write", e))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}
