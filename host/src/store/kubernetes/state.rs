//! What the Kubernetes store holds during a call: its client, the node's cached homes,
//! and what this attempt read and listed (for the commit to check), with the small
//! steps every other part shares (keeping a home, noting a conflict).

use super::api::Api;
use super::homes;
use super::objects::{NodeUsage, Place, Role, Shard, select};
use crate::error::{CniError, code};
use crate::store::ServedBy;
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// The node's unfinished commit, in `dataDir`: written before its first lock, removed
/// once every object it locked is written.
pub const PENDING_FILE: &str = "kubernetes-commit";

pub struct KubernetesStore {
    pub(super) api: Api,
    pub(super) node: String,
    pub(super) data_dir: PathBuf,
    pub(super) homes: homes::Homes,
    /// Whether a group this store's commits create lies in the node's home (a
    /// runtime's call) or in an object of its own (an operator's command: what it
    /// creates, such as a reservation, is read by every node's calls).
    pub(super) homing: bool,
    pub(super) state: RefCell<State>,
}

#[derive(Default)]
pub(super) struct State {
    /// Every object this attempt read, by name: its `resourceVersion` (none: absent)
    /// and its entries.
    pub(super) read: BTreeMap<String, Read>,
    /// Objects read by peeks only (not checked at the commit), so one object is
    /// fetched once per attempt; a later guarded read checks it from this version.
    pub(super) peeked: BTreeMap<String, Read>,
    /// Every list this attempt made, by selector: the names and versions it saw.
    pub(super) listed: BTreeMap<String, BTreeMap<String, String>>,
    pub(super) conflicted: bool,
    pub(super) served_by: Option<(String, ServedBy)>,
    /// Own homes this attempt read from the cache, their versions not yet confirmed
    /// by a write or a read of the apiserver.
    pub(super) unconfirmed: BTreeSet<String>,
}

#[derive(Clone)]
pub(super) struct Read {
    pub(super) place: Place,
    pub(super) shard: Option<Shard>,
    pub(super) entries: BTreeMap<String, Vec<u8>>,
}

impl Read {
    pub(super) fn rv(&self) -> Option<String> {
        self.shard.as_ref().map(Shard::rv)
    }
}

/// The commit this node left unfinished, as `dataDir` remembers it.
#[derive(serde::Serialize, serde::Deserialize)]
pub(super) struct Pending {
    pub(super) commit: String,
    pub(super) network: String,
    pub(super) names: Vec<String>,
}

impl KubernetesStore {
    /// Keeps `home` (the node's own, as the apiserver last showed it) for the next call.
    pub(super) fn cache_home(&self, network: &str, home: Option<&Shard>) {
        let home = home.filter(|h| h.spec.lock.is_none()).cloned();
        self.homes.update(network, |cached| cached.home = home);
    }

    /// The home as the apiserver now holds it after this node wrote it: cached.
    pub(super) fn confirmed(&self, network: &str, home: &Shard) {
        self.cache_home(network, Some(home));
        self.state
            .borrow_mut()
            .unconfirmed
            .remove(&home.metadata.name);
    }

    pub(super) fn forget_home(&self, network: &str) {
        self.homes.update(network, |cached| cached.home = None);
    }

    /// Every node object of `network`: its usage rows.
    pub(super) fn node_rows(&self, network: &str) -> Result<Vec<Shard>, CniError> {
        Ok(self
            .api
            .list(&select(Role::Node, Some(network)))?
            .into_iter()
            .filter(|s| s.spec.network == network)
            .collect())
    }

    pub(super) fn write_pending(&self, pending: Option<&Pending>) -> Result<(), CniError> {
        let path = self.data_dir.join(PENDING_FILE);
        let bytes = pending.map(|p| serde_json::to_vec(p).expect("serialisable"));
        crate::files::put_record(&path, bytes.as_deref()).map_err(|e| {
            CniError::new(
                code::IO_FAILURE,
                format!("kubernetes: cannot record the commit in {}", path.display()),
            )
            .with_details(e)
        })
    }

    pub(super) fn note_conflict(&self, why: &str) -> CniError {
        self.state.borrow_mut().conflicted = true;
        self.api.figures.borrow_mut().conflicts += 1;
        conflict(why)
    }
}

pub(super) fn conflict(why: &str) -> CniError {
    CniError::new(
        code::TRY_AGAIN_LATER,
        format!(
            "kubernetes: another writer changed what this call read ({why}); nothing was committed"
        ),
    )
}

pub(super) fn sum(rows: &[Shard], own: &str) -> (NodeUsage, Option<Shard>) {
    let mut total = NodeUsage::default();
    let mut mine = None;
    for row in rows {
        total = total.plus(row.spec.usage.unwrap_or_default());
        if row.spec.group == own {
            mine = Some(row.clone());
        }
    }
    (total, mine)
}
