//! `examples/cluster-pool`'s named pools, block limits, reservations, sticky pods and
//! pool figures on each cluster store (a real etcd and the real kube-apiserver, through
//! [`crate::cluster_store`]): simulated nodes, each with its own lock, data dir and
//! `nodeName`, as in `etcd.rs`. This file holds the pools, codes and helpers the
//! `pools_*` tests share, and the tests of named pools and block limits.

use crate::cluster_store::{ClusterStore, on_both_stores};
use crate::etcd::list_json;
use crate::harness::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// The module's codes (docs/cluster.md): a pool the pod names does not exist; no pool
/// serves its namespace and none is the default; borrowing is forbidden.
pub const UNKNOWN_POOL: u64 = 141;
pub const NO_POOL: u64 = 142;
pub const BLOCK_LIMIT: u64 = 143;

/// Two tenants' pools, and a dual-stack default when `default`.
pub fn tenant_pools(default: bool) -> Value {
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

pub fn pod_args(namespace: &str, extra: &str) -> String {
    format!("K8S_POD_NAMESPACE={namespace};K8S_POD_NAME=p{extra}")
}

/// The pool an address lies in, by its first octets.
pub fn pool_by_address(address: &str) -> &'static str {
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
pub const ADDRESS_HELD: u64 = 148;

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
