//! `wasm-ipam store migrate --netconf FROM --to TO`: moves a cluster's IPAM from one
//! cluster store to the other (the etcd store to the Kubernetes store, or back),
//! offline: every network the old store holds (or those `--network` names), every
//! entry as it is (addresses, blocks, sticky entries, reservations: the host copies a
//! module's keys, never reads them), with the record of which module serves each
//! network.
//!
//! - Offline means no node calls meanwhile: a network any node committed to within
//!   `--idle` is refused, naming the node, and the old store is read again after the
//!   copy: a commit that landed in between fails the command (the new store then holds
//!   a copy that is not the whole truth: `forget` it there and run again).
//! - The new store must hold none of these networks (a copy half done by a failed
//!   run included: `forget` it there first), or exactly what the old one holds (a
//!   finished run repeated): then nothing is written.
//! - The copy is committed a batch of keys at a time, each batch through the new
//!   store's own commit (atomic, counted in its usage records), and checked whole
//!   after: the new store's entries equal the old one's, key by key.
//! - On the Kubernetes store the copied groups lie in objects of their own; the
//!   first runtime call that reads or changes one takes it into its node's home (one
//!   commit across objects, once), after which that node's calls write only their
//!   home again.

use crate::error::{CniError, code};
use crate::operator::ask::StoreAccess;
use crate::store::{self, Changes, IfMissing, Quota, Store};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

/// How long every node must have been quiet before its networks are moved
/// (`--idle`).
pub const DEFAULT_IDLE: &str = "2m";
/// How long the whole move may take (`--timeout`).
pub const DEFAULT_TIMEOUT: &str = "10m";
/// Keys per commit to the new store: small enough for one etcd transaction at its
/// default `maxTxnOps` and for one Kubernetes commit's decision record.
const BATCH_KEYS: usize = 64;

/// Every entry of one store: network → key → value.
type Snapshot = BTreeMap<String, BTreeMap<String, Vec<u8>>>;

/// Moves every network of `from`'s store (or those `only` names) to `to`'s; what was
/// moved, as text. Both stores are opened with `budget` for their requests (the whole
/// command's).
pub fn migrate(
    from: &StoreAccess,
    to: &StoreAccess,
    only: &[String],
    idle: Duration,
    budget: Duration,
) -> Result<String, CniError> {
    refuse_unless_between_cluster_stores(from, to)?;
    // This node's calls wait while the copy runs; the other nodes' are found by
    // their last commits.
    let _lock = crate::lock::acquire(&from.lock_file, Some(from.lock_timeout))?;
    let mut old = open_refusing_missing(from, budget)?;
    let mut new = open_refusing_missing(to, budget)?;
    let snapshot = chosen(read_all(old.as_ref(), None)?, only, old.as_ref())?;
    if snapshot.is_empty() {
        return Err(CniError::config(format!(
            "{} holds no network: nothing to move (is --netconf the old store's?)",
            old.describe()
        )));
    }
    refuse_networks_called_within_idle(old.as_ref(), &snapshot, idle)?;
    if let Some(nothing_to_do) = already_moved(old.as_ref(), new.as_ref(), &snapshot)? {
        return Ok(nothing_to_do);
    }
    let mut out = copy_in_batches(old.as_ref(), new.as_mut(), &snapshot)?;
    verify_copy(old.as_mut(), new.as_mut(), &snapshot)?;
    let total: usize = snapshot.values().map(BTreeMap::len).sum();
    let _ = writeln!(
        out,
        "moved {total} entries of {} network(s) from {} to {}; point the nodes' ipam.store at the new store (wasm-ipam install --ipam-config) before they call again",
        snapshot.len(),
        old.describe(),
        new.describe()
    );
    Ok(out)
}

/// Refuses unless `from` and `to` name two different cluster stores: the embedded
/// store is a node's own, and a store cannot be moved onto its own kind.
fn refuse_unless_between_cluster_stores(
    from: &StoreAccess,
    to: &StoreAccess,
) -> Result<(), CniError> {
    let kind = |access: &StoreAccess| match &access.store {
        crate::config::StoreConfig::Etcd(_) => Some("etcd"),
        crate::config::StoreConfig::Kubernetes(_) => Some("kubernetes"),
        crate::config::StoreConfig::Embedded => None,
    };
    let (Some(from_kind), Some(to_kind)) = (kind(from), kind(to)) else {
        return Err(CniError::config(
            "store migrate moves a cluster between the cluster stores (etcd, kubernetes): both --netconf and --to must name one in ipam.store",
        ));
    };
    if from_kind == to_kind {
        return Err(CniError::config(format!(
            "--netconf and --to both name the {from_kind} store: store migrate moves a cluster from one cluster store to the other"
        )));
    }
    Ok(())
}

/// Opens `access`'s store with `budget` for its requests; a store that does not exist
/// is refused, never created.
fn open_refusing_missing(
    access: &StoreAccess,
    budget: Duration,
) -> Result<Box<dyn Store>, CniError> {
    store::select::open(
        &access.store,
        &access.data_dir,
        &access.node,
        budget,
        IfMissing::Refuse,
    )
}

/// Refuses when any node committed to a network of `snapshot` within `idle` (or its
/// last commit is not recorded): the move is offline.
fn refuse_networks_called_within_idle(
    old: &dyn Store,
    snapshot: &Snapshot,
    idle: Duration,
) -> Result<(), CniError> {
    let now = crate::health::unix_now();
    for network in snapshot.keys() {
        for (node, last) in store::last_commits(old, network)? {
            if let Some(refused) = busy(network, &node, last, now, idle) {
                return Err(refused);
            }
        }
    }
    Ok(())
}

/// What to say when `new` already holds exactly `snapshot` (a finished run
/// repeated); `None` when it holds none of it; refused when it holds something
/// else of one of its networks.
fn already_moved(
    old: &dyn Store,
    new: &dyn Store,
    snapshot: &Snapshot,
) -> Result<Option<String>, CniError> {
    let there = snapshot_of(new, snapshot)?;
    if &there == snapshot {
        return Ok(Some(format!(
            "{} already holds every entry of {} (network(s) {}): nothing to do\n",
            new.describe(),
            old.describe(),
            names(snapshot)
        )));
    }
    if let Some((network, held)) = there.iter().find(|(_, held)| !held.is_empty()) {
        return Err(CniError::config(format!(
            "{} already holds {} entries of network {network:?}, not what {} holds: nothing was moved; remove them there first (wasm-ipam forget {network} --netconf TO --force) and run again",
            new.describe(),
            held.len(),
            old.describe()
        )));
    }
    Ok(None)
}

/// Copies each network of `snapshot` to `new` with its record of which module
/// serves it, `BATCH_KEYS` keys per commit; a line per network, as text.
fn copy_in_batches(
    old: &dyn Store,
    new: &mut dyn Store,
    snapshot: &Snapshot,
) -> Result<String, CniError> {
    let served = old.served_by()?;
    let mut out = String::new();
    for (network, entries) in snapshot {
        // A record that does not parse is left behind: the next call writes it anew.
        if let Some((_, Ok(record))) = served.iter().find(|(name, _)| name == network) {
            new.record_served_by(network, record);
        }
        let keys: Vec<(&String, &Vec<u8>)> = entries.iter().collect();
        for batch in keys.chunks(BATCH_KEYS) {
            // Each batch its own attempt: what the last one read (and wrote) is not a
            // version this one builds on.
            afresh(new);
            let changes: Changes = batch
                .iter()
                .map(|(key, value)| ((*key).clone(), Some((*value).clone())))
                .collect();
            new.commit(network, &changes, Quota::UNLIMITED, &|| false)
                .map_err(|e| {
                    CniError::new(
                        e.code,
                        format!(
                            "moving network {network:?} to {}: {}; the new store holds part of it: remove it there (wasm-ipam forget {network} --netconf TO --force) and run again",
                            new.describe(),
                            e.msg
                        ),
                    )
                })?;
        }
        let _ = writeln!(out, "network {network}: {} entries", entries.len());
    }
    Ok(out)
}

/// Checks after the copy that `old` still holds `snapshot` (no node committed
/// meanwhile) and that `new` holds it key by key.
fn verify_copy(
    old: &mut dyn Store,
    new: &mut dyn Store,
    snapshot: &Snapshot,
) -> Result<(), CniError> {
    // Both read afresh: a commit made since their last reads must show.
    afresh(old);
    afresh(new);
    if &snapshot_of(old, snapshot)? != snapshot {
        return Err(CniError::new(
            code::TRY_AGAIN_LATER,
            format!(
                "a node committed to {} while its networks were copied: the copy in {} misses it; remove the copy there (wasm-ipam forget NETWORK --netconf TO --force, for each of {}), stop the nodes' calls and run again",
                old.describe(),
                new.describe(),
                names(snapshot)
            ),
        ));
    }
    let copied = snapshot_of(new, snapshot)?;
    if let Some(differs) = first_difference(snapshot, &copied) {
        return Err(CniError::new(
            code::STORE_FAILURE,
            format!(
                "{} does not hold what was copied to it ({differs}; another writer?): remove the copy there and run again",
                new.describe()
            ),
        ));
    }
    Ok(())
}

/// The networks of `all` that `only` names (all when it names none); a name the
/// store does not hold is refused, listing those it does.
fn chosen(mut all: Snapshot, only: &[String], store: &dyn Store) -> Result<Snapshot, CniError> {
    if only.is_empty() {
        return Ok(all);
    }
    if let Some(missing) = only.iter().find(|n| !all.contains_key(*n)) {
        return Err(crate::operator::args::unknown(
            &format!("{} holds no network {missing:?}", store.describe()),
            "it holds",
            all.keys().map(String::as_str),
            "name one of those with --network, or none to move them all",
        ));
    }
    all.retain(|network, _| only.contains(network));
    Ok(all)
}

/// Why `node`'s last commit to `network` (unix seconds) makes the move unsafe: within
/// `idle` of `now`, or not recorded at all.
fn busy(
    network: &str,
    node: &str,
    last: Option<u64>,
    now: u64,
    idle: Duration,
) -> Option<CniError> {
    let idle_text = humantime::format_duration(idle);
    let Some(last) = last else {
        return Some(CniError::config(format!(
            "node {node}'s last call to network {network:?} is not recorded, so it may still be calling: nothing was moved"
        )));
    };
    super::committed_within(last, now, idle).map(|ago| {
        CniError::new(
            code::TRY_AGAIN_LATER,
            format!(
                "node {node} committed a call to network {network:?} {ago} s ago, within --idle {idle_text}: calls are running; nothing was moved (stop the nodes' pod churn, or their kubelets, and run again once they have been quiet that long)"
            ),
        )
    })
}

/// Starts a new attempt on `store`: a cluster store's reads within one attempt are
/// one snapshot (the etcd store's at one revision), which would hide what was
/// committed since.
fn afresh(store: &mut dyn Store) {
    if let Some(shared) = store.shared_mut() {
        shared.begin();
    }
}

/// Every entry `store` holds (of `network` only, when given), by network.
fn read_all(store: &dyn Store, network: Option<&str>) -> Result<Snapshot, CniError> {
    let mut all = Snapshot::new();
    for (network, key, value) in store.entries(network)? {
        all.entry(network).or_default().insert(key, value);
    }
    Ok(all)
}

/// What `store` holds of the networks `of` names (each present, maybe empty).
fn snapshot_of(store: &dyn Store, of: &Snapshot) -> Result<Snapshot, CniError> {
    let mut there = Snapshot::new();
    for network in of.keys() {
        let held = read_all(store, Some(network))?
            .remove(network)
            .unwrap_or_default();
        there.insert(network.clone(), held);
    }
    Ok(there)
}

/// Where `found` first differs from `wanted`: a network and key, and how.
fn first_difference(wanted: &Snapshot, found: &Snapshot) -> Option<String> {
    let empty = BTreeMap::new();
    for (network, entries) in wanted {
        let there = found.get(network).unwrap_or(&empty);
        let keys: std::collections::BTreeSet<&String> =
            entries.keys().chain(there.keys()).collect();
        for key in keys {
            let how = match (entries.get(key), there.get(key)) {
                (Some(a), Some(b)) if a == b => continue,
                (Some(_), Some(_)) => "holds another value",
                (Some(_), None) => "is missing",
                (None, _) => "is there and should not be",
            };
            return Some(format!(
                "network {network:?}, key {key:?} {how}; {} of {} keys as copied",
                entries
                    .iter()
                    .filter(|(k, v)| there.get(*k) == Some(*v))
                    .count(),
                entries.len()
            ));
        }
    }
    None
}

fn names(snapshot: &Snapshot) -> String {
    snapshot.keys().cloned().collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_quiet_for_the_idle_time_passes_and_one_that_is_not_is_named() {
        let idle = Duration::from_secs(120);
        assert!(busy("n", "a", Some(1000), 1120, idle).is_none());
        let refused = busy("n", "a", Some(1000), 1119, idle).expect("refused");
        assert_eq!(refused.code, code::TRY_AGAIN_LATER);
        assert!(refused.msg.contains("node a") && refused.msg.contains("119 s ago"));
        // A clock behind the node's: not known to be quiet.
        assert!(busy("n", "a", Some(2000), 1000, idle).is_some());
        assert!(busy("n", "a", None, 1000, idle).is_some());
    }
}
