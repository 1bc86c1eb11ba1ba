//! Reads, remembered with each object's `resourceVersion` (and each list with what it
//! selected) for the commit to check; the node's own home first, from its cache when
//! it has one.

use super::locks::Met;
use super::objects::{Place, Role, Scope, Shard, group_of, scope_of};
use super::state::{KubernetesStore, Read};
use crate::error::{CniError, code};
use std::collections::BTreeMap;

impl KubernetesStore {
    /// The object at `place`, read and remembered for the commit's checks (or as
    /// remembered already); a lock on it is resolved first.
    pub(super) fn load(&self, place: &Place, guarded: bool) -> Result<Read, CniError> {
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

    pub(super) fn remember(
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
    pub(super) fn list_selected(
        &self,
        selector: &str,
        guarded: bool,
    ) -> Result<Vec<Read>, CniError> {
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
    pub(super) fn own_home(&self, network: &str) -> Result<Read, CniError> {
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

    /// Where `group` of `network` lies, and its entries.
    pub(super) fn group(
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
    pub(super) fn entries_under(
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
}

/// Where a group's entries lie, as a call reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Located {
    /// In this node's home.
    Own,
    /// Nowhere yet (or in an empty object of its own, left by a commit undone).
    Absent,
    /// In an object of its own.
    Shared,
    /// In the home of that node.
    Home(String),
}

/// The entries of `group` among a home's.
pub(super) fn in_group(
    entries: &BTreeMap<String, Vec<u8>>,
    group: &str,
) -> BTreeMap<String, Vec<u8>> {
    entries
        .iter()
        .filter(|(key, _)| group_of(key) == group)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}
