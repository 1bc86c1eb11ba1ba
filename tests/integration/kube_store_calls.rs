//! ADDs, DELs and GCs on simulated nodes sharing the Kubernetes store, against the
//! real apiserver ([`crate::kube_store`]): each node writes its own objects, nodes
//! racing for blocks all succeed the first time, and a call killed after any write
//! of its commit, or whose answer was lost, leaves nothing doubled or lost.

use crate::etcd::{list_json, operator_on, write_conf};
use crate::harness::*;
use crate::kube_store::{api, cluster, entries, held, kube_requests, unlocked};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

#[test]
fn adds_and_dels_on_two_nodes_go_to_the_api_and_each_node_writes_its_own_objects() {
    let network = "k-basic";
    let ipam = json!({"cidr": "10.70.0.0/16", "blockSize": 26});
    let (nodes, confs) = cluster(network, 2, &ipam);
    let a = Call::new("ADD", "pod-a")
        .run(&confs[0])
        .address()
        .to_string();
    let b = Call::new("ADD", "pod-b")
        .run(&confs[1])
        .address()
        .to_string();
    assert_ne!(a, b);
    // Again for the same container: the same address, nothing new.
    assert_eq!(Call::new("ADD", "pod-a").run(&confs[0]).address(), a);
    let holders = held(network);
    assert_eq!(holders.len(), 2, "{holders:?}");
    assert_eq!(holders[a.split('/').next().unwrap()], "pod-a");
    // Each node's records lie in objects of their own: own/<node> and aff/<node>.
    let keys = entries(network);
    for n in 0..2 {
        let node = format!("{network}-node-{n}");
        assert!(keys.contains_key(&format!("own/{node}/pod-{}/eth0", ["a", "b"][n])));
        assert!(keys.keys().any(|k| k.starts_with(&format!("aff/{node}/"))));
    }
    assert!(unlocked(network));
    // kubectl shows the objects with their network, role, group and size.
    let table = api().kubectl(&["get", "ipamshards"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.lines().next().unwrap().contains("NETWORK")
            && table.contains(network)
            && table.contains("ENTRIES"),
        "{table}"
    );
    // A second pod in the node's block, and its DEL: the steady state.
    // At logLevel debug, each request is a line of its own (target `store`).
    let mut debug = confs[0].clone();
    debug["ipam"]["logLevel"] = "debug".into();
    let before = nodes[0].log_lines("store").len();
    Call::new("ADD", "pod-c").run(&debug).assert_ok();
    Call::new("DEL", "pod-c").run(&debug).assert_ok();
    let lines = nodes[0].log_lines("store");
    for line in &lines[before..] {
        eprintln!("{line}");
    }
    // Every call's log record states the API requests it made.
    let requests = kube_requests(&nodes[0]);
    assert_eq!(requests.len(), 4);
    assert!(requests.iter().all(|&r| r > 0), "{requests:?}");
    eprintln!(
        "API requests per call on node 0 (first ADD, ADD again, a steady ADD, its DEL): {requests:?}"
    );
    // The budget of a DEL herd: a steady ADD at most 3 requests, its DEL at most 2
    // (the node's home is cached; the commit is one write of it).
    assert!(
        requests[2] <= 3 && requests[3] <= 2,
        "steady ADD and DEL: {requests:?}"
    );
    assert_eq!(
        lines.len() - before,
        (requests[2] + requests[3]) as usize,
        "one debug line per request"
    );

    // list reads the cluster through the module's inspect export.
    let conf_file = write_conf(&nodes[0], &confs[0]);
    let (ok, stdout, stderr) = list_json(&nodes[0], &conf_file, &[]);
    assert!(ok, "{stderr}");
    let rows: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(rows.len(), 2, "{stdout}");

    Call::new("DEL", "pod-a").run(&confs[0]).assert_ok();
    Call::new("DEL", "pod-b").run(&confs[1]).assert_ok();
    Call::new("DEL", "pod-b").run(&confs[1]).assert_ok();
    assert!(held(network).is_empty());
    assert!(!entries(network).keys().any(|k| k.starts_with("own/")));
    let (ok, stdout, stderr) = operator_on(&nodes[0], &conf_file, &["store", "check"]);
    assert!(ok, "{stdout}{stderr}");
}

/// Three nodes racing for blocks of one pool, 40 ADDs each at once: every address
/// distinct, every call answered ok the first time (what a runtime sees), nothing
/// locked after.
#[test]
fn three_nodes_claiming_blocks_at_once_all_succeed_first_time_with_distinct_addresses() {
    let network = "k-storm";
    let ipam = json!({"cidr": "10.71.0.0/16", "blockSize": 27, "deadlineSeconds": 120, "lockTimeoutSeconds": 600});
    let (nodes, mut confs) = cluster(network, 3, &ipam);
    // The node's limiter at its default (5/s) would make this a test of the limiter:
    // 40 ADDs of about 20 requests each on one node.
    for conf in &mut confs {
        conf["ipam"]["store"]["qps"] = 200.into();
    }
    let per_node = 40;
    let started = Instant::now();
    let replies: Vec<Reply> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .flat_map(|n| (0..per_node).map(move |i| (n, i)))
            .map(|(n, i)| {
                let conf = &confs[n];
                s.spawn(move || Call::new("ADD", &format!("n{n}-c{i}")).run(conf))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let failed: Vec<&Reply> = replies.iter().filter(|r| !r.success).collect();
    let total = replies.len();
    eprintln!(
        "{total} ADDs on 3 nodes in {:?}: {} failed",
        started.elapsed(),
        failed.len()
    );
    assert!(
        failed.len() * 100 <= total,
        "more than 1% failed: {:?}",
        failed.first()
    );
    let distinct: BTreeSet<&str> = replies
        .iter()
        .filter(|r| r.success)
        .map(|r| r.address())
        .collect();
    assert_eq!(distinct.len(), total - failed.len());
    assert!(unlocked(network));
    assert_eq!(held(network).len(), total - failed.len());
    let retries: u64 = nodes
        .iter()
        .flat_map(|n| n.log_lines("invocation"))
        .map(|l| l["store_retries"].as_u64().unwrap())
        .sum();
    eprintln!("conflict retries: {retries}");
}

/// A call killed right after each of its API writes in turn, and a call whose write
/// landed but whose answer was lost: the next call (or `store check`) finishes or
/// undoes the commit; no address is doubled or lost, nothing stays locked. Both kinds
/// of commit: a node's first ADD, which claims a block (several objects, through
/// locks and a decision), and a steady ADD (one write of the node's home).
#[test]
fn a_kill_after_any_write_of_a_commit_and_a_lost_answer_leave_nothing_doubled_or_lost() {
    let network = "k-kill";
    let ipam = json!({"cidr": "10.72.0.0/16", "blockSize": 28});
    // Node 0 is warm (its block claimed: its ADDs are steady); each node after it
    // is fresh for one claiming ADD.
    let (nodes, confs) = cluster(network, 48, &ipam);
    Call::new("ADD", "warm").run(&confs[0]).assert_ok();
    let mut fresh = confs[1..].iter();
    let mut killed: Vec<(String, &Value, usize)> = Vec::new();
    let mut writes = BTreeMap::new();
    for (kind, steady) in [("claim", false), ("steady", true)] {
        for n in 1..=24 {
            let conf = match steady {
                true => &confs[0],
                false => fresh.next().expect("a fresh node"),
            };
            let id = format!("kill-{kind}-{n}");
            let reply = Call::new("ADD", &id)
                .env("WASM_IPAM_TEST_KILL_AFTER_WRITE", n.to_string())
                .run(conf);
            if reply.success {
                // Past the commit's last write: every write was made.
                writes.insert(kind, n - 1);
                break;
            }
            killed.push((id.clone(), conf, n));
            // The runtime tries again (ADD), and the pod is deleted later: both work.
            let again = Call::new("ADD", &id).run(conf);
            let address = again.address().to_string();
            let holders = held(network);
            assert_eq!(
                holders
                    .get(address.split('/').next().unwrap())
                    .map(String::as_str),
                Some(id.as_str()),
                "after a kill at write {n} of a {kind} ADD: {holders:?}"
            );
            assert!(unlocked(network), "after a kill at write {n}");
            // Another node sees the same and allocates something else.
            let other = Call::new("ADD", &format!("other-{kind}-{n}")).run(&confs[0]);
            assert_ne!(other.address(), address);
        }
    }
    eprintln!("writes per ADD: {writes:?}");
    assert_eq!(writes.get("steady"), Some(&1), "a steady ADD is one write");
    assert!(
        writes.get("claim").is_some_and(|&w| w >= 3),
        "a claiming ADD writes several objects: {writes:?}"
    );
    // Killed DELs: the address is freed once, by the DEL the runtime repeats.
    for (id, conf, n) in &killed {
        // A DEL makes fewer writes than an ADD: one killed past its last write
        // succeeded, and the DEL the runtime repeats is a DEL of nothing.
        Call::new("DEL", id)
            .env("WASM_IPAM_TEST_KILL_AFTER_WRITE", n.to_string())
            .run(conf);
        Call::new("DEL", id).run(conf).assert_ok();
        assert!(!held(network).values().any(|h| h == id), "{id} after DEL");
    }
    // A lost answer after each write: the call either succeeds or fails with 11, and
    // the state agrees with what the runtime was told.
    for (kind, steady) in [("claim", false), ("steady", true)] {
        for n in 1..=writes[kind] {
            let conf = match steady {
                true => &confs[0],
                false => fresh.next().expect("a fresh node"),
            };
            let id = format!("lost-{kind}-{n}");
            let reply = Call::new("ADD", &id)
                .env("WASM_IPAM_TEST_LOSE_ANSWER_OF_WRITE", n.to_string())
                .run(conf);
            if !reply.success {
                assert_eq!(reply.error_code(), 11, "{reply:?}");
            }
            let again = Call::new("ADD", &id).run(conf);
            if reply.success {
                assert_eq!(reply.address(), again.address());
            }
            assert!(unlocked(network), "after a lost answer at write {n}");
        }
    }
    // Everything held is held once (held() asserts), each pod has one address.
    let holders = held(network);
    let mut per_pod: BTreeMap<&str, usize> = BTreeMap::new();
    for id in holders.values() {
        *per_pod.entry(id).or_default() += 1;
    }
    assert!(per_pod.values().all(|&c| c == 1), "{per_pod:?}");
    let conf_file = write_conf(&nodes[0], &confs[0]);
    let (ok, stdout, stderr) = operator_on(&nodes[0], &conf_file, &["store", "check"]);
    assert!(ok, "{stdout}{stderr}");
}

/// CNI GC, as a runtime sends it, on this store: of five attachments on a node, the
/// three it does not list are released, their addresses free again, the two it lists
/// kept; a GC again changes nothing.
#[test]
fn cni_gc_releases_what_the_runtime_no_longer_runs_and_keeps_the_rest() {
    let network = "k-gc";
    let (nodes, confs) = cluster(network, 1, &json!({"cidr": "10.79.0.0/16"}));
    let mut added = BTreeMap::new();
    for n in 0..5 {
        let id = format!("pod-{n}");
        let address = Call::new("ADD", &id).run(&confs[0]).address().to_string();
        added.insert(id, address);
    }
    assert_eq!(held(network).len(), 5);
    let mut gc = confs[0].clone();
    gc["cni.dev/valid-attachments"] = json!([
        {"containerID": "pod-1", "ifname": "eth0"},
        {"containerID": "pod-3", "ifname": "eth0"},
    ]);
    for _ in 0..2 {
        Call::new("GC", "").run(&gc).assert_ok();
        let holders: BTreeSet<String> = held(network).into_values().collect();
        assert_eq!(
            holders,
            BTreeSet::from(["pod-1".to_string(), "pod-3".to_string()])
        );
        let own: Vec<String> = entries(network)
            .into_keys()
            .filter(|k| k.starts_with("own/"))
            .collect();
        assert_eq!(own.len(), 2, "{own:?}");
    }
    // A kept attachment still answers its ADD with its address; a new pod is served.
    assert_eq!(
        Call::new("ADD", "pod-1").run(&confs[0]).address(),
        added["pod-1"]
    );
    Call::new("ADD", "pod-5").run(&confs[0]).assert_ok();
    assert_eq!(held(network).len(), 3);
    let conf_file = write_conf(&nodes[0], &confs[0]);
    let (ok, stdout, stderr) = operator_on(&nodes[0], &conf_file, &["store", "check"]);
    assert!(ok, "{stdout}{stderr}");
}
