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
pub mod homes;
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
/// How long (seconds) the other nodes' usage, as listed, stands in for the quota
/// check while a network is under half its quota.
const QUOTA_FRESH: u64 = 30;
/// The pause before a call runs again after meeting a lock still in force.
const LOCKED_PAUSE: Duration = Duration::from_millis(50);

pub struct KubernetesStore {
    api: Api,
    node: String,
    data_dir: PathBuf,
    homes: homes::Homes,
    /// Whether a group this store's commits create lies in the node's home (a
    /// runtime's call) or in an object of its own (an operator's command: what it
    /// creates, such as a reservation, is read by every node's calls).
    homing: bool,
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
    /// Own homes this attempt read from the cache, their versions not yet confirmed
    /// by a write or a read of the apiserver.
    unconfirmed: BTreeSet<String>,
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
            // Undoing it may change the home (its decision spoiled): read it afresh.
            self.forget_home(&pending.network);
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
        if place.role == Role::Node && place.group == self.node {
            return self.own_home(&place.network);
        }
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

    /// The node's own home in `network`, read for the commit to check (its one write
    /// is conditional on this version): as this attempt read it, else as the cache
    /// keeps it, else fetched (and cached).
    fn own_home(&self, network: &str) -> Result<Read, CniError> {
        let place = Place::node(network, &self.node);
        let name = place.name();
        if let Some(read) = self.state.borrow().read.get(&name) {
            return Ok(read.clone());
        }
        let cached = self.homes.get(network).home;
        if let Some(home) = cached.filter(|h| h.metadata.name == name && h.spec.lock.is_none()) {
            match self.remember(place.clone(), Some(home), true) {
                Ok(read) => {
                    self.state.borrow_mut().unconfirmed.insert(name);
                    return Ok(read);
                }
                // A copy of a home edited by hand: the apiserver's may be mended.
                Err(_) => self.forget_home(network),
            }
        }
        let shard = match self.api.get(&name)? {
            Some(shard) if shard.spec.lock.is_some() => self.resolve(shard, Met::Guarded)?,
            other => other,
        };
        self.cache_home(network, shard.as_ref());
        self.remember(place, shard, true)
    }

    /// Keeps `home` (the node's own, as the apiserver last showed it) for the next call.
    fn cache_home(&self, network: &str, home: Option<&Shard>) {
        let home = home.filter(|h| h.spec.lock.is_none()).cloned();
        self.homes.update(network, |cached| cached.home = home);
    }

    /// Where `group` of `network` lies, and its entries.
    fn group(
        &self,
        network: &str,
        group: &str,
        guarded: bool,
    ) -> Result<(Located, BTreeMap<String, Vec<u8>>), CniError> {
        let own = self.own_home(network)?;
        if own.shard.as_ref().is_some_and(|s| s.spec.holds(group)) {
            return Ok((Located::Own, in_group(&own.entries, group)));
        }
        let anchor = self.load(&Place::entries(network, group), guarded)?;
        let Some(shard) = &anchor.shard else {
            return Ok((Located::Absent, BTreeMap::new()));
        };
        match &shard.spec.home {
            None if anchor.entries.is_empty() => Ok((Located::Absent, BTreeMap::new())),
            None => Ok((Located::Shared, anchor.entries)),
            // Homed here by a commit whose home write never landed: nothing in it yet.
            Some(node) if *node == self.node => Ok((Located::Own, BTreeMap::new())),
            Some(node) => {
                let home = self.load(&Place::node(network, node), guarded)?;
                let entries = in_group(&home.entries, group);
                Ok((Located::Home(node.clone()), entries))
            }
        }
    }

    /// The entries of `network` under `prefix`, in key order.
    fn entries_under(
        &self,
        network: &str,
        prefix: &str,
        guarded: bool,
    ) -> Result<Vec<(String, Vec<u8>)>, CniError> {
        // The home first: a later read of another object must not predate it.
        self.own_home(network)?;
        let mut out: Vec<(String, Vec<u8>)> = Vec::new();
        match scope_of(network, prefix) {
            Scope::Group(group) => out.extend(self.group(network, &group, guarded)?.1),
            Scope::Select(selector) => {
                let found = self.list_selected(&selector, guarded)?;
                for read in found.into_iter().filter(|r| r.place.network == network) {
                    match read.shard.as_ref().and_then(|s| s.spec.home.clone()) {
                        None => out.extend(read.entries),
                        Some(node) => {
                            let home = self.load(&Place::node(network, &node), guarded)?;
                            out.extend(in_group(&home.entries, &read.place.group));
                        }
                    }
                }
            }
        }
        out.retain(|(key, _)| key.starts_with(prefix));
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
            return self.finish(shard, decision);
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

    /// Writes what a decided commit changes in the object it locked, unlocking it.
    fn finish(&self, shard: Shard, decision: &Decision) -> Result<Option<Shard>, CniError> {
        let done = finished(&shard, decision);
        let written = match done.spec.role == Role::Entries
            && done.spec.entries.is_empty()
            && done.spec.home.is_none()
        {
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
            let created = shard.spec.role == Role::Entries
                && shard.spec.entries.is_empty()
                && shard.spec.commit.is_none();
            let _ = match created {
                // Created by the lock: gone again.
                true => self.api.delete(&shard.metadata.name, &shard.rv()),
                false => self.api.replace(&unlocked).map(drop),
            };
        }
    }

    /// Step 1: locks `targets`; the locked objects, or the conflict.
    fn lock(&self, targets: &[Read], lock: &Lock) -> Result<Vec<Shard>, CniError> {
        let mut locked = Vec::new();
        for read in targets {
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
            // A home read is locked (another node's) or decided on (this node's).
            if locked_names.contains(name.as_str())
                || listed_names.contains(name)
                || read.place.role == Role::Node
            {
                continue;
            }
            let now = self.api.get(name)?;
            if now.as_ref().map(Shard::rv) != read.rv() {
                return Err(self.conflicted(&format!("{PLURAL}/{name} changed since it was read")));
            }
        }
        Ok(())
    }

    /// What a commit of `changes` to `network` writes where: this node's home, and the
    /// other objects it must lock (none: the commit is one write of the home).
    fn plan(&self, network: &str, changes: &Changes) -> Result<Plan, CniError> {
        let own = self.own_home(network)?;
        let own_place = Place::node(network, &self.node);
        let own_name = own_place.name();
        let mut own_spec = own
            .shard
            .as_ref()
            .map_or_else(|| Spec::empty(&own_place), |s| s.spec.clone());
        let mut by_group: BTreeMap<&str, Vec<Change>> = BTreeMap::new();
        for (key, change) in changes {
            by_group.entry(group_of(key)).or_default().push(Change {
                key: key.clone(),
                put: change.as_ref().map(|v| Entry::new(key, v)),
            });
        }
        let mut decision = Decision {
            commit: commit_id(&self.node),
            ..Decision::default()
        };
        let mut targets: BTreeMap<String, Read> = BTreeMap::new();
        let mut delta = NodeUsage::default();
        for (group, group_changes) in &by_group {
            let (located, old) = self.group(network, group, true)?;
            for change in group_changes {
                if let Some(value) = old.get(&change.key) {
                    delta.entries -= 1;
                    delta.bytes -= entry_bytes(&change.key, value) as i64;
                }
                if let Some(value) = changes[&change.key].as_deref() {
                    delta.entries += 1;
                    delta.bytes += entry_bytes(&change.key, value) as i64;
                }
            }
            let puts = group_changes.iter().any(|c| c.put.is_some());
            let anchor = Place::entries(network, group);
            // A group a runtime's call starts (or finds empty in another node's home)
            // lies in this node's home from now on, while the home has room.
            let homed_here = self.homing
                && puts
                && old.is_empty()
                && located != Located::Own
                && roomy(&own_spec);
            match located {
                Located::Own => own_spec.apply(group_changes),
                _ if homed_here => {
                    targets.insert(anchor.name(), self.load(&anchor, true)?);
                    decision.homes.insert(anchor.name(), self.node.clone());
                    if let Located::Home(node) = &located {
                        let home = self.load(&Place::node(network, node), true)?;
                        if home.shard.as_ref().is_some_and(|s| s.spec.holds(group)) {
                            decision
                                .dropped
                                .entry(home.place.name())
                                .or_default()
                                .push(group.to_string());
                        }
                    }
                    own_spec.apply(group_changes);
                }
                Located::Absent if !puts => {}
                Located::Absent | Located::Shared => {
                    targets.insert(anchor.name(), self.load(&anchor, true)?);
                    decision
                        .changes
                        .entry(anchor.name())
                        .or_default()
                        .extend(group_changes.iter().cloned());
                }
                Located::Home(node) => {
                    let home = Place::node(network, &node);
                    targets.insert(home.name(), self.load(&home, true)?);
                    decision
                        .changes
                        .entry(home.name())
                        .or_default()
                        .extend(group_changes.iter().cloned());
                }
            }
        }
        // Every other node's home this attempt read is locked too: that node's
        // one-write commits check nothing but their own home.
        for (name, read) in self.state.borrow().read.iter() {
            if read.place.role == Role::Node && *name != own_name {
                targets.entry(name.clone()).or_insert_with(|| read.clone());
            }
        }
        fits(network, &own_spec)?;
        for read in targets.values() {
            let shard = read
                .shard
                .clone()
                .unwrap_or_else(|| Shard::new(&read.place, Spec::empty(&read.place)));
            fits(network, &finished(&shard, &decision).spec)?;
        }
        Ok(Plan {
            own,
            own_spec,
            targets: targets.into_values().collect(),
            decision,
            delta,
        })
    }

    /// The other nodes' usage of `network`, for the quota: as last listed while that
    /// is under [`QUOTA_FRESH`] seconds old and the network stays under half its quota
    /// with this commit, else listed now.
    fn others_usage(
        &self,
        network: &str,
        own: NodeUsage,
        delta: NodeUsage,
        quota: Quota,
    ) -> Result<NodeUsage, CniError> {
        let now = crate::health::unix_now();
        if let Some((others, at)) = self.homes.get(network).others {
            let entries = (others.entries + own.entries + delta.entries).max(0) as u64;
            let bytes = (others.bytes + own.bytes + delta.bytes).max(0) as u64;
            let fresh = now >= at && now - at < QUOTA_FRESH;
            if fresh && entries <= quota.entries / 2 && bytes <= quota.bytes / 2 {
                return Ok(others);
            }
        }
        let mut others = NodeUsage::default();
        for row in self.node_rows(network)? {
            if row.spec.group != self.node {
                let usage = row.spec.usage.unwrap_or_default();
                others.entries += usage.entries;
                others.bytes += usage.bytes;
            }
        }
        self.homes
            .update(network, |cached| cached.others = Some((others, now)));
        Ok(others)
    }

    /// The home as a commit leaves it: the node's usage, when it last committed, the
    /// module that served it, the commit's id.
    fn stamp(&self, network: &str, spec: &mut Spec, delta: NodeUsage, commit: &str) {
        let usage = spec.usage.unwrap_or_default();
        spec.usage = Some(NodeUsage {
            entries: usage.entries + delta.entries,
            bytes: usage.bytes + delta.bytes,
            last: Some(crate::health::unix_now()),
        });
        // Which module served the network, as this node ran it: kept in its own home,
        // so no call writes a shared record.
        let served_by = self.state.borrow().served_by.clone();
        if let Some((_, record)) = served_by.filter(|(net, _)| net == network) {
            spec.served_by = Some(serde_json::to_string(&record).expect("serialisable"));
        }
        spec.commit = Some(commit.to_string());
    }

    /// Writes the node's home as `spec`, conditional on the version `own` read.
    fn put_home(&self, own: &Read, spec: Spec) -> Result<Shard, WriteFailure> {
        match &own.shard {
            Some(shard) => {
                let mut shard = shard.clone();
                shard.spec = spec;
                self.api.replace(&shard)
            }
            None => self.api.create(&Shard::new(&own.place, spec)),
        }
    }

    /// The home as the apiserver now holds it after this node wrote it: cached.
    fn confirmed(&self, network: &str, home: &Shard) {
        self.cache_home(network, Some(home));
        self.state
            .borrow_mut()
            .unconfirmed
            .remove(&home.metadata.name);
    }

    fn forget_home(&self, network: &str) {
        self.homes.update(network, |cached| cached.home = None);
    }

    /// The whole commit in one write of the node's home: nothing else was written or
    /// locked, and its version checks every read of it.
    fn write_home(&self, network: &str, plan: Plan) -> Result<Written, CniError> {
        let Plan {
            own,
            mut own_spec,
            decision,
            delta,
            ..
        } = plan;
        self.stamp(network, &mut own_spec, delta, &decision.commit);
        match self.put_home(&own, own_spec) {
            Ok(shard) => {
                self.confirmed(network, &shard);
                Ok(Written::durable())
            }
            Err(WriteFailure::Unknown(e)) => match self.api.get(&own.place.name()) {
                Ok(Some(now)) if now.spec.commit.as_deref() == Some(&decision.commit) => {
                    self.confirmed(network, &now);
                    Ok(Written::durable())
                }
                Ok(now) => {
                    self.cache_home(network, now.as_ref());
                    Err(Api::not_applied(e))
                }
                Err(_) => {
                    self.forget_home(network);
                    Err(e)
                }
            },
            Err(WriteFailure::Conflict) => {
                self.forget_home(network);
                Err(self.conflicted("the node's own home changed since it was read"))
            }
            Err(WriteFailure::Failed(e)) => Err(e),
        }
    }

    /// A commit that writes or locks other objects than the node's home: steps 1 to 4
    /// of the module's description, the decision in the home.
    fn commit_across(
        &self,
        network: &str,
        plan: Plan,
        changes: &Changes,
        expired: &dyn Fn() -> bool,
    ) -> Result<Written, CniError> {
        let Plan {
            own,
            mut own_spec,
            mut targets,
            decision,
            delta,
        } = plan;
        targets.sort_by_key(|read| read.place.name());
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
            names: targets.iter().map(|r| r.place.name()).collect(),
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

        // Step 3: the decision, with this node's own changes, in its home.
        self.stamp(network, &mut own_spec, delta, &decision.commit);
        own_spec.decided = Some(decision.clone());
        match self.put_home(&own, own_spec) {
            Ok(shard) => self.confirmed(network, &shard),
            Err(WriteFailure::Unknown(e)) => {
                let looked = self.api.get(&own.place.name());
                match looked {
                    Ok(Some(now))
                        if now
                            .spec
                            .decided
                            .as_ref()
                            .is_some_and(|d| d.commit == decision.commit) =>
                    {
                        self.confirmed(network, &now)
                    }
                    looked => {
                        self.forget_home(network);
                        self.unlock_all(&locked);
                        return Err(match looked {
                            Ok(_) => Api::not_applied(e),
                            Err(_) => e,
                        });
                    }
                }
            }
            Err(WriteFailure::Conflict) => {
                self.forget_home(network);
                self.unlock_all(&locked);
                return Err(self.conflicted("the node's own home changed during the commit"));
            }
            Err(WriteFailure::Failed(e)) => {
                self.unlock_all(&locked);
                return Err(e);
            }
        }

        // Step 4: each locked object as the commit leaves it. The commit stands
        // already; one not written now is finished by whoever meets its lock.
        for shard in locked {
            let name = shard.metadata.name.clone();
            if let Err(e) = self.finish(shard, &decision) {
                tracing::warn!(
                    "kubernetes: commit {} decided, {PLURAL}/{name} not yet written: {e}; the next call finishes it",
                    decision.commit
                );
                return Ok(Written::durable());
            }
        }
        self.write_pending(None)?;
        Ok(Written::durable())
    }

    fn conflicted(&self, why: &str) -> CniError {
        self.state.borrow_mut().conflicted = true;
        self.api.figures.borrow_mut().conflicts += 1;
        conflict(why)
    }
}

/// `shard`, locked by `decision`'s commit, as that commit leaves it: its entries
/// changed, its group's home set, the groups moved out of it gone, unlocked.
fn finished(shard: &Shard, decision: &Decision) -> Shard {
    let name = &shard.metadata.name;
    let mut done = shard.clone();
    done.spec
        .apply(decision.changes.get(name).map_or(&[][..], Vec::as_slice));
    if let Some(node) = decision.homes.get(name) {
        done.spec.home = Some(node.clone());
    }
    if let Some(moved) = decision.dropped.get(name) {
        done.spec.groups.retain(|g| !moved.contains(g));
        done.spec
            .entries
            .retain(|e| !moved.iter().any(|g| g == group_of(&e.key)));
        done.spec.size = done.spec.entries.len() as u64;
    }
    done.spec.lock = None;
    if done.spec.role == Role::Entries {
        done.spec.commit = Some(decision.commit.clone());
    }
    done
}

/// Where a group's entries lie, as a call reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Located {
    /// In this node's home.
    Own,
    /// Nowhere yet (or in an empty object of its own, left by a commit undone).
    Absent,
    /// In an object of its own.
    Shared,
    /// In the home of that node.
    Home(String),
}

/// A commit, planned: see [`KubernetesStore::plan`].
struct Plan {
    own: Read,
    own_spec: Spec,
    targets: Vec<Read>,
    decision: Decision,
    delta: NodeUsage,
}

/// Whether a home may take a new group: under half of what one object holds.
fn roomy(home: &Spec) -> bool {
    home.entries.len() < objects::MAX_OBJECT_ENTRIES / 2
        && serde_json::to_vec(&home.entries)
            .expect("serialisable")
            .len()
            < objects::MAX_OBJECT_BYTES / 2
}

/// Refuses an object that would hold more than one object may (code 105).
fn fits(network: &str, spec: &Spec) -> Result<(), CniError> {
    let what = match spec.role {
        Role::Entries => format!("the entries of group {:?}", spec.group),
        Role::Node => format!("the home of node {:?}", spec.group),
    };
    if spec.entries.len() > objects::MAX_OBJECT_ENTRIES {
        return Err(CniError::new(
            code::LIMIT_EXCEEDED,
            format!(
                "kubernetes: {what} of network {network:?} would number {} entries in one {KIND}, over its limit of {}; nothing was committed",
                spec.entries.len(),
                objects::MAX_OBJECT_ENTRIES
            ),
        ));
    }
    let bytes = serde_json::to_vec(&spec.entries)
        .expect("serialisable")
        .len();
    if bytes > objects::MAX_OBJECT_BYTES {
        return Err(CniError::new(
            code::LIMIT_EXCEEDED,
            format!(
                "kubernetes: {what} of network {network:?} would take {bytes} bytes in one {KIND}, over its limit of {} bytes; nothing was committed",
                objects::MAX_OBJECT_BYTES
            ),
        ));
    }
    Ok(())
}

/// The entries of `group` among a home's.
fn in_group(entries: &BTreeMap<String, Vec<u8>>, group: &str) -> BTreeMap<String, Vec<u8>> {
    entries
        .iter()
        .filter(|(key, _)| group_of(key) == group)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
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

    fn commit_written(
        &mut self,
        network: &str,
        changes: &Changes,
        quota: Quota,
        expired: &dyn Fn() -> bool,
    ) -> Result<Written, CniError> {
        if changes.is_empty() {
            return self.confirm_reads().map(|()| Written::durable());
        }
        let plan = self.plan(network, changes)?;
        let growing = plan.delta.entries > 0 || plan.delta.bytes > 0;
        if growing {
            let own = plan
                .own
                .shard
                .as_ref()
                .and_then(|s| s.spec.usage)
                .unwrap_or_default();
            let others = self.others_usage(network, own, plan.delta, quota)?;
            let total = NodeUsage {
                entries: others.entries + own.entries,
                bytes: others.bytes + own.bytes,
                last: None,
            };
            let after = NodeUsage {
                entries: total.entries + plan.delta.entries,
                bytes: total.bytes + plan.delta.bytes,
                last: None,
            };
            check_quota(network, clamp(total), clamp(after), quota)?;
        }
        if expired() {
            return Err(super::too_late(changes));
        }
        match plan.targets.is_empty() {
            true => self.write_home(network, plan),
            false => self.commit_across(network, plan, changes, expired),
        }
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
                return Err(self.conflicted(&format!(
                    "{PLURAL}/{name}, this node's home, changed since the node cached it"
                )));
            }
        }
        Ok(())
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
