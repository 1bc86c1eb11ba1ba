//! `wasm-ipam store migrate`: a cluster moved from the etcd store to the Kubernetes
//! store offline, as an operator does it, on a real etcd and the shared
//! kube-apiserver: refused while nodes have just called, then one command, `list` the
//! same before and after, sticky entries and reservations kept, and the nodes calling
//! on the new store at once, a steady call writing only its node's home again after
//! its first change of a moved group; and the move back, refused while etcd still
//! holds its old copy.

use crate::cluster_store::{Cluster, ClusterStore};
use crate::etcd::{list_json, operator_on};
use crate::harness::*;
use serde_json::{Value, json};
use std::path::Path;

/// The CNI_ARGS of pod `name` of namespace web: a Deployment's pod (no StatefulSet
/// ordinal: not sticky) unless its name ends in one.
fn pod(name: &str) -> String {
    format!("K8S_POD_NAMESPACE=web;K8S_POD_NAME={name}")
}

/// Fills the etcd store of `old` (its netconf file `old_file`): 35 pods a node (over
/// one batch of the copy, 64 keys), a StatefulSet's pod deleted (its address kept for
/// it, sticky: returned) and a reserved address.
fn fill_the_old_store(old: &Cluster, old_file: &Path) -> String {
    for n in 0..2 {
        for i in 0..35 {
            Call::new("ADD", &format!("c{n}-{i}"))
                .env("CNI_ARGS", pod(&format!("app-{n}x{i}")))
                .run(&old.confs[n])
                .assert_ok();
        }
    }
    let db = Call::new("ADD", "db-c1")
        .env("CNI_ARGS", pod("db-0"))
        .run(&old.confs[0])
        .address()
        .to_string();
    Call::new("DEL", "db-c1")
        .env("CNI_ARGS", pod("db-0"))
        .run(&old.confs[0])
        .assert_ok();
    assert_eq!(old.keys("sticky/"), ["sticky/web/db-0"]);
    let (ok, _, stderr) = operator_on(
        &old.nodes[0],
        old_file,
        &["reserve", "10.89.0.250", "--note", "VIP"],
    );
    assert!(ok, "{stderr}");
    db
}

/// `store migrate` from `old_file`'s store to `new_file`'s, on `old`'s node 0.
fn migrate(
    old: &Cluster,
    old_file: &Path,
    new_file: &Path,
    extra: &[&str],
) -> (bool, String, String) {
    let mut args = vec!["store", "migrate", "--to", new_file.to_str().unwrap()];
    args.extend_from_slice(extra);
    operator_on(&old.nodes[0], old_file, &args)
}

/// The move: refused while the nodes have just called (naming one, nothing moved),
/// done once they have been quiet as long as asked (here: no wait at all), nothing
/// to do when run again; `list` and the reservations the same before and after.
fn check_the_move(old: &Cluster, old_file: &Path, new_file: &Path) {
    let (ok, before, stderr) = list_json(&old.nodes[0], old_file, &["--reservations"]);
    assert!(ok, "{stderr}");
    let (ok, before_pods, stderr) = list_json(&old.nodes[0], old_file, &[]);
    assert!(ok, "{stderr}");
    let (ok, _, stderr) = migrate(old, old_file, new_file, &[]);
    assert!(
        !ok && stderr.contains("committed a call") && stderr.contains("--idle"),
        "{stderr}"
    );
    assert!(
        crate::kube_store::entries("p-migrate").is_empty(),
        "a refused move wrote to the new store"
    );
    let (ok, out, stderr) = migrate(old, old_file, new_file, &["--idle", "0s"]);
    assert!(ok, "{stderr}");
    assert!(
        out.contains("moved ") && out.contains("network p-migrate"),
        "{out}"
    );
    let (ok, again, stderr) = migrate(old, old_file, new_file, &["--idle", "0s"]);
    assert!(ok && again.contains("nothing to do"), "{again}{stderr}");

    let (ok, after, stderr) = list_json(&old.nodes[0], new_file, &["--reservations"]);
    assert!(ok, "{stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(&after).unwrap(),
        serde_json::from_str::<Value>(&before).unwrap(),
        "reservations before and after"
    );
    let (ok, after_pods, stderr) = list_json(&old.nodes[0], new_file, &[]);
    assert!(ok, "{stderr}");
    let rows = serde_json::from_str::<Value>(&after_pods).unwrap();
    assert_eq!(rows.as_array().map(Vec::len), Some(70), "{after_pods}");
    assert_eq!(
        rows,
        serde_json::from_str::<Value>(&before_pods).unwrap(),
        "list before and after"
    );
}

/// The nodes on the new store (`new_confs`). A pod's DEL on node 0: the first takes
/// the moved groups it changes (the node's attachments, its block) and those named
/// after the node it reads (its block affinities) into the node's home; a second DEL
/// in the same block makes at most 2 requests, as on a cluster that began on this
/// store. db-0 gets its kept address (`db`) back on node 1; the reserved address is
/// never handed out.
fn check_the_nodes_call_on_the_new_store(old: &Cluster, new_confs: &[Value], db: &str) {
    Call::new("DEL", "c0-0")
        .env("CNI_ARGS", pod("app-0x0"))
        .run(&new_confs[0])
        .assert_ok();
    Call::new("DEL", "c0-1")
        .env("CNI_ARGS", pod("app-0x1"))
        .run(&new_confs[0])
        .assert_ok();
    let record = old.nodes[0]
        .log_lines("invocation")
        .pop()
        .expect("a logged call");
    assert!(
        record["kube_requests"].as_u64().is_some_and(|r| r <= 2),
        "a steady DEL after the move: {record}"
    );
    let again = Call::new("ADD", "db-c2")
        .env("CNI_ARGS", pod("db-0"))
        .run(&new_confs[1])
        .address()
        .to_string();
    assert_eq!(bare(&again), bare(db), "db-0's kept address");
    for i in 0..3 {
        let reply = Call::new("ADD", &format!("late-{i}"))
            .env("CNI_ARGS", pod(&format!("late-{i}")))
            .run(&new_confs[0]);
        assert_ne!(bare(reply.address()), "10.89.0.250", "the reserved address");
    }
    // No key held twice across the network's objects (entries() panics on one), and
    // one attachment for each pod: 70 moved, 2 deleted, db-0 and 3 late ones added.
    let held = crate::kube_store::entries("p-migrate");
    let attachments = held.keys().filter(|k| k.starts_with("own/")).count();
    assert_eq!(attachments, 72, "{:?}", held.keys().collect::<Vec<_>>());
}

/// `store migrate` back from `new_file`'s store to `old_file`'s, with the node's lock
/// and data dir and `extra`.
fn migrate_back(
    old: &Cluster,
    old_file: &Path,
    new_file: &Path,
    extra: &[&str],
) -> (bool, String, String) {
    let mut args: Vec<std::ffi::OsString> = ["store", "migrate", "--netconf"]
        .iter()
        .map(Into::into)
        .collect();
    args.push(new_file.into());
    args.push("--to".into());
    args.push(old_file.into());
    args.extend(old.nodes[0].operator_flags().into_iter().map(Into::into));
    args.extend(extra.iter().map(Into::into));
    crate::harness::operator_output(args)
}

/// And back: etcd still holds the network as it was before the move, not what the
/// nodes changed since, so the move back is refused, naming forget; once etcd's copy
/// is forgotten, the network moves back and lists the same on both stores. The
/// shared apiserver holds other tests' networks too: only this one moves.
fn check_the_move_back(old: &Cluster, old_file: &Path, new_file: &Path) {
    let back = |extra: &[&str]| migrate_back(old, old_file, new_file, extra);
    let (ok, _, stderr) = back(&["--idle", "0s", "--network", "p-migrat"]);
    assert!(
        !ok && stderr.contains("holds no network \"p-migrat\"") && stderr.contains("p-migrate"),
        "{stderr}"
    );
    let (ok, _, stderr) = back(&["--idle", "0s", "--network", "p-migrate"]);
    assert!(
        !ok && stderr.contains("already holds") && stderr.contains("wasm-ipam forget p-migrate"),
        "{stderr}"
    );
    let (ok, _, stderr) = operator_on(&old.nodes[0], old_file, &["forget", "p-migrate", "--force"]);
    assert!(ok, "{stderr}");
    let (ok, out, stderr) = back(&["--idle", "0s", "--network", "p-migrate"]);
    assert!(ok && out.contains("moved "), "{out}{stderr}");
    let (ok, on_kube, stderr) = list_json(&old.nodes[0], new_file, &[]);
    assert!(ok, "{stderr}");
    let (ok, on_etcd, stderr) = list_json(&old.nodes[0], old_file, &[]);
    assert!(ok, "{stderr}");
    assert_eq!(
        serde_json::from_str::<Value>(&on_etcd).unwrap(),
        serde_json::from_str::<Value>(&on_kube).unwrap(),
        "list on etcd after the move back"
    );
    assert_eq!(
        serde_json::from_str::<Value>(&on_etcd)
            .unwrap()
            .as_array()
            .map(Vec::len),
        Some(72)
    );
}

#[test]
fn a_cluster_moves_from_etcd_to_kubernetes_with_everything_it_holds() {
    let etcd = ClusterStore::etcd();
    let kube = ClusterStore::kubernetes();
    let ipam = json!({"cidr": "10.89.0.0/24", "blockSize": 28, "stickySeconds": 600});
    let old = etcd.cluster("p-migrate", 2, &ipam);
    // The same nodes (their data dirs and locks), their netconfs naming the new store.
    let new = kube.cluster("p-migrate", 0, &ipam);
    let new_confs: Vec<Value> = (0..2)
        .map(|n| {
            new.conf_on(
                &old.nodes[n],
                &old.names[n],
                &cluster_pool_module(),
                ipam.clone(),
            )
        })
        .collect();
    let old_file = old.conf_file(0);
    let db = fill_the_old_store(&old, &old_file);
    let new_file = old.nodes[0].dir.path().join("new.conf");
    std::fs::write(&new_file, new_confs[0].to_string()).unwrap();
    check_the_move(&old, &old_file, &new_file);
    check_the_nodes_call_on_the_new_store(&old, &new_confs, &db);
    check_the_move_back(&old, &old_file, &new_file);

    // Kept out of the way of the shared apiserver's other tests: the network removed.
    let (ok, _, stderr) = operator_on(
        &old.nodes[0],
        &new_file,
        &["forget", "p-migrate", "--force"],
    );
    assert!(ok, "{stderr}");
}

/// An address without its prefix length.
fn bare(address: &str) -> &str {
    address.split('/').next().unwrap()
}
