//! Calls on several nodes reading, changing and writing the same keys of a cluster
//! store at once, on etcd and on the Kubernetes store: the history the calls answer
//! is one some serial order explains, and the conflicts that make it so were retried.

use crate::cluster_store::{Cluster, ClusterStore, on_both_stores};
use crate::etcd::retries;
use crate::harness::*;
use serde_json::{Value, json};
use std::time::Instant;

/// One call of the history: when it ran (as the test saw it) and what it answered.
struct Event {
    id: String,
    start: Instant,
    end: Instant,
    node: usize,
    value: Option<u64>,
}

/// The number a probe's `counter`/`append` call read, from its ADD's address.
fn value_of(reply: &Reply) -> u64 {
    let ip = reply.address().split('/').next().unwrap();
    let o: Vec<u64> = ip.split('.').map(|x| x.parse().unwrap()).collect();
    (o[1] << 16) | (o[2] << 8) | o[3]
}

/// Runs `per_node` ADDs on each of `nodes` simulated nodes of `network` at once (each
/// node's calls all started together, so they queue on its lock while the nodes race
/// each other in the store); every `fail_every`th call of a node fails after writing
/// (the host must commit none of it).
fn history<'s>(
    store: &'s ClusterStore,
    network: &str,
    probe: Value,
    nodes: usize,
    per_node: usize,
    fail_every: usize,
) -> (Vec<Event>, Cluster<'s>) {
    let suffixes: Vec<String> = (0..nodes).map(|n| format!("node-{n}")).collect();
    let suffixes: Vec<&str> = suffixes.iter().map(String::as_str).collect();
    let ipam = json!({"probe": probe, "deadlineSeconds": 60});
    let cluster = store.cluster_of(network, &suffixes, &probe_module(), &ipam);
    let started = Instant::now();
    let events = std::thread::scope(|s| {
        let mut handles = Vec::new();
        for (n, conf) in cluster.confs.iter().enumerate() {
            for i in 0..per_node {
                let mut conf = conf.clone();
                let fails = fail_every > 0 && i % fail_every == fail_every - 1;
                if fails {
                    conf["ipam"]["probe"]["then"] = "error".into();
                }
                handles.push(s.spawn(move || {
                    let id = format!("n{n}c{i}");
                    let start = Instant::now();
                    let reply = Call::new("ADD", &id).run(&conf);
                    let end = Instant::now();
                    let value = if fails {
                        assert_eq!(reply.error_code(), 142, "{reply:?}");
                        None
                    } else {
                        Some(value_of(&reply))
                    };
                    Event {
                        id,
                        start,
                        end,
                        node: n,
                        value,
                    }
                }));
            }
        }
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    eprintln!("{} calls in {:?}", events.len(), started.elapsed());
    (events, cluster)
}

/// The history checker: the committed calls' values are exactly 0..n, each once (no
/// lost update, no phantom), and respect real time: a call that ended before another
/// began read a smaller value (strict serializability of the register or set).
fn check_history(events: &[Event]) -> u64 {
    let mut values: Vec<u64> = events.iter().filter_map(|e| e.value).collect();
    values.sort_unstable();
    let n = values.len() as u64;
    let readers = |v: u64| -> Vec<&str> {
        events
            .iter()
            .filter(|e| e.value == Some(v))
            .map(|e| e.id.as_str())
            .collect()
    };
    let twice: Vec<(u64, Vec<&str>)> = values
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| (w[0], readers(w[0])))
        .collect();
    assert_eq!(
        values,
        (0..n).collect::<Vec<_>>(),
        "each value read exactly once; read by more than one call: {twice:?}"
    );
    for a in events {
        for b in events {
            if let (Some(va), Some(vb)) = (a.value, b.value)
                && a.end < b.start
            {
                assert!(
                    va < vb,
                    "call on node {} ended before one on node {} began, yet read {va} >= {vb}",
                    a.node,
                    b.node
                );
            }
        }
    }
    n
}

on_both_stores!(concurrent_read_modify_writes_across_nodes_are_serializable);
fn concurrent_read_modify_writes_across_nodes_are_serializable(store: &ClusterStore) {
    let probe = json!({"counter": "ctr", "sleepMs": 20});
    let (events, cluster) = history(store, "e-counter", probe, 3, 12, 4);
    let committed = check_history(&events);
    assert_eq!(committed, 27);
    assert_eq!(
        cluster.values("ctr")["ctr"],
        27,
        "the failed calls committed nothing"
    );
    let (total, most) = retries(&cluster.nodes);
    eprintln!("conflict retries: {total} in all, at most {most} in one call");
    assert!(total > 0, "three nodes racing on one key must conflict");
    // Bounded, on etcd: a conflict is another node's commit landing during an
    // attempt, and each commit can cut short at most one attempt on each of the two
    // other nodes. The Kubernetes store's commits lock what they change over several
    // writes, and a call meeting a lock runs again after a pause, as often as the lock
    // lasts: its retries count waits as well as conflicts.
    if store.is_etcd() {
        assert!(
            total <= 2 * committed,
            "{total} retries for {committed} commits"
        );
    }
}

on_both_stores!(concurrent_appends_under_a_listed_prefix_are_serializable);
fn concurrent_appends_under_a_listed_prefix_are_serializable(store: &ClusterStore) {
    let probe = json!({"append": "m/", "sleepMs": 20});
    let (events, cluster) = history(store, "e-append", probe, 3, 10, 5);
    let committed = check_history(&events);
    assert_eq!(committed, 24);
    assert_eq!(cluster.keys("m/").len(), 24, "one entry per committed call");
    let (total, _) = retries(&cluster.nodes);
    assert!(
        total > 0,
        "three nodes appending under one prefix must conflict"
    );
}
