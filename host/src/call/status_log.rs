//! What STATUS logs: each condition once when it begins and once when it ends, with
//! how long it lasted. kubelet and the runtimes ask STATUS every few seconds, so a
//! line per poll would be thousands of identical lines a day, and the one line that
//! matters (when it began, when it was over) lost among them.
//!
//! STATUS takes no lock and no store, and each call is its own process: what was
//! logged is kept in `<dataDir>/status-logged/<network>.json`, written only when the
//! set of conditions changes. Two STATUS calls at once may both log a change (each
//! read the file before the other wrote it): a line doubled, never one lost. When the
//! file cannot be written (the data directory itself unusable, a condition STATUS
//! reports), every poll logs, as nothing can remember that it did.

use crate::files;
use crate::health::Condition;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// How bad a condition is for the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Severity {
    /// The node cannot serve ADDs: STATUS fails, kubelet turns the Node NotReady.
    Fault,
    /// Logged and exported; STATUS fails for it only under `strictStatus`.
    Warning,
}

/// One condition STATUS met: what it is, its code and message, since when (Unix s).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    pub what: String,
    pub condition: Condition,
    pub severity: Severity,
    pub since: u64,
}

impl Seen {
    fn same(&self, other: &Seen) -> bool {
        self.what == other.what && self.condition == other.condition
    }
}

fn path(data_dir: &Path, network: &str) -> PathBuf {
    data_dir
        .join("status-logged")
        .join(crate::health::file_name(network))
}

/// Logs what began and what ended since the last STATUS of `network`, and remembers
/// `now_seen` (each one's `since` kept from when it was first logged).
pub fn log_changes(data_dir: &Path, network: &str, now_seen: Vec<Seen>, now: u64) {
    let path = path(data_dir, network);
    let before: Vec<Seen> = std::fs::read(&path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default();
    let mut after = Vec::new();
    for mut seen in now_seen {
        match before.iter().find(|b| b.same(&seen)) {
            Some(logged) => seen.since = logged.since,
            None => began(network, &seen),
        }
        after.push(seen);
    }
    for gone in before.iter().filter(|b| !after.iter().any(|a| a.same(b))) {
        tracing::info!(
            target: "status",
            network,
            code = gone.condition.code,
            lasted_s = now.saturating_sub(gone.since),
            "STATUS: over after {} s: {}: {}",
            now.saturating_sub(gone.since),
            gone.what,
            gone.condition.msg
        );
    }
    if after == before {
        return;
    }
    let json = (!after.is_empty()).then(|| serde_json::to_vec(&after).expect("serialisable"));
    if let Err(e) = files::put_record(&path, json.as_deref()) {
        tracing::debug!(target: "status", "cannot remember what STATUS logged: {e}");
    }
}

fn began(network: &str, seen: &Seen) {
    let (code, msg) = (seen.condition.code, &seen.condition.msg);
    match seen.severity {
        Severity::Fault => tracing::error!(
            target: "status", network, code, since = seen.since,
            "STATUS: {}: {msg}", seen.what
        ),
        Severity::Warning => tracing::warn!(
            target: "status", network, code, since = seen.since,
            "STATUS: {}: {msg}", seen.what
        ),
    }
}
