//! `examples/cluster-pool`'s sticky pods on each cluster store ([`crate::pools`]):
//! under churn only a StatefulSet pod keeps its address on another node, and a sticky
//! hold expires after its seconds, GC releasing what no pod runs.

use crate::cluster_store::{ClusterStore, on_both_stores};
use crate::etcd::operator_on;
use crate::harness::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

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
