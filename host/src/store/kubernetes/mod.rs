//! The cluster-wide store in the Kubernetes API (`"store": {"type": "kubernetes",
//! ...}`): the etcd store's guarantee — a call's writes take effect all together or
//! not at all, and as if the call had run alone — kept on an API that changes one
//! object at a time.
//!
//! Reads are optimistic, as on etcd: each object a call reads is remembered with its
//! `resourceVersion`, each list with what it selected. A commit then
//! 1. locks every object it changes, each by a write conditional on the
//!    `resourceVersion` it was read at (so a lock also checks that read), creating an
//!    object that did not exist;
//! 2. checks that every other object it read, and every list, is unchanged (locks are
//!    writes, so two calls that each read what the other writes cannot both pass);
//! 3. decides: one conditional write of the node's own object of the network, which
//!    records the changes of every locked object and the node's usage. This write is
//!    the commit: before it nothing happened, after it the commit stands;
//! 4. writes each locked object's new entries, unlocking it.
//!
//! A conflict at 1 or 2 unlocks what was locked and lets the call run again, within
//! its post-lock budget. A call killed between any two writes, or a write whose
//! answer was lost, leaves locks that name the commit: whoever meets one (the node's
//! next call, which also remembers its unfinished commit in `dataDir`, another node,
//! or `wasm-ipam store check`) finishes a decided commit from the decision, or, once
//! the lock's deadline has passed, first spoils the undecided commit's decision (a
//! write to the deciding object, so a decision still in flight can no longer land)
//! and then unlocks. No address is ever doubled or lost.

mod api;
pub mod manifests;
pub mod objects;

use super::{Changes, Quota, Records, ServedBy, Store, Usage, Written, check_quota, entry_bytes};
use crate::config::KubernetesConfig;
use crate::error::{CniError, code};
use crate::health::{Condition, StoreSeen};
use api::{Api, WriteFailure};
use objects::{
    Change, Decision, Entry, KIND, Lock, NodeUsage, PLURAL, Place, Role, Scope, Shard, Spec,
    group_of, scope_of, select,
};
use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub use api::Figures;

/// The node's Kubernetes rate limiter's state, in `dataDir`.
pub const RATE_FILE: &str = "kubernetes-rate";
/// The node's unfinished commit, in `dataDir`: written before its first lock, removed
/// once every object it locked is written.
pub const PENDING_FILE: &str = "kubernetes-commit";
/// How long after a lock's deadline (by the locking node's clock) another node may
/// take it as abandoned: room for clocks that disagree and a write still in flight.
const LOCK_GRACE: u64 = 30;
/// How many spoiled commits a node's object remembers.
const ABORTED_KEPT: usize = 16;
/// How many times `check` looks at a network's usage before it reports a mismatch.
const USAGE_LOOKS: usize = 3;
/// The pause before a call runs again after meeting a lock still in force.
const LOCKED_PAUSE: Duration = Duration::from_millis(50);

pub struct KubernetesStore {
    api: Api,
    node: String,
    data_dir: PathBuf,
    state: RefCell<State>,
}

#[derive(Default)]
struct State {
    /// Every object this attempt read, by name: its `resourceVersion` (none: absent)
    /// and its entries.
    read: BTreeMap<String, Read>,
    /// Objects read by peeks only (not checked at the commit), so one object is
    /// fetched once per attempt; a later guarded read checks it from this version.
    peeked: BTreeMap<String, Read>,
    /// Every list this attempt made, by selector: the names and versions it saw.
    listed: BTreeMap<String, BTreeMap<String, String>>,
    conflicted: bool,
    served_by: Option<(String, ServedBy)>,
}

#[derive(Clone)]
struct Read {
    place: Place,
    shard: Option<Shard>,
    entries: BTreeMap<String, Vec<u8>>,
}

impl Read {
    fn rv(&self) -> Option<String> {
        self.shard.as_ref().map(Shard::rv)
    }
}

/// The commit this node left unfinished, as `dataDir` remembers it.
#[derive(serde::Serialize, serde::Deserialize)]
struct Pending {
    commit: String,
    network: String,
    names: Vec<String>,
}

impl KubernetesStore {
    pub fn open(
        config: &KubernetesConfig,
        node: &str,
        data_dir: &Path,
        wait: Duration,
    ) -> Result<Self, CniError> {
        let api = Api::open(config, data_dir, wait)?;
        let store = KubernetesStore {
            api,
            node: node.to_string(),
            data_dir: data_dir.to_path_buf(),
            state: RefCell::new(State::default()),
        };
        store.finish_pending()?;
        Ok(store)
    }

    pub fn figures(&self) -> Figures {
        *self.api.figures.borrow()
    }

    /// Finishes (or undoes) the commit this node's last call left, before anything
    /// else: its decision must be applied before a new one replaces it.
    fn finish_pending(&self) -> Result<(), CniError> {
        let path = self.data_dir.join(PENDING_FILE);
        let Ok(text) = std::fs::read(&path) else {
            return Ok(());
        };
        if let Ok(pending) = serde_json::from_slice::<Pending>(&text) {
            for name in &pending.names {
                if let Some(shard) = self.api.get(name)?
                    && shard
                        .spec
                        .lock
                        .as_ref()
                        .is_some_and(|l| l.commit == pending.commit)
                {
                    self.resolve(shard, Met::OwnPending)?;
                }
            }
        }
        crate::files::put_record(&path, None).map_err(|e| {
            CniError::new(
                code::IO_FAILURE,
                format!("kubernetes: cannot remove {}", path.display()),
            )
            .with_details(e)
        })
    }

    /// The object at `place`, read and remembered for the commit's checks (or as
    /// remembered already); a lock on it is resolved first.
    fn load(&self, place: &Place, guarded: bool) -> Result<Read, CniError> {
        let name = place.name();
        if let Some(read) = self.state.borrow().read.get(&name) {
            return Ok(read.clone());
        }
        let peeked = self.state.borrow_mut().peeked.remove(&name);
        // A peek that read through a lock in force is no version a guarded read may
        // build on: that one reads again, and meets the lock as a conflict.
        let peeked = peeked
            .filter(|read| !guarded || read.shard.as_ref().is_none_or(|s| s.spec.lock.is_none()));
        if let Some(read) = peeked {
            let mut state = self.state.borrow_mut();
            match guarded {
                true => state.read.insert(name, read.clone()),
                false => state.peeked.insert(name, read.clone()),
            };
            return Ok(read);
        }
        let shard = match self.api.get(&name)? {
            Some(shard) if shard.spec.lock.is_some() => self.resolve(shard, Met::by(guarded))?,
            other => other,
        };
        let read = self.remember(place.clone(), shard, guarded)?;
        Ok(read)
    }

    fn remember(
        &self,
        place: Place,
        shard: Option<Shard>,
        guarded: bool,
    ) -> Result<Read, CniError> {
        let entries = match &shard {
            Some(s) => s
                .spec
                .entry_map(&s.metadata.name)
                .map_err(|e| CniError::new(code::STORE_FAILURE, format!("kubernetes: {e}")))?,
            None => BTreeMap::new(),
        };
        let read = Read {
            place,
            shard,
            entries,
        };
        let mut state = self.state.borrow_mut();
        match guarded {
            true => state.read.insert(read.place.name(), read.clone()),
            false => state.peeked.insert(read.place.name(), read.clone()),
        };
        Ok(read)
    }

    /// Every object `selector` selects, locks resolved; remembered when `guarded`.
    fn list_selected(&self, selector: &str, guarded: bool) -> Result<Vec<Read>, CniError> {
        let mut reads = Vec::new();
        let mut seen = BTreeMap::new();
        for shard in self.api.list(selector)? {
            let shard = match shard.spec.lock.is_some() {
                true => match self.resolve(shard, Met::by(guarded))? {
                    Some(shard) => shard,
                    None => continue,
                },
                false => shard,
            };
            seen.insert(shard.metadata.name.clone(), shard.rv());
            let place = shard.spec.place();
            reads.push(self.remember(place, Some(shard), guarded)?);
        }
        if guarded {
            self.state
                .borrow_mut()
                .listed
                .insert(selector.to_string(), seen);
        }
        Ok(reads)
    }

    /// The entries of `network` under `prefix`, in key order.
    fn entries_under(
        &self,
        network: &str,
        prefix: &str,
        guarded: bool,
    ) -> Result<Vec<(String, Vec<u8>)>, CniError> {
        let reads = match scope_of(network, prefix) {
            Scope::Group(group) => vec![self.load(&Place::entries(network, &group), guarded)?],
            Scope::Select(selector) => self
                .list_selected(&selector, guarded)?
                .into_iter()
                .filter(|r| r.place.network == network && r.place.role == Role::Entries)
                .collect(),
        };
        let mut out: Vec<(String, Vec<u8>)> = reads
            .into_iter()
            .flat_map(|r| r.entries.into_iter())
            .filter(|(key, _)| key.starts_with(prefix))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// A locked object met by a read: a decided commit is finished, an abandoned one
    /// undone; one still in force is, for a guarded read, a conflict the call waits out
    /// by running again, and for a peek the object as it was before that commit (its
    /// entries change only when it is unlocked). Returns the object as it is after
    /// (none: deleted by the commit it finished).
    fn resolve(&self, shard: Shard, met: Met) -> Result<Option<Shard>, CniError> {
        let Some(lock) = shard.spec.lock.clone() else {
            return Ok(Some(shard));
        };
        let network = shard.spec.network.clone();
        let deciding = Place::node(&network, &lock.node);
        let decider = self.api.get(&deciding.name())?;
        let decided = decider
            .as_ref()
            .and_then(|d| d.spec.decided.as_ref())
            .filter(|d| d.commit == lock.commit);
        if let Some(decision) = decided {
            let changes = decision
                .changes
                .get(&shard.metadata.name)
                .cloned()
                .unwrap_or_default();
            return self.finish(shard, &lock.commit, &changes);
        }
        let spoiled = decider
            .as_ref()
            .is_some_and(|d| d.spec.aborted.contains(&lock.commit));
        let abandoned = met == Met::OwnPending
            || lock.node == self.node
            || crate::health::unix_now() > lock.until + LOCK_GRACE;
        if !spoiled && !abandoned && met == Met::Peek {
            return Ok(Some(shard));
        }
        if !spoiled && !abandoned {
            std::thread::sleep(LOCKED_PAUSE);
            self.state.borrow_mut().conflicted = true;
            self.api.figures.borrow_mut().conflicts += 1;
            return Err(conflict(&format!(
                "{PLURAL}/{} is locked by commit {} of node {} in progress",
                shard.metadata.name, lock.commit, lock.node
            )));
        }
        if !spoiled {
            self.spoil(&deciding, decider, &lock.commit)?;
        }
        // Undone: the object as it was before the lock.
        let mut unlocked = shard.clone();
        unlocked.spec.lock = None;
        match self.api.replace(&unlocked) {
            Ok(shard) => Ok(Some(shard)),
            Err(WriteFailure::Conflict | WriteFailure::Unknown(_)) => self.reread(&shard),
            Err(WriteFailure::Failed(e)) => Err(e),
        }
    }

    /// Writes a decided commit's `changes` into the object it locked, unlocking it.
    fn finish(
        &self,
        shard: Shard,
        commit: &str,
        changes: &[Change],
    ) -> Result<Option<Shard>, CniError> {
        let mut done = shard.clone();
        done.spec.apply(changes);
        done.spec.lock = None;
        done.spec.commit = Some(commit.to_string());
        let written = match done.spec.role == Role::Entries && done.spec.entries.is_empty() {
            true => self
                .api
                .delete(&done.metadata.name, &shard.rv())
                .map(|()| None),
            false => self.api.replace(&done).map(Some),
        };
        match written {
            Ok(shard) => Ok(shard),
            // Someone else finished it first, or the answer was lost: look.
            Err(WriteFailure::Conflict | WriteFailure::Unknown(_)) => self.reread(&shard),
            Err(WriteFailure::Failed(e)) => Err(e),
        }
    }

    /// The object after a write that conflicted or whose answer was lost: done when
    /// its lock is gone (it is no longer this call's to write).
    fn reread(&self, shard: &Shard) -> Result<Option<Shard>, CniError> {
        match self.api.get(&shard.metadata.name)? {
            Some(now) if now.spec.lock.is_some() && now.spec.lock == shard.spec.lock => {
                Err(CniError::new(
                    code::TRY_AGAIN_LATER,
                    format!(
                        "kubernetes: {PLURAL}/{} could not be unlocked; the next call tries again",
                        shard.metadata.name
                    ),
                ))
            }
            other => Ok(other),
        }
    }

    /// Makes sure `commit` of the node whose object is `deciding` can never be
    /// decided: its decision is a write conditional on that object's version, which
    /// this write changes.
    fn spoil(
        &self,
        deciding: &Place,
        decider: Option<Shard>,
        commit: &str,
    ) -> Result<(), CniError> {
        let written = match decider {
            Some(mut shard) => {
                shard.spec.aborted.push(commit.to_string());
                let excess = shard.spec.aborted.len().saturating_sub(ABORTED_KEPT);
                shard.spec.aborted.drain(..excess);
                self.api.replace(&shard).map(drop)
            }
            None => {
                let mut spec = Spec::empty(deciding);
                spec.aborted.push(commit.to_string());
                self.api.create(&Shard::new(deciding, spec)).map(drop)
            }
        };
        match written {
            Ok(()) => Ok(()),
            Err(WriteFailure::Failed(e)) => Err(e),
            // Changed meanwhile (maybe decided after all): the caller's next attempt
            // reads it again.
            Err(WriteFailure::Conflict | WriteFailure::Unknown(_)) => {
                self.state.borrow_mut().conflicted = true;
                Err(conflict(
                    "a commit's deciding object changed while it was undone",
                ))
            }
        }
    }

    /// Every node object of `network`: its usage rows.
    fn node_rows(&self, network: &str) -> Result<Vec<Shard>, CniError> {
        Ok(self
            .api
            .list(&select(Role::Node, Some(network)))?
            .into_iter()
            .filter(|s| s.spec.network == network)
            .collect())
    }

    fn write_pending(&self, pending: Option<&Pending>) -> Result<(), CniError> {
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

    /// Unlocks what this attempt locked, after a conflict; a lock left behind (an
    /// unlock that failed) is undone by whoever meets it.
    fn unlock_all(&self, locked: &[Shard]) {
        for shard in locked {
            let mut unlocked = shard.clone();
            unlocked.spec.lock = None;
            let _ = match shard.spec.entries.is_empty() && shard.spec.commit.is_none() {
                // Created by the lock: gone again.
                true => self.api.delete(&shard.metadata.name, &shard.rv()),
                false => self.api.replace(&unlocked).map(drop),
            };
        }
    }

    /// Step 1: locks `targets` (name → the read, with its new spec); the locked
    /// objects, or the conflict.
    fn lock(&self, targets: &[(Read, Spec)], lock: &Lock) -> Result<Vec<Shard>, CniError> {
        let mut locked = Vec::new();
        for (read, _) in targets {
            let attempt = match &read.shard {
                // Never over another commit's lock (a read through it): a conflict.
                Some(shard) if shard.spec.lock.is_some() => Err(WriteFailure::Conflict),
                Some(shard) => {
                    let mut with = shard.clone();
                    with.spec.lock = Some(lock.clone());
                    self.api.replace(&with)
                }
                None => {
                    let mut spec = Spec::empty(&read.place);
                    spec.lock = Some(lock.clone());
                    self.api.create(&Shard::new(&read.place, spec))
                }
            };
            let shard = match attempt {
                Ok(shard) => shard,
                Err(WriteFailure::Unknown(e)) => match self.api.get(&read.place.name()) {
                    Ok(Some(s)) if s.spec.lock.as_ref() == Some(lock) => s,
                    Ok(_) => {
                        self.unlock_all(&locked);
                        return Err(Api::not_applied(e));
                    }
                    Err(_) => {
                        self.unlock_all(&locked);
                        return Err(e);
                    }
                },
                Err(WriteFailure::Conflict) => {
                    self.unlock_all(&locked);
                    return Err(self.conflicted(&format!(
                        "{PLURAL}/{} changed since it was read",
                        read.place.name()
                    )));
                }
                Err(WriteFailure::Failed(e)) => {
                    self.unlock_all(&locked);
                    return Err(e);
                }
            };
            locked.push(shard);
        }
        Ok(locked)
    }

    /// Step 2: every object read and not locked, and every list, as it was read.
    fn validate(&self, locked: &[Shard]) -> Result<(), CniError> {
        let locked_names: BTreeSet<&str> =
            locked.iter().map(|s| s.metadata.name.as_str()).collect();
        let (reads, lists) = {
            let state = self.state.borrow();
            (state.read.clone(), state.listed.clone())
        };
        let mut listed_names = BTreeSet::new();
        for (selector, seen) in &lists {
            let mut now: BTreeMap<String, String> = self
                .api
                .list(selector)?
                .into_iter()
                .map(|s| (s.metadata.name.clone(), s.rv()))
                .collect();
            // An object this call locked is checked by its lock from the version the
            // call read; that version must be the one the list saw (absent included),
            // or another commit put it under the listed prefix in between (a phantom).
            for name in &locked_names {
                if now.remove(*name).is_some() || seen.contains_key(*name) {
                    let at_read = reads.get(*name).and_then(Read::rv);
                    if seen.get(*name) != at_read.as_ref() {
                        return Err(self.conflicted(&format!(
                            "{PLURAL}/{name} changed under a listed prefix since it was listed"
                        )));
                    }
                }
            }
            let before: BTreeMap<String, String> = seen
                .iter()
                .filter(|(name, _)| !locked_names.contains(name.as_str()))
                .map(|(n, rv)| (n.clone(), rv.clone()))
                .collect();
            if now != before {
                return Err(self.conflicted("an object listed changed since it was listed"));
            }
            listed_names.extend(seen.keys().cloned());
        }
        for (name, read) in &reads {
            if locked_names.contains(name.as_str()) || listed_names.contains(name) {
                continue;
            }
            let now = self.api.get(name)?;
            if now.as_ref().map(Shard::rv) != read.rv() {
                return Err(self.conflicted(&format!("{PLURAL}/{name} changed since it was read")));
            }
        }
        Ok(())
    }

    fn conflicted(&self, why: &str) -> CniError {
        self.state.borrow_mut().conflicted = true;
        self.api.figures.borrow_mut().conflicts += 1;
        conflict(why)
    }
}

/// Who meets a lock, for [`KubernetesStore::resolve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Met {
    /// This node's own unfinished commit, which no call of this node is running now
    /// (it holds the host-wide lock): finished or undone whatever its deadline.
    OwnPending,
    /// A read the commit checks: a lock in force is a conflict.
    Guarded,
    /// A read nothing checks (a module's peek, an operator's listing, `check`): a lock
    /// in force is read through.
    Peek,
}

impl Met {
    fn by(guarded: bool) -> Self {
        match guarded {
            true => Met::Guarded,
            false => Met::Peek,
        }
    }
}

/// A new commit's id: unique across nodes and calls without coordination.
fn commit_id(node: &str) -> String {
    use sha2::{Digest, Sha256};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let digest = Sha256::digest(format!("{node}\0{nanos}\0{}", std::process::id()));
    digest[..10].iter().map(|b| format!("{b:02x}")).collect()
}

fn conflict(why: &str) -> CniError {
    CniError::new(
        code::TRY_AGAIN_LATER,
        format!(
            "kubernetes: another writer changed what this call read ({why}); nothing was committed"
        ),
    )
}

fn sum(rows: &[Shard], own: &str) -> (NodeUsage, Option<Shard>) {
    let mut total = NodeUsage::default();
    let mut mine = None;
    for row in rows {
        let usage = row.spec.usage.unwrap_or_default();
        total.entries += usage.entries;
        total.bytes += usage.bytes;
        if row.spec.group == own {
            mine = Some(row.clone());
        }
    }
    (total, mine)
}

fn clamp(u: NodeUsage) -> Usage {
    Usage {
        entries: u.entries.max(0) as u64,
        bytes: u.bytes.max(0) as u64,
    }
}

impl Store for KubernetesStore {
    fn get(&self, network: &str, key: &str) -> Result<Option<Vec<u8>>, CniError> {
        let read = self.load(&Place::entries(network, group_of(key)), true)?;
        Ok(read.entries.get(key).cloned())
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
        let read = self.load(&Place::entries(network, group_of(key)), false)?;
        Ok(read.entries.get(key).cloned())
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
        for read in self.list_selected(&select(Role::Entries, network), false)? {
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

    fn commit_written(
        &mut self,
        network: &str,
        changes: &Changes,
        quota: Quota,
        expired: &dyn Fn() -> bool,
    ) -> Result<Written, CniError> {
        if changes.is_empty() {
            return Ok(Written::durable());
        }
        // The changes by object, each object read (and so checked) if the handler
        // did not read it itself.
        let mut by_place: BTreeMap<Place, Vec<Change>> = BTreeMap::new();
        for (key, change) in changes {
            by_place
                .entry(Place::entries(network, group_of(key)))
                .or_default()
                .push(Change {
                    key: key.clone(),
                    put: change.as_ref().map(|v| Entry::new(key, v)),
                });
        }
        let mut targets: Vec<(Read, Spec)> = Vec::new();
        let mut delta = NodeUsage::default();
        let mut decision = Decision {
            commit: commit_id(&self.node),
            changes: BTreeMap::new(),
        };
        for (place, object_changes) in &by_place {
            let read = self.load(place, true)?;
            for change in object_changes {
                if let Some(old) = read.entries.get(&change.key) {
                    delta.entries -= 1;
                    delta.bytes -= entry_bytes(&change.key, old) as i64;
                }
                if let Some(value) = changes[&change.key].as_deref() {
                    delta.entries += 1;
                    delta.bytes += entry_bytes(&change.key, value) as i64;
                }
            }
            let mut spec = read
                .shard
                .as_ref()
                .map_or_else(|| Spec::empty(place), |s| s.spec.clone());
            spec.apply(object_changes);
            let bytes = serde_json::to_vec(&spec.entries)
                .expect("serialisable")
                .len();
            if spec.entries.len() > objects::MAX_OBJECT_ENTRIES {
                return Err(CniError::new(
                    code::LIMIT_EXCEEDED,
                    format!(
                        "kubernetes: the entries of group {:?} of network {network:?} would number {} in one {KIND}, over its limit of {}; nothing was committed",
                        place.group,
                        spec.entries.len(),
                        objects::MAX_OBJECT_ENTRIES
                    ),
                ));
            }
            if bytes > objects::MAX_OBJECT_BYTES {
                return Err(CniError::new(
                    code::LIMIT_EXCEEDED,
                    format!(
                        "kubernetes: the entries of group {:?} of network {network:?} would take {bytes} bytes in one {KIND}, over its limit of {} bytes; nothing was committed",
                        place.group,
                        objects::MAX_OBJECT_BYTES
                    ),
                ));
            }
            decision
                .changes
                .insert(place.name(), object_changes.clone());
            targets.push((read, spec));
        }
        // Which module served the network, as this node ran it: kept in the node's own
        // object, written with the decision, so no call writes a shared record.
        let served_by = self
            .state
            .borrow()
            .served_by
            .clone()
            .filter(|(net, _)| net == network)
            .map(|(_, record)| serde_json::to_string(&record).expect("serialisable"));
        let rows = self.node_rows(network)?;
        let (total, mine) = sum(&rows, &self.node);
        let after = NodeUsage {
            entries: total.entries + delta.entries,
            bytes: total.bytes + delta.bytes,
            last: None,
        };
        check_quota(network, clamp(total), clamp(after), quota)?;
        targets.sort_by_key(|(read, _)| read.place.name());
        if expired() {
            return Err(super::too_late(changes));
        }

        let until = crate::health::unix_now()
            + self
                .api
                .until()
                .saturating_duration_since(Instant::now())
                .as_secs();
        let lock = Lock {
            node: self.node.clone(),
            commit: decision.commit.clone(),
            until,
        };
        self.write_pending(Some(&Pending {
            commit: decision.commit.clone(),
            network: network.to_string(),
            names: targets.iter().map(|(r, _)| r.place.name()).collect(),
        }))?;
        let locked = self.lock(&targets, &lock)?;
        if let Err(e) = self.validate(&locked) {
            self.unlock_all(&locked);
            return Err(e);
        }
        if expired() {
            self.unlock_all(&locked);
            return Err(super::too_late(changes));
        }

        // Step 3: the decision, in the node's own object.
        let deciding = Place::node(network, &self.node);
        let mut own = mine.map_or_else(
            || Shard::new(&deciding, Spec::empty(&deciding)),
            |shard| shard.clone(),
        );
        let usage = own.spec.usage.unwrap_or_default();
        own.spec.usage = Some(NodeUsage {
            entries: usage.entries + delta.entries,
            bytes: usage.bytes + delta.bytes,
            last: Some(crate::health::unix_now()),
        });
        if served_by.is_some() {
            own.spec.served_by = served_by;
        }
        own.spec.decided = Some(decision.clone());
        own.spec.commit = Some(decision.commit.clone());
        let decided = match own.metadata.resource_version.is_some() {
            true => self.api.replace(&own),
            false => self.api.create(&own),
        };
        match decided {
            Ok(_) => {}
            Err(WriteFailure::Unknown(e)) => {
                let looked = self.api.get(&deciding.name());
                let landed = matches!(
                    &looked,
                    Ok(Some(s)) if s.spec.decided.as_ref().is_some_and(|d| d.commit == decision.commit)
                );
                if !landed {
                    self.unlock_all(&locked);
                    return Err(match looked {
                        Ok(_) => Api::not_applied(e),
                        Err(_) => e,
                    });
                }
            }
            Err(WriteFailure::Conflict) => {
                self.unlock_all(&locked);
                return Err(self.conflicted("the node's own object changed during the commit"));
            }
            Err(WriteFailure::Failed(e)) => {
                self.unlock_all(&locked);
                return Err(e);
            }
        }

        // Step 4: each locked object's new entries. The commit stands already; one
        // not written now is finished by whoever meets its lock.
        for (shard, (_, spec)) in locked.into_iter().zip(&targets) {
            let mut done = shard.clone();
            done.spec = spec.clone();
            done.spec.lock = None;
            done.spec.commit = Some(decision.commit.clone());
            let written = match done.spec.role == Role::Entries && done.spec.entries.is_empty() {
                true => self.api.delete(&done.metadata.name, &shard.rv()),
                false => self.api.replace(&done).map(drop),
            };
            if let Err(WriteFailure::Failed(e) | WriteFailure::Unknown(e)) = written {
                tracing::warn!(
                    "kubernetes: commit {} decided, {PLURAL}/{} not yet written: {e}; the next call finishes it",
                    decision.commit,
                    shard.metadata.name
                );
                return Ok(Written::durable());
            }
        }
        self.write_pending(None)?;
        Ok(Written::durable())
    }

    fn usage(&self, network: &str) -> Result<Usage, CniError> {
        Ok(clamp(sum(&self.node_rows(network)?, "").0))
    }

    fn last_commits(&self, network: &str) -> Result<Vec<(String, Option<u64>)>, CniError> {
        Ok(self
            .node_rows(network)?
            .into_iter()
            .filter(|s| s.spec.usage.is_some())
            .map(|s| (s.spec.group.clone(), s.spec.usage.and_then(|u| u.last)))
            .collect())
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

    fn forget(&mut self, network: &str) -> Result<(u64, Written), CniError> {
        let selector = objects::select_network(network);
        let mut held = 0;
        for shard in self.api.list(&selector)? {
            if shard.spec.network != network {
                continue;
            }
            if shard.spec.role == Role::Entries {
                held += shard.spec.entries.len() as u64;
            }
            match self.api.delete(&shard.metadata.name, &shard.rv()) {
                Ok(()) | Err(WriteFailure::Conflict) => {}
                Err(WriteFailure::Unknown(e) | WriteFailure::Failed(e)) => return Err(e),
            }
        }
        Ok((held, Written::durable()))
    }

    /// Finishes or undoes every commit left locked (a node killed mid-commit), then
    /// checks every network's usage against its entries.
    fn check(&self) -> Result<Vec<String>, CniError> {
        let mut problems = Vec::new();
        // Only entries objects are locked: a node's object is written by its decision.
        for shard in self.api.list(&select(Role::Entries, None))? {
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
        // The entries and the usage rows are two lists, not one snapshot: a commit
        // that decides between them shows a mismatch no object holds. One is reported
        // only when every round of looks finds one.
        let mut usage = super::usage_problems(self)?;
        for _ in 1..USAGE_LOOKS {
            if usage.is_empty() {
                break;
            }
            std::thread::sleep(LOCKED_PAUSE);
            usage = super::usage_problems(self)?;
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

    fn conflicted(&self) -> bool {
        self.state.borrow().conflicted
    }

    fn begin(&mut self) {
        let mut state = self.state.borrow_mut();
        state.read.clear();
        state.peeked.clear();
        state.listed.clear();
        state.conflicted = false;
    }

    fn kubernetes_figures(&self) -> Option<Figures> {
        Some(self.figures())
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
