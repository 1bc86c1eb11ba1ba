//! The node's own homes as its last call left them, kept in `dataDir` between calls:
//! a call reads its home from here instead of asking the apiserver, and its one
//! write, conditional on the remembered `resourceVersion`, checks that nothing
//! changed it meanwhile (a 409 makes the call read it afresh and run again). Beside
//! each home, the other nodes' usage as last listed, for the quota check.
//!
//! Only a cache: a missing, torn or foreign file is read as empty, and it is written
//! without a disk sync (a copy lost in a crash costs one read).

use super::objects::{NodeUsage, Shard};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The cache's file in `dataDir`.
pub const HOMES_FILE: &str = "kubernetes-homes";

/// One network's cached home.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Cached {
    /// The home as the node last read or wrote it (never one locked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<Shard>,
    /// The other nodes' usage of the network, and when it was listed (Unix seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub others: Option<(NodeUsage, u64)>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct File {
    /// Which apiserver the homes are from: another's are no use.
    server: String,
    networks: BTreeMap<String, Cached>,
}

pub struct Homes {
    path: PathBuf,
    server: String,
}

impl Homes {
    pub fn new(data_dir: &Path, server: &str) -> Self {
        Homes {
            path: data_dir.join(HOMES_FILE),
            server: server.to_string(),
        }
    }

    fn read(&self) -> File {
        std::fs::read(&self.path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<File>(&bytes).ok())
            .filter(|file| file.server == self.server)
            .unwrap_or_else(|| File {
                server: self.server.clone(),
                networks: BTreeMap::new(),
            })
    }

    pub fn get(&self, network: &str) -> Cached {
        self.read().networks.remove(network).unwrap_or_default()
    }

    /// Changes `network`'s entry; a failure to write only costs the next call a read.
    pub fn update(&self, network: &str, change: impl FnOnce(&mut Cached)) {
        let mut file = self.read();
        let entry = file.networks.entry(network.to_string()).or_default();
        change(entry);
        if entry.home.is_none() && entry.others.is_none() {
            file.networks.remove(network);
        }
        let bytes = serde_json::to_vec(&file).expect("serialisable");
        let tmp = self
            .path
            .with_extension(format!("tmp.{}", std::process::id()));
        let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, &self.path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            tracing::debug!(target: "store", "kubernetes: cannot cache the node's home in {}: {e}", self.path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::kubernetes::objects::{Place, Spec};

    #[test]
    fn a_home_cached_for_one_server_is_not_read_for_another_and_a_torn_file_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let homes = Homes::new(dir.path(), "https://a");
        let place = Place::node("n", "node-a");
        let mut shard = Shard::new(&place, Spec::empty(&place));
        shard.metadata.resource_version = Some("7".into());
        homes.update("n", |c| c.home = Some(shard.clone()));
        assert_eq!(homes.get("n").home.unwrap().rv(), "7");
        assert!(Homes::new(dir.path(), "https://b").get("n").home.is_none());
        std::fs::write(dir.path().join(HOMES_FILE), b"{\"server\":").unwrap();
        assert!(homes.get("n").home.is_none());
        homes.update("n", |c| c.others = Some((NodeUsage::default(), 1)));
        homes.update("n", |c| c.others = None);
        assert!(
            !std::fs::read_to_string(dir.path().join(HOMES_FILE))
                .unwrap()
                .contains("\"n\""),
            "an empty entry goes"
        );
    }
}
