//! The operators' view: every allocation and reservation, and per network its pools
//! (and their blocks), as the module serving each network reports them through its
//! `inspect`, `usage` and `reservations` exports. The host reads no
//! module's keys; it only checks and bounds what a module says, since a module is a
//! stranger's code and its answer reaches an operator's terminal.

use crate::error::CniError;
use crate::module::bindings::{inspect, reservations, usage, wide_usage};
use crate::module::exports::Export;
use crate::module::question::{Allocations, Pools, Question, Reservations, Usage, widened};
use crate::operator::ask::{NetworkToAsk, Note, StoreAccess, asked_all};
use crate::operator::view::table::{Align, Table};
use crate::pipeline::{Session, Writes};
use crate::store::Records;
use serde::Serialize;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::Path;

/// The longest text field of an allocation or pool shown (ids, names, attributes);
/// past it the field is cut and says how much was.
const MAX_FIELD_BYTES: usize = 256;
/// Most pool rows shown per network.
const MAX_POOLS: usize = 1024;
/// Most rows of any kind (pools and blocks, reservations, held addresses) kept of one
/// module's answer.
const MAX_ROWS: usize = 65_536;
/// Latest `since` shown as a date (9999-12-31T23:59:59Z): RFC 3339 has four-digit years.
pub const LAST_RFC3339_SECOND: u64 = 253_402_300_799;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Allocation {
    pub network: String,
    pub address: IpAddr,
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
    /// Unix seconds when it was handed out, if the module recorded it.
    pub since: Option<u64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub attributes: BTreeMap<String, String>,
}

/// A pool's row, or a block's (a part of a pool row, never summed).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PoolStats {
    pub network: String,
    pub pool: String,
    /// For a block, its pool row's name.
    pub parent: Option<String>,
    /// For a block, the node it belongs to.
    pub node: Option<String>,
    /// Addresses the pool can hand out, if the module knows it.
    pub capacity: Option<u128>,
    pub in_use: u128,
    pub excluded: u128,
    pub cooling_down: u128,
    /// Kept out of use by a reservation (not in use).
    pub reserved: u128,
    /// Of in use, held in another node's block.
    pub borrowed: u128,
    pub free: Option<u128>,
    /// The module's warning threshold, percent of capacity in use.
    pub warn_percent: Option<u8>,
}

/// A reservation as shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reservation {
    pub network: String,
    pub cidr: String,
    pub note: String,
    pub since: u64,
    /// Its addresses a pod holds now.
    pub held: Vec<String>,
}

/// Each network's totals over its pools (as `stats` showed before pools existed).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NetworkStats {
    pub network: String,
    /// Known only if every pool's is.
    pub capacity: Option<u128>,
    pub in_use: u128,
    pub excluded: u128,
    pub cooling_down: u128,
    pub reserved: u128,
    pub borrowed: u128,
    pub free: Option<u128>,
    pub pools: Vec<PoolStats>,
    /// The blocks of its pools, when the module reports them.
    pub blocks: Vec<PoolStats>,
    /// Allocations `gc` would release now (its dry run with the default grace), when
    /// `stats` was given the runtime to ask.
    pub leak_candidates: Option<u64>,
}

/// A Unix time as RFC 3339, or as the number when no four-digit year holds it.
pub fn since(secs: u64) -> String {
    if secs > LAST_RFC3339_SECOND {
        return secs.to_string();
    }
    humantime::format_rfc3339_seconds(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
        .to_string()
}

/// `list`'s table: one row per address; NODE, POOL and BORROWED appear when a
/// module reports them (a cluster network's `node`, `pool` and `borrowed` attributes).
pub fn allocation_table(allocations: &[Allocation]) -> String {
    let shown = |key: &str| allocations.iter().any(|a| a.attributes.contains_key(key));
    let extra: Vec<(&str, &str)> = [("node", "NODE"), ("pool", "POOL"), ("borrowed", "BORROWED")]
        .into_iter()
        .filter(|(key, _)| shown(key))
        .collect();
    let mut columns = vec![
        ("NETWORK", Align::Left),
        ("ADDRESS", Align::Left),
        ("CONTAINER ID", Align::Left),
        ("IFNAME", Align::Left),
    ];
    columns.extend(extra.iter().map(|(_, header)| (*header, Align::Left)));
    columns.push(("SINCE", Align::Left));
    let mut table = Table::new(&columns);
    for a in allocations {
        let mut row = vec![
            printable(&a.network),
            a.address.to_string(),
            printable(&a.container_id),
            printable(&a.ifname),
        ];
        for (key, _) in &extra {
            row.push(match (a.attributes.get(*key), *key) {
                (Some(value), _) => printable(value),
                (None, "borrowed") => "no".into(),
                (None, _) => "-".into(),
            });
        }
        row.push(a.since.map_or("-".into(), since));
        table.row(row);
    }
    table.render()
}

/// Which networks to ask, and by which module: the one network a netconf names,
/// asked by its module; else the store's records (all, or `network` only). With both,
/// a `network` other than the netconf's is asked by its record in the netconf's
/// store (a network on etcd whose conflist is gone). A `network` with no record is
/// an error listing those that have one.
pub fn networks(
    access: &StoreAccess,
    network: Option<&str>,
    netconf: Option<&Path>,
) -> Result<Records, CniError> {
    let configured = netconf
        .map(crate::operator::ask::from_netconf)
        .transpose()?;
    if let Some((name, served_by)) = &configured
        && network.is_none_or(|wanted| wanted == name)
    {
        return Ok(vec![(name.clone(), Ok(served_by.clone()))]);
    }
    let (store, mut served) = access.records()?;
    if let Some(network) = network {
        let known: Vec<String> = served
            .iter()
            .map(|(name, _)| name.clone())
            .chain(configured.map(|(name, _)| name))
            .collect();
        served.retain(|(name, _)| name == network);
        if served.is_empty() {
            return Err(not_recorded(network, &store, &known));
        }
    }
    Ok(served)
}

/// Why `--network NAME` names nothing in `store` (whose networks are `known`): a
/// typo, or a network the node's own store does not record because its store is
/// etcd, which a netconf names.
pub fn not_recorded(network: &str, store: &str, known: &[String]) -> CniError {
    crate::operator::args::unknown(
        &format!("no module is recorded for network {network} in {store}"),
        "the networks it records",
        known.iter().map(String::as_str),
        &format!(
            "no call has committed to it there: check the name; a network whose store is etcd is recorded in etcd, not on the node: name it with --netconf FILE (its conflist, e.g. /etc/cni/net.d/10-{network}.conflist)"
        ),
    )
}

/// The allocations on `node`: those whose module reports them there (a shared
/// network's `node` attribute), and, when `node` is this node, those of a network
/// whose store is this node's own. A node that no network asked knows is an error
/// listing those they know, rather than an empty answer.
pub fn on_node(
    access: &StoreAccess,
    networks: Records,
    node: &str,
    mut allocations: Vec<Allocation>,
) -> Result<Vec<Allocation>, CniError> {
    let (asked, _) = asked_all(access, networks);
    let own: BTreeMap<&str, String> = asked
        .iter()
        .filter(|a| !a.shared())
        .map(|a| (a.network.as_str(), a.node_name()))
        .collect();
    let node_of = |a: &Allocation| -> Option<String> {
        a.attributes
            .get("node")
            .cloned()
            .or_else(|| own.get(a.network.as_str()).cloned())
    };
    let mut known: std::collections::BTreeSet<String> =
        allocations.iter().filter_map(&node_of).collect();
    allocations.retain(|a| node_of(a).as_deref() == Some(node));
    if !allocations.is_empty() {
        return Ok(allocations);
    }
    known.extend(own.values().cloned());
    for a in asked.iter().filter(|a| a.shared()) {
        known.extend(a.nodes_of_store()?);
    }
    match known.contains(node) {
        true => Ok(allocations),
        false => Err(crate::operator::args::unknown(
            &format!("no network asked knows node {node}"),
            "the nodes they know",
            known.iter().map(String::as_str),
            "nothing is listed: check the name (ipam.nodeName, else the node's hostname)",
        )),
    }
}

/// Asks each network's module for operator command `command` what `ask` asks it
/// (read-only, through [`Session::ask`]; `None`: nothing to show); a network whose
/// module fails is reported in `notes` and the others are still asked.
fn ask_each<A>(
    access: &StoreAccess,
    command: &str,
    networks: Records,
    ask: impl Fn(&NetworkToAsk, &mut Session) -> Result<Option<A>, CniError>,
    notes: &mut Vec<Note>,
) -> Vec<(String, A)> {
    let (asked, unusable) = asked_all(access, networks);
    notes.extend(unusable);
    let mut answers = Vec::new();
    for asked in asked {
        match asked.run(command, notes, |session| ask(&asked, session)) {
            Ok(Some(answer)) => answers.push((asked.network, answer)),
            Ok(None) => {}
            Err(e) => notes.push(Note::Missing(e.to_string())),
        }
    }
    answers
}

/// `work`, read-only.
fn read<Q: Question>(session: &mut Session, work: Q) -> Result<Option<Q::Answer>, CniError> {
    session.ask(work, Writes::ReadOnly).map(Some)
}

/// Every allocation of the networks asked, in network then address order.
pub fn allocations(
    access: &StoreAccess,
    networks: Records,
    notes: &mut Vec<Note>,
) -> Vec<Allocation> {
    let mut out = Vec::new();
    for (network, list) in ask_each(
        access,
        "list",
        networks,
        |a, session| read(session, Allocations(a.context())),
        notes,
    ) {
        let mut skipped = 0;
        let mut these: Vec<Allocation> = list
            .into_iter()
            .filter_map(|a| {
                let checked = checked_allocation(&network, a);
                skipped += usize::from(checked.is_none());
                checked
            })
            .collect();
        if skipped > 0 {
            notes.push(Note::Missing(format!(
                "network {network}: the module reported {skipped} allocation(s) whose address is not an IP address; not shown"
            )));
        }
        these.sort_by_key(|a| a.address);
        out.extend(these);
    }
    out
}

/// Every reservation of the networks asked whose module keeps them, in network order.
pub fn reservations(
    access: &StoreAccess,
    networks: Records,
    notes: &mut Vec<Note>,
) -> Vec<Reservation> {
    let answers = ask_each(
        access,
        "list",
        networks,
        |a, session| {
            if !session.module().exports(Export::Reservations) {
                return Ok(None);
            }
            match read(session, Reservations(a.nodes_context())) {
                // A module that keeps no reservations has none to show.
                Err(e) if e.code == crate::error::code::NOT_IMPLEMENTED => Ok(None),
                answer => answer,
            }
        },
        notes,
    );
    let mut out = Vec::new();
    for (network, list) in answers {
        out.extend(
            list.into_iter()
                .take(MAX_ROWS)
                .map(|r| checked_reservation(&network, r)),
        );
    }
    out
}

/// Every pool (and block) of the networks asked, grouped per network with its totals:
/// `usage` if the module exports it, else `inspect`'s pools.
pub fn network_stats(
    access: &StoreAccess,
    networks: Records,
    notes: &mut Vec<Note>,
) -> Vec<NetworkStats> {
    ask_each(
        access,
        "stats",
        networks,
        |a, session| match session.module().exports(Export::Usage) {
            true => read(session, Usage(a.context())),
            // A module older than `usage` (0.2.3): its `inspect` pools, as pool rows.
            false => read(session, Pools(a.context())).map(|pools| {
                pools.map(|pools| pools.into_iter().map(pool_row).map(widened).collect())
            }),
        },
        notes,
    )
    .into_iter()
    .map(|(network, rows)| totals(&network, rows))
    .collect()
}

/// `inspect`'s pool record as a pool row.
fn pool_row(p: inspect::Pool) -> usage::PoolUsage {
    usage::PoolUsage {
        kind: usage::Kind::Pool,
        name: p.name,
        parent: None,
        node: None,
        capacity: p.capacity,
        in_use: p.in_use,
        excluded: p.excluded,
        cooling_down: p.cooling_down,
        reserved: 0,
        borrowed: 0,
        free: p.free,
        warn_percent: None,
    }
}

/// A count as one number.
fn exact(c: wide_usage::Count) -> u128 {
    (u128::from(c.high) << 64) | u128::from(c.low)
}

fn checked_reservation(network: &str, r: reservations::Reservation) -> Reservation {
    Reservation {
        network: network.to_string(),
        cidr: field(&r.cidr),
        note: field(&r.note),
        since: r.since,
        held: r.held.iter().take(MAX_ROWS).map(|a| field(a)).collect(),
    }
}

/// A module's allocation as shown: the address must be an IP address (a prefix length
/// is dropped); text is cut to [`MAX_FIELD_BYTES`].
pub fn checked_allocation(network: &str, a: inspect::Allocation) -> Option<Allocation> {
    let text = a
        .address
        .split_once('/')
        .map_or(a.address.as_str(), |(ip, _)| ip);
    let address: IpAddr = text.parse().ok()?;
    Some(Allocation {
        network: network.to_string(),
        address,
        container_id: field(&a.container_id),
        ifname: field(&a.ifname),
        since: a.since,
        attributes: a
            .attributes
            .iter()
            .take(32)
            .map(|(k, v)| (field(k), field(v)))
            .collect(),
    })
}

/// Text from a module, safe for a terminal: control characters escaped.
pub fn printable(text: &str) -> String {
    if text.chars().any(char::is_control) {
        return text.escape_debug().to_string();
    }
    text.to_string()
}

fn field(text: &str) -> String {
    crate::limits::truncated(text, MAX_FIELD_BYTES).to_string()
}

fn totals(network: &str, rows: Vec<wide_usage::PoolUsage>) -> NetworkStats {
    let row = |p: wide_usage::PoolUsage| PoolStats {
        network: network.to_string(),
        pool: field(&p.name),
        parent: p.parent.as_deref().map(field),
        node: p.node.as_deref().map(field),
        capacity: p.capacity.map(exact),
        in_use: exact(p.in_use),
        excluded: exact(p.excluded),
        cooling_down: exact(p.cooling_down),
        reserved: exact(p.reserved),
        borrowed: exact(p.borrowed),
        free: p.free.map(exact),
        warn_percent: p.warn_percent.filter(|p| *p <= 100),
    };
    let (pools, blocks): (Vec<_>, Vec<_>) = rows
        .into_iter()
        .take(MAX_ROWS)
        .partition(|p| p.kind == usage::Kind::Pool);
    let pools: Vec<PoolStats> = pools.into_iter().take(MAX_POOLS).map(row).collect();
    let blocks: Vec<PoolStats> = blocks.into_iter().map(row).collect();
    let sum = |f: fn(&PoolStats) -> Option<u128>| -> Option<u128> {
        pools
            .iter()
            .try_fold(0u128, |total, p| Some(total.saturating_add(f(p)?)))
    };
    NetworkStats {
        network: network.to_string(),
        capacity: sum(|p| p.capacity),
        in_use: sum(|p| Some(p.in_use)).unwrap_or(0),
        excluded: sum(|p| Some(p.excluded)).unwrap_or(0),
        cooling_down: sum(|p| Some(p.cooling_down)).unwrap_or(0),
        reserved: sum(|p| Some(p.reserved)).unwrap_or(0),
        borrowed: sum(|p| Some(p.borrowed)).unwrap_or(0),
        free: sum(|p| p.free),
        pools,
        blocks,
        leak_candidates: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocation(address: &str, since: Option<u64>) -> inspect::Allocation {
        inspect::Allocation {
            address: address.into(),
            container_id: "c".repeat(1000),
            ifname: "eth0".into(),
            since,
            attributes: vec![("node".into(), "n1".into())],
        }
    }

    #[test]
    fn a_module_s_allocations_are_checked_and_bounded() {
        let a = checked_allocation("n", allocation("10.0.0.2/24", Some(u64::MAX))).unwrap();
        assert_eq!(a.address, "10.0.0.2".parse::<IpAddr>().unwrap());
        assert!(a.container_id.starts_with(&"c".repeat(MAX_FIELD_BYTES)));
        assert!(
            a.container_id.ends_with("[744 bytes cut]"),
            "{}",
            a.container_id
        );
        assert_eq!(a.since, Some(u64::MAX));
        assert_eq!(a.attributes["node"], "n1");
        assert!(checked_allocation("n", allocation("not-an-ip", None)).is_none());
        assert!(checked_allocation("n", allocation("fd00::5", None)).is_some());
    }

    #[test]
    fn totals_are_known_only_when_every_pool_s_are() {
        let pool = |name: &str, capacity: Option<u64>, free: Option<u64>| {
            widened(pool_row(inspect::Pool {
                name: name.into(),
                capacity,
                in_use: 2,
                excluded: 1,
                cooling_down: 1,
                free,
            }))
        };
        let both = totals(
            "n",
            vec![
                pool("a", Some(10), Some(6)),
                pool("b", Some(u64::MAX), Some(3)),
            ],
        );
        assert_eq!(
            both.capacity,
            Some(u128::from(u64::MAX) + 10),
            "exact past 2^64"
        );
        assert_eq!((both.in_use, both.excluded, both.free), (4, 2, Some(9)));
        let one_unknown = totals(
            "n",
            vec![pool("a", Some(10), Some(6)), pool("b", None, None)],
        );
        assert_eq!((one_unknown.capacity, one_unknown.free), (None, None));
        assert_eq!(one_unknown.pools.len(), 2);
    }

    #[test]
    fn wide_counts_are_exact() {
        let wide = |high: u64, low: u64| wide_usage::Count { high, low };
        assert_eq!(exact(wide(0, 5)), 5);
        // A /48 of IPv6: 2^80 addresses.
        assert_eq!(exact(wide(1 << 16, 0)), 1u128 << 80);
        assert_eq!(exact(wide(u64::MAX, u64::MAX)), u128::MAX);
    }

    #[test]
    fn block_rows_are_shown_apart_and_never_summed() {
        let count = |n: u64| wide_usage::Count { high: 0, low: n };
        let row =
            |kind: usage::Kind, name: &str, in_use: u64, borrowed: u64| wide_usage::PoolUsage {
                kind,
                name: name.into(),
                parent: (kind == usage::Kind::Block).then(|| "pool p 10.0.0.0/24".into()),
                node: None,
                capacity: Some(count(61)),
                in_use: count(in_use),
                excluded: count(0),
                cooling_down: count(0),
                reserved: count(3),
                borrowed: count(borrowed),
                free: None,
                warn_percent: Some(101),
            };
        let stats = totals(
            "n",
            vec![
                row(usage::Kind::Pool, "pool p 10.0.0.0/24", 5, 1),
                row(usage::Kind::Block, "10.0.0.0/26", 4, 1),
                row(usage::Kind::Block, "10.0.0.64/26", 1, 0),
            ],
        );
        assert_eq!((stats.in_use, stats.borrowed, stats.reserved), (5, 1, 3));
        assert_eq!((stats.pools.len(), stats.blocks.len()), (1, 2));
        assert_eq!(
            stats.pools[0].warn_percent, None,
            "over 100 is not a percent"
        );
    }
}
