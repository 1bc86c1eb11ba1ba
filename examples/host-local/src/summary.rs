//! The network's `summary` store entry, `{"capacity": N, "excluded": M}`, so
//! operators' `wasm-ipam stats` can report free addresses without knowing this
//! module's configuration. Capacity counts every address the ranges hand out (the
//! gateway is never handed out); excluded counts those of them that `exclude` covers.
//! Inspect's pools count the same per range set, and read the entry back when the
//! host has no configuration to count from.

use crate::config::IpamConfig;
use crate::exclude::{Exclusions, int};
use crate::range_set::RangeSet;
use wasm_ipam_guest::Error;
use wasm_ipam_guest::store::Store;

pub const SUMMARY_KEY: &str = "summary";

/// (capacity, excluded) of one range set, before clamping.
fn counts(set: &RangeSet, exclusions: &Exclusions) -> (u128, u128) {
    let (mut capacity, mut excluded) = (0u128, 0u128);
    for range in set.ranges() {
        let (start, end) = (int(range.range_start), int(range.range_end));
        let gateway = int(range.gateway);
        capacity = capacity.saturating_add(
            (end - start).saturating_add(1) - u128::from((start..=end).contains(&gateway)),
        );
        excluded = excluded.saturating_add(exclusions.count_in(
            range.range_start,
            range.range_end,
            range.gateway,
        ));
    }
    (capacity, excluded)
}

fn clamp(v: u128) -> u64 {
    u64::try_from(v).unwrap_or(u64::MAX)
}

/// (capacity, excluded) of one range set, as inspect's pools report it.
pub fn set_capacity(set: &RangeSet, exclusions: &Exclusions) -> (u64, u64) {
    let (capacity, excluded) = counts(set, exclusions);
    (clamp(capacity), clamp(excluded))
}

/// (capacity, excluded) of the configured ranges.
pub fn capacity(conf: &IpamConfig) -> (u64, u64) {
    let exclusions = Exclusions::new(&conf.exclude);
    let (capacity, excluded) = conf
        .ranges
        .iter()
        .map(|set| counts(set, &exclusions))
        .fold((0u128, 0u128), |(c, e), (sc, se)| {
            (c.saturating_add(sc), e.saturating_add(se))
        });
    (clamp(capacity), clamp(excluded))
}

/// Writes the summary for `conf` (part of the call's staged writes).
pub fn record(store: &mut impl Store, conf: &IpamConfig) -> Result<(), Error> {
    let (capacity, excluded) = capacity(conf);
    let summary = serde_json::json!({ "capacity": capacity, "excluded": excluded });
    store.put(SUMMARY_KEY, summary.to_string().as_bytes())
}

/// (capacity, excluded) as last recorded, if the entry is there and well formed.
pub fn read(store: &impl Store) -> Option<(u64, u64)> {
    let summary: serde_json::Value = serde_json::from_slice(&store.get(SUMMARY_KEY)?).ok()?;
    let capacity = summary["capacity"].as_u64()?;
    Some((capacity, summary["excluded"].as_u64().unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conf(ipam: serde_json::Value) -> IpamConfig {
        crate::config::load(
            &json!({"cniVersion": "1.0.0", "name": "n", "ipam": ipam}),
            &[],
        )
        .unwrap()
    }

    #[test]
    fn capacity_skips_gateway_and_counts_exclusions_once() {
        // .1 is the gateway; .2-.254 can be handed out.
        assert_eq!(capacity(&conf(json!({"subnet": "10.0.0.0/24"}))), (253, 0));
        let c = conf(json!({"subnet": "10.0.0.0/24",
            "exclude": ["10.0.0.0/28", "10.0.0.8/29", "10.0.0.100", "10.9.9.9"]}));
        // 10.0.0.0/28 within the range is .2-.15 (14); the /29 lies inside it; .100 is one.
        assert_eq!(capacity(&c), (253, 15));
        let dual =
            conf(json!({"ranges": [[{"subnet": "10.0.0.0/29"}], [{"subnet": "fd00::/120"}]]}));
        assert_eq!(capacity(&dual), (5 + 254, 0));
    }
}
