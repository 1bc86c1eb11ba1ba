//! The host's log file (`ipam.logFile`): JSON lines, one per event, appended with a
//! single write each so concurrent calls interleave whole lines. Guest `log` messages
//! and stdout/stderr land here too; stdout stays reserved for the CNI result. The
//! file is private (0600, see [`crate::files`]): guests' output may hold what only
//! root should read.

use crate::error::{CniError, code};
use crate::files;
use std::fs::OpenOptions;
use std::path::Path;
use std::sync::Mutex;

/// Sends this process's log events to `path`.
pub fn init(path: &Path) -> Result<(), CniError> {
    files::parent_dir(path).map_err(|e| log_error(path, e))?;
    let file = files::open(path, OpenOptions::new().create(true).append(true))
        .map_err(|e| log_error(path, e))?;
    // A second init in one process (as in unit tests) keeps the first subscriber.
    let _ = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_max_level(tracing::Level::DEBUG)
        .with_writer(Mutex::new(file))
        .try_init();
    Ok(())
}

fn log_error(path: &Path, e: std::io::Error) -> CniError {
    CniError::new(
        code::IO_FAILURE,
        format!("cannot open log file {}", path.display()),
    )
    .with_details(e)
}
