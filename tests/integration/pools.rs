//! `examples/cluster-pool`'s named pools, block limits, reservations, sticky pods and
//! pool figures on each cluster store (a real etcd and the real kube-apiserver, through
//! [`crate::cluster_store`]): simulated nodes, each with its own lock, data dir and
//! `nodeName`, as in `etcd.rs`.

use crate::cluster_store::{ClusterStore, on_both_stores};
use crate::etcd::{list_json, operator_on};
use crate::harness::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// The module's codes (docs/cluster.md): a pool the pod names does not exist; no pool
/// serves its namespace and none is the default; borrowing is forbidden.
const UNKNOWN_POOL: u64 = 141;
const NO_POOL: u64 = 142;
const BLOCK_LIMIT: u64 = 143;

/// Two tenants' pools, and a dual-stack default when `default`.
fn tenant_pools(default: bool) -> Value {
    let mut pools = vec![
        json!({"name": "team-a", "cidr": ["10.81.0.0/16"], "namespaces": ["team-a", "team-a-ci"]}),
        json!({"name": "team-b", "cidr": ["10.82.0.0/16"], "namespaces": ["team-b"]}),
    ];
    if default {
        pools.push(
            json!({"name": "default", "cidr": ["10.80.0.0/16", "fd80::/48"], "default": true}),
        );
    }
    json!({"pools": pools, "blockSize": 26, "deadlineSeconds": 120, "lockTimeoutSeconds": 600})
}

fn pod_args(namespace: &str, extra: &str) -> String {
    format!("K8S_POD_NAMESPACE={namespace};K8S_POD_NAME=p{extra}")
}

/// The pool an address lies in, by its first octets.
fn pool_by_address(address: &str) -> &'static str {
    match address {
        a if a.starts_with("10.81.") => "team-a",
        a if a.starts_with("10.82.") => "team-b",
        a if a.starts_with("10.80.") || a.starts_with("fd80:") => "default",
        _ => "none",
    }
}

on_both_stores!(concurrent_adds_on_three_nodes_land_in_their_namespaces_pools_all_distinct);
fn concurrent_adds_on_three_nodes_land_in_their_namespaces_pools_all_distinct(
    store: &ClusterStore,
) {
    let cluster = store.cluster("p-tenants", 3, &tenant_pools(true));
    let (nodes, confs) = (&cluster.nodes, &cluster.confs);
    // Namespaces team-a and team-a-ci share team-a's pool; web has none: the default.
    let namespaces = ["team-a", "team-b", "web", "team-a-ci"];
    let replies: Vec<(String, &str, Value)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .flat_map(|n| (0..24).map(move |i| (n, i)))
            .map(|(n, i)| {
                let conf = &confs[n];
                let namespace = namespaces[i % namespaces.len()];
                s.spawn(move || {
                    let id = format!("n{n}-c{i}");
                    let reply = Call::new("ADD", &id)
                        .env("CNI_ARGS", pod_args(namespace, &id))
                        .run(conf);
                    reply.assert_ok();
                    (id, namespace, reply.json.unwrap())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut all = BTreeSet::new();
    for (id, namespace, result) in &replies {
        let addresses: Vec<&str> = result["ips"]
            .as_array()
            .unwrap()
            .iter()
            .map(|ip| ip["address"].as_str().unwrap())
            .collect();
        let wanted = match *namespace {
            "team-a" | "team-a-ci" => "team-a",
            "team-b" => "team-b",
            _ => "default",
        };
        // The tenants' pools are IPv4 only; the default is dual stack.
        let families = if wanted == "default" { 2 } else { 1 };
        assert_eq!(addresses.len(), families, "{id}: {result}");
        for address in addresses {
            assert_eq!(
                pool_by_address(address),
                wanted,
                "{id} in {namespace}: {address}"
            );
            assert!(
                all.insert(address.to_string()),
                "{address} handed out twice"
            );
        }
    }
    assert_eq!(all.len(), 72 + 18, "every address distinct");

    // list names each allocation's pool, as the addresses say.
    let conf_file = cluster.conf_file(0);
    let (ok, stdout, stderr) = list_json(&nodes[0], &conf_file, &[]);
    assert!(ok, "{stderr}");
    let rows: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(rows.len(), 90, "{stdout:.400}");
    for row in &rows {
        assert_eq!(
            row["attributes"]["pool"].as_str(),
            Some(pool_by_address(row["address"].as_str().unwrap())),
            "{row}"
        );
    }

    // stats: one row per pool and family, with its use.
    let (ok, prom, stderr) = cluster.operator(0, &["stats", "--prometheus"]);
    assert!(ok, "{stderr}");
    let network = &cluster.network;
    // 18 pods each in team-a (two namespaces: 36), team-b, default.
    for (pool, in_use) in [
        ("pool team-a 10.81.0.0/16", 36),
        ("pool team-b 10.82.0.0/16", 18),
        ("pool default 10.80.0.0/16", 18),
        ("pool default fd80::/48", 18),
    ] {
        let line = format!(
            "wasm_ipam_pool_addresses_in_use{{network=\"{network}\",pool=\"{pool}\"}} {in_use}"
        );
        assert!(prom.lines().any(|l| l == line), "no {line:?} in\n{prom}");
    }
    let capacity = format!(
        "wasm_ipam_pool_addresses_capacity{{network=\"{network}\",pool=\"pool team-a 10.81.0.0/16\"}} 62464"
    );
    assert!(prom.lines().any(|l| l == capacity), "{prom}");
}

on_both_stores!(an_unmapped_namespace_without_a_default_is_refused_and_the_pod_can_name_its_pool);
fn an_unmapped_namespace_without_a_default_is_refused_and_the_pod_can_name_its_pool(
    store: &ClusterStore,
) {
    let cluster = store.cluster("p-unmapped", 3, &tenant_pools(false));
    let confs = &cluster.confs;
    let refused = Call::new("ADD", "web-1")
        .env("CNI_ARGS", pod_args("web", "1"))
        .run(&confs[0]);
    assert_eq!(refused.error_code(), NO_POOL, "{refused:?}");
    assert!(
        refused.msg().contains("namespace \"web\""),
        "{}",
        refused.msg()
    );
    assert!(cluster.keys("").is_empty(), "nothing written");

    // CNI_ARGS IPAM_POOL names the pool, over the namespace's.
    let by_arg = Call::new("ADD", "a-1")
        .env(
            "CNI_ARGS",
            format!("{};IPAM_POOL=team-b", pod_args("team-a", "1")),
        )
        .run(&confs[1]);
    assert_eq!(pool_by_address(by_arg.address()), "team-b", "{by_arg:?}");
    // The pod annotation (containerd's io.kubernetes.cri.pod-annotations capability,
    // in runtimeConfig) names it too, and wins over IPAM_POOL.
    let mut annotated = confs[2].clone();
    annotated["runtimeConfig"] =
        json!({"io.kubernetes.cri.pod-annotations": {"wasm-ipam.io/pool": "team-a"}});
    let by_annotation = Call::new("ADD", "web-2")
        .env(
            "CNI_ARGS",
            format!("{};IPAM_POOL=team-b", pod_args("web", "2")),
        )
        .run(&annotated);
    assert_eq!(pool_by_address(by_annotation.address()), "team-a");
    // A pool nobody configured.
    let mut unknown = confs[2].clone();
    unknown["runtimeConfig"] =
        json!({"io.kubernetes.cri.pod-annotations": {"wasm-ipam.io/pool": "team-z"}});
    let refused = Call::new("ADD", "web-3")
        .env("CNI_ARGS", pod_args("team-a", "3"))
        .run(&unknown);
    assert_eq!(refused.error_code(), UNKNOWN_POOL, "{refused:?}");
    assert!(
        refused
            .msg()
            .contains("pod annotation wasm-ipam.io/pool names pool \"team-z\""),
        "{}",
        refused.msg()
    );
}

/// One /27 pool in /29 blocks (5 usable addresses each), at most one block a node.
fn limited(strict: bool) -> Value {
    json!({"cidr": "10.83.0.0/27", "blockSize": 29, "maxBlocksPerNode": 1, "strictAffinity": strict})
}

on_both_stores!(
    a_node_at_max_blocks_per_node_borrows_a_host_route_address_or_fails_with_strict_affinity
);
fn a_node_at_max_blocks_per_node_borrows_a_host_route_address_or_fails_with_strict_affinity(
    store: &ClusterStore,
) {
    let cluster = store.cluster("p-limit", 3, &limited(false));
    let (nodes, confs) = (&cluster.nodes, &cluster.confs);
    let lender = Call::new("ADD", "b-0").run(&confs[1]).address().to_string();
    let own: Vec<String> = (0..5)
        .map(|i| {
            Call::new("ADD", &format!("a-{i}"))
                .run(&confs[0])
                .address()
                .to_string()
        })
        .collect();
    assert!(own.iter().all(|a| a.ends_with("/29")), "{own:?}");
    // Node 0's one block is full: it borrows from node 1's.
    let reply = Call::new("ADD", "a-5").run(&confs[0]);
    let result = reply.assert_ok().json.clone().unwrap();
    let address = result["ips"][0]["address"].as_str().unwrap();
    let block = |a: &str| {
        let ip: std::net::Ipv4Addr = a.split('/').next().unwrap().parse().unwrap();
        u32::from(ip) & !7
    };
    assert_eq!(block(address), block(&lender), "{result}");
    assert!(address.ends_with("/32"), "a host prefix: {result}");
    let gateway = std::net::Ipv4Addr::from(block(&lender) + 1).to_string();
    assert_eq!(result["ips"][0]["gateway"], gateway.as_str(), "{result}");
    assert_eq!(
        result["routes"],
        json!([{"dst": format!("{gateway}/32"), "scope": 253}]),
        "a link route to the gateway: {result}"
    );
    assert!(
        cluster.keys(&format!("aff/{}/", cluster.names[0])).len() == 1,
        "node 0 claimed no second block"
    );
    let conf_file = cluster.conf_file(0);
    let (ok, stdout, stderr) = list_json(&nodes[0], &conf_file, &[]);
    assert!(ok, "{stderr}");
    let borrowed: Vec<String> = serde_json::from_str::<Vec<Value>>(&stdout)
        .unwrap()
        .iter()
        .filter(|r| r["attributes"]["borrowed"] == "yes")
        .map(|r| r["containerID"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(borrowed, ["a-5"], "{stdout}");
    // Its DEL hands the address back to the lender's block.
    Call::new("DEL", "a-5").run(&confs[0]).assert_ok();
    let again = Call::new("ADD", "b-1").run(&confs[1]).address().to_string();
    assert_eq!(
        again.split('/').next(),
        address.split('/').next(),
        "reused by its block's node"
    );

    // With strictAffinity, the same situation is an error, and nothing is written.
    let strict_cluster = store.cluster("p-strict", 3, &limited(true));
    let strict = &strict_cluster.confs;
    Call::new("ADD", "b-0").run(&strict[1]).assert_ok();
    for i in 0..5 {
        Call::new("ADD", &format!("a-{i}"))
            .run(&strict[0])
            .assert_ok();
    }
    let keys = strict_cluster.keys("");
    let refused = Call::new("ADD", "a-5").run(&strict[0]);
    assert_eq!(refused.error_code(), BLOCK_LIMIT, "{refused:?}");
    assert!(
        refused.msg().contains("maxBlocksPerNode") && refused.msg().contains("strictAffinity"),
        "{}",
        refused.msg()
    );
    assert_eq!(strict_cluster.keys(""), keys);
    // So is a requested address in another node's block, free as it is.
    let lender = Call::new("ADD", "b-1")
        .run(&strict[1])
        .address()
        .to_string();
    let free = std::net::Ipv4Addr::from(block(&lender) + 6).to_string();
    let refused = Call::new("ADD", "a-6")
        .env("CNI_ARGS", format!("IP={free}"))
        .run(&strict[0]);
    assert_eq!(refused.error_code(), BLOCK_LIMIT, "{refused:?}");
    assert!(
        refused
            .msg()
            .contains(&format!("requested address {free} is in block"))
            && refused
                .msg()
                .contains(&format!("of node {}", strict_cluster.names[1])),
        "{}",
        refused.msg()
    );
}

/// The module's code for a requested address another container holds.
const ADDRESS_HELD: u64 = 148;

on_both_stores!(
    codes_an_operator_can_act_on_unknown_container_held_address_and_a_limit_that_is_not_exhaustion
);
fn codes_an_operator_can_act_on_unknown_container_held_address_and_a_limit_that_is_not_exhaustion(
    store: &ClusterStore,
) {
    let cluster = store.cluster("p-codes", 3, &limited(false));
    let confs = &cluster.confs;
    // CHECK of a container never added: the spec's 3; its DEL succeeds.
    let check = Call::new("CHECK", "never").run(&confs[0]);
    assert_eq!(check.error_code(), 3, "{check:?}");
    Call::new("DEL", "never").run(&confs[0]).assert_ok();
    // An address another node's pod holds, asked for: its own code, naming the holder.
    let held = Call::new("ADD", "b-0").run(&confs[1]).address().to_string();
    let ip = held.split('/').next().unwrap();
    let refused = Call::new("ADD", "a-0")
        .env("CNI_ARGS", format!("IP={ip}"))
        .run(&confs[0]);
    assert_eq!(refused.error_code(), ADDRESS_HELD, "{refused:?}");
    assert_eq!(
        refused.msg(),
        format!(
            "requested address {ip} is held by container \"b-0\" (interface eth0) on node {}",
            cluster.names[1]
        )
    );
    // Node 0's one block (5 addresses) and node 1's full: nothing to borrow, and the
    // two blocks no node claimed are free. The limit refuses them, not exhaustion.
    for i in 0..5 {
        Call::new("ADD", &format!("a-{i}"))
            .run(&confs[0])
            .assert_ok();
    }
    for i in 1..5 {
        Call::new("ADD", &format!("b-{i}"))
            .run(&confs[1])
            .assert_ok();
    }
    let refused = Call::new("ADD", "a-5").run(&confs[0]);
    assert_eq!(refused.error_code(), BLOCK_LIMIT, "{refused:?}");
    assert!(
        refused.msg().contains("blocks no node has claimed")
            && refused.msg().contains("raise maxBlocksPerNode")
            && !refused.msg().contains("exhausted"),
        "{}",
        refused.msg()
    );
}

/// The module's codes for a reserved address asked for by a pod.
const RESERVED: u64 = 144;

/// One pod's ADD (and DEL, if the churn deleted it), as the test saw them.
struct Hold {
    pod: String,
    address: String,
    add_start: Instant,
    add_end: Instant,
    del_start: Option<Instant>,
}

/// The history checker for addresses: a pod holds its address for certain from its
/// ADD's answer to its DEL's start; no two pods' certain holds of one address overlap.
fn check_no_address_held_twice(holds: &[Hold]) {
    for a in holds {
        for b in holds
            .iter()
            .filter(|b| b.pod != a.pod && b.address == a.address)
        {
            let a_until = a.del_start.unwrap_or_else(Instant::now);
            let b_until = b.del_start.unwrap_or_else(Instant::now);
            assert!(
                a_until <= b.add_end || b_until <= a.add_end,
                "{} held by {} and {} at once",
                a.address,
                a.pod,
                b.pod
            );
        }
    }
}

fn in_reserved(address: &str) -> bool {
    let ip: std::net::Ipv4Addr = address.split('/').next().unwrap().parse().unwrap();
    u32::from(ip) & !15 == u32::from(std::net::Ipv4Addr::new(10, 84, 0, 96))
}

/// A /25 in /28 blocks (13 usable each, 104 in all), at most two blocks a node so
/// nodes also borrow, warning at 40% in use (42 addresses).
fn churned() -> Value {
    json!({"cidr": "10.84.0.0/25", "blockSize": 28, "maxBlocksPerNode": 2, "warnPercent": 40,
           "deadlineSeconds": 120, "lockTimeoutSeconds": 600})
}

on_both_stores!(
    a_reservation_made_while_nodes_churn_is_never_handed_out_and_no_address_is_held_twice
);
fn a_reservation_made_while_nodes_churn_is_never_handed_out_and_no_address_is_held_twice(
    store: &ClusterStore,
) {
    // cluster-pool spreads nodes over blocks by a hash of their names: under this
    // network's name node 2 starts looking at the block the reservation covers
    // (10.84.0.96/28), so pods hold some of it when it is reserved with --force.
    let cluster = store.cluster("p-churn-vip", 3, &churned());
    let (nodes, confs) = (&cluster.nodes, &cluster.confs);
    let conf_file = cluster.conf_file(0);
    // Nodes 1 and 2 ADD 24 pods each and DEL every third one's predecessor; node 0
    // ADDs 30 and keeps them, more than its two blocks hold, so it borrows. The
    // reservation is made once every node has 5 pods, while the churn goes on.
    // Node 0 borrows (its pods from the 27th on) only once nodes 1 and 2 have each made
    // 22 ADDs, so 15 pods live, more than one block holds: else a node 0 that ran
    // ahead could find every other node's claimed block full while the pool's free
    // addresses lie in blocks they had not claimed yet, and its ADD is refused with
    // 143, rightly (seen once under a loaded suite).
    const BORROWS_FROM: usize = 26;
    const OTHERS_ADDED: usize = 22;
    let added: [std::sync::atomic::AtomicUsize; 3] = Default::default();
    let (ready, started) = std::sync::mpsc::channel();
    let mut reserved_at = None;
    let holds: Vec<Hold> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..3)
            .map(|n| {
                let conf = &confs[n];
                let ready = ready.clone();
                let added = &added;
                s.spawn(move || {
                    let mut holds: Vec<Hold> = Vec::new();
                    let (pods, deletes) = if n == 0 { (30, false) } else { (24, true) };
                    for i in 0..pods {
                        if n == 0 && i == BORROWS_FROM {
                            let waited = Instant::now();
                            while added[1..]
                                .iter()
                                .any(|a| a.load(std::sync::atomic::Ordering::SeqCst) < OTHERS_ADDED)
                            {
                                assert!(
                                    waited.elapsed() < Duration::from_secs(300),
                                    "nodes 1 and 2 made no {OTHERS_ADDED} ADDs in 300 s"
                                );
                                std::thread::sleep(Duration::from_millis(20));
                            }
                        }
                        let pod = format!("n{n}-p{i}");
                        let add_start = Instant::now();
                        let reply = Call::new("ADD", &pod).run(conf);
                        let address = reply.assert_ok().address().to_string();
                        added[n].fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        holds.push(Hold {
                            pod,
                            address,
                            add_start,
                            add_end: Instant::now(),
                            del_start: None,
                        });
                        if i == 4 {
                            ready.send(()).unwrap();
                        }
                        if deletes && i % 3 == 2 {
                            let gone = &mut holds[i - 1];
                            gone.del_start = Some(Instant::now());
                            Call::new("DEL", &gone.pod).run(conf).assert_ok();
                        }
                    }
                    holds
                })
            })
            .collect();
        for _ in 0..3 {
            started.recv().unwrap();
        }
        let (ok, out, stderr) = operator_on(
            &nodes[0],
            &conf_file,
            &["reserve", "10.84.0.96/28", "--note", "VIPs", "--force"],
        );
        assert!(ok, "{stderr}");
        assert!(out.contains("reserved 10.84.0.96/28 (VIPs)"), "{out}");
        reserved_at = Some(Instant::now());
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    let reserved_at = reserved_at.unwrap();
    assert_eq!(holds.len(), 78);
    check_no_address_held_twice(&holds);
    let late: Vec<&Hold> = holds.iter().filter(|h| h.add_start > reserved_at).collect();
    assert!(!late.is_empty(), "ADDs ran after the reservation");
    for h in &late {
        assert!(
            !in_reserved(&h.address),
            "{} got reserved {}",
            h.pod,
            h.address
        );
    }

    // list --reservations shows it, with what of it pods still hold.
    let (ok, out, stderr) =
        operator_on(&nodes[1], &conf_file, &["list", "--reservations", "--json"]);
    assert!(ok, "{stderr}");
    let listed: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(listed.len(), 1, "{out}");
    assert_eq!(
        (listed[0]["cidr"].as_str(), listed[0]["note"].as_str()),
        (Some("10.84.0.96/28"), Some("VIPs"))
    );
    let mut held_now: BTreeSet<String> = holds
        .iter()
        .filter(|h| h.del_start.is_none() && in_reserved(&h.address))
        .map(|h| h.address.split('/').next().unwrap().to_string())
        .collect();
    let held_listed: BTreeSet<String> = listed[0]["held"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_string())
        .collect();
    assert_eq!(held_listed, held_now);

    // stats: the pool's reserved and borrowed addresses, as list and the holds say.
    let (ok, prom, stderr) = operator_on(&nodes[2], &conf_file, &["stats", "--prometheus"]);
    assert!(ok, "{stderr}");
    let gauge = |name: &str| -> u64 {
        let prefix = format!(
            "{name}{{network=\"{}\",pool=\"pool default 10.84.0.0/25\"}} ",
            cluster.network
        );
        prom.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("no {prefix} in\n{prom}"))
            .parse()
            .unwrap()
    };
    assert_eq!(
        gauge("wasm_ipam_pool_addresses_reserved"),
        13 - held_now.len() as u64
    );
    assert_eq!(
        gauge("wasm_ipam_pool_addresses_in_use"),
        62,
        "78 ADDs less 16 DELs"
    );
    assert_eq!(gauge("wasm_ipam_pool_warn_percent"), 40);
    let (_, list, _) = list_json(&nodes[0], &conf_file, &[]);
    let borrowed = serde_json::from_str::<Vec<Value>>(&list)
        .unwrap()
        .iter()
        .filter(|r| r["attributes"]["borrowed"] == "yes")
        .count() as u64;
    assert!(borrowed > 0, "node 0 borrowed: {list}");
    // The table has the same columns for people.
    let (ok, table, stderr) = operator_on(&nodes[0], &conf_file, &["list"]);
    assert!(ok, "{stderr}");
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NETWORK",
            "ADDRESS",
            "CONTAINER",
            "ID",
            "IFNAME",
            "NODE",
            "POOL",
            "BORROWED",
            "SINCE"
        ],
        "{table}"
    );
    let yes = table.lines().filter(|l| l.contains(" yes ")).count() as u64;
    assert_eq!(yes, borrowed, "{table}");
    assert_eq!(gauge("wasm_ipam_pool_addresses_borrowed"), borrowed);
    let (ok, table, stderr) = operator_on(&nodes[0], &conf_file, &["stats", "--blocks"]);
    assert!(ok, "{stderr}");
    assert!(table.contains("    block 10.84.0."), "{table}");
    assert!(
        table.contains(&format!("({})", cluster.names[0])) && table.contains("RESERVED"),
        "{table}"
    );

    // At 40% (42 of 104; 62 at the end) the pool warned: once per crossing.
    let lines: Vec<String> = nodes
        .iter()
        .flat_map(|n| n.log_lines("guest"))
        .filter(|l| l["level"] == "WARN")
        .filter_map(|l| l["message"].as_str().map(String::from))
        .filter(|m| m.starts_with("pool default 10.84.0.0/25: "))
        .collect();
    let past = lines
        .iter()
        .filter(|m| m.contains("reached its warnPercent 40"))
        .count();
    let under = lines
        .iter()
        .filter(|m| m.contains("back under its warnPercent 40"))
        .count();
    assert!(
        past >= 1 && past >= under && past - under <= 1,
        "{lines:#?}"
    );
    let flagged = !cluster.keys("warn/").is_empty();
    assert_eq!(flagged, past == under + 1, "{lines:#?}");

    // A pod asking for a reserved address is refused; once unreserved it gets it.
    // (When node 2's pods came to hold the whole of it before the reservation, one
    // of them is deleted first: the address stays reserved.)
    let free = (98..=110)
        .map(|i| format!("10.84.0.{i}"))
        .find(|a| !held_now.contains(a))
        .unwrap_or_else(|| {
            let address = held_now.pop_last().unwrap();
            let holder = holds
                .iter()
                .find(|h| h.del_start.is_none() && h.address.starts_with(&format!("{address}/")))
                .unwrap();
            let node: usize = holder.pod[1..2].parse().unwrap();
            Call::new("DEL", &holder.pod).run(&confs[node]).assert_ok();
            address
        });
    let asked = Call::new("ADD", "wants-vip")
        .env("CNI_ARGS", format!("IP={free}"))
        .run(&confs[1]);
    assert_eq!(asked.error_code(), RESERVED, "{asked:?}");
    let (ok, out, stderr) = operator_on(&nodes[1], &conf_file, &["unreserve", "10.84.0.96/28"]);
    assert!(
        ok && out.contains("unreserved 10.84.0.96/28"),
        "{out}{stderr}"
    );
    assert!(!held_now.is_empty());
    for held in &held_now {
        assert!(
            out.contains(&format!(
                "held    {held} is in use: its holder keeps it; once deleted, it is handed out again"
            )),
            "{out}"
        );
    }
    let asked = Call::new("ADD", "wants-vip")
        .env("CNI_ARGS", format!("IP={free}"))
        .run(&confs[1]);
    assert_eq!(
        asked.assert_ok().address().split('/').next(),
        Some(free.as_str())
    );
    let (ok, _, stderr) = operator_on(&nodes[1], &conf_file, &["unreserve", "10.84.0.96/28"]);
    assert!(!ok && stderr.contains("is not reserved"), "{stderr}");
}

on_both_stores!(
    reserving_addresses_in_use_is_refused_without_force_and_bad_input_is_refused_before_the_lock
);
fn reserving_addresses_in_use_is_refused_without_force_and_bad_input_is_refused_before_the_lock(
    store: &ClusterStore,
) {
    let cluster = store.cluster("p-reserve", 3, &churned());
    let (nodes, confs) = (&cluster.nodes, &cluster.confs);
    let conf_file = cluster.conf_file(0);
    let held = Call::new("ADD", "c1").run(&confs[0]).address().to_string();
    let held = held.split('/').next().unwrap();
    let keys = cluster.keys("");
    let (ok, _, stderr) = operator_on(&nodes[0], &conf_file, &["reserve", held]);
    assert!(
        !ok && stderr.contains("are held (") && stderr.contains("--force"),
        "{stderr}"
    );
    assert!(stderr.contains("145"), "the module's code: {stderr}");
    assert_eq!(cluster.keys(""), keys, "nothing written");
    for (bad, why) in [
        ("10.84.0.1/24", "has host bits set"),
        ("ten", "neither an IP address nor a CIDR"),
        ("10.99.0.0/24", "not within one range"),
    ] {
        let (ok, _, stderr) = operator_on(&nodes[0], &conf_file, &["reserve", bad]);
        assert!(!ok && stderr.contains(why), "{bad}: {stderr}");
    }
    let long = "n".repeat(257);
    for note in ["a\nb", long.as_str()] {
        let (ok, _, stderr) = operator_on(
            &nodes[0],
            &conf_file,
            &["reserve", "10.84.0.120", "--note", note],
        );
        assert!(
            !ok && stderr.contains("--note must be one line of at most 256 bytes"),
            "{stderr}"
        );
    }
    assert_eq!(cluster.keys(""), keys, "nothing written");
}

on_both_stores!(under_deployment_churn_only_a_statefulset_pod_keeps_its_address_on_another_node);
fn under_deployment_churn_only_a_statefulset_pod_keeps_its_address_on_another_node(
    store: &ClusterStore,
) {
    let ipam = json!({"cidr": "10.86.0.0/24", "blockSize": 28, "stickySeconds": 600});
    let cluster = store.cluster("p-sticky", 3, &ipam);
    let (nodes, confs) = (&cluster.nodes, &cluster.confs);
    let pod = |name: &str| format!("K8S_POD_NAMESPACE=web;K8S_POD_NAME={name}");
    let db = Call::new("ADD", "db-c1")
        .env("CNI_ARGS", pod("db-0"))
        .run(&confs[0])
        .address()
        .to_string();
    // A Deployment's churn on node 0: every pod a new name, deleted again.
    let mut churned = BTreeSet::new();
    for i in 0..20 {
        let name = format!(
            "web-5d9c7b8f4-{}",
            ["x2k4q", "b7zt9", "qw8rl", "m4n6p"][i % 4]
        );
        let id = format!("web-c{i}");
        let address = Call::new("ADD", &id)
            .env("CNI_ARGS", pod(&format!("{name}{i}")))
            .run(&confs[0])
            .address()
            .to_string();
        churned.insert(address);
        Call::new("DEL", &id)
            .env("CNI_ARGS", pod(&format!("{name}{i}")))
            .run(&confs[0])
            .assert_ok();
    }
    assert_eq!(
        churned.len(),
        1,
        "each new pod got the address the last one freed: {churned:?}"
    );
    // db-0 is deleted and rescheduled to node 1: it gets its address back.
    Call::new("DEL", "db-c1")
        .env("CNI_ARGS", pod("db-0"))
        .run(&confs[0])
        .assert_ok();
    assert_eq!(cluster.keys("sticky/"), ["sticky/web/db-0"]);
    let conf_file = cluster.conf_file(0);
    let (ok, prom, stderr) = operator_on(&nodes[0], &conf_file, &["stats", "--prometheus"]);
    assert!(ok, "{stderr}");
    assert!(
        prom.lines()
            .any(|l| l.starts_with("wasm_ipam_pool_addresses_cooling_down{") && l.ends_with(" 1")),
        "only db-0's address cools: {prom}"
    );
    let again = Call::new("ADD", "db-c2")
        .env("CNI_ARGS", pod("db-0"))
        .run(&confs[1])
        .address()
        .to_string();
    assert_eq!(
        again.split('/').next(),
        db.split('/').next(),
        "{again} vs {db}"
    );
}

on_both_stores!(ipv6_pools_count_exactly_in_the_table_json_and_prometheus);
/// IPv6 pools count exactly past 2^64 addresses: a /48 in the default /122 blocks
/// holds 61 × 2^74 usable addresses, a /64 61 × 2^58, in the table, `--json` and
/// Prometheus alike (docs/cluster.md, "Pool use and exhaustion").
fn ipv6_pools_count_exactly_in_the_table_json_and_prometheus(store: &ClusterStore) {
    let ipam = json!({"pools": [
        {"name": "default", "cidr": ["10.84.0.0/24", "fd84::/64"], "default": true},
        {"name": "wide", "cidr": ["fd85::/48"], "namespaces": ["wide"]},
    ]});
    let cluster = store.cluster("p-ipv6", 3, &ipam);
    let (nodes, confs) = (&cluster.nodes, &cluster.confs);
    Call::new("ADD", "c1")
        .env("CNI_ARGS", pod_args("web", "1"))
        .run(&confs[0])
        .assert_ok();
    let conf_file = cluster.conf_file(0);
    let wide = 61u128 << 74;
    let slash64 = 61u128 << 58;
    assert_eq!(wide.to_string(), "1152257421820193432141824");
    let docs = std::fs::read_to_string(workspace().join("docs/cluster.md")).unwrap();
    assert!(docs.contains(&format!("2^74 blocks × 61 = {wide}")));

    let (ok, json_out, stderr) = operator_on(&nodes[0], &conf_file, &["stats", "--json"]);
    assert!(ok, "{stderr}");
    // Exact integers in the text (a reader parsing numbers as doubles would round).
    let stats: Value = serde_json::from_str(&json_out).unwrap();
    let names: Vec<&str> = stats[0]["pools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["pool"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "pool default 10.84.0.0/24",
            "pool default fd84::/64",
            "pool wide fd85::/48"
        ]
    );
    for capacity in [244, slash64, wide, wide + slash64 + 244] {
        let field = format!("\"capacity\": {capacity},");
        assert!(json_out.contains(&field), "no {field} in {json_out}");
    }

    let (ok, prom, stderr) = operator_on(&nodes[0], &conf_file, &["stats", "--prometheus"]);
    assert!(ok, "{stderr}");
    let line = format!(
        "wasm_ipam_pool_addresses_capacity{{network=\"{}\",pool=\"pool wide fd85::/48\"}} {wide}",
        cluster.network
    );
    assert!(prom.lines().any(|l| l == line), "no {line:?} in\n{prom}");
    let value: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert_eq!(value, wide as f64, "a float reads it");

    // The table: exact, and every row's CAPACITY cell ends where the header's does.
    let (ok, table, stderr) = operator_on(&nodes[0], &conf_file, &["stats"]);
    assert!(ok, "{stderr}");
    assert!(table.contains(&wide.to_string()), "{table}");
    let lines: Vec<&str> = table
        .lines()
        .skip_while(|l| !l.contains("CAPACITY"))
        .take_while(|l| !l.trim().is_empty())
        .collect();
    assert!(lines.len() >= 4, "{table}");
    let capacity_end = lines[0].find("CAPACITY").unwrap() + "CAPACITY".len();
    for row in &lines[1..] {
        let cell_end = row[..capacity_end.min(row.len())].trim_end().len();
        assert_eq!(
            cell_end, capacity_end,
            "CAPACITY is not right-aligned in {row:?}\n{table}"
        );
    }
}

on_both_stores!(a_sticky_hold_expires_after_its_seconds_and_gc_releases_what_no_pod_runs);
/// Upkeep and leak repair as an operator meets them: a StatefulSet pod's hold on its
/// address lasts `stickySeconds` and is swept by the node's later calls once it has
/// passed (not before); `wasm-ipam gc` releases every attachment the runtime no longer
/// lists and keeps the ones it lists, on either cluster store.
fn a_sticky_hold_expires_after_its_seconds_and_gc_releases_what_no_pod_runs(store: &ClusterStore) {
    const STICKY: Duration = Duration::from_secs(3);
    let ipam = json!({"cidr": "10.87.0.0/24", "blockSize": 28, "stickySeconds": STICKY.as_secs()});
    let cluster = store.cluster("p-upkeep", 2, &ipam);
    let confs = &cluster.confs;
    let pod = "K8S_POD_NAMESPACE=web;K8S_POD_NAME=db-0";
    Call::new("ADD", "db-c1")
        .env("CNI_ARGS", pod)
        .run(&confs[0])
        .assert_ok();
    Call::new("DEL", "db-c1")
        .env("CNI_ARGS", pod)
        .run(&confs[0])
        .assert_ok();
    let released = Instant::now();
    // A DEL of an attachment the node does not have runs the node's upkeep: it keeps
    // the hold while it lasts, and sweeps it once it has passed.
    let mut sweeps = 0;
    let swept = loop {
        Call::new("DEL", &format!("sweep-{sweeps}"))
            .run(&confs[0])
            .assert_ok();
        sweeps += 1;
        let held = cluster.keys("sticky/");
        if held.is_empty() {
            break released.elapsed();
        }
        assert_eq!(held, ["sticky/web/db-0"]);
        assert!(
            released.elapsed() < STICKY + Duration::from_secs(30),
            "the hold outlived its {STICKY:?} by 30 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        swept >= STICKY,
        "swept after {swept:?}, before its {STICKY:?}"
    );
    eprintln!("the hold was swept {swept:?} after the DEL, by DEL {sweeps}");
    let (ok, prom, stderr) = cluster.operator(0, &["stats", "--prometheus"]);
    assert!(ok, "{stderr}");
    assert!(
        prom.lines()
            .any(|l| l.starts_with("wasm_ipam_pool_addresses_cooling_down{") && l.ends_with(" 0")),
        "nothing cools down any more: {prom}"
    );

    // Twelve pods on node 1, of which the runtime still runs two.
    let ids: Vec<String> = (0..12).map(|i| format!("gc-c{i}")).collect();
    for id in &ids {
        Call::new("ADD", id).run(&confs[1]).assert_ok();
    }
    let listed = cluster.nodes[1].dir.path().join("running");
    std::fs::write(&listed, format!("{}\n{}\n", ids[0], ids[1])).unwrap();
    let listed = listed.to_string_lossy().into_owned();
    let (ok, stdout, stderr) = cluster.operator(
        1,
        &["gc", "--valid-from", &listed, "--grace", "0s", "--json"],
    );
    assert!(ok, "{stdout} {stderr}");
    let leaks: Value = serde_json::from_str(&stdout).unwrap();
    let leaks = leaks.as_array().expect("a list of leaks");
    let gone: BTreeSet<&str> = leaks
        .iter()
        .filter(|l| l["released"] == true)
        .filter_map(|l| l["containerID"].as_str())
        .collect();
    let expected: BTreeSet<&str> = ids[2..].iter().map(String::as_str).collect();
    assert_eq!(gone, expected, "{stdout}");
    let own = format!("own/{}/", cluster.names[1]);
    let kept: Vec<String> = cluster.keys(&own);
    assert_eq!(kept.len(), 2, "{kept:?}");
    assert!(
        kept.iter()
            .all(|k| k.contains(&ids[0]) || k.contains(&ids[1])),
        "{kept:?}"
    );
    // A second run finds nothing more. (No `store check` here: it looks at every
    // network of the store, and the other tests' networks commit meanwhile.)
    let (ok, stdout, stderr) = cluster.operator(
        1,
        &["gc", "--valid-from", &listed, "--grace", "0s", "--json"],
    );
    assert!(ok, "{stderr}");
    assert_eq!(serde_json::from_str::<Value>(&stdout).unwrap(), json!([]));
}

on_both_stores!(the_quota_counts_every_nodes_entries_and_a_release_always_commits);
/// `storeQuotaEntries` holds across the cluster (docs/cluster.md, "Quotas"): two nodes
/// adding in turn are refused with 108 once the network's entries, summed over both,
/// would pass it; nothing of a refused call is left; a DEL past the quota commits,
/// and makes room for the next ADD.
fn the_quota_counts_every_nodes_entries_and_a_release_always_commits(store: &ClusterStore) {
    const QUOTA: usize = 24;
    let ipam = json!({"cidr": "10.88.0.0/24", "blockSize": 28, "storeQuotaEntries": QUOTA});
    let cluster = store.cluster("p-quota", 2, &ipam);
    let confs = &cluster.confs;
    let mut added = Vec::new();
    let refused = loop {
        let n = added.len();
        let id = format!("q-c{n}");
        let reply = Call::new("ADD", &id).run(&confs[n % 2]);
        let held = cluster.keys("").len();
        assert!(held <= QUOTA, "{held} entries after ADD {n}, over {QUOTA}");
        if !reply.success {
            break reply;
        }
        added.push(id);
        assert!(added.len() < QUOTA, "no ADD was refused");
    };
    assert_eq!(refused.error_code(), 108, "{refused:?}");
    assert!(
        refused.msg().contains("storeQuotaEntries")
            && refused.msg().contains("nothing was committed"),
        "{refused:?}"
    );
    let full = cluster.keys("");
    eprintln!(
        "{} ADDs on two nodes held {} of {QUOTA} entries",
        added.len(),
        full.len()
    );
    assert!(added.len() >= 2, "both nodes added: {added:?}");
    // The refused call left nothing; a second try is refused the same way.
    let again = Call::new("ADD", "q-again").run(&confs[added.len() % 2]);
    assert_eq!(again.error_code(), 108, "{again:?}");
    assert_eq!(cluster.keys(""), full, "a refused ADD wrote nothing");
    // Releasing is never refused, and frees room for the next ADD, on either node.
    let last = added.pop().unwrap();
    Call::new("DEL", &last)
        .run(&confs[added.len() % 2])
        .assert_ok();
    assert!(cluster.keys("").len() < full.len());
    Call::new("ADD", &last)
        .run(&confs[added.len() % 2])
        .assert_ok();
    assert_eq!(cluster.keys(""), full, "the room the DEL made, taken again");
}

on_both_stores!(store_check_while_three_nodes_commit_finds_the_store_sound);
/// `store check` in a busy cluster tells the truth: while three nodes ADD and DEL
/// (steady one-write commits, block claims across objects), every check finds the
/// store sound (on the Kubernetes store one once answered 104 for a busy network, its
/// usage and its entries read from lists taken apart).
fn store_check_while_three_nodes_commit_finds_the_store_sound(store: &ClusterStore) {
    let ipam = json!({"cidr": "10.89.0.0/24", "blockSize": 28});
    let cluster = store.cluster("p-checked", 3, &ipam);
    let confs = &cluster.confs;
    let done = std::sync::atomic::AtomicUsize::new(0);
    let checks = std::thread::scope(|s| {
        for (n, conf) in confs.iter().enumerate() {
            let done = &done;
            s.spawn(move || {
                for i in 0..24 {
                    let pod = format!("c{n}-p{i}");
                    Call::new("ADD", &pod).run(conf).assert_ok();
                    if i % 2 == 1 {
                        Call::new("DEL", &format!("c{n}-p{}", i - 1))
                            .run(conf)
                            .assert_ok();
                    }
                }
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            });
        }
        let mut checks = 0;
        while done.load(std::sync::atomic::Ordering::SeqCst) < 3 || checks < 3 {
            let (ok, stdout, stderr) = cluster.operator(0, &["store", "check"]);
            assert!(
                ok,
                "check {checks} while the nodes commit: {stdout} {stderr}"
            );
            checks += 1;
        }
        checks
    });
    eprintln!("{checks} store checks while three nodes committed, each sound");
    assert_eq!(cluster.keys("own/").len(), 3 * 12);
}
