//! What the node's calls learned of each network's readiness, kept beside the store
//! (`<dataDir>/status/<network>.json`) for CNI STATUS, which takes no lock and reads
//! no store: whether the cluster store answered the last call that asked it, and what
//! the module last reported degraded (`cni:ipam/readiness`). A network with nothing to
//! report has no file. The pipeline writes it only when what it holds changes; a
//! file that cannot be read counts as nothing recorded, since STATUS must not fail
//! for a record of a condition.

use crate::error::CniError;
use crate::files;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A condition as a call met it: its CNI code and message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Condition {
    pub code: u32,
    pub msg: String,
}

impl Condition {
    /// An error as the condition it records.
    pub fn of(e: &CniError) -> Self {
        Condition {
            code: e.code,
            msg: e.msg.clone(),
        }
    }
}

/// What is recorded for one network on this node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Health {
    /// The last call that asked the cluster store failed to reach it (or was refused
    /// by it), with that failure and the Unix second it was first seen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store_unreachable: Option<(Condition, u64)>,
    /// What the module last reported degraded, and since when.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub degraded: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded_since: Option<u64>,
}

impl Health {
    pub fn is_empty(&self) -> bool {
        self.store_unreachable.is_none() && self.degraded.is_empty()
    }
}

/// What one run saw of the store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum StoreSeen {
    /// Not a cluster store, or the run sent it nothing.
    #[default]
    Unknown,
    /// Its requests were answered.
    Reached,
    /// Its last request failed so.
    Unreached(Condition),
}

/// What one run learned.
#[derive(Debug, Clone, Default)]
pub struct Learned {
    pub store: StoreSeen,
    /// What the module reported, if it did.
    pub degraded: Option<Vec<Condition>>,
}

impl Learned {
    fn is_nothing(&self) -> bool {
        self.store == StoreSeen::Unknown && self.degraded.is_none()
    }
}

/// Now, in Unix seconds: the clock the node's records (this one, the etcd store's
/// node records, `gc`'s grace) are stamped with; before 1970 reads as 0.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

const DIR: &str = "status";

/// The record's file name: the network name with every byte outside
/// `[A-Za-z0-9_-]` as `%XX`, so no name reaches outside the directory.
pub(crate) fn file_name(network: &str) -> String {
    let mut name = String::new();
    for b in network.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'-' => name.push(char::from(b)),
            _ => name.push_str(&format!("%{b:02X}")),
        }
    }
    name + ".json"
}

fn network_of(file: &str) -> Option<String> {
    let escaped = file.strip_suffix(".json")?;
    let mut bytes = Vec::new();
    let mut rest = escaped.as_bytes();
    while let Some((&b, tail)) = rest.split_first() {
        if b == b'%' {
            let hex = std::str::from_utf8(tail.get(..2)?).ok()?;
            bytes.push(u8::from_str_radix(hex, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(b);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

pub fn path(data_dir: &Path, network: &str) -> PathBuf {
    data_dir.join(DIR).join(file_name(network))
}

/// What is recorded for `network`; nothing when there is no record or it cannot be
/// read.
pub fn read(data_dir: &Path, network: &str) -> Health {
    read_file(&path(data_dir, network))
}

fn read_file(path: &Path) -> Health {
    std::fs::read(path)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

/// Every network with a record in `data_dir`, by name.
pub fn all(data_dir: &Path) -> Vec<(String, Health)> {
    let Ok(entries) = std::fs::read_dir(data_dir.join(DIR)) else {
        return Vec::new();
    };
    let mut all: Vec<(String, Health)> = entries
        .filter_map(Result::ok)
        .filter_map(|e| {
            let network = network_of(e.file_name().to_str()?)?;
            let health = read_file(&e.path());
            (!health.is_empty()).then_some((network, health))
        })
        .collect();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    all
}

/// `health` with what a run learned at Unix second `now`.
pub fn updated(mut health: Health, learned: &Learned, now: u64) -> Health {
    match &learned.store {
        StoreSeen::Unknown => {}
        StoreSeen::Reached => health.store_unreachable = None,
        StoreSeen::Unreached(condition) => {
            let since = health.store_unreachable.map_or(now, |(_, since)| since);
            health.store_unreachable = Some((condition.clone(), since));
        }
    }
    if let Some(degraded) = &learned.degraded
        && *degraded != health.degraded
    {
        health.degraded = degraded.clone();
        health.degraded_since = (!degraded.is_empty()).then_some(now);
    }
    health
}

/// Records what a run learned of `network`, writing only when the record changes
/// (a file that says the same thing with a later time is not rewritten).
pub fn record(data_dir: &Path, network: &str, learned: &Learned, now: u64) -> std::io::Result<()> {
    if learned.is_nothing() {
        return Ok(());
    }
    let path = path(data_dir, network);
    let before = read_file(&path);
    let after = updated(before.clone(), learned, now);
    if after == before {
        return Ok(());
    }
    let json = (!after.is_empty())
        .then(|| serde_json::to_vec(&after).map_err(std::io::Error::other))
        .transpose()?;
    files::put_record(&path, json.as_deref())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(code: u32, msg: &str) -> Condition {
        Condition {
            code,
            msg: msg.into(),
        }
    }

    #[test]
    fn names_escape_and_come_back() {
        for name in ["pods", "a/../b", "v4.pods", "%2F", "ünï"] {
            let file = file_name(name);
            assert!(!file.contains('/') && !file.starts_with('.'), "{file}");
            assert_eq!(network_of(&file).as_deref(), Some(name));
        }
        assert_ne!(file_name("a/b"), file_name("a%2Fb"));
    }

    #[test]
    fn a_record_keeps_when_it_began_and_goes_when_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let down = condition(11, "etcd: no member answered");
        let unreached = Learned {
            store: StoreSeen::Unreached(down.clone()),
            degraded: None,
        };
        record(dir.path(), "pods", &unreached, 100).unwrap();
        record(dir.path(), "pods", &unreached, 160).unwrap();
        let health = read(dir.path(), "pods");
        assert_eq!(health.store_unreachable, Some((down, 100)));
        // A run that says nothing leaves it; one that reached the store clears it.
        record(dir.path(), "pods", &Learned::default(), 170).unwrap();
        assert!(!read(dir.path(), "pods").is_empty());
        let full = vec![condition(140, "range set 0 has no address left")];
        let reached = Learned {
            store: StoreSeen::Reached,
            degraded: Some(full.clone()),
        };
        record(dir.path(), "pods", &reached, 180).unwrap();
        let health = read(dir.path(), "pods");
        assert_eq!(health.store_unreachable, None);
        assert_eq!((health.degraded, health.degraded_since), (full, Some(180)));
        assert_eq!(all(dir.path()).len(), 1);
        let cleared = Learned {
            store: StoreSeen::Reached,
            degraded: Some(Vec::new()),
        };
        record(dir.path(), "pods", &cleared, 190).unwrap();
        assert!(!path(dir.path(), "pods").exists());
        assert!(all(dir.path()).is_empty());
    }

    #[test]
    fn a_garbled_record_counts_as_nothing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(DIR)).unwrap();
        std::fs::write(path(dir.path(), "pods"), b"{not json").unwrap();
        assert!(read(dir.path(), "pods").is_empty());
    }
}
