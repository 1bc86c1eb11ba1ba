//! Reservations (`wasm-ipam reserve` and `unreserve`): addresses no ADD hands out, on
//! any node, however it would (its own block, a new block, a borrow, a request).
//!
//! Key `rsv/<range>`: the range's reservations, CIDR → note and since. An ADD reads
//! the key of each range it allocates in (one read), so a reservation committed
//! while it runs makes its commit conflict and it runs again, seeing it. `reserve`
//! reads the range's claimed blocks and those it covers, so an ADD that takes one of
//! its addresses meanwhile makes the reservation run again and find it in use.

use crate::blocks::Range;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;
use wasm_ipam_guest::{Error, Store};

/// Most reservations of one range: they are one record, read by every ADD.
pub const MAX_PER_RANGE: usize = 256;

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Reserved {
    pub note: String,
    pub since: u64,
}

/// A range's reservations, as stored.
pub type Reservations = BTreeMap<IpNet, Reserved>;

pub fn key(range: &Range) -> String {
    format!("rsv/{}", range.cidr)
}

/// The reservations of `range` (none recorded: none).
pub fn of(store: &impl Store, range: &Range) -> Result<Reservations, Error> {
    Ok(crate::read(store, &key(range))?.unwrap_or_default())
}

/// The reserved CIDRs of one range, merged where they overlap, for the ADD's checks
/// and the counts.
#[derive(Clone, Default, Debug)]
pub struct Kept(Vec<IpNet>);

impl Kept {
    pub fn of(reservations: &Reservations) -> Self {
        Kept(IpNet::aggregate(&reservations.keys().copied().collect()))
    }

    /// How many merged reserved CIDRs there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The reserved CIDR holding all of `block`, if one does.
    pub fn covering(&self, block: IpNet) -> Option<IpNet> {
        self.0.iter().copied().find(|net| net.contains(&block))
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// How many of `block`'s usable addresses are reserved.
    pub fn in_block(&self, range: &Range, block: IpNet) -> u128 {
        self.0.iter().map(|net| usable_in(range, block, *net)).sum()
    }

    /// How many usable addresses of the whole range are reserved.
    pub fn in_range(&self, range: &Range) -> u128 {
        self.0
            .iter()
            .filter(|net| range.cidr.contains(*net))
            .map(|net| match net.prefix_len() <= range.block_len {
                // Whole blocks.
                true => {
                    (1u128 << (range.block_len - net.prefix_len())).saturating_mul(range.usable())
                }
                false => range
                    .block_of(net.network())
                    .map_or(0, |block| usable_in(range, block, *net)),
            })
            .fold(0u128, u128::saturating_add)
    }
}

fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u32::from(v4).into(),
        IpAddr::V6(v6) => v6.into(),
    }
}

/// The usable addresses of `block` (all but its first two and its last) within `net`.
fn usable_in(range: &Range, block: IpNet, net: IpNet) -> u128 {
    if !(block.contains(&net) || net.contains(&block)) {
        return 0;
    }
    let base = to_u128(block.network());
    let low = (base + 2).max(to_u128(net.network()));
    let high = (base + range.block_size() - 2).min(to_u128(net.broadcast()));
    if high >= low { high - low + 1 } else { 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(nets: &[&str]) -> Kept {
        let all: Reservations = nets
            .iter()
            .map(|n| {
                let reserved = Reserved {
                    note: String::new(),
                    since: 0,
                };
                (n.parse().unwrap(), reserved)
            })
            .collect();
        Kept::of(&all)
    }

    #[test]
    fn counts_only_usable_addresses_and_overlaps_once() {
        let range = Range::new("10.80.0.0/16".parse().unwrap(), 26).unwrap();
        let block: IpNet = "10.80.0.0/26".parse().unwrap();
        // .0 is the network, .1 the gateway, .63 the last: not usable.
        assert_eq!(kept(&["10.80.0.0/30"]).in_block(&range, block), 2);
        assert_eq!(kept(&["10.80.0.1/32"]).in_block(&range, block), 0);
        assert_eq!(kept(&["10.80.0.62/31"]).in_block(&range, block), 1);
        // Overlapping reservations count once.
        assert_eq!(
            kept(&["10.80.0.8/29", "10.80.0.10/32"]).in_block(&range, block),
            8
        );
        // A reservation wider than the block covers its usable addresses.
        assert_eq!(kept(&["10.80.0.0/24"]).in_block(&range, block), 61);
        assert_eq!(kept(&["10.80.0.0/24"]).in_range(&range), 4 * 61);
        assert_eq!(kept(&["10.80.0.8/29"]).in_range(&range), 8);
        assert!(kept(&["10.80.0.8/29"]).contains("10.80.0.15".parse().unwrap()));
        assert!(!kept(&["10.80.0.8/29"]).contains("10.80.0.16".parse().unwrap()));
        let v6 = Range::new("fd80::/48".parse().unwrap(), 122).unwrap();
        assert_eq!(kept(&["fd80::/64"]).in_range(&v6), (1u128 << 58) * 61);
    }
}
