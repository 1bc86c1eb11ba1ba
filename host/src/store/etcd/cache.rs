//! What the node's calls last read and wrote of each network in etcd, kept in
//! `dataDir` between calls: a key found here is not asked of etcd again. The commit's
//! transaction compares each such key's modification revision as it compares a key
//! read from etcd, so a copy another node made stale fails the commit, which then
//! forgets the network's copies and runs the call again on fresh reads. A call that
//! commits nothing but read from here confirms its reads with one transaction of
//! compares alone.
//!
//! Only a cache: a missing, torn or foreign file is read as empty, and it is written
//! without a disk sync (a copy lost in a crash costs a read).

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The cache's file in `dataDir`.
pub const CACHE_FILE: &str = "etcd-cache";
/// The most keys kept per network: a node's own records and the few shared ones its
/// calls read (its blocks, the reservations), with room to spare.
pub const MAX_KEYS: usize = 1024;

/// One key as the node last saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seen {
    /// Its modification revision; 0: absent.
    pub revision: i64,
    /// Its value, in base64; none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    value: Option<String>,
}

impl Seen {
    pub fn new(revision: i64, value: Option<&[u8]>) -> Self {
        Seen {
            revision,
            value: value.map(|v| base64::engine::general_purpose::STANDARD.encode(v)),
        }
    }

    pub fn value(&self) -> Option<Vec<u8>> {
        self.value
            .as_ref()
            .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
    }
}

/// One network's copies.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Network {
    /// Entry keys within the network.
    #[serde(default)]
    pub keys: BTreeMap<String, Seen>,
    /// This node's usage row (its JSON) and its modification revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub own_row: Option<(String, i64)>,
    /// The other nodes' rows summed (JSON of the usage), and when they were read
    /// (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub others: Option<(String, u64)>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    /// Which etcd (its endpoints and prefix) the copies are of.
    store: String,
    networks: BTreeMap<String, Network>,
}

pub struct Cache {
    path: PathBuf,
    store: String,
}

impl Cache {
    pub fn new(data_dir: &Path, store: &str) -> Self {
        Cache {
            path: data_dir.join(CACHE_FILE),
            store: store.to_string(),
        }
    }

    fn read(&self) -> File {
        std::fs::read(&self.path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<File>(&bytes).ok())
            .filter(|file| file.store == self.store)
            .unwrap_or_else(|| File {
                store: self.store.clone(),
                networks: BTreeMap::new(),
            })
    }

    pub fn get(&self, network: &str) -> Network {
        self.read().networks.remove(network).unwrap_or_default()
    }

    /// Replaces `network`'s copies; a failure to write only costs the next call reads.
    pub fn put(&self, network: &str, mut copies: Network) {
        if copies.keys.len() > MAX_KEYS {
            copies.keys.clear();
        }
        let mut file = self.read();
        match copies.keys.is_empty() && copies.own_row.is_none() && copies.others.is_none() {
            true => file.networks.remove(network),
            false => file.networks.insert(network.to_string(), copies),
        };
        let bytes = serde_json::to_vec(&file).expect("serialisable");
        let tmp = self
            .path
            .with_extension(format!("tmp.{}", std::process::id()));
        let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, &self.path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            tracing::debug!(target: "store", "etcd: cannot keep the node's copies in {}: {e}", self.path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_of_one_etcd_are_not_read_for_another_and_too_many_are_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path(), "a");
        let mut copies = Network::default();
        copies
            .keys
            .insert("blk/x".into(), Seen::new(7, Some(&[0, 255, 1])));
        copies.keys.insert("rsv/y".into(), Seen::new(0, None));
        cache.put("n", copies);
        let back = cache.get("n");
        assert_eq!(back.keys["blk/x"].value(), Some(vec![0, 255, 1]));
        assert_eq!(back.keys["rsv/y"].value(), None);
        assert!(Cache::new(dir.path(), "b").get("n").keys.is_empty());
        let many = Network {
            keys: (0..=MAX_KEYS)
                .map(|i| (format!("k{i}"), Seen::new(1, None)))
                .collect(),
            ..Network::default()
        };
        cache.put("n", many);
        assert!(cache.get("n").keys.is_empty());
        std::fs::write(dir.path().join(CACHE_FILE), b"{").unwrap();
        assert!(cache.get("n").keys.is_empty());
    }
}
