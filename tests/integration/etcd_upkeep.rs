//! Upkeep and bulk work on the etcd store at the scale a node meets, so that a node
//! is never taken out of service by its own upkeep: a thousand sticky holds expiring together and fifty
//! idle blocks must not fail a call under a small `maxTxnOps`, and must drain over
//! later calls within the budget docs/cluster.md gives; gc, CNI GC and release-node
//! over a thousand allocations go in batches, each atomic, and finish when run again
//! after a kill mid-way; and a free address in any of 64 full blocks is what FREE
//! says and what the next ADD borrows.
//!
//! The store is seeded directly, in the module's own key layout (what a thousand
//! pods' ADDs and DELs would have left), so the tests take seconds, not minutes.

use crate::etcd::{Etcd, node_conf, write_conf};
use crate::harness::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const NETWORK: &str = "testnet";
/// Addresses a /26 (or /122) block hands out: all but its first, second and last.
const USABLE: usize = 61;

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Two pools, dual stack, the default one watched by `warnPercent`.
fn pools_ipam(max_txn_ops: u64, etcd: &Etcd, prefix: &str) -> (Value, Value) {
    let mut store = etcd.store(prefix);
    store["maxTxnOps"] = max_txn_ops.into();
    // The node's request rate (50 a second by default, tested on its own) would only
    // pace these runs of thousands of requests.
    store["qps"] = 2000.into();
    store["burst"] = 2000.into();
    let ipam = json!({
        "pools": [
            {"name": "main", "cidr": ["10.0.0.0/16", "fd00::/112"], "default": true, "warnPercent": 95},
            {"name": "other", "cidr": ["10.1.0.0/16", "fd01::/112"], "namespaces": ["other"]}
        ],
        "stickySeconds": 30,
        "stickyPods": "all",
        "blockGraceSeconds": 0,
        "deadlineSeconds": 60
    });
    (ipam, store)
}

/// The `k`-th block of a family's pool, and its `i`-th usable address.
fn block(v4: bool, k: usize) -> String {
    match v4 {
        true => format!("{}/26", Ipv4Addr::from(0x0a00_0000u32 + (k as u32) * 64)),
        false => format!(
            "{}/122",
            Ipv6Addr::from((0xfd00u128 << 112) + (k as u128) * 64)
        ),
    }
}

fn address(v4: bool, n: usize) -> IpAddr {
    let (k, i) = (n / USABLE, n % USABLE);
    match v4 {
        true => IpAddr::V4(Ipv4Addr::from(
            0x0a00_0000u32 + (k as u32) * 64 + 2 + i as u32,
        )),
        false => IpAddr::V6(Ipv6Addr::from(
            (0xfd00u128 << 112) + (k as u128) * 64 + 2 + i as u128,
        )),
    }
}

/// What `node` holds, as the module keeps it: `pods` pods with an address of each
/// family (as live attachments, or as holds kept for sticky pods that ran out at
/// `expired_at`), then `idle` empty blocks per family that emptied an hour ago.
struct Seed<'a> {
    node: &'a str,
    pods: usize,
    /// `Some(t)`: every pod was deleted and its hold ran out at `t`.
    expired_at: Option<u64>,
    idle: usize,
}

impl Seed<'_> {
    fn entries(&self, now: u64) -> Vec<(String, String)> {
        let node = self.node;
        let mut out = Vec::new();
        let used = self.pods.div_ceil(USABLE);
        let mut blocks: BTreeMap<String, Value> = BTreeMap::new();
        for v4 in [true, false] {
            for k in 0..used + self.idle {
                blocks.insert(
                    block(v4, k),
                    json!({"node": node, "ips": {}, "empty_since": now - 3600}),
                );
            }
        }
        for n in 0..self.pods {
            let ips = [address(true, n), address(false, n)];
            let id = format!("{node}-c{n}");
            let holder = match self.expired_at {
                Some(until) => {
                    json!({"id": "", "ifname": "eth0", "node": node, "since": now - 3600, "identity": format!("web/{id}"), "held_until": until})
                }
                None => json!({"id": id, "ifname": "eth0", "node": node, "since": now - 3600}),
            };
            for (v4, ip) in [(true, ips[0]), (false, ips[1])] {
                let b = blocks.get_mut(&block(v4, n / USABLE)).unwrap();
                b["ips"][ip.to_string()] = holder.clone();
                b.as_object_mut().unwrap().remove("empty_since");
            }
            match self.expired_at {
                Some(until) => out.push((
                    format!("sticky/web/{id}"),
                    json!({"ips": ips, "until": until}).to_string(),
                )),
                None => out.push((
                    format!("own/{node}/{id}/eth0"),
                    json!({"ips": ips, "since": now - 3600}).to_string(),
                )),
            }
        }
        for (v4, cidr) in [(true, "10.0.0.0/16"), (false, "fd00::/112")] {
            let claimed: Vec<String> = (0..used + self.idle).map(|k| block(v4, k)).collect();
            for b in &claimed {
                out.push((format!("aff/{node}/{b}"), String::new()));
            }
            out.push((format!("pool/{cidr}"), json!(claimed).to_string()));
        }
        for (b, value) in blocks {
            out.push((format!("blk/{b}"), value.to_string()));
        }
        out
    }

    /// Writes the seed into `etcd` under `prefix`, with the node's usage row as its
    /// commits would have left it (an hour ago).
    fn write(&self, etcd: &Etcd, prefix: &str) {
        let mut entries: Vec<(String, String)> = self
            .entries(now())
            .into_iter()
            .map(|(k, v)| (format!("e/{k}"), v))
            .collect();
        let bytes: usize = entries.iter().map(|(k, v)| k.len() - 2 + v.len()).sum();
        entries.push((
            format!("u/{}", self.node),
            json!({"entries": entries.len(), "bytes": bytes, "last": now() - 3600}).to_string(),
        ));
        put_all(etcd, prefix, &entries);
    }
}

/// Writes `entries` (keys under the network's key, as `e/KEY`) into `etcd` under
/// `prefix`, a hundred keys a transaction.
fn put_all(etcd: &Etcd, prefix: &str, entries: &[(String, String)]) {
    let endpoints = etcd.endpoints();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut client = etcd_client::Client::connect(endpoints, None).await.unwrap();
        for chunk in entries.chunks(100) {
            let ops: Vec<etcd_client::TxnOp> = chunk
                .iter()
                .map(|(k, v)| {
                    etcd_client::TxnOp::put(format!("{prefix}n/{NETWORK}/{k}"), v.as_bytes(), None)
                })
                .collect();
            client
                .txn(etcd_client::Txn::new().and_then(ops))
                .await
                .unwrap();
        }
    });
}

/// How many of `prefix`'s entries start with `key_prefix`.
fn count(etcd: &Etcd, prefix: &str, key_prefix: &str) -> usize {
    etcd.keys(&format!("{prefix}n/{NETWORK}/e/{key_prefix}"))
        .len()
}

/// Every invocation line of `node`'s log so far, as (command, outcome, error).
fn invocations(node: &Node) -> Vec<(String, String, String)> {
    node.log_lines("invocation")
        .iter()
        .map(|l| {
            (
                l["command"].as_str().unwrap_or_default().to_string(),
                l["outcome"].as_str().unwrap_or_default().to_string(),
                l["error"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_thousand_expired_sticky_holds_and_fifty_idle_blocks_fail_no_call_and_drain_over_dels() {
    const MAX_TXN_OPS: u64 = 32;
    let etcd = Etcd::start(1);
    let prefix = "/u/";
    let (ipam, store) = pools_ipam(MAX_TXN_OPS, &etcd, prefix);
    let node = Node::new();
    let conf = node_conf(&node, "node-a", &cluster_pool_module(), &store, ipam);
    let seed = Seed {
        node: "node-a",
        pods: 1000,
        expired_at: Some(now() - 5),
        idle: 25,
    };
    seed.write(&etcd, prefix);
    assert_eq!(count(&etcd, prefix, "sticky/"), 1000);
    assert_eq!(
        count(&etcd, prefix, "blk/"),
        2 * (17 + 25),
        "17 held and 25 idle blocks a family"
    );

    // The node's next ADD and DEL succeed (before the fix: code 105, over maxTxnOps).
    let pod = "K8S_POD_NAMESPACE=web;K8S_POD_NAME=fresh";
    let added = Call::new("ADD", "fresh").env("CNI_ARGS", pod).run(&conf);
    added.assert_ok();
    Call::new("DEL", "fresh")
        .env("CNI_ARGS", pod)
        .run(&conf)
        .assert_ok();
    Call::new("ADD", "plain").run(&conf).assert_ok();
    Call::new("DEL", "plain").run(&conf).assert_ok();

    // The backlog drains over later DELs. docs/cluster.md: a DEL of an attachment
    // the node does not have takes 1 key and the host's 2, leaving 29 of 32 for
    // upkeep; each expired pod's record takes 1, each block looked at 1 and each
    // freed 2 more: about (1000 + 3 × 84) / 29 = 43 DELs, and no fewer than
    // 1000 / 29 = 35.
    let mut dels = 0;
    loop {
        let (sticky, blocks) = (
            count(&etcd, prefix, "sticky/"),
            count(&etcd, prefix, "blk/"),
        );
        let left = sticky + blocks;
        if sticky <= 1 && blocks <= 2 {
            // What is kept for the `fresh` pod for 30 s (its record and 2 blocks), if
            // its 30 s have not run out meanwhile.
            break;
        }
        dels += 1;
        assert!(dels <= 100, "the backlog does not drain: {left} keys left");
        Call::new("DEL", "nothing").run(&conf).assert_ok();
    }
    assert!(
        dels >= 35,
        "{dels} DELs: the backlog cannot go that fast within 32 keys"
    );
    assert!(count(&etcd, prefix, "aff/node-a/") <= 2);
    let failed: Vec<_> = invocations(&node)
        .into_iter()
        .filter(|(_, outcome, _)| outcome != "ok")
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
    eprintln!("the backlog drained over {dels} DELs");
    // docs/cluster.md: a DEL draining a backlog makes at most about 16 + 2 ×
    // maxTxnOps requests (the blocks it peeks at, and per hold it sweeps, its pod's
    // record and its other family's block).
    let calls = node.log_lines("invocation");
    // With dual stack, two pools and warnPercent, "an ADD makes about 7 (17 when
    // the node keeps nothing from earlier calls)".
    let adds: Vec<u64> = calls
        .iter()
        .filter(|l| l["command"] == "ADD")
        .map(|l| l["etcd_requests"].as_u64().unwrap())
        .collect();
    eprintln!("etcd requests per ADD: {adds:?}");
    // The first with nothing kept in dataDir from earlier calls (the keys were seeded
    // into etcd directly), the second with what the first kept.
    assert!(
        adds.len() == 2 && (16..=18).contains(&adds[0]) && (6..=8).contains(&adds[1]),
        "{adds:?}"
    );
    let most = calls
        .iter()
        .filter(|l| l["command"] == "DEL")
        .map(|l| l["etcd_requests"].as_u64().unwrap())
        .max()
        .unwrap();
    // (Far more than a steady DEL's 2: it swept holds, a pod's record read each.)
    assert!(
        most > 16 && most <= 16 + 2 * MAX_TXN_OPS,
        "the busiest DEL made {most} requests"
    );
}

/// Spawns `make`'s process, waits until `node`'s log has `first` invocation lines of
/// `command` that committed, and kills it there: mid-way through its batches.
fn kill_after_first_batch(node: &Node, command: &str, mut child: std::process::Child) {
    let limit = Instant::now() + Duration::from_secs(120);
    loop {
        let committed = node
            .log_lines("invocation")
            .iter()
            .filter(|l| l["command"] == command && l["commit_full"] == true)
            .count();
        if committed >= 1 {
            break;
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "{command} ended before a full batch committed"
        );
        assert!(Instant::now() < limit, "no batch of {command} committed");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Pools under `prefix` (128 operations a transaction) where `node` holds 1000 live
/// pods and `idle` empty blocks per family ([`Seed`]): the netconf's `ipam` and
/// `store` for them.
fn thousand_pods_of(etcd: &Etcd, prefix: &str, node: &str, idle: usize) -> (Value, Value) {
    let (ipam, store) = pools_ipam(128, etcd, prefix);
    Seed {
        node,
        pods: 1000,
        expired_at: None,
        idle,
    }
    .write(etcd, prefix);
    (ipam, store)
}

/// CNI GC, as a runtime sends it, keeping ten of node-b's 1000 attachments: killed
/// after its first batch, it is run again and finishes, in three batches or more.
fn check_cni_gc_goes_in_batches(etcd: &Etcd, node: &Node) {
    let prefix = "/g1/";
    let (ipam, store) = thousand_pods_of(etcd, prefix, "node-b", 0);
    let mut gc = node_conf(node, "node-b", &cluster_pool_module(), &store, ipam);
    gc["cni.dev/valid-attachments"] = (0..10)
        .map(|n| json!({"containerID": format!("node-b-c{n}"), "ifname": "eth0"}))
        .collect();
    kill_after_first_batch(node, "GC", Call::new("GC", "").spawn(&gc));
    let left = count(etcd, prefix, "own/node-b/");
    assert!(
        (11..1000).contains(&left),
        "{left} attachments after a kill mid-way"
    );
    Call::new("GC", "").run(&gc).assert_ok();
    assert_eq!(count(etcd, prefix, "own/node-b/"), 10);
    let batches = invocations(node)
        .iter()
        .filter(|(command, outcome, _)| command == "GC" && outcome == "ok")
        .count();
    assert!(batches >= 3, "{batches} GC batches");
}

/// `wasm-ipam gc` with a runtime that runs no pod at all, over node-c's 1000
/// attachments: killed after its first batch, run again, it releases what the first
/// left.
fn check_operator_gc_goes_in_batches(etcd: &Etcd, node: &Node) {
    let prefix = "/g2/";
    let (ipam, store) = thousand_pods_of(etcd, prefix, "node-c", 0);
    let conf_file = write_conf(
        node,
        &node_conf(node, "node-c", &cluster_pool_module(), &store, ipam),
    );
    let none = node.dir.path().join("no-pods");
    std::fs::write(&none, "").unwrap();
    let gc = |node: &Node| {
        let mut cmd = std::process::Command::new(bin());
        cmd.args(["gc", "--valid-from"])
            .arg(&none)
            .args(["--allow-empty", "--grace", "0s", "--json", "--netconf"])
            .arg(&conf_file)
            .args(node.operator_flags())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        cmd
    };
    kill_after_first_batch(node, "gc", gc(node).spawn().unwrap());
    let left = count(etcd, prefix, "own/node-c/");
    assert!((1..1000).contains(&left), "{left} after a kill mid-way");
    let out = gc(node).output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout} {stderr}");
    assert_eq!(count(etcd, prefix, "own/node-c/"), 0, "{stderr}");
    let leaks: Value = serde_json::from_str(&stdout).unwrap();
    let leaks = leaks.as_array().expect("a list of leaks");
    assert_eq!(
        leaks.len(),
        2 * left,
        "the second run found the {left} attachments the first left (two families each)"
    );
    assert!(
        leaks.iter().all(|l| l["released"] == true),
        "every leak released: {stdout}"
    );
}

/// release-node of a gone node (node-d, 1000 attachments), from a live one: killed
/// after its first batch, run again, it releases what the first left, and nothing of
/// node-d is left.
fn check_release_node_goes_in_batches(etcd: &Etcd, node: &Node) {
    let prefix = "/g3/";
    let (ipam, store) = thousand_pods_of(etcd, prefix, "node-d", 5);
    let conf_file = write_conf(
        node,
        &node_conf(node, "node-a", &cluster_pool_module(), &store, ipam),
    );
    let release = |node: &Node| {
        let mut cmd = std::process::Command::new(bin());
        cmd.args(["release-node", "node-d", "--force", "--netconf"])
            .arg(&conf_file)
            .args(node.operator_flags())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        cmd
    };
    kill_after_first_batch(node, "release-node", release(node).spawn().unwrap());
    let left = count(etcd, prefix, "own/node-d/");
    assert!((1..1000).contains(&left), "{left} after a kill mid-way");
    let out = release(node).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!("released {} address(es)", 2 * left)),
        "the second run released the {left} attachments the first left: {text}"
    );
    for gone in ["own/node-d/", "aff/node-d/", "blk/"] {
        assert_eq!(count(etcd, prefix, gone), 0, "{gone} left: {text}");
    }
}

#[test]
fn gc_cni_gc_and_release_node_over_a_thousand_allocations_go_in_batches_and_finish_after_a_kill() {
    let etcd = Etcd::start(1);
    let node = Node::new();
    check_cni_gc_goes_in_batches(&etcd, &node);
    check_operator_gc_goes_in_batches(&etcd, &node);
    check_release_node_goes_in_batches(&etcd, &node);
    // Every batch of every command committed within etcd's transaction limit.
    let refused: Vec<_> = invocations(&node)
        .into_iter()
        .filter(|(_, _, error)| error.contains("maxTxnOps"))
        .collect();
    assert!(refused.is_empty(), "{refused:?}");
}

#[test]
fn a_free_address_beyond_what_one_borrow_reads_is_what_free_says_and_the_next_add_gets() {
    // 64 blocks of 5 usable addresses (/29s of a /23), each claimed by a node and
    // full; node-x holds one of them and may claim no other (maxBlocksPerNode 1).
    // One address freed at a time, in blocks 16 apart (one borrow used to read 32
    // of the 63 others, so at least one of them was out of its reach): FREE says 1,
    // and node-x's next ADD borrows exactly it.
    let etcd = Etcd::start(1);
    let prefix = "/f/";
    let mut store = etcd.store(prefix);
    store["qps"] = 2000.into();
    store["burst"] = 2000.into();
    let ipam = json!({"cidr": "10.9.0.0/23", "blockSize": 29, "maxBlocksPerNode": 1});
    let now = now();
    let mut entries = Vec::new();
    let mut claimed = Vec::new();
    for b in 0..64u32 {
        let net = format!("{}/29", Ipv4Addr::from(0x0a09_0000u32 + b * 8));
        let node = if b == 0 {
            "node-x".to_string()
        } else {
            format!("n{b}")
        };
        let mut ips = serde_json::Map::new();
        for i in 0..5u32 {
            let ip = Ipv4Addr::from(0x0a09_0000u32 + b * 8 + 2 + i);
            let id = format!("{node}-{i}");
            ips.insert(
                ip.to_string(),
                json!({"id": id, "ifname": "eth0", "node": node, "since": now - 60}),
            );
            entries.push((
                format!("e/own/{node}/{id}/eth0"),
                json!({"ips": [ip], "since": now - 60}).to_string(),
            ));
        }
        entries.push((
            format!("e/blk/{net}"),
            json!({"node": node, "ips": ips}).to_string(),
        ));
        entries.push((format!("e/aff/{node}/{net}"), String::new()));
        entries.push((
            format!("u/{node}"),
            json!({"entries": 7, "bytes": 1, "last": now - 60}).to_string(),
        ));
        claimed.push(net);
    }
    entries.push(("e/pool/10.9.0.0/23".to_string(), json!(claimed).to_string()));
    put_all(&etcd, prefix, &entries);

    let node = Node::new();
    let conf = node_conf(&node, "node-x", &cluster_pool_module(), &store, ipam);
    let conf_file = write_conf(&node, &conf);
    let gauge = |name: &str| -> u64 {
        let (ok, prom, stderr) =
            crate::etcd::operator_on(&node, &conf_file, &["stats", "--prometheus"]);
        assert!(ok, "{stderr}");
        let prefix = format!("{name}{{network=\"{NETWORK}\",pool=\"pool default 10.9.0.0/23\"}} ");
        prom.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {prefix} in\n{prom}"))
            .parse()
            .unwrap()
    };
    assert_eq!(gauge("wasm_ipam_pool_addresses_free"), 0);
    for b in [9u32, 25, 41, 57] {
        let lender = Node::new();
        let name = format!("n{b}");
        let lender_conf = node_conf(
            &lender,
            &name,
            &cluster_pool_module(),
            &store,
            conf["ipam"].clone(),
        );
        Call::new("DEL", &format!("{name}-4"))
            .run(&lender_conf)
            .assert_ok();
        let freed = Ipv4Addr::from(0x0a09_0000u32 + b * 8 + 6).to_string();
        assert_eq!(
            gauge("wasm_ipam_pool_addresses_free"),
            1,
            "after freeing {freed}"
        );
        let got = Call::new("ADD", &format!("x-{b}"))
            .run(&conf)
            .address()
            .to_string();
        assert_eq!(
            got.split('/').next(),
            Some(freed.as_str()),
            "borrowed the one free address"
        );
        assert_eq!(gauge("wasm_ipam_pool_addresses_free"), 0);
    }
    let refused = Call::new("ADD", "x-more").run(&conf);
    assert_eq!(refused.error_code(), 140, "{refused:?}");
}
