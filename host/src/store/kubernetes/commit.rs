//! The Kubernetes store's part of a commit ([`crate::store::commit`]): planning where
//! each change lands, then either one write of the node's home or the steps across
//! objects of the module's description (lock, validate, decide, finish).

use super::api::{Api, WriteFailure};
use super::locks::finished;
use super::objects::{
    Change, Decision, Entry, KIND, Lock, NodeUsage, PLURAL, Place, Role, Shard, Spec, group_of,
};
use super::reads::Located;
use super::state::{KubernetesStore, Pending, Read};
use crate::error::{CniError, code};
use crate::store::commit::{Prepared, others_may_stand_in, too_late};
use crate::store::{Changes, Quota, Usage, Written};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

impl KubernetesStore {
    /// Unlocks what this attempt locked, after a conflict; a lock left behind (an
    /// unlock that failed) is undone by whoever meets it.
    pub(super) fn unlock_all(&self, locked: &[Shard]) {
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
    pub(super) fn lock(&self, targets: &[Read], lock: &Lock) -> Result<Vec<Shard>, CniError> {
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
                    return Err(self.note_conflict(&format!(
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
    pub(super) fn validate(&self, locked: &[Shard]) -> Result<(), CniError> {
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
                        return Err(self.note_conflict(&format!(
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
                return Err(self.note_conflict("an object listed changed since it was listed"));
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
                return Err(
                    self.note_conflict(&format!("{PLURAL}/{name} changed since it was read"))
                );
            }
        }
        Ok(())
    }

    /// What a commit of `changes` to `network` writes where: this node's home, and the
    /// other objects it must lock (none: the commit is one write of the home).
    pub(super) fn plan(&self, network: &str, changes: &Changes) -> Result<Plan, CniError> {
        let own = self.own_home(network)?;
        let own_place = Place::node(network, &self.node);
        let own_name = own_place.name();
        let own_spec = own
            .shard
            .as_ref()
            .map_or_else(|| Spec::empty(&own_place), |s| s.spec.clone());
        let by_group = changes_by_group(changes);
        let mut draft = Draft {
            own_spec,
            decision: Decision {
                commit: commit_id(&self.node),
                ..Decision::default()
            },
            targets: BTreeMap::new(),
            delta: NodeUsage::default(),
        };
        for (group, group_changes) in &by_group {
            self.plan_group(network, group, group_changes, changes, &mut draft)?;
        }
        // A group in an object of its own that this call only read: taken in too, so
        // the node's steady calls read nothing but their home (cluster-pool's DEL reads
        // the node's block affinities and, in turn, each of its blocks). Read or
        // peeked: the lock the commit takes on it checks its version either way.
        for read in &self.groups_only_read(&by_group) {
            self.take_in(
                read,
                &mut draft.own_spec,
                &mut draft.decision,
                &mut draft.targets,
            );
        }
        // Every other node's home this attempt read is locked too: that node's
        // one-write commits check nothing but their own home.
        for (name, read) in self.state.borrow().read.iter() {
            if read.place.role == Role::Node && *name != own_name {
                draft
                    .targets
                    .entry(name.clone())
                    .or_insert_with(|| read.clone());
            }
        }
        draft.refuse_what_does_not_fit(network)?;
        let Draft {
            own_spec,
            decision,
            targets,
            delta,
        } = draft;
        Ok(Plan {
            own,
            own_spec,
            targets: targets.into_values().collect(),
            decision,
            delta,
        })
    }

    /// Plans the changes `group_changes` of one group of `network` into `draft`: the
    /// usage they add, and where they land (this node's home, or an object to lock),
    /// by where the group lies and whether it moves into the home on the way.
    fn plan_group(
        &self,
        network: &str,
        group: &str,
        group_changes: &[Change],
        changes: &Changes,
        draft: &mut Draft,
    ) -> Result<(), CniError> {
        let (located, old) = self.group(network, group, true)?;
        for change in group_changes {
            let was = old.get(&change.key).map(|v| v.len() as u64);
            let new = changes[&change.key].as_ref().map(|v| v.len() as u64);
            draft.delta = draft
                .delta
                .plus(NodeUsage::of_change(&change.key, was, new));
        }
        let puts = group_changes.iter().any(|c| c.put.is_some());
        let anchor = Place::entries(network, group);
        // A group a runtime's call starts (or finds empty in another node's home)
        // lies in this node's home from now on, while the home has room.
        let homed_here = self.homing
            && puts
            && old.is_empty()
            && located != Located::Own
            && roomy(&draft.own_spec);
        // A group in an object of its own that this call changes: see `take_in`.
        let taken = located == Located::Shared
            && !old.is_empty()
            && self.take_in(
                &self.load(&anchor, true)?,
                &mut draft.own_spec,
                &mut draft.decision,
                &mut draft.targets,
            );
        match located {
            Located::Own => draft.own_spec.apply(group_changes),
            Located::Shared if taken => draft.own_spec.apply(group_changes),
            _ if homed_here => {
                self.home_group_here(network, group, &anchor, &located, group_changes, draft)?
            }
            Located::Absent if !puts => {}
            Located::Absent | Located::Shared => {
                let target = self.load(&anchor, true)?;
                draft.change_in(anchor.name(), target, group_changes);
            }
            Located::Home(node) => {
                let home = Place::node(network, &node);
                let target = self.load(&home, true)?;
                draft.change_in(home.name(), target, group_changes);
            }
        }
        Ok(())
    }

    /// Moves `group` (its object of its own at `anchor`, lying as `located` says)
    /// into this node's home with `group_changes` applied: the object is locked and
    /// names the home, and another node's home that holds it drops it.
    fn home_group_here(
        &self,
        network: &str,
        group: &str,
        anchor: &Place,
        located: &Located,
        group_changes: &[Change],
        draft: &mut Draft,
    ) -> Result<(), CniError> {
        draft
            .targets
            .insert(anchor.name(), self.load(anchor, true)?);
        draft
            .decision
            .homes
            .insert(anchor.name(), self.node.clone());
        if let Located::Home(node) = located {
            let home = self.load(&Place::node(network, node), true)?;
            if home.shard.as_ref().is_some_and(|s| s.spec.holds(group)) {
                draft
                    .decision
                    .dropped
                    .entry(home.place.name())
                    .or_default()
                    .push(group.to_string());
            }
        }
        draft.own_spec.apply(group_changes);
        Ok(())
    }

    /// The groups in objects of their own (not homed, not locked, not empty) that
    /// this attempt read or peeked and does not change (`by_group`), by name.
    fn groups_only_read(&self, by_group: &BTreeMap<&str, Vec<Change>>) -> Vec<Read> {
        let state = self.state.borrow();
        let mut found: BTreeMap<String, Read> = BTreeMap::new();
        for (name, read) in state.peeked.iter().chain(state.read.iter()) {
            if read.place.role == Role::Entries
                && !by_group.contains_key(read.place.group.as_str())
                && read.shard.as_ref().is_some_and(|s| {
                    s.spec.home.is_none() && s.spec.lock.is_none() && !s.spec.entries.is_empty()
                })
            {
                found.insert(name.clone(), read.clone());
            }
        }
        found.into_values().collect()
    }

    /// Takes the group whose object of its own `read` is (with its entries: one
    /// `store migrate` copied there, or left there while a home was full) into this
    /// node's home `own`, once, while the home stays under half full with it: the
    /// object gives its entries to the home and names it instead, as a new cluster's
    /// groups lie in the home of the first node that needed them, so from then on
    /// the group's changes are the home's one write, not a commit across objects.
    /// Only for a runtime's call. Whether it was taken.
    fn take_in(
        &self,
        read: &Read,
        own: &mut Spec,
        decision: &mut Decision,
        targets: &mut BTreeMap<String, Read>,
    ) -> bool {
        if !self.homing {
            return false;
        }
        let mut with = own.clone();
        with.apply(&as_puts(&read.entries));
        if !roomy(&with) {
            return false;
        }
        let name = read.place.name();
        decision.homes.insert(name.clone(), self.node.clone());
        decision
            .changes
            .entry(name.clone())
            .or_default()
            .extend(read.entries.keys().map(|key| Change {
                key: key.clone(),
                put: None,
            }));
        *own = with;
        targets.insert(name, read.clone());
        true
    }

    /// The other nodes' usage of `network`, for the quota: as last listed while that
    /// may stand in ([`others_may_stand_in`]), else listed now.
    pub(super) fn others_usage(
        &self,
        network: &str,
        own: NodeUsage,
        delta: NodeUsage,
        quota: Quota,
    ) -> Result<NodeUsage, CniError> {
        let now = crate::health::unix_now();
        if let Some((others, at)) = self.homes.get(network).others {
            let after = others.plus(own).plus(delta);
            if others_may_stand_in(now.checked_sub(at), after, quota) {
                return Ok(others);
            }
        }
        let mut others = NodeUsage::default();
        for row in self.node_rows(network)? {
            if row.spec.group != self.node {
                others = others.plus(row.spec.usage.unwrap_or_default());
            }
        }
        self.homes
            .update(network, |cached| cached.others = Some((others, now)));
        Ok(others)
    }

    /// The home as a commit leaves it: the node's usage, when it last committed, the
    /// module that served it, the commit's id.
    pub(super) fn stamp(&self, network: &str, spec: &mut Spec, delta: NodeUsage, commit: &str) {
        spec.usage = Some(NodeUsage {
            last: Some(crate::health::unix_now()),
            ..spec.usage.unwrap_or_default().plus(delta)
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
    pub(super) fn put_home(&self, own: &Read, spec: Spec) -> Result<Shard, WriteFailure> {
        match &own.shard {
            Some(shard) => {
                let mut shard = shard.clone();
                shard.spec = spec;
                self.api.replace(&shard)
            }
            None => self.api.create(&Shard::new(&own.place, spec)),
        }
    }

    /// The whole commit in one write of the node's home: nothing else was written or
    /// locked, and its version checks every read of it.
    pub(super) fn write_home(&self, network: &str, plan: Plan) -> Result<Written, CniError> {
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
                Err(self.note_conflict("the node's own home changed since it was read"))
            }
            Err(WriteFailure::Failed(e)) => Err(e),
        }
    }

    /// A commit that writes or locks other objects than the node's home: steps 1 to 4
    /// of the module's description, the decision in the home.
    pub(super) fn commit_across(
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
        let lock = self.lock_until_the_deadline(&decision.commit);
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
            return Err(too_late(changes.len()));
        }

        // Step 3: the decision, with this node's own changes, in its home.
        self.stamp(network, &mut own_spec, delta, &decision.commit);
        own_spec.decided = Some(decision.clone());
        self.decide_in_home(network, &own, own_spec, &decision, &locked)?;
        self.finish_locked(locked, &decision)
    }

    /// The lock commit `commit` takes on each object: this node's, held until the
    /// deadline of the store's requests.
    fn lock_until_the_deadline(&self, commit: &str) -> Lock {
        let until = crate::health::unix_now()
            + self
                .api
                .until()
                .saturating_duration_since(Instant::now())
                .as_secs();
        Lock {
            node: self.node.clone(),
            commit: commit.to_string(),
            until,
        }
    }

    /// Step 3: writes `own_spec`, which carries `decision`, as this node's home; from
    /// then on the commit stands. Unless it is known to have landed, `locked` is
    /// unlocked and the commit fails.
    fn decide_in_home(
        &self,
        network: &str,
        own: &Read,
        own_spec: Spec,
        decision: &Decision,
        locked: &[Shard],
    ) -> Result<(), CniError> {
        match self.put_home(own, own_spec) {
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
                        self.unlock_all(locked);
                        return Err(match looked {
                            Ok(_) => Api::not_applied(e),
                            Err(_) => e,
                        });
                    }
                }
            }
            Err(WriteFailure::Conflict) => {
                self.forget_home(network);
                self.unlock_all(locked);
                return Err(self.note_conflict("the node's own home changed during the commit"));
            }
            Err(WriteFailure::Failed(e)) => {
                self.unlock_all(locked);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Step 4: each locked object as the commit leaves it. The commit stands
    /// already; one not written now is finished by whoever meets its lock.
    fn finish_locked(&self, locked: Vec<Shard>, decision: &Decision) -> Result<Written, CniError> {
        for shard in locked {
            let name = shard.metadata.name.clone();
            if let Err(e) = self.finish(shard, decision) {
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
}

/// A commit, planned: see [`KubernetesStore::plan`].
pub(super) struct Plan {
    pub(super) own: Read,
    pub(super) own_spec: Spec,
    pub(super) targets: Vec<Read>,
    pub(super) decision: Decision,
    pub(super) delta: NodeUsage,
}

/// A plan as [`KubernetesStore::plan`] builds it, group by group: the home as the
/// commit leaves it, the decision, the objects to lock by name, the usage added.
struct Draft {
    own_spec: Spec,
    decision: Decision,
    targets: BTreeMap<String, Read>,
    delta: NodeUsage,
}

impl Draft {
    /// Locks `target` (named `name`) and puts `group_changes` in the decision as its
    /// changes.
    fn change_in(&mut self, name: String, target: Read, group_changes: &[Change]) {
        self.targets.insert(name.clone(), target);
        self.decision
            .changes
            .entry(name)
            .or_default()
            .extend(group_changes.iter().cloned());
    }

    /// Refuses the plan when the home, or an object locked as the decision leaves
    /// it, would hold more than one object may.
    fn refuse_what_does_not_fit(&self, network: &str) -> Result<(), CniError> {
        fits(network, &self.own_spec)?;
        for read in self.targets.values() {
            let shard = read
                .shard
                .clone()
                .unwrap_or_else(|| Shard::new(&read.place, Spec::empty(&read.place)));
            fits(network, &finished(&shard, &self.decision).spec)?;
        }
        Ok(())
    }
}

/// `changes` as [`Change`]s, by the group each key belongs to.
fn changes_by_group(changes: &Changes) -> BTreeMap<&str, Vec<Change>> {
    let mut by_group: BTreeMap<&str, Vec<Change>> = BTreeMap::new();
    for (key, change) in changes {
        by_group.entry(group_of(key)).or_default().push(Change {
            key: key.clone(),
            put: change.as_ref().map(|v| Entry::new(key, v)),
        });
    }
    by_group
}

/// `entries` as changes that put each of them.
fn as_puts(entries: &BTreeMap<String, Vec<u8>>) -> Vec<Change> {
    entries
        .iter()
        .map(|(key, value)| Change {
            key: key.clone(),
            put: Some(Entry::new(key, value)),
        })
        .collect()
}

/// Whether a home may take a new group: under half of what one object holds.
pub(super) fn roomy(home: &Spec) -> bool {
    home.entries.len() < super::objects::MAX_OBJECT_ENTRIES / 2
        && serde_json::to_vec(&home.entries)
            .expect("serialisable")
            .len()
            < super::objects::MAX_OBJECT_BYTES / 2
}

/// Refuses an object that would hold more than one object may (code 105).
pub(super) fn fits(network: &str, spec: &Spec) -> Result<(), CniError> {
    let what = match spec.role {
        Role::Entries => format!("the entries of group {:?}", spec.group),
        Role::Node => format!("the home of node {:?}", spec.group),
    };
    if spec.entries.len() > super::objects::MAX_OBJECT_ENTRIES {
        return Err(CniError::new(
            code::LIMIT_EXCEEDED,
            format!(
                "kubernetes: {what} of network {network:?} would number {} entries in one {KIND}, over its limit of {}; nothing was committed",
                spec.entries.len(),
                super::objects::MAX_OBJECT_ENTRIES
            ),
        ));
    }
    let bytes = serde_json::to_vec(&spec.entries)
        .expect("serialisable")
        .len();
    if bytes > super::objects::MAX_OBJECT_BYTES {
        return Err(CniError::new(
            code::LIMIT_EXCEEDED,
            format!(
                "kubernetes: {what} of network {network:?} would take {bytes} bytes in one {KIND}, over its limit of {} bytes; nothing was committed",
                super::objects::MAX_OBJECT_BYTES
            ),
        ));
    }
    Ok(())
}

/// A new commit's id: unique across nodes and calls without coordination.
pub(super) fn commit_id(node: &str) -> String {
    use sha2::{Digest, Sha256};
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let digest = Sha256::digest(format!("{node}\0{nanos}\0{}", std::process::id()));
    digest[..10].iter().map(|b| format!("{b:02x}")).collect()
}

/// A commit of the Kubernetes store, planned ([`KubernetesStore::plan`]): one write of
/// the node's home, or the steps of the module's description across objects.
pub(super) struct KubernetesCommit<'a> {
    pub(super) store: &'a KubernetesStore,
    pub(super) network: &'a str,
    pub(super) changes: &'a Changes,
    pub(super) plan: Plan,
}

impl Prepared for KubernetesCommit<'_> {
    fn delta(&self) -> NodeUsage {
        self.plan.delta
    }

    fn usage_before(&mut self, quota: Quota) -> Result<Usage, CniError> {
        let own = self
            .plan
            .own
            .shard
            .as_ref()
            .and_then(|s| s.spec.usage)
            .unwrap_or_default();
        let others = self
            .store
            .others_usage(self.network, own, self.plan.delta, quota)?;
        Ok(others.plus(own).into())
    }

    fn write(self: Box<Self>, expired: &dyn Fn() -> bool) -> Result<Written, CniError> {
        let KubernetesCommit {
            store,
            network,
            changes,
            plan,
        } = *self;
        match plan.targets.is_empty() {
            true => store.write_home(network, plan),
            false => store.commit_across(network, plan, changes, expired),
        }
    }
}
