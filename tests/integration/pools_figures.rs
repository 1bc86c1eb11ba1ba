//! `examples/cluster-pool`'s figures on each cluster store ([`crate::pools`]): IPv6
//! pools counted exactly in the table, its JSON and Prometheus, the quota counting
//! every node's entries, and `store check` finding the store sound while three nodes
//! commit.

use crate::cluster_store::{ClusterStore, on_both_stores};
use crate::etcd::operator_on;
use crate::harness::*;
use crate::pools::pod_args;
use serde_json::{Value, json};

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
