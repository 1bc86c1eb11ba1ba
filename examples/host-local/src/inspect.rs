//! What the module tells operators (`wasm-ipam list` and `stats`), read from the
//! reservations [`crate::allocator`] keeps: an allocation per `ip/<address>` entry,
//! and a pool per range set when the host has the network's configuration, else one
//! pool for the network from the `summary` entry the last committing call wrote.
//!
//! Store values are whatever was last written, by this module, an import or a
//! hand: entries that cannot be read are skipped or shown as they are, never fatal.

use crate::allocator::{self, Held};
use crate::config;
use crate::exclude::Exclusions;
use crate::summary;
use std::net::IpAddr;
use wasm_ipam_guest::store::Store;
use wasm_ipam_guest::{Allocation, Context, Error, Pool};

/// Every reservation, with when it was made if the module recorded it.
pub fn allocations(store: &impl Store) -> Vec<Allocation> {
    allocator::held(store)
        .into_iter()
        .map(|held| {
            let allocation = Allocation::new(held.ip, held.container_id, held.ifname);
            match held.since {
                Some(since) => allocation.since(since),
                None => allocation,
            }
        })
        .collect()
}

fn count(ips: impl Iterator<Item = IpAddr>, within: impl Fn(IpAddr) -> bool) -> u64 {
    let n = ips.filter(|ip| within(*ip)).count();
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Capacity and use per range set, named by its subnets (with its ranges too when
/// another set has the same subnets); without a configuration, the network as one
/// pool with the recorded summary's capacity (unknown if there is none).
pub fn pools(context: &Context, store: &impl Store) -> Result<Vec<Pool>, Error> {
    let held: Vec<Held> = allocator::held(store);
    let cooling = allocator::cooling(store, context.now().seconds);
    let in_use = |within: &dyn Fn(IpAddr) -> bool| count(held.iter().map(|h| h.ip), within);
    let resting = |within: &dyn Fn(IpAddr) -> bool| count(cooling.iter().copied(), within);

    let Some(netconf) = context.config() else {
        let pool = Pool::new(context.network_name())
            .in_use(in_use(&|_| true))
            .cooling_down(resting(&|_| true));
        return Ok(vec![match summary::read(store) {
            Some((capacity, excluded)) => pool
                .capacity(capacity)
                .excluded(excluded)
                .free_from_capacity(),
            None => pool,
        }]);
    };
    let conf = config::load(netconf, &[])?;
    let exclusions = Exclusions::new(&conf.exclude);
    let names: Vec<String> = conf
        .ranges
        .iter()
        .map(|set| {
            let mut subnets: Vec<String> = Vec::new();
            for subnet in set.ranges().iter().map(|r| r.subnet.to_string()) {
                if !subnets.contains(&subnet) {
                    subnets.push(subnet);
                }
            }
            subnets.join(",")
        })
        .collect();
    Ok(conf
        .ranges
        .iter()
        .zip(&names)
        .map(|(set, name)| {
            let (capacity, excluded) = summary::set_capacity(set, &exclusions);
            let shared = names.iter().filter(|n| *n == name).count() > 1;
            let name = if shared {
                format!("{name} ({set})")
            } else {
                name.clone()
            };
            Pool::new(name)
                .capacity(capacity)
                .excluded(excluded)
                .in_use(in_use(&|ip| set.contains(ip)))
                .cooling_down(resting(&|ip| set.contains(ip)))
                .free_from_capacity()
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use wasm_ipam_guest::store::MemoryStore;

    fn netconf(ipam: Value) -> Value {
        json!({"cniVersion": "1.0.0", "name": "net", "ipam": ipam})
    }

    fn store(entries: &[(&str, &[u8])]) -> MemoryStore {
        entries.iter().map(|(k, v)| (*k, v.to_vec())).collect()
    }

    #[test]
    fn allocations_read_owners_and_since() {
        let store = store(&[
            ("ip/10.0.0.2", b"c1\r\neth0"),
            ("meta/10.0.0.2", br#"{"since":1700000000}"#),
            ("ip/10.0.0.3", b" legacy-id "),
            ("ip/fd00::2", b"c2\r\nnet1"),
            ("meta/fd00::2", b"not json"),
            ("last_reserved_ip.0", b"10.0.0.3"),
        ]);
        assert_eq!(
            allocations(&store),
            [
                Allocation::new("10.0.0.2", "c1", "eth0").since(1_700_000_000),
                Allocation::new("10.0.0.3", "legacy-id", ""),
                Allocation::new("fd00::2", "c2", "net1"),
            ]
        );
    }

    #[test]
    fn hostile_values_are_skipped_or_shown_as_they_are() {
        let store = store(&[
            ("ip/not-an-address", b"c1\r\neth0"),
            ("ip/10.0.0.2", b"\xff\xfe\r\neth0"),
            ("meta/10.0.0.2", br#"{"since":18446744073709551615}"#),
            ("ip/10.0.0.3", b"c3\r\neth0"),
            ("meta/10.0.0.3", br#"{"since":-1}"#),
            ("ip/10.0.0.4", b"c4\r\neth0"),
            ("meta/10.0.0.4", br#"[1, 2]"#),
            ("cooldown/10.0.0.5", br#"{"until":"soon"}"#),
            ("cooldown/junk", br#"{"until":99999}"#),
            ("summary", br#"{"capacity":-3}"#),
        ]);
        assert_eq!(
            allocations(&store),
            [
                Allocation::new("10.0.0.2", "\u{fffd}\u{fffd}", "eth0").since(u64::MAX),
                Allocation::new("10.0.0.3", "c3", "eth0"),
                Allocation::new("10.0.0.4", "c4", "eth0"),
            ]
        );
        let pools = pools(&Context::for_test("net", None), &store).unwrap();
        assert_eq!(pools, [Pool::new("net").in_use(3)]);
    }

    #[test]
    fn pools_count_each_range_set() {
        let conf = netconf(json!({
            "ranges": [
                [{"subnet": "10.0.0.0/24"}, {"subnet": "10.0.1.0/29"}],
                [{"subnet": "fd00::/120"}]
            ],
            "exclude": ["10.0.0.0/28"]
        }));
        let store = store(&[
            ("ip/10.0.0.20", b"c1\r\neth0"),
            ("ip/10.0.1.2", b"c2\r\neth0"),
            ("ip/fd00::2", b"c1\r\neth0"),
            ("ip/192.168.9.9", b"elsewhere\r\neth0"),
            ("cooldown/10.0.0.30", br#"{"until":2000}"#),
            ("cooldown/10.0.0.31", br#"{"until":1000}"#),
            ("cooldown/fd00::9", br#"{"until":5000}"#),
        ]);
        let context = Context::for_test("net", Some(conf)).with_now(1000);
        assert_eq!(
            pools(&context, &store).unwrap(),
            [
                // .2-.254 and .2-.6 (253 + 5); .2-.15 excluded (14).
                Pool::new("10.0.0.0/24,10.0.1.0/29")
                    .capacity(258)
                    .excluded(14)
                    .in_use(2)
                    .cooling_down(1)
                    .free(241),
                Pool::new("fd00::/120")
                    .capacity(254)
                    .in_use(1)
                    .cooling_down(1)
                    .free(252),
            ]
        );
    }

    #[test]
    fn sets_sharing_a_subnet_are_told_apart_by_their_ranges() {
        let range = |start: &str, end: &str| json!([{"subnet": "10.0.0.0/24", "rangeStart": start, "rangeEnd": end}]);
        let conf = netconf(json!({"ranges": [
            range("10.0.0.10", "10.0.0.19"),
            range("10.0.0.20", "10.0.0.29"),
        ]}));
        let context = Context::for_test("net", Some(conf));
        let names: Vec<String> = pools(&context, &MemoryStore::default())
            .unwrap()
            .into_iter()
            .map(|p| p.name)
            .collect();
        assert_eq!(
            names,
            [
                "10.0.0.0/24 (10.0.0.10-10.0.0.19)",
                "10.0.0.0/24 (10.0.0.20-10.0.0.29)"
            ]
        );
    }

    #[test]
    fn without_a_configuration_the_summary_stands_in() {
        let store = store(&[
            ("ip/10.0.0.2", b"c1\r\neth0"),
            ("ip/10.0.0.3", b"legacy"),
            ("cooldown/10.0.0.4", br#"{"until":2000}"#),
            ("cooldown/10.0.0.5", br#"{"until":500}"#),
            ("summary", br#"{"capacity":253,"excluded":2}"#),
        ]);
        let context = Context::for_test("net", None).with_now(1000);
        assert_eq!(
            pools(&context, &store).unwrap(),
            [Pool::new("net")
                .capacity(253)
                .excluded(2)
                .in_use(2)
                .cooling_down(1)
                .free(248)]
        );
    }

    #[test]
    fn an_invalid_configuration_is_code_7() {
        let context = Context::for_test("net", Some(netconf(json!({"ranges": []}))));
        let err = pools(&context, &MemoryStore::default()).unwrap_err();
        assert_eq!(err.code, 7);
    }
}
