//! Taking over from another IPAM plugin: the [`ImportRequest`] the host calls
//! `import-state` with (the old plugin's files, read by the host) and builders for the
//! [`StateFile`]s in it and the [`ImportReport`] a module answers with. The module's
//! writes commit like a handler's: all or nothing, only on `Ok`.
//!
//! ```
//! use wasm_ipam_guest::{ImportReport, ImportRequest, StateFile};
//!
//! let import = ImportRequest::for_test(
//!     "host-local",
//!     "net",
//!     None,
//!     vec![StateFile::new("10.0.0.5", "ctr-1\r\neth0").modified(1_700_000_000)],
//! );
//! assert_eq!(import.files()[0].modified.map(|m| m.seconds), Some(1_700_000_000));
//!
//! let report = ImportReport::default().note("lock: host-local's lock file, skipped");
//! assert_eq!((report.imported, report.notes.len()), (0, 1));
//! ```

use crate::request::parse_config;
use crate::{Error, ImportReport, StateFile, WallInstant};
use serde_json::Value;
use std::fmt::Display;

/// One import: where the state comes from, for which network, and its files.
#[derive(Debug, Clone)]
pub struct ImportRequest {
    format: String,
    network_name: String,
    config: Option<Value>,
    files: Vec<StateFile>,
}

impl ImportRequest {
    /// Wraps the host's arguments, parsing the configuration JSON (invalid JSON is
    /// code 6).
    pub fn new(
        format: String,
        network_name: String,
        config: Option<String>,
        files: Vec<StateFile>,
    ) -> Result<Self, Error> {
        Ok(ImportRequest {
            config: config.as_deref().map(parse_config).transpose()?,
            format,
            network_name,
            files,
        })
    }

    /// An import for tests outside a host.
    pub fn for_test(
        format: &str,
        network_name: &str,
        config: Option<Value>,
        files: Vec<StateFile>,
    ) -> Self {
        ImportRequest {
            format: format.into(),
            network_name: network_name.into(),
            config,
            files,
        }
    }

    /// Where the state comes from: `host-local` (one file per address holding
    /// `containerID\r\nifname`, and `last_reserved_ip.<N>`).
    pub fn format(&self) -> &str {
        &self.format
    }
    pub fn network_name(&self) -> &str {
        &self.network_name
    }
    /// The network's configuration, if the operator gave one.
    pub fn config(&self) -> Option<&Value> {
        self.config.as_ref()
    }
    /// The old plugin's files for this network.
    pub fn files(&self) -> &[StateFile] {
        &self.files
    }
}

impl StateFile {
    /// A file of the old plugin's state: its name within the network's directory
    /// and its bytes; when it was modified is unknown.
    pub fn new(name: impl Display, contents: impl Into<Vec<u8>>) -> Self {
        StateFile {
            name: name.to_string(),
            contents: contents.into(),
            modified: None,
        }
    }

    /// Sets when the file was last modified, in Unix seconds.
    pub fn modified(mut self, seconds: u64) -> Self {
        self.modified = Some(WallInstant {
            seconds,
            nanoseconds: 0,
        });
        self
    }
}

impl ImportReport {
    /// Adds a line for the operator (a file skipped, and why).
    pub fn note(mut self, note: impl Display) -> Self {
        self.notes.push(note.to_string());
        self
    }
}
