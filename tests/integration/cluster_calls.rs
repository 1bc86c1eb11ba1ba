//! ADDs and DELs on simulated nodes sharing a cluster store, on etcd and on the
//! Kubernetes store ([`crate::cluster_store`]): what one node commits every node
//! sees, and nodes calling at once each get distinct addresses from blocks of their
//! own.

use crate::cluster_store::{ClusterStore, on_both_stores};
use crate::etcd::{block_owners, last_call, list_json, retries};
use crate::harness::*;
use serde_json::{Value, json};
use std::time::Instant;

on_both_stores!(an_add_and_a_del_go_to_the_store_and_every_node_sees_them);
fn an_add_and_a_del_go_to_the_store_and_every_node_sees_them(store: &ClusterStore) {
    let ipam = json!({"subnet": "10.80.0.0/24"});
    let cluster = store.cluster_of("e-basic", &["a", "b"], &host_local_module(), &ipam);
    let (a, conf_a, conf_b) = (&cluster.nodes[0], &cluster.confs[0], &cluster.confs[1]);

    let first = Call::new("ADD", "c1").run(conf_a);
    assert_eq!(first.address(), "10.80.0.2/24");
    // Node b shares the pool: it sees node a's allocation and takes the next address.
    assert_eq!(Call::new("ADD", "c2").run(conf_b).address(), "10.80.0.3/24");
    let entries = cluster.keys("");
    assert!(
        entries.iter().any(|k| k.contains("10.80.0.2"))
            && entries.iter().any(|k| k.contains("10.80.0.3")),
        "{entries:?}"
    );
    assert!(
        a.store_entries(&cluster.network).is_empty(),
        "nothing in the embedded store"
    );
    // The record of who serves the network, in etcd's key layout (docs/cluster.md,
    // "The keys in etcd"); the Kubernetes store keeps it in an object of its own.
    if let ClusterStore::Etcd(etcd) = store {
        let records = format!("{}s/", cluster.prefix);
        assert_eq!(
            etcd.keys(&records),
            [format!("{records}{}", cluster.network)],
            "the record of who serves it"
        );
    }
    let line = last_call(a);
    assert!(
        line[store.requests_field()].as_u64().unwrap() >= 3,
        "{line}"
    );
    assert_eq!(line["store_retries"], 0);

    // A DEL from the other node frees c1's address cluster-wide.
    Call::new("DEL", "c1").run(conf_b).assert_ok();
    Call::new("DEL", "c1").run(conf_b).assert_ok();
    let entries = cluster.keys("");
    assert!(
        !entries.iter().any(|k| k.contains("10.80.0.2")),
        "{entries:?}"
    );

    // The operators' view reads the store through the module's inspect export.
    let (ok, stdout, stderr) = cluster.operator(0, &["list", "--json"]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.contains("10.80.0.3") && stdout.contains("c2"),
        "{stdout}"
    );
    assert!(!stdout.contains("10.80.0.2"), "{stdout}");
}

on_both_stores!(three_nodes_with_a_hundred_adds_each_get_distinct_addresses_from_their_own_blocks);
/// The cluster issue's scenario: three nodes, each running 100 ADDs at once against
/// one cluster pool in a cluster store.
fn three_nodes_with_a_hundred_adds_each_get_distinct_addresses_from_their_own_blocks(
    store: &ClusterStore,
) {
    let ipam = json!({"cidr": "10.90.0.0/16", "blockSize": 26, "deadlineSeconds": 120, "lockTimeoutSeconds": 600});
    let nodes = store.cluster("e-hundred", 3, &ipam);
    let (cluster, confs) = (&nodes.nodes, &nodes.confs);
    let started = Instant::now();
    let replies: Vec<(usize, String)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .flat_map(|n| (0..100).map(move |i| (n, i)))
            .map(|(n, i)| {
                let conf = &confs[n];
                s.spawn(move || {
                    (
                        n,
                        Call::new("ADD", &format!("n{n}-c{i}"))
                            .run(conf)
                            .address()
                            .to_string(),
                    )
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    eprintln!("300 ADDs on 3 nodes in {:?}", started.elapsed());
    let distinct: std::collections::BTreeSet<&str> =
        replies.iter().map(|(_, a)| a.as_str()).collect();
    assert_eq!(distinct.len(), 300, "every address distinct");

    // Each block has exactly one owner, and each node's addresses lie in its own blocks.
    let owner = block_owners(&nodes);
    let block_of = |address: &str| -> String {
        let ip: std::net::Ipv4Addr = address.split('/').next().unwrap().parse().unwrap();
        let base = u32::from(ip) & !63;
        format!("{}/26", std::net::Ipv4Addr::from(base))
    };
    for (n, address) in &replies {
        assert_eq!(
            owner.get(&block_of(address)),
            Some(&nodes.names[*n]),
            "{address} of node {n}: {owner:?}"
        );
    }
    // 100 addresses take two /26 blocks (61 usable each) per node.
    assert_eq!(owner.len(), 6, "{owner:?}");
    let (total, most) = retries(cluster);
    eprintln!("conflict retries: {total} in all, at most {most} in one call");

    // list reads the cluster through the module's inspect export, per node too.
    let conf_file = nodes.conf_file(0);
    let (ok, stdout, stderr) = list_json(&cluster[0], &conf_file, &[]);
    assert!(ok, "{stderr}");
    let listed: Value = serde_json::from_str(&stdout).unwrap();
    let rows = listed.as_array().unwrap();
    assert_eq!(rows.len(), 300, "{stdout:.400}");
    let (ok, stdout, stderr) = list_json(&cluster[0], &conf_file, &["--node", &nodes.names[1]]);
    assert!(ok, "{stderr}");
    let on_node_1: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(on_node_1.len(), 100);
    assert!(
        on_node_1
            .iter()
            .all(|a| a["containerID"].as_str().unwrap().starts_with("n1-"))
    );

    // DELs from every node free everything; a DEL again is fine.
    std::thread::scope(|s| {
        for (n, conf) in confs.iter().enumerate() {
            s.spawn(move || {
                for i in 0..100 {
                    Call::new("DEL", &format!("n{n}-c{i}"))
                        .run(conf)
                        .assert_ok();
                }
                Call::new("DEL", "n0-c0").run(conf).assert_ok();
            });
        }
    });
    assert!(nodes.keys("own/").is_empty());
}
