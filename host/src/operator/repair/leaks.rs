//! What `wasm-ipam gc` (and `stats`' leak candidates) decide: which allocations are
//! leaks, under the rules `repair::gc` states, and their release through each
//! network's module.

use crate::error::{CniError, code};
use crate::module::bindings::inspect;
use crate::module::question::{Allocations, Call, Handle};
use crate::operator::ask::{NetworkToAsk, Note};
use crate::operator::repair::runtime::Runtime;
use crate::operator::view::inventory::{Allocation, checked_allocation};
use crate::pipeline::Writes;
use crate::store::AttachmentRecord;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

/// Calico's leak grace period, and the default here (`--grace`).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(15 * 60);
/// How long the runtime may take to answer, by default (`--timeout`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Options {
    pub runtime: Runtime,
    /// An allocation younger than this is never a leak.
    pub grace: Duration,
    /// For the runtime's answer.
    pub timeout: Duration,
    pub dry_run: bool,
    /// Release even when the runtime lists no sandbox at all.
    pub allow_empty: bool,
}

/// An address whose sandbox the runtime does not have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Leak {
    pub network: String,
    pub address: IpAddr,
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
    /// Seconds since it was handed out, if known.
    pub age_seconds: Option<u64>,
    pub node: String,
    /// Released by the module (never in a dry run).
    pub released: bool,
}

/// What `gc` did: the leaks found, per network in address order, and what it could
/// not do: the networks it could not reconcile, each with a note saying why.
#[derive(Debug, Default)]
pub struct Outcome {
    pub leaks: Vec<Leak>,
    pub notes: Vec<Note>,
    pub unreconciled: BTreeSet<String>,
}

/// An allocation as `gc` identifies it.
type Held = BTreeSet<(String, String, IpAddr)>;

/// The host's attachment records by container id: looked up for every allocation.
type Records = BTreeMap<String, Vec<AttachmentRecord>>;

fn by_container(records: Vec<AttachmentRecord>) -> Records {
    let mut by_id = Records::new();
    for record in records {
        by_id
            .entry(record.container_id.clone())
            .or_default()
            .push(record);
    }
    by_id
}

/// Reconciles each network with what `options.runtime` says is alive.
pub fn gc(networks: Vec<NetworkToAsk>, options: &Options) -> Result<Outcome, CniError> {
    let mut out = Outcome::default();
    let mut before = Vec::new();
    for asked in networks {
        match holdings(&asked, &mut out.notes) {
            Ok(held) => before.push((asked, held)),
            Err(e) => {
                out.notes.push(Note::Missing(e.to_string()));
                out.unreconciled.insert(asked.network.clone());
            }
        }
    }
    let asked_at = crate::health::unix_now();
    let live = options.runtime.live(options.timeout)?;
    for (asked, held) in before {
        let mut found: BTreeMap<(String, String, IpAddr), Leak> = BTreeMap::new();
        loop {
            match reconcile(&asked, &held, &live, asked_at, options, &mut out.notes) {
                Ok((leaks, full)) => {
                    let released = leaks.iter().filter(|l| l.released).count();
                    for leak in leaks {
                        let key = (leak.container_id.clone(), leak.ifname.clone(), leak.address);
                        found.insert(key, leak);
                    }
                    // Another batch while this one filled its transaction and released.
                    if !full || released == 0 {
                        break;
                    }
                }
                Err(e) => {
                    out.notes.push(Note::Missing(e.to_string()));
                    out.unreconciled.insert(asked.network.clone());
                    break;
                }
            }
        }
        for leak in found.values().filter(|l| !l.released && !options.dry_run) {
            // Reported, not failed: the runtime's truth was applied, the module chose.
            out.notes.push(Note::Warning(format!(
                "network {}: the module kept {} (container {}) through its GC",
                leak.network, leak.address, leak.container_id
            )));
        }
        let mut leaks: Vec<Leak> = found.into_values().collect();
        leaks.sort_by_key(|l| l.address);
        out.leaks.extend(leaks);
    }
    Ok(out)
}

/// The network's allocations, as its module reports them.
fn allocations_of(asked: &NetworkToAsk, list: Vec<inspect::Allocation>) -> Vec<Allocation> {
    list.into_iter()
        .filter_map(|a| checked_allocation(&asked.network, a))
        .collect()
}

/// What the network holds before the runtime is asked.
fn holdings(asked: &NetworkToAsk, notes: &mut Vec<Note>) -> Result<Held, CniError> {
    let work = Allocations(asked.context());
    let answer = asked.ask("gc", work, Writes::ReadOnly, notes)?;
    Ok(allocations_of(asked, answer)
        .into_iter()
        .map(|a| (a.container_id, a.ifname, a.address))
        .collect())
}

/// Under one hold of the lock: the allocations now, the leaks among them, and (unless
/// a dry run) the module's GC keeping every other allocation; and whether its commit
/// filled the store's transaction.
fn reconcile(
    asked: &NetworkToAsk,
    held_before: &Held,
    live: &BTreeSet<String>,
    asked_at: u64,
    options: &Options,
    notes: &mut Vec<Note>,
) -> Result<(Vec<Leak>, bool), CniError> {
    let context = Allocations(asked.context());
    let node = asked.node_name();
    let request = asked.gc_request()?;
    let batch = asked.run_batch("gc", notes, |session| {
        // ReadOnlyUntracked: on etcd, one key per allocation would leave the module's GC no
        // room in the transaction; the GC reads again each attachment it releases.
        let allocations = allocations_of(asked, session.ask(context.clone(), Writes::ReadOnlyUntracked)?);
        let records = by_container(session.attachments()?);
        let now = session.granted_unix();
        let facts = LeakEvidence {
            held_before,
            live,
            asked_at,
            records: &records,
            node: &node,
            shared: asked.shared(),
            grace: options.grace,
            now,
            netns_exists: &|path| Path::new(path).exists(),
        };
        let ours = allocations.iter().filter(|a| facts.ours(a)).count();
        if live.is_empty() && ours > 0 && !options.allow_empty {
            return Err(CniError::new(
                code::INVALID_NETWORK_CONFIG,
                format!(
                    "network {}: the runtime at {} lists no sandbox at all while the network holds {ours} allocation(s) of this node; nothing was released (a wrong socket and a freshly reset runtime look alike: pass --allow-empty if it really runs no pod)",
                    asked.network,
                    options.runtime.describe()
                ),
            ));
        }
        let leaks = facts.leaks(&allocations);
        if options.dry_run || leaks.is_empty() {
            return Ok(leaks);
        }
        let leaked: BTreeSet<(&str, &str)> = leaks
            .iter()
            .map(|l| (l.container_id.as_str(), l.ifname.as_str()))
            .collect();
        let valid: BTreeSet<(String, String)> = allocations
            .iter()
            .filter(|a| !leaked.contains(&(a.container_id.as_str(), a.ifname.as_str())))
            .map(|a| (a.container_id.clone(), a.ifname.clone()))
            .collect();
        let valid = valid
            .into_iter()
            .map(|(container_id, ifname)| crate::module::bindings::types::Attachment {
                container_id,
                ifname,
            })
            .collect();
        let gc = Handle {
            request: request.clone(),
            call: Call::Gc(valid),
        };
        session.ask(gc, Writes::Commit)?;
        Ok(leaks)
    })?;
    let mut leaks = batch.answer;
    if !options.dry_run && !leaks.is_empty() {
        confirm_released(asked, &mut leaks, notes)?;
    }
    Ok((leaks, batch.commit_was_full))
}

/// After a GC batch: which leaks the module released (it decides), each logged.
fn confirm_released(
    asked: &NetworkToAsk,
    leaks: &mut [Leak],
    notes: &mut Vec<Note>,
) -> Result<(), CniError> {
    let work = Allocations(asked.context());
    let left: Held = allocations_of(asked, asked.ask("gc", work, Writes::ReadOnly, notes)?)
        .into_iter()
        .map(|a| (a.container_id, a.ifname, a.address))
        .collect();
    for leak in leaks.iter_mut() {
        leak.released =
            !left.contains(&(leak.container_id.clone(), leak.ifname.clone(), leak.address));
        if leak.released {
            tracing::info!(
                target: "gc",
                network = %leak.network,
                address = %leak.address,
                container_id = %leak.container_id,
                ifname = %leak.ifname,
                age_s = leak.age_seconds,
                "released an address whose sandbox the runtime does not have"
            );
        }
    }
    Ok(())
}

/// What decides whether an allocation is a leak.
struct LeakEvidence<'a> {
    held_before: &'a Held,
    live: &'a BTreeSet<String>,
    /// Unix seconds when the runtime was asked.
    asked_at: u64,
    /// The host's attachment records, by container id.
    records: &'a Records,
    node: &'a str,
    /// The store is shared by nodes: only allocations the module says are this
    /// node's are candidates.
    shared: bool,
    grace: Duration,
    now: u64,
    netns_exists: &'a dyn Fn(&str) -> bool,
}

impl LeakEvidence<'_> {
    /// Whether the allocation is this node's to reconcile.
    fn ours(&self, a: &Allocation) -> bool {
        match a.attributes.get("node") {
            Some(node) => node == self.node,
            None => !self.shared,
        }
    }

    fn record(&self, a: &Allocation) -> Option<&AttachmentRecord> {
        self.records
            .get(&a.container_id)?
            .iter()
            .find(|r| r.ifname == a.ifname)
    }

    /// The allocation's age, from the module's `since` or the host's record of its ADD.
    fn age(&self, a: &Allocation) -> Option<u64> {
        let since = a.since.or_else(|| self.record(a).map(|r| r.added))?;
        Some(self.now.saturating_sub(since))
    }

    /// Whether this one allocation, alone, would be a leak.
    fn leaked(&self, a: &Allocation) -> bool {
        let key = (a.container_id.clone(), a.ifname.clone(), a.address);
        if !self.ours(a) || !self.held_before.contains(&key) || self.live.contains(&a.container_id)
        {
            return false;
        }
        if a.since.is_some_and(|since| since > self.asked_at) {
            return false;
        }
        if let Some(record) = self.record(a)
            && !record.netns.is_empty()
            && (self.netns_exists)(&record.netns)
        {
            return false;
        }
        match self.age(a) {
            Some(age) => age >= self.grace.as_secs(),
            None => self.grace.is_zero(),
        }
    }

    /// The leaks among `allocations`: an attachment (container id and ifname) is a
    /// leak only if every address it holds is.
    fn leaks(&self, allocations: &[Allocation]) -> Vec<Leak> {
        let mut attachments: BTreeMap<(&str, &str), Vec<&Allocation>> = BTreeMap::new();
        for a in allocations {
            attachments
                .entry((a.container_id.as_str(), a.ifname.as_str()))
                .or_default()
                .push(a);
        }
        let mut leaks: Vec<Leak> = attachments
            .into_values()
            .filter(|held| held.iter().all(|a| self.leaked(a)))
            .flatten()
            .map(|a| Leak {
                network: a.network.clone(),
                address: a.address,
                container_id: a.container_id.clone(),
                ifname: a.ifname.clone(),
                age_seconds: self.age(a),
                node: a
                    .attributes
                    .get("node")
                    .cloned()
                    .unwrap_or_else(|| self.node.to_string()),
                released: false,
            })
            .collect();
        leaks.sort_by_key(|l| l.address);
        leaks
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocation(id: &str, ip: &str, since: Option<u64>, node: Option<&str>) -> Allocation {
        Allocation {
            network: "n".into(),
            address: ip.parse().unwrap(),
            container_id: id.into(),
            ifname: "eth0".into(),
            since,
            attributes: node
                .map(|n| BTreeMap::from([("node".to_string(), n.to_string())]))
                .unwrap_or_default(),
        }
    }

    fn held(all: &[Allocation]) -> Held {
        all.iter()
            .map(|a| (a.container_id.clone(), a.ifname.clone(), a.address))
            .collect()
    }

    struct Case {
        before: Held,
        live: BTreeSet<String>,
        records: Vec<AttachmentRecord>,
        grace: Duration,
        shared: bool,
    }

    impl Case {
        fn new(before: &[Allocation], live: &[&str]) -> Self {
            Case {
                before: held(before),
                live: live.iter().map(|s| s.to_string()).collect(),
                records: Vec::new(),
                grace: Duration::from_secs(600),
                shared: false,
            }
        }

        fn leaks(&self, now_held: &[Allocation], netns_alive: &[&str]) -> Vec<String> {
            let alive = |p: &str| netns_alive.contains(&p);
            let records = by_container(self.records.clone());
            let facts = LeakEvidence {
                held_before: &self.before,
                live: &self.live,
                asked_at: 10_000,
                records: &records,
                node: "node-a",
                shared: self.shared,
                grace: self.grace,
                now: 10_000,
                netns_exists: &alive,
            };
            facts
                .leaks(now_held)
                .into_iter()
                .map(|l| format!("{} {}", l.container_id, l.address))
                .collect()
        }
    }

    #[test]
    fn only_old_allocations_of_sandboxes_the_runtime_lacks_are_leaks() {
        let all = [
            allocation("live", "10.0.0.2", Some(1_000), None),
            allocation("gone", "10.0.0.3", Some(1_000), None),
            allocation("young", "10.0.0.4", Some(9_900), None),
        ];
        let case = Case::new(&all, &["live"]);
        assert_eq!(case.leaks(&all, &[]), ["gone 10.0.0.3"]);
    }

    #[test]
    fn an_allocation_made_after_the_runtime_was_asked_is_never_a_leak() {
        let before = [allocation("gone", "10.0.0.3", Some(1_000), None)];
        let mut case = Case::new(&before, &[]);
        case.grace = Duration::ZERO;
        // Committed after the snapshot: not in it, whatever its age says.
        let now_held = [
            allocation("gone", "10.0.0.3", Some(1_000), None),
            allocation("new", "10.0.0.5", Some(1_000), None),
            allocation("later", "10.0.0.6", Some(10_001), None),
        ];
        assert_eq!(case.leaks(&now_held, &[]), ["gone 10.0.0.3"]);
    }

    #[test]
    fn unknown_age_is_a_leak_only_without_grace_and_the_host_record_gives_one() {
        let all = [allocation("gone", "10.0.0.3", None, None)];
        let mut case = Case::new(&all, &[]);
        assert!(case.leaks(&all, &[]).is_empty());
        case.records.push(AttachmentRecord {
            container_id: "gone".into(),
            ifname: "eth0".into(),
            node: "node-a".into(),
            netns: String::new(),
            added: 1_000,
        });
        assert_eq!(case.leaks(&all, &[]), ["gone 10.0.0.3"]);
        case.records.clear();
        case.grace = Duration::ZERO;
        assert_eq!(case.leaks(&all, &[]), ["gone 10.0.0.3"]);
    }

    #[test]
    fn a_live_network_namespace_keeps_its_attachment() {
        let all = [allocation("gone", "10.0.0.3", Some(1_000), None)];
        let mut case = Case::new(&all, &[]);
        case.records.push(AttachmentRecord {
            container_id: "gone".into(),
            ifname: "eth0".into(),
            node: "node-a".into(),
            netns: "/var/run/netns/cni-1".into(),
            added: 1_000,
        });
        assert!(case.leaks(&all, &["/var/run/netns/cni-1"]).is_empty());
        assert_eq!(case.leaks(&all, &[]), ["gone 10.0.0.3"]);
    }

    #[test]
    fn on_a_shared_store_only_this_nodes_allocations_are_candidates() {
        let all = [
            allocation("a", "10.0.0.3", Some(1_000), Some("node-a")),
            allocation("b", "10.0.0.4", Some(1_000), Some("node-b")),
            allocation("c", "10.0.0.5", Some(1_000), None),
        ];
        let mut case = Case::new(&all, &[]);
        case.shared = true;
        assert_eq!(case.leaks(&all, &[]), ["a 10.0.0.3"]);
        case.shared = false;
        assert_eq!(case.leaks(&all, &[]), ["a 10.0.0.3", "c 10.0.0.5"]);
    }

    #[test]
    fn an_attachment_is_a_leak_only_if_all_its_addresses_are() {
        let before = [
            allocation("dual", "10.0.0.3", Some(1_000), None),
            allocation("dual", "fd00::3", Some(1_000), None),
        ];
        let case = Case::new(&before, &[]);
        // Its second address was committed after the question: keep both.
        let now_held = [
            allocation("dual", "10.0.0.3", Some(1_000), None),
            allocation("dual", "fd00::4", Some(1_000), None),
        ];
        assert!(case.leaks(&now_held, &[]).is_empty());
        assert_eq!(case.leaks(&before, &[]), ["dual 10.0.0.3", "dual fd00::3"]);
    }
}
