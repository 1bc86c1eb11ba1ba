//! A pool's use: the rows of `wasm-ipam stats` (`usage` export), and the warning a
//! call logs when it brings a range to its pool's `warnPercent`.
//!
//! The warning needs the range's addresses in use cluster-wide at every call, which
//! no node's own keys say. Each node publishes its own count, `use/<range>/<node>`,
//! counted from its attachments (`own/<node>/…`) by each call that changes them, and
//! sums the others' with a peek (read, not checked at the commit: a read checked
//! there would make every ADD of every node conflict with every other). The sum can
//! lag by the calls running at that instant; the next call sees them. Whether the
//! range is past the threshold is recorded in `warn/<range>` (a checked read), so
//! of nodes racing past it, one commits the record and logs the line; the others run
//! again and see it. Below the threshold again, the record goes and one line says so.

use crate::blocks::Range;
use crate::conf::{Conf, NamedPool};
use crate::reserve::Kept;
use crate::{AttachmentAddresses, Block, decode, read, reserve};
use ipnet::IpNet;
use std::collections::BTreeMap;
use std::net::IpAddr;
use wasm_ipam_guest::{Error, PoolUsage, Store};

pub fn use_key(range: &Range, node: &str) -> String {
    format!("use/{}/{node}", range.cidr)
}
fn use_prefix(range: &Range) -> String {
    format!("use/{}/", range.cidr)
}
fn warn_key(range: &Range) -> String {
    format!("warn/{}", range.cidr)
}

/// A range's addresses a pod can get: every block's usable ones.
pub fn capacity(range: &Range) -> u128 {
    range.blocks().saturating_mul(range.usable())
}

/// The pool row's name for a range: `pool NAME CIDR`.
pub fn row_name(pool: &NamedPool, range: &Range) -> String {
    format!("pool {} {}", pool.name, range.cidr)
}

/// After a call changed `node`'s attachments in `ranges`: publishes the node's count
/// for each range whose pool has `warnPercent`, and answers the lines to log for
/// those it brought to the threshold (or back under it). Reaching it counts, not only
/// passing it: `warnPercent` 100 then warns when the range is full.
pub fn account(
    store: &mut impl Store,
    conf: &Conf,
    node: &str,
    ranges: &[IpNet],
) -> Result<Vec<String>, Error> {
    let watched: Vec<(&NamedPool, &Range, u8)> = conf
        .pools
        .iter()
        .flat_map(|p| p.ranges.iter().map(move |r| (p, r)))
        .filter(|(_, r)| ranges.contains(&r.cidr))
        .filter_map(|(p, r)| Some((p, r, p.warn_percent?)))
        .collect();
    if watched.is_empty() {
        return Ok(Vec::new());
    }
    // This node's addresses per range, from its attachments: a peek, as only its own
    // calls write them, one at a time, and a node's hundreds of attachments must not
    // each be a compare in the commit.
    let mut mine: BTreeMap<IpNet, u64> = BTreeMap::new();
    let prefix = format!("own/{node}/");
    for (key, value) in store.peek(&prefix) {
        let own: AttachmentAddresses = decode(&key, &value)?;
        for ip in own.ips {
            if let Some(range) = conf.range_of(ip) {
                *mine.entry(range.cidr).or_default() += 1;
            }
        }
    }
    let mut lines = Vec::new();
    for (pool, range, percent) in watched {
        let own = mine.get(&range.cidr).copied().unwrap_or(0);
        let key = use_key(range, node);
        let mut others = 0u64;
        let mut published = None;
        for (k, v) in store.peek(&use_prefix(range)) {
            let count: u64 = decode(&k, &v)?;
            match k == key {
                true => published = Some(count),
                false => others = others.saturating_add(count),
            }
        }
        if published != Some(own) {
            store.put(&key, own.to_string().as_bytes())?;
        }
        let in_use = u128::from(others.saturating_add(own));
        let capacity = capacity(range);
        let reached = in_use * 100 >= capacity.saturating_mul(u128::from(percent));
        let warned = store.get(&warn_key(range)).is_some();
        let name = row_name(pool, range);
        let share = in_use * 100 / capacity.max(1);
        if reached && !warned {
            store.put(&warn_key(range), b"")?;
            lines.push(format!(
                "{name}: {in_use} of {capacity} addresses in use ({share}%), reached its warnPercent {percent}"
            ));
        } else if !reached && warned {
            store.delete(&warn_key(range))?;
            lines.push(format!(
                "{name}: {in_use} of {capacity} addresses in use ({share}%), back under its warnPercent {percent}"
            ));
        }
    }
    Ok(lines)
}

/// Forgets a node's published counts (a node released by `release-node`).
pub fn forget(store: &mut impl Store, conf: &Conf, node: &str) -> Result<(), Error> {
    for range in conf.ranges() {
        store.delete(&use_key(range, node))?;
    }
    Ok(())
}

/// One block's figures: addresses held by pods, kept for sticky pods, and held by
/// another node's pod (borrowed).
struct Held {
    in_use: u64,
    kept: u64,
    borrowed: u64,
    /// Held addresses (in use or kept) that are reserved.
    reserved_held: u64,
}

/// Holds kept for sticky pods past their time are neither: upkeep sweeps them, and
/// an ADD takes one back when its block has no other free address.
fn held(block: &Block, kept: &Kept, now: u64) -> Held {
    let mut h = Held {
        in_use: 0,
        kept: 0,
        borrowed: 0,
        reserved_held: 0,
    };
    for (ip, holder) in block.ips.iter().filter(|(_, h)| !h.expired(now)) {
        match holder.held_until.is_some() {
            true => h.kept += 1,
            false => h.in_use += 1,
        }
        if holder.held_until.is_none() && holder.node != block.node {
            h.borrowed += 1;
        }
        if kept.contains(*ip) {
            h.reserved_held += 1;
        }
    }
    h
}

/// The `usage` rows: one per range of each pool (the network's partition), then one
/// per claimed block of it, with its node.
pub fn rows(store: &impl Store, conf: &Conf, now: u64) -> Result<Vec<PoolUsage>, Error> {
    // One listing of every block (one store request), not a read per block.
    let mut blocks: Vec<(IpNet, Block)> = Vec::new();
    for (key, value) in store.list("blk/") {
        let Ok(block_net) = key["blk/".len()..].parse::<IpNet>() else {
            continue;
        };
        blocks.push((block_net, decode(&key, &value)?));
    }
    let mut pools = Vec::new();
    let mut block_rows = Vec::new();
    for pool in &conf.pools {
        for range in &pool.ranges {
            let all = reserve::of(store, range)?;
            let kept = Kept::of(&all);
            let name = row_name(pool, range);
            let (mut in_use, mut cooling, mut borrowed, mut reserved_held) =
                (0u64, 0u64, 0u64, 0u64);
            for (net, block) in blocks.iter().filter(|(net, _)| range.cidr.contains(net)) {
                let h = held(block, &kept, now);
                in_use += h.in_use;
                cooling += h.kept;
                borrowed += h.borrowed;
                reserved_held += h.reserved_held;
                let reserved = kept
                    .in_block(range, *net)
                    .saturating_sub(h.reserved_held.into());
                block_rows.push(
                    PoolUsage::block(net, &name)
                        .node(&block.node)
                        .capacity(range.usable())
                        .in_use(h.in_use.into())
                        .cooling_down(h.kept.into())
                        .borrowed(h.borrowed.into())
                        .reserved(reserved)
                        .free_from_capacity(),
                );
            }
            let reserved = kept.in_range(range).saturating_sub(reserved_held.into());
            let mut row = PoolUsage::pool(&name)
                .capacity(capacity(range))
                .in_use(in_use.into())
                .cooling_down(cooling.into())
                .borrowed(borrowed.into())
                .reserved(reserved)
                .free_from_capacity();
            if let Some(percent) = pool.warn_percent {
                row = row.warn_percent(percent);
            }
            pools.push(row);
        }
    }
    pools.extend(block_rows);
    Ok(pools)
}

/// The addresses of `net` (in `range`) held now, in use or kept for a sticky pod.
/// `Read::Checked` reads each block the commit checks (for a decision, as reserve's
/// "is any held"); `Read::Peeked` peeks every block in one listing, so a report over
/// a range of any size costs the commit nothing (unreserve's).
pub fn held_in(
    store: &impl Store,
    range: &Range,
    net: IpNet,
    now: u64,
    how: Read,
) -> Result<Vec<IpAddr>, Error> {
    let overlaps = |b: &IpNet| range.cidr.contains(b) && (b.contains(&net) || net.contains(b));
    let blocks: Vec<Block> = match how {
        Read::Checked => {
            let claimed: std::collections::BTreeSet<IpNet> =
                read(store, &crate::pool_key(range))?.unwrap_or_default();
            let mut blocks = Vec::new();
            for block_net in claimed.into_iter().filter(overlaps) {
                blocks.extend(read::<Block>(store, &crate::block_key(block_net))?);
            }
            blocks
        }
        Read::Peeked => store
            .peek("blk/")
            .into_iter()
            .filter(|(k, _)| {
                k["blk/".len()..]
                    .parse::<IpNet>()
                    .is_ok_and(|b| overlaps(&b))
            })
            .map(|(k, v)| decode(&k, &v))
            .collect::<Result<_, _>>()?,
    };
    Ok(blocks
        .iter()
        .flat_map(|block| {
            block
                .ips
                .iter()
                .filter(|(ip, h)| net.contains(*ip) && h.held_until.is_none_or(|t| t >= now))
                .map(|(ip, _)| *ip)
        })
        .collect())
}

/// How [`held_in`] reads.
#[derive(Clone, Copy)]
pub enum Read {
    Checked,
    Peeked,
}
