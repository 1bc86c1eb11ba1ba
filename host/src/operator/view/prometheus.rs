//! `wasm-ipam stats --prometheus`: each network's and pool's address use, the STATUS
//! conditions this node's calls recorded, and the calls' timings from the log, in
//! Prometheus text format (for node_exporter's textfile collector).

use crate::health::Health;
use crate::operator::view::inventory::{NetworkStats, PoolStats};
use crate::operator::view::metrics::{
    BUCKETS, CallTiming, DATASTORE_COUNTS, DATASTORE_TIMINGS, TIMINGS, used_a_datastore,
};
use std::collections::BTreeMap;
use std::fmt::Write;

type NetworkMetric = (
    &'static str,
    &'static str,
    fn(&NetworkStats) -> Option<u128>,
);
type PoolMetric = (&'static str, &'static str, fn(&PoolStats) -> Option<u128>);

const NETWORK_METRICS: &[NetworkMetric] = &[
    (
        "wasm_ipam_addresses_capacity",
        "Addresses the network can hand out.",
        |n| n.capacity,
    ),
    ("wasm_ipam_addresses_in_use", "Addresses allocated.", |n| {
        Some(n.in_use)
    }),
    (
        "wasm_ipam_addresses_free",
        "Addresses that can be handed out now.",
        |n| n.free,
    ),
    (
        "wasm_ipam_addresses_excluded",
        "Addresses excluded from allocation.",
        |n| Some(n.excluded),
    ),
    (
        "wasm_ipam_addresses_cooling_down",
        "Released addresses not yet reusable.",
        |n| Some(n.cooling_down),
    ),
    (
        "wasm_ipam_addresses_reserved",
        "Addresses kept out of use by a reservation, not in use.",
        |n| Some(n.reserved),
    ),
    (
        "wasm_ipam_addresses_borrowed",
        "Addresses in use held in another node's block.",
        |n| Some(n.borrowed),
    ),
];

fn gauge(out: &mut String, name: &str, help: &str, rows: &[(String, u128)]) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
    for (labels, value) in rows {
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

/// One row per network, source and code, counting its conditions.
fn condition_rows(conditions: &[(String, Health)]) -> Vec<(String, u128)> {
    let mut rows: BTreeMap<String, u128> = BTreeMap::new();
    for (network, health) in conditions {
        let labels = |source: &str, code: u32| {
            format!(
                "network=\"{}\",source=\"{source}\",code=\"{code}\"",
                escape(network)
            )
        };
        if let Some((c, _)) = &health.store_unreachable {
            *rows.entry(labels("store", c.code)).or_default() += 1;
        }
        for c in &health.degraded {
            *rows.entry(labels("module", c.code)).or_default() += 1;
        }
    }
    rows.into_iter().collect()
}

fn escape(label: &str) -> String {
    label
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

const POOL_METRICS: &[PoolMetric] = &[
    (
        "wasm_ipam_pool_addresses_capacity",
        "Addresses the pool can hand out.",
        |p| p.capacity,
    ),
    (
        "wasm_ipam_pool_addresses_in_use",
        "Addresses allocated from the pool.",
        |p| Some(p.in_use),
    ),
    (
        "wasm_ipam_pool_addresses_free",
        "Addresses the pool can hand out now.",
        |p| p.free,
    ),
    (
        "wasm_ipam_pool_addresses_excluded",
        "Addresses of the pool excluded from allocation.",
        |p| Some(p.excluded),
    ),
    (
        "wasm_ipam_pool_addresses_cooling_down",
        "Released addresses of the pool not yet reusable.",
        |p| Some(p.cooling_down),
    ),
    (
        "wasm_ipam_pool_addresses_reserved",
        "Addresses of the pool kept out of use by a reservation, not in use.",
        |p| Some(p.reserved),
    ),
    (
        "wasm_ipam_pool_addresses_borrowed",
        "Addresses of the pool in use held in another node's block.",
        |p| Some(p.borrowed),
    ),
    (
        "wasm_ipam_pool_warn_percent",
        "The module's warning threshold: percent of the pool's capacity in use.",
        |p| p.warn_percent.map(u128::from),
    ),
];

/// Prometheus text exposition format: per network (its totals over its pools), then
/// per pool, then the STATUS conditions, then the calls' timings from the log.
pub fn prometheus(
    networks: &[NetworkStats],
    conditions: &[(String, Health)],
    timings: &[CallTiming],
) -> String {
    let mut out = String::new();
    let rows = |f: fn(&NetworkStats) -> Option<u128>| -> Vec<(String, u128)> {
        networks
            .iter()
            .filter_map(|n| Some((format!("network=\"{}\"", escape(&n.network)), f(n)?)))
            .collect()
    };
    let pools: Vec<&PoolStats> = networks.iter().flat_map(|n| &n.pools).collect();
    let pool_rows = |f: fn(&PoolStats) -> Option<u128>| -> Vec<(String, u128)> {
        pools
            .iter()
            .filter_map(|p| {
                let labels = format!(
                    "network=\"{}\",pool=\"{}\"",
                    escape(&p.network),
                    escape(&p.pool)
                );
                Some((labels, f(p)?))
            })
            .collect()
    };
    for (name, help, value) in NETWORK_METRICS {
        gauge(&mut out, name, help, &rows(*value));
    }
    if networks.iter().any(|n| n.leak_candidates.is_some()) {
        gauge(
            &mut out,
            "wasm_ipam_leak_candidates",
            "Allocations whose sandbox the runtime does not have, older than the grace period: what wasm-ipam gc would release.",
            &rows(|n| n.leak_candidates.map(u128::from)),
        );
    }
    for (name, help, value) in POOL_METRICS {
        gauge(&mut out, name, help, &pool_rows(*value));
    }
    gauge(
        &mut out,
        "wasm_ipam_status_conditions",
        "Conditions this node's calls met that fail some ADDs while CNI STATUS answers ready: source store (the cluster store not reached) or module (what the module reported degraded), by CNI code.",
        &condition_rows(conditions),
    );
    let datastore = used_a_datastore(timings);
    if datastore {
        for (name, help, value) in DATASTORE_COUNTS {
            let total: u64 = timings.iter().map(|t| value(&t.datastore)).sum();
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {total}"
            );
        }
    }
    let histograms = TIMINGS
        .iter()
        .chain(DATASTORE_TIMINGS.iter().filter(|_| datastore));
    for (name, help, value) in histograms {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        for bound in BUCKETS {
            let count = timings.iter().filter(|t| value(t) <= *bound).count();
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", timings.len());
        let sum: f64 = timings.iter().map(value).sum();
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {}", timings.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gauge_is_written_in_the_exposition_format_with_its_labels_escaped() {
        let network = "a \"quoted\" \\ net\nwork";
        let mut out = String::new();
        gauge(
            &mut out,
            "wasm_ipam_example",
            "An example.",
            &[(format!("network=\"{}\"", escape(network)), 7)],
        );
        assert_eq!(
            out,
            "# HELP wasm_ipam_example An example.\n# TYPE wasm_ipam_example gauge\n\
             wasm_ipam_example{network=\"a \\\"quoted\\\" \\\\ net\\nwork\"} 7\n"
        );
    }
}
