//! `wasm-ipam stats`' figures: from the log file's recent calls, how long they waited
//! for the lock, held it and used of their budget; and the table people read, with
//! each network's address use. `prometheus` writes the same for node_exporter.

use crate::operator::view::inventory::{NetworkStats, PoolStats, printable};
use crate::operator::view::log_tail;
use crate::operator::view::table::{Align, Table};
use serde::Deserialize;
use std::fmt::Write;
use std::io;
use std::path::Path;
use std::time::SystemTime;

/// Histogram bucket bounds in seconds: from a fast call to the default 90 s budget.
pub(super) const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 90.0,
];

/// The timings one invocation's log line carries, in seconds, and what it did with
/// a datastore (etcd), if it used one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallTiming {
    pub lock_wait: f64,
    pub lock_hold: f64,
    pub budget_used: f64,
    pub datastore: Datastore,
}

/// One call's datastore figures (etcd or the Kubernetes API, whichever the network
/// uses): requests sent, commits refused by a conflict, handler runs repeated after
/// one, time waiting for answers and for the node's rate limiter (seconds). All zero
/// for the embedded store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Deserialize)]
pub struct Datastore {
    #[serde(rename = "etcd_requests")]
    pub requests: u64,
    #[serde(rename = "etcd_conflicts")]
    pub conflicts: u64,
    #[serde(rename = "store_retries")]
    pub retries: u64,
    #[serde(rename = "etcd_ms")]
    pub latency_ms: f64,
    #[serde(rename = "etcd_rate_wait_ms")]
    pub rate_wait_ms: f64,
}

/// The Kubernetes store's fields of a log line, summed into [`Datastore`].
#[derive(Debug, Clone, Copy, Default, Deserialize)]
struct KubeFields {
    kube_requests: u64,
    kube_conflicts: u64,
    kube_ms: f64,
    kube_rate_wait_ms: f64,
}

impl Datastore {
    fn with_kube(mut self, kube: KubeFields) -> Self {
        self.requests += kube.kube_requests;
        self.conflicts += kube.kube_conflicts;
        self.latency_ms += kube.kube_ms;
        self.rate_wait_ms += kube.kube_rate_wait_ms;
        self
    }
}

#[derive(Deserialize)]
struct InvocationLine {
    target: String,
    /// The CNI command (`ADD`), or the operator command (`list`) whose run this was.
    #[serde(default)]
    command: String,
    /// When the line was written (RFC 3339, UTC).
    timestamp: Option<String>,
    lock_wait_ms: f64,
    lock_hold_ms: f64,
    budget_used_ms: f64,
    /// Lines written before the etcd store have none of its fields.
    #[serde(flatten)]
    datastore: Option<Datastore>,
    /// Lines written before the Kubernetes store have none of its fields.
    #[serde(flatten)]
    kube: Option<KubeFields>,
}

/// Which calls `stats` reads: the `last` most recent, and of those only the ones
/// logged since `since`. Reading stops there, so its time does not grow with the log.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub last: usize,
    pub since: Option<SystemTime>,
}

/// The timings of the calls in `window`, from the log `path` and its renamed files,
/// newest first (other lines are skipped).
pub fn recent_call_timings(path: &Path, window: Window) -> io::Result<Vec<CallTiming>> {
    let mut timings = Vec::new();
    if window.last == 0 {
        return Ok(timings);
    }
    log_tail::lines_backwards(path, |line| {
        let Some((timing, logged)) = call_timing(line) else {
            return true;
        };
        if let (Some(since), Some(logged)) = (window.since, logged)
            && logged < since
        {
            return false;
        }
        timings.push(timing);
        timings.len() < window.last
    })?;
    Ok(timings)
}

/// The commands a runtime's CNI calls log (`cni::Command::as_str`).
const CNI_COMMANDS: &[&str] = &["ADD", "DEL", "CHECK", "GC", "STATUS"];

/// One invocation line's timings and when it was logged; None for other lines.
fn call_timing(line: &str) -> Option<(CallTiming, Option<SystemTime>)> {
    let l = serde_json::from_str::<InvocationLine>(line).ok()?;
    // Call timings are the runtime's calls': an operator's runs are logged alike, but
    // their timings would blur what pods wait for.
    if l.target != "invocation" || !CNI_COMMANDS.contains(&l.command.as_str()) {
        return None;
    }
    let logged = l.timestamp.and_then(|t| humantime::parse_rfc3339(&t).ok());
    let timing = CallTiming {
        lock_wait: l.lock_wait_ms / 1000.0,
        lock_hold: l.lock_hold_ms / 1000.0,
        budget_used: l.budget_used_ms / 1000.0,
        datastore: l
            .datastore
            .unwrap_or_default()
            .with_kube(l.kube.unwrap_or_default()),
    };
    Some((timing, logged))
}

/// Whether any call used a datastore: only then are its series shown.
pub(super) fn used_a_datastore(timings: &[CallTiming]) -> bool {
    timings.iter().any(|t| t.datastore.requests > 0)
}

pub(super) type Count = (&'static str, &'static str, fn(&Datastore) -> u64);

pub(super) const DATASTORE_COUNTS: &[Count] = &[
    (
        "wasm_ipam_datastore_requests_total",
        "Requests calls sent to the datastore (etcd or the Kubernetes API).",
        |d| d.requests,
    ),
    (
        "wasm_ipam_datastore_conflicts_total",
        "Commits the datastore refused because another writer changed what the call read.",
        |d| d.conflicts,
    ),
    (
        "wasm_ipam_datastore_retries_total",
        "Handler runs repeated after a conflict.",
        |d| d.retries,
    ),
];

pub(super) const DATASTORE_TIMINGS: &[Metric] = &[
    (
        "wasm_ipam_datastore_latency_seconds",
        "Time a call waited for the datastore's answers.",
        |t| t.datastore.latency_ms / 1000.0,
    ),
    (
        "wasm_ipam_datastore_rate_wait_seconds",
        "Time a call waited for the node's datastore rate limiter.",
        |t| t.datastore.rate_wait_ms / 1000.0,
    ),
];

pub(super) type Metric = (&'static str, &'static str, fn(&CallTiming) -> f64);

pub(super) const TIMINGS: &[Metric] = &[
    (
        "wasm_ipam_lock_wait_seconds",
        "Time a call waited for the host-wide lock.",
        |t| t.lock_wait,
    ),
    (
        "wasm_ipam_lock_hold_seconds",
        "Time a call held the host-wide lock.",
        |t| t.lock_hold,
    ),
    (
        "wasm_ipam_budget_used_seconds",
        "Time a module ran, counted from the lock grant.",
        |t| t.budget_used,
    ),
];

/// The value below which `q` of `sorted` lies (nearest rank).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// A table for people: each network's use, then (from the log, `log` its path if one
/// was given) the call timings.
pub fn table(networks: &[NetworkStats], timings: &[CallTiming], log: Option<&Path>) -> String {
    let mut out = usage_table(networks);
    match log {
        Some(_) => {
            let _ = writeln!(out, "\nthe last {} calls in the log", timings.len());
            out += &timing_table(timings);
        }
        None => {
            let _ = writeln!(out, "\nno log given (--log-file): no call timings");
        }
    }
    out
}

/// Each network's use: one row a network, each of several pools under it, each pool's
/// blocks under their pool when they were asked for (`--blocks`).
fn usage_table(networks: &[NetworkStats]) -> String {
    let opt = |v: Option<u128>| v.map_or("-".to_string(), |v| v.to_string());
    // The leak column only when the runtime was asked (`stats --runtime-endpoint`).
    let leaks = networks.iter().any(|n| n.leak_candidates.is_some());
    let mut columns = vec![
        ("NETWORK", Align::Left),
        ("CAPACITY", Align::Right),
        ("IN USE", Align::Right),
        ("FREE", Align::Right),
        ("EXCLUDED", Align::Right),
        ("COOLING", Align::Right),
        ("RESERVED", Align::Right),
        ("BORROWED", Align::Right),
    ];
    if leaks {
        columns.push(("LEAKS", Align::Right));
    }
    let mut table = Table::new(&columns);
    let cells = |name: String, p: &PoolStats| {
        vec![
            name,
            opt(p.capacity),
            p.in_use.to_string(),
            opt(p.free),
            p.excluded.to_string(),
            p.cooling_down.to_string(),
            p.reserved.to_string(),
            p.borrowed.to_string(),
        ]
    };
    for n in networks {
        let mut row = vec![
            printable(&n.network),
            opt(n.capacity),
            n.in_use.to_string(),
            opt(n.free),
            n.excluded.to_string(),
            n.cooling_down.to_string(),
            n.reserved.to_string(),
            n.borrowed.to_string(),
        ];
        if leaks {
            row.push(opt(n.leak_candidates.map(u128::from)));
        }
        table.row(row);
        // A network of one pool is its pool.
        for p in &n.pools {
            if n.pools.len() > 1 {
                table.row(cells(format!("  {}", printable(&p.pool)), p));
            }
            for b in n
                .blocks
                .iter()
                .filter(|b| b.parent.as_ref() == Some(&p.pool))
            {
                let node = b
                    .node
                    .as_deref()
                    .map_or(String::new(), |n| format!(" ({})", printable(n)));
                table.row(cells(format!("    block {}{node}", printable(&b.pool)), b));
            }
        }
    }
    table.render()
}

/// The calls' timings (p50, p99, max), and their datastore counts when they used one.
fn timing_table(timings: &[CallTiming]) -> String {
    let mut out = format!(
        "{:<30} {:>10} {:>10} {:>10}\n",
        "TIMING (ms)", "p50", "p99", "max"
    );
    let datastore = used_a_datastore(timings);
    let rows = TIMINGS
        .iter()
        .chain(DATASTORE_TIMINGS.iter().filter(|_| datastore));
    for (name, _, value) in rows {
        let mut values: Vec<f64> = timings.iter().map(value).collect();
        values.sort_by(f64::total_cmp);
        let ms = |v: f64| format!("{:.1}", v * 1000.0);
        let _ = writeln!(
            out,
            "{:<30} {:>10} {:>10} {:>10}",
            name.trim_start_matches("wasm_ipam_")
                .trim_end_matches("_seconds"),
            ms(quantile(&values, 0.5)),
            ms(quantile(&values, 0.99)),
            ms(values.last().copied().unwrap_or(0.0))
        );
    }
    if datastore {
        let _ = writeln!(out);
        for (name, _, value) in DATASTORE_COUNTS {
            let total: u64 = timings.iter().map(|t| value(&t.datastore)).sum();
            let _ = writeln!(
                out,
                "{:<30} {:>10}",
                name.trim_start_matches("wasm_ipam_")
                    .trim_end_matches("_total"),
                total
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::view::prometheus::prometheus;

    /// The timings of a log's text, in its order.
    fn call_timings(log: &str) -> Vec<CallTiming> {
        log.lines()
            .filter_map(call_timing)
            .map(|(t, _)| t)
            .collect()
    }

    #[test]
    fn the_window_stops_at_the_last_calls_or_at_since() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let line = |second: u32, wait: u32| {
            format!(
                r#"{{"timestamp":"2025-01-01T00:00:{second:02}.500000Z","target":"invocation","command":"ADD","lock_wait_ms":{wait}.0,"lock_hold_ms":1.0,"budget_used_ms":1.0}}"#
            )
        };
        let text: Vec<String> = (0..10).map(|i| line(i, i)).collect();
        std::fs::write(&log, text.join("\n{\"target\":\"guest\"}\n") + "\n").unwrap();
        let waits = |window| -> Vec<f64> {
            recent_call_timings(&log, window)
                .unwrap()
                .iter()
                .map(|t| t.lock_wait * 1000.0)
                .collect()
        };
        let all = Window {
            last: 100,
            since: None,
        };
        assert_eq!(waits(all).len(), 10);
        assert_eq!(waits(Window { last: 3, ..all }), [9.0, 8.0, 7.0]);
        let since = humantime::parse_rfc3339("2025-01-01T00:00:07Z").unwrap();
        assert_eq!(
            waits(Window {
                since: Some(since),
                ..all
            }),
            [9.0, 8.0, 7.0]
        );
        assert!(waits(Window { last: 0, ..all }).is_empty());
    }

    const LOG: &str = r#"{"target":"guest","message":"hi"}
{"target":"invocation","command":"ADD","lock_wait_ms":2.0,"lock_hold_ms":100.0,"budget_used_ms":99.0}
{"target":"invocation","command":"list","lock_wait_ms":7.0,"lock_hold_ms":5.0,"budget_used_ms":4.0}
{"target":"invocation","command":"DEL","lock_wait_ms":3000.0,"lock_hold_ms":120.0,"budget_used_ms":110.0}
not json
"#;

    const ETCD_LOG: &str = r#"{"target":"invocation","command":"ADD","lock_wait_ms":2.0,"lock_hold_ms":100.0,"budget_used_ms":99.0,"etcd_requests":5,"etcd_conflicts":1,"store_retries":1,"etcd_ms":30.0,"etcd_rate_wait_ms":0.0}
{"target":"invocation","command":"ADD","lock_wait_ms":2.0,"lock_hold_ms":100.0,"budget_used_ms":99.0,"etcd_requests":4,"etcd_conflicts":0,"store_retries":0,"etcd_ms":3000.0,"etcd_rate_wait_ms":200.0}
"#;

    #[test]
    fn datastore_series_appear_only_for_calls_that_used_one() {
        let plain = prometheus(&[], &[], &call_timings(LOG));
        assert!(!plain.contains("datastore"), "{plain}");
        let timings = call_timings(ETCD_LOG);
        assert_eq!(timings[0].datastore.conflicts, 1);
        let text = prometheus(&[], &[], &timings);
        assert!(
            text.contains("wasm_ipam_datastore_requests_total 9\n"),
            "{text}"
        );
        assert!(
            text.contains("wasm_ipam_datastore_conflicts_total 1\n"),
            "{text}"
        );
        assert!(
            text.contains("wasm_ipam_datastore_retries_total 1\n"),
            "{text}"
        );
        assert!(
            text.contains("wasm_ipam_datastore_latency_seconds_bucket{le=\"0.05\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("wasm_ipam_datastore_rate_wait_seconds_sum 0.2\n"),
            "{text}"
        );
        let table = table(&[], &timings, Some(std::path::Path::new("log")));
        assert!(table.contains("datastore_conflicts"), "{table}");
    }

    #[test]
    fn the_kubernetes_stores_figures_are_datastore_figures_too() {
        let log = r#"{"target":"invocation","command":"ADD","lock_wait_ms":2.0,"lock_hold_ms":100.0,"budget_used_ms":99.0,"etcd_requests":0,"etcd_conflicts":0,"store_retries":1,"etcd_ms":0.0,"etcd_rate_wait_ms":0.0,"kube_requests":11,"kube_conflicts":2,"kube_ms":40.0,"kube_rate_wait_ms":100.0}
"#;
        let timings = call_timings(log);
        let d = timings[0].datastore;
        assert_eq!((d.requests, d.conflicts, d.retries), (11, 2, 1));
        assert_eq!((d.latency_ms, d.rate_wait_ms), (40.0, 100.0));
        let text = prometheus(&[], &[], &timings);
        assert!(
            text.contains("wasm_ipam_datastore_requests_total 11\n"),
            "{text}"
        );
    }

    #[test]
    fn timings_come_from_cni_calls_invocation_lines_only() {
        // The guest's line, the operator's `list` and the line that is not JSON: skipped.
        let timings = call_timings(LOG);
        assert_eq!(timings.len(), 2);
        assert_eq!(timings[1].lock_wait, 3.0);
    }

    #[test]
    fn prometheus_histograms_are_cumulative() {
        let pool = PoolStats {
            network: "n\"1".into(),
            pool: "10.0.0.0/28".into(),
            capacity: Some(10),
            in_use: 3,
            free: Some(7),
            ..PoolStats::default()
        };
        let networks = [NetworkStats {
            network: "n\"1".into(),
            capacity: Some(10),
            in_use: 3,
            free: Some(7),
            pools: vec![pool],
            ..NetworkStats::default()
        }];
        let text = prometheus(&networks, &[], &call_timings(LOG));
        assert!(
            text.contains("wasm_ipam_addresses_capacity{network=\"n\\\"1\"} 10\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "wasm_ipam_pool_addresses_free{network=\"n\\\"1\",pool=\"10.0.0.0/28\"} 7\n"
            ),
            "{text}"
        );
        assert!(text.contains("wasm_ipam_lock_wait_seconds_bucket{le=\"0.0025\"} 1\n"));
        assert!(text.contains("wasm_ipam_lock_wait_seconds_bucket{le=\"2.5\"} 1\n"));
        assert!(text.contains("wasm_ipam_lock_wait_seconds_bucket{le=\"5\"} 2\n"));
        assert!(text.contains("wasm_ipam_lock_wait_seconds_bucket{le=\"+Inf\"} 2\n"));
        assert!(text.contains("wasm_ipam_lock_wait_seconds_count 2\n"));
        assert!(text.contains("wasm_ipam_lock_hold_seconds_sum 0.22"));
    }

    #[test]
    fn quantiles_use_nearest_rank() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(quantile(&v, 0.5), 2.0);
        assert_eq!(quantile(&v, 0.99), 4.0);
        assert_eq!(quantile(&[], 0.5), 0.0);
    }
}
