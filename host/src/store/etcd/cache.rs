//! What the node's calls last read and wrote of each network in etcd, kept in
//! `dataDir` between calls: a key found here is not asked of etcd again. The commit's
//! transaction compares each such key's modification revision as it compares a key
//! read from etcd, so a copy another node made stale fails the commit, which then
//! forgets the network's copies and runs the call again on fresh reads. A call that
//! commits nothing but read from here confirms its reads with one transaction of
//! compares alone.
//!
//! Only a cache ([`Kept`]).

use crate::store::kept::Kept;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

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

pub struct Cache(Kept<Network>);

impl Cache {
    pub fn new(data_dir: &Path, store: &str) -> Self {
        Cache(Kept::new(data_dir, CACHE_FILE, store))
    }

    pub fn get(&self, network: &str) -> Network {
        self.0.get(network)
    }

    /// Replaces `network`'s copies (all dropped past [`MAX_KEYS`]).
    pub fn put(&self, network: &str, mut copies: Network) {
        if copies.keys.len() > MAX_KEYS {
            copies.keys.clear();
        }
        let empty = copies.keys.is_empty() && copies.own_row.is_none() && copies.others.is_none();
        self.0.put(network, (!empty).then_some(copies));
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
