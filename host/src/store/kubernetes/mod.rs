//! The cluster-wide store in the Kubernetes API (`"store": {"type": "kubernetes",
//! ...}`): the etcd store's guarantee — a call's writes take effect all together or
//! not at all, and as if the call had run alone — kept on an API that changes one
//! object at a time.
//!
//! Where entries lie ([`objects`]): each node has one object per network, its
//! *home*, which holds the groups its runtime calls started (its attachments, its
//! affinities, the blocks it claimed), its usage and its last decision; each group has
//! an object of its own, which either holds the group's entries (a group an operator's
//! command started, such as a reservation) or names the home that does. The node
//! keeps its homes in `dataDir` ([`homes`]), so reading them costs no request.
//!
//! Reads are optimistic, as on etcd: each object a call reads is remembered with its
//! `resourceVersion`, each list with what it selected; a call reads its home before
//! any other object. A commit that changes only its node's home, and read no other
//! node's home, is one write: the home, conditional on the version read (a 409 reads
//! it afresh and runs the call again). That is a steady ADD or DEL: its reads of
//! other objects need no check, because whoever writes those locks every home it
//! read (below), so the two writes meet on the home. Any other commit
//! 1. locks every object it changes, and every other node's home it read, each by a
//!    write conditional on the `resourceVersion` it was read at (so a lock also
//!    checks that read), creating an object that did not exist;
//! 2. checks that every other object it read, and every list, is unchanged (locks are
//!    writes, so two calls that each read what the other writes cannot both pass);
//! 3. decides: one conditional write of the node's home, with its own changes and a
//!    record of the changes of every locked object. This write is the commit: before
//!    it nothing happened, after it the commit stands;
//! 4. writes each locked object's new entries, unlocking it.
//!
//! A conflict at 1 or 2 unlocks what was locked and lets the call run again, within
//! its post-lock budget. A call killed between any two writes, or a write whose
//! answer was lost, leaves locks that name the commit: whoever meets one (the node's
//! next call, which also remembers its unfinished commit in `dataDir`, another node,
//! or `wasm-ipam store check`) finishes a decided commit from the decision, or, once
//! the lock's deadline has passed, first spoils the undecided commit's decision (a
//! write to the deciding home, so a decision still in flight can no longer land)
//! and then unlocks. No address is ever doubled or lost. A call that commits nothing
//! but read its home from the cache reads it once to confirm the version.

mod api;
mod commit;
pub mod homes;
mod locks;
pub mod manifests;
pub mod objects;
mod reads;
mod state;

use super::{Figures, Records, Remote, ServedBy, Shared, Store, Usage, Written};
use crate::config::KubernetesConfig;
use crate::error::{CniError, code};
use crate::health::{Condition, StoreSeen};
use crate::store::Changes;
use crate::store::commit::Prepared;
use api::{Api, WriteFailure};
use commit::KubernetesCommit;
use locks::{LOCKED_PAUSE, Met};
use objects::{NodeUsage, PLURAL, Role, Shard, group_of, select};
use state::{State, sum};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::Path;
use std::time::Duration;

pub use api::RATE_FILE;
pub use state::{KubernetesStore, PENDING_FILE};

/// How many times `check` looks at a network's usage before it reports a mismatch.
const USAGE_LOOKS: usize = 3;

impl KubernetesStore {
    pub fn open(
        config: &KubernetesConfig,
        node: &str,
        data_dir: &Path,
        wait: Duration,
    ) -> Result<Self, CniError> {
        let api = Api::open(config, data_dir, wait)?;
        let homes = homes::Homes::new(data_dir, &api.describe());
        let store = KubernetesStore {
            api,
            node: node.to_string(),
            data_dir: data_dir.to_path_buf(),
            homes,
            homing: false,
            state: RefCell::new(State::default()),
        };
        store.finish_pending()?;
        Ok(store)
    }

    /// Every network whose usage rows differ from the entries it holds, as one look
    /// sees them: each home's usage and entries from the same listing (a home's own
    /// commit changes both in one write, so no such commit falls between them), the
    /// groups' own objects from a listing just before. (Usage and entries from lists
    /// taken apart showed a busy network as damaged: its homes' commits landed in
    /// between.)
    fn usage_mismatches(&self) -> Result<Vec<String>, CniError> {
        let mut shards = self.api.list(&select(Role::Entries, None))?;
        shards.extend(self.api.list(&select(Role::Node, None))?);
        let mut recorded: BTreeMap<&str, NodeUsage> = BTreeMap::new();
        let mut entries = Vec::new();
        for shard in &shards {
            let network = shard.spec.network.as_str();
            // An object that does not parse is named by the check's first part.
            let held = shard
                .spec
                .entry_map(&shard.metadata.name)
                .unwrap_or_default();
            entries.extend(held.into_iter().map(|(key, value)| (network, key, value)));
            if let Some(usage) = shard.spec.usage {
                let row = recorded.entry(network).or_default();
                *row = row.plus(usage);
            }
        }
        super::usage_mismatches(
            entries
                .iter()
                .map(|(n, k, v)| (*n, k.as_str(), v.as_slice())),
            |network| Ok(recorded.get(network).copied().unwrap_or_default().into()),
        )
    }
}

impl Store for KubernetesStore {
    fn get(&self, network: &str, key: &str) -> Result<Option<Vec<u8>>, CniError> {
        let (_, mut entries) = self.group(network, group_of(key), true)?;
        Ok(entries.remove(key))
    }

    fn visit_prefix(
        &self,
        network: &str,
        prefix: &str,
        visit: &mut dyn FnMut(&str, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), CniError> {
        for (key, value) in self.entries_under(network, prefix, true)? {
            if visit(&key, &value).is_break() {
                break;
            }
        }
        Ok(())
    }

    fn peek(&self, network: &str, key: &str) -> Result<Option<Vec<u8>>, CniError> {
        let (_, mut entries) = self.group(network, group_of(key), false)?;
        Ok(entries.remove(key))
    }

    fn peek_prefix(
        &self,
        network: &str,
        prefix: &str,
        visit: &mut dyn FnMut(&str, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), CniError> {
        for (key, value) in self.entries_under(network, prefix, false)? {
            if visit(&key, &value).is_break() {
                break;
            }
        }
        Ok(())
    }

    fn entries(&self, network: Option<&str>) -> Result<Vec<(String, String, Vec<u8>)>, CniError> {
        let mut out = Vec::new();
        // Groups of their own, then the nodes' homes (a group's object that names a
        // home holds nothing itself).
        let mut reads = self.list_selected(&select(Role::Entries, network), false)?;
        reads.extend(self.list_selected(&select(Role::Node, network), false)?);
        for read in reads {
            if network.is_some_and(|n| n != read.place.network) {
                continue;
            }
            for (key, value) in read.entries {
                out.push((read.place.network.clone(), key, value));
            }
        }
        out.sort();
        Ok(out)
    }

    fn prepare<'a>(
        &'a mut self,
        network: &'a str,
        changes: &'a Changes,
    ) -> Result<Box<dyn Prepared + 'a>, CniError> {
        let plan = self.plan(network, changes)?;
        Ok(Box::new(KubernetesCommit {
            store: self,
            network,
            changes,
            plan,
        }))
    }

    fn usage(&self, network: &str) -> Result<Usage, CniError> {
        Ok(sum(&self.node_rows(network)?, "").0.into())
    }

    fn record_served_by(&mut self, network: &str, served_by: &ServedBy) {
        self.state.borrow_mut().served_by = Some((network.to_string(), served_by.clone()));
    }

    /// Each network's record as the node that committed to it last ran it.
    fn served_by(&self) -> Result<Records, CniError> {
        let mut latest: BTreeMap<String, (Option<u64>, String)> = BTreeMap::new();
        for shard in self.api.list(&select(Role::Node, None))? {
            let Some(text) = shard.spec.served_by else {
                continue;
            };
            let last = shard.spec.usage.and_then(|u| u.last);
            let newer = latest
                .get(&shard.spec.network)
                .is_none_or(|(seen, _)| last > *seen);
            if newer {
                latest.insert(shard.spec.network, (last, text));
            }
        }
        Ok(latest
            .into_iter()
            .map(|(network, (_, text))| (network, ServedBy::from_json(&text)))
            .collect())
    }

    /// One delete per object, the groups' objects first and the homes (which hold the
    /// usage rows and the record of the serving module) last, so a removal cut short
    /// (the rate limiter's budget spent) leaves what the same command, run again,
    /// needs to finish it.
    fn forget(&mut self, network: &str) -> Result<(u64, Written), CniError> {
        let selector = objects::select_network(network);
        let mut shards: Vec<Shard> = self
            .api
            .list(&selector)?
            .into_iter()
            .filter(|s| s.spec.network == network)
            .collect();
        shards.sort_by_key(|s| s.spec.role == Role::Node);
        self.homes
            .update(network, |cached| *cached = homes::Cached::default());
        let total = shards.len();
        let mut held = 0;
        for (done, shard) in shards.into_iter().enumerate() {
            let failed = match self.api.delete(&shard.metadata.name, &shard.rv()) {
                Ok(()) | Err(WriteFailure::Conflict) => None,
                Err(WriteFailure::Unknown(e) | WriteFailure::Failed(e)) => Some(e),
            };
            if let Some(e) = failed {
                return Err(CniError::new(
                    e.code,
                    format!(
                        "kubernetes: removed {done} of the {total} objects of network {network:?}, then: {}; run the same command again to remove the rest",
                        e.msg
                    ),
                ));
            }
            held += shard.spec.entries.len() as u64;
        }
        Ok((held, Written::durable()))
    }

    /// Finishes or undoes every commit left locked (a node killed mid-commit), then
    /// checks every network's usage against its entries.
    fn check(&self) -> Result<Vec<String>, CniError> {
        let mut problems = Vec::new();
        let mut all = self.api.list(&select(Role::Entries, None))?;
        all.extend(self.api.list(&select(Role::Node, None))?);
        for shard in all {
            let name = shard.metadata.name.clone();
            if let Err(e) = shard.spec.entry_map(&name) {
                problems.push(e);
            }
            if shard.spec.lock.is_some()
                && let Err(e) = self.resolve(shard, Met::Peek)
            {
                problems.push(format!("{PLURAL}/{name}: {}", e.msg));
            }
        }
        // A mismatch is reported only when every round of looks finds one: a commit
        // across objects changes its home's usage before the other objects' entries.
        let mut usage = self.usage_mismatches()?;
        for _ in 1..USAGE_LOOKS {
            if usage.is_empty() {
                break;
            }
            std::thread::sleep(LOCKED_PAUSE);
            usage = self.usage_mismatches()?;
        }
        problems.extend(usage);
        Ok(problems)
    }

    fn describe(&self) -> String {
        self.api.describe()
    }

    fn backup(&self, _to: &Path) -> Result<(), CniError> {
        Err(CniError::config(format!(
            "{}: `wasm-ipam store backup` copies the embedded store only; nothing was done. The Kubernetes store's objects are kept by the cluster's etcd: back them up with it (etcdctl snapshot save) or as objects (kubectl get {PLURAL} -o yaml > FILE)",
            self.api.describe()
        )))
    }

    fn shared(&self) -> Option<&dyn Shared> {
        Some(self)
    }

    fn shared_mut(&mut self) -> Option<&mut dyn Shared> {
        Some(self)
    }
}

impl Shared for KubernetesStore {
    fn last_commits(&self, network: &str) -> Result<Vec<(String, Option<u64>)>, CniError> {
        Ok(self
            .node_rows(network)?
            .into_iter()
            .filter(|s| s.spec.usage.is_some())
            .map(|s| (s.spec.group.clone(), s.spec.usage.and_then(|u| u.last)))
            .collect())
    }

    fn conflicted(&self) -> bool {
        self.state.borrow().conflicted
    }

    fn begin(&mut self) {
        let mut state = self.state.borrow_mut();
        state.read.clear();
        state.peeked.clear();
        state.listed.clear();
        state.unconfirmed.clear();
        state.conflicted = false;
    }

    fn serve_runtime(&mut self) {
        self.homing = true;
    }

    fn confirm_reads(&mut self) -> Result<(), CniError> {
        let names = std::mem::take(&mut self.state.borrow_mut().unconfirmed);
        for name in names {
            let Some(read) = self.state.borrow().read.get(&name).cloned() else {
                continue;
            };
            let now = self.api.get(&name)?;
            if now.as_ref().map(Shard::rv) != read.rv() {
                self.cache_home(&read.place.network, now.as_ref());
                return Err(self.note_conflict(&format!(
                    "{PLURAL}/{name}, this node's home, changed since the node cached it"
                )));
            }
        }
        Ok(())
    }

    fn remote(&self) -> Remote {
        Remote::Kubernetes
    }

    fn figures(&self) -> Figures {
        *self.api.figures.borrow()
    }

    fn seen(&self) -> StoreSeen {
        match *self.api.reached.borrow() {
            None => StoreSeen::Unknown,
            Some(true) => StoreSeen::Reached,
            Some(false) => StoreSeen::Unreached(Condition {
                code: code::TRY_AGAIN_LATER,
                msg: format!("{} did not answer", self.api.describe()),
            }),
        }
    }
}

/// `store restore`'s refusal for a Kubernetes store.
pub fn restored_by_kubernetes(config: &KubernetesConfig) -> CniError {
    CniError::config(format!(
        "Kubernetes store ({}): `wasm-ipam store restore` puts back the embedded store only; nothing was done. Restore the objects with kubectl apply -f FILE, or the cluster's etcd from its snapshot",
        config.kubeconfig.display()
    ))
}
