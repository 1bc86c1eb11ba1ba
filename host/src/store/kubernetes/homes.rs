//! The node's own homes as its last call left them, kept in `dataDir` between calls:
//! a call reads its home from here instead of asking the apiserver, and its one
//! write, conditional on the remembered `resourceVersion`, checks that nothing
//! changed it meanwhile (a 409 makes the call read it afresh and run again). Beside
//! each home, the other nodes' usage as last listed, for the quota check.
//!
//! Only a cache ([`Kept`]).

use super::objects::{NodeUsage, Shard};
use crate::store::kept::Kept;
use serde::{Deserialize, Serialize};
use std::path::Path;

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

pub struct Homes(Kept<Cached>);

impl Homes {
    pub fn new(data_dir: &Path, server: &str) -> Self {
        Homes(Kept::new(data_dir, HOMES_FILE, server))
    }

    pub fn get(&self, network: &str) -> Cached {
        self.0.get(network)
    }

    /// Changes `network`'s entry.
    pub fn update(&self, network: &str, change: impl FnOnce(&mut Cached)) {
        let mut cached = self.0.get(network);
        change(&mut cached);
        let empty = cached.home.is_none() && cached.others.is_none();
        self.0.put(network, (!empty).then_some(cached));
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
