//! The operators' view of the store: every allocation, and per network capacity and
//! use. It reads the store conventions modules follow so operators need not know a
//! module's internals:
//!
//! - `ip/<address>` → `<containerID>\r\n<ifname>` (host-local's per-address file; a
//!   value without `\r\n` is host-local's legacy id-only form),
//! - `meta/<address>` → `{"since": <unix seconds>}`, when the address was handed out,
//! - `cooldown/<address>` → `{"until": <unix seconds>}`, not reused before then,
//! - `summary` → `{"capacity": N, "excluded": M}`: addresses the ranges can hand out,
//!   and how many of those are excluded; free is capacity less excluded, in use and cooling.

use crate::error::CniError;
use crate::store::Store;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Allocation {
    pub network: String,
    pub address: IpAddr,
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
    /// Unix seconds when it was handed out, if the module recorded it.
    pub since: Option<u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NetworkStats {
    pub network: String,
    /// Addresses the network can hand out, if the module recorded it.
    pub capacity: Option<u64>,
    pub in_use: u64,
    pub excluded: u64,
    pub cooling_down: u64,
    pub free: Option<u64>,
}

#[derive(Deserialize)]
struct Meta {
    since: Option<u64>,
}

#[derive(Deserialize)]
struct Cooldown {
    until: u64,
}

#[derive(Deserialize)]
struct Summary {
    capacity: u64,
    #[serde(default)]
    excluded: u64,
}

/// Every allocation, in network then key order.
pub fn allocations(store: &dyn Store, network: Option<&str>) -> Result<Vec<Allocation>, CniError> {
    let entries = store.entries(network)?;
    let since: BTreeMap<(&str, &str), u64> = entries
        .iter()
        .filter_map(|(net, key, value)| {
            let address = key.strip_prefix("meta/")?;
            let meta: Meta = serde_json::from_slice(value).ok()?;
            Some(((net.as_str(), address), meta.since?))
        })
        .collect();
    Ok(entries
        .iter()
        .filter_map(|(net, key, value)| {
            let address = key.strip_prefix("ip/")?;
            let owner = String::from_utf8_lossy(value);
            let (container_id, ifname) = owner.split_once("\r\n").unwrap_or((&owner, ""));
            Some(Allocation {
                network: net.clone(),
                address: address.parse().ok()?,
                container_id: container_id.trim().to_string(),
                ifname: ifname.trim().to_string(),
                since: since.get(&(net.as_str(), address)).copied(),
            })
        })
        .collect())
}

/// Capacity and use per network, counting cooldowns still running at `now` (unix s).
pub fn network_stats(store: &dyn Store, now: u64) -> Result<Vec<NetworkStats>, CniError> {
    let mut stats: BTreeMap<String, NetworkStats> = BTreeMap::new();
    for (net, key, value) in store.entries(None)? {
        let entry = stats.entry(net.clone()).or_insert_with(|| NetworkStats {
            network: net,
            ..NetworkStats::default()
        });
        if key.starts_with("ip/") {
            entry.in_use += 1;
        } else if key.starts_with("cooldown/") {
            if serde_json::from_slice::<Cooldown>(&value).is_ok_and(|c| c.until > now) {
                entry.cooling_down += 1;
            }
        } else if key == "summary"
            && let Ok(summary) = serde_json::from_slice::<Summary>(&value)
        {
            entry.capacity = Some(summary.capacity);
            entry.excluded = summary.excluded;
        }
    }
    Ok(stats
        .into_values()
        .map(|mut s| {
            s.free = s
                .capacity
                .map(|c| c.saturating_sub(s.excluded + s.in_use + s.cooling_down));
            s
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Changes, Quota};

    fn put(store: &mut dyn Store, network: &str, pairs: &[(&str, &str)]) {
        let changes: Changes = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), Some(v.as_bytes().to_vec())))
            .collect();
        store
            .commit(network, &changes, Quota::UNLIMITED, &|| false)
            .unwrap();
    }

    #[test]
    fn allocations_and_stats_follow_the_conventions() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = crate::store::open(dir.path(), std::time::Duration::ZERO).unwrap();
        put(
            store.as_mut(),
            "a",
            &[
                ("ip/10.0.0.2", "c1\r\neth0"),
                ("meta/10.0.0.2", r#"{"since":1700000000}"#),
                ("ip/10.0.0.3", "legacy-id"),
                ("last_reserved_ip.0", "10.0.0.3"),
                ("cooldown/10.0.0.4", r#"{"until":2000}"#),
                ("cooldown/10.0.0.5", r#"{"until":500}"#),
                ("summary", r#"{"capacity":253,"excluded":2}"#),
            ],
        );
        put(store.as_mut(), "b", &[("ip/fd00::2", "c2\r\nnet1")]);
        let all = allocations(store.as_ref(), None).unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(all[0].container_id, "c1");
        assert_eq!(all[0].ifname, "eth0");
        assert_eq!(all[0].since, Some(1_700_000_000));
        assert_eq!(all[1].container_id, "legacy-id");
        assert_eq!(all[1].ifname, "");
        assert_eq!(allocations(store.as_ref(), Some("b")).unwrap().len(), 1);

        let stats = network_stats(store.as_ref(), 1000).unwrap();
        assert_eq!(
            stats[0],
            NetworkStats {
                network: "a".into(),
                capacity: Some(253),
                in_use: 2,
                excluded: 2,
                cooling_down: 1,
                free: Some(248),
            }
        );
        assert_eq!(stats[1].capacity, None);
        assert_eq!(stats[1].free, None);
    }
}
