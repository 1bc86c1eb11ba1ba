//! Operator commands on a cluster store, on etcd and on the Kubernetes store: the
//! store commands and `forget` on the store a netconf names, and `release-node`
//! freeing a gone node's addresses and blocks while refusing a live one.

use crate::cluster_store::{Cluster, ClusterStore, on_both_stores};
use crate::etcd::{block_owners, list_json, operator_on, write_conf};
use crate::harness::*;
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

/// `store backup` and `restore` on a cluster store refuse, naming the store
/// (`named`) and what keeps it, and so what backs it up and restores it, rather than
/// copy the node's embedded store instead; nothing is written.
fn check_backup_and_restore_refused(
    store: &ClusterStore,
    cluster: &Cluster,
    conf_file: &Path,
    named: &str,
) {
    let a = &cluster.nodes[0];
    let backup = a.dir.path().join("backup");
    let (ok, _, stderr) = operator_on(
        a,
        conf_file,
        &["store", "backup", "--to", &backup.to_string_lossy()],
    );
    assert!(
        !ok && stderr.contains("code 7")
            && stderr.contains(named)
            && stderr.contains("copies the embedded store only"),
        "{stderr}"
    );
    assert!(!backup.exists(), "nothing written");
    std::fs::write(&backup, "anything").unwrap();
    let (ok, _, restore) = operator_on(
        a,
        conf_file,
        &["store", "restore", "--from", &backup.to_string_lossy()],
    );
    assert!(!ok && restore.contains("code 7"), "{restore}");
    match store {
        ClusterStore::Etcd(etcd) => {
            let endpoint = &etcd.endpoints()[0];
            assert!(
                stderr.contains(&format!("etcdctl --endpoints {endpoint} snapshot save")),
                "{stderr}"
            );
            assert!(
                restore.contains(named) && restore.contains("etcdutl snapshot restore"),
                "{restore}"
            );
        }
        ClusterStore::Kubernetes => {
            assert!(
                stderr.contains("kubectl get ipamshards -o yaml"),
                "{stderr}"
            );
            assert!(
                restore.contains(&*cluster.kubeconfig(0).to_string_lossy())
                    && restore.contains("kubectl apply -f FILE"),
                "{restore}"
            );
        }
    }
}

on_both_stores!(store_commands_and_forget_work_on_the_cluster_store_a_netconf_names);
/// The store commands and `forget` take `--netconf` like the others and work on the
/// store it names: on a cluster store, `forget` deletes the network (its entries,
/// every node's usage and its record) after the same checks as on the embedded store,
/// `store check` checks it, and `store backup` and `restore` refuse, naming the store
/// and what keeps it, rather than copy the node's embedded store instead. Nothing is
/// created on the node.
fn store_commands_and_forget_work_on_the_cluster_store_a_netconf_names(store: &ClusterStore) {
    let ipam = json!({"subnet": "10.82.0.0/24"});
    let cluster = store.cluster_of("e-forget", &["a", "b"], &host_local_module(), &ipam);
    let (a, conf_a, conf_b) = (&cluster.nodes[0], &cluster.confs[0], &cluster.confs[1]);
    let (network, other_name) = (cluster.network.as_str(), cluster.other_name("other"));
    let mut other = cluster.other_network(1, "other");
    other["ipam"]["subnet"] = "10.83.0.0/24".into();
    Call::new("ADD", "c1").run(conf_a).assert_ok();
    Call::new("ADD", "o1").run(&other).assert_ok();
    Call::new("DEL", "o1").run(&other).assert_ok();
    let conf_file = cluster.conf_file(0);
    let named = cluster.describe(0);

    let (ok, stdout, stderr) = operator_on(a, &conf_file, &["store", "check"]);
    assert!(ok, "{stderr}");
    assert!(stdout.starts_with(&format!("{named}: ok, ")), "{stdout}");

    check_backup_and_restore_refused(store, &cluster, &conf_file, &named);

    // forget: refused while the module reports an allocation, on any node.
    let forget = |network: &str, extra: &[&str]| {
        let mut args = vec!["forget", network];
        args.extend(extra);
        operator_on(a, &conf_file, &args)
    };
    let (ok, _, stderr) = forget(network, &[]);
    assert!(
        !ok && stderr.contains("still holds 1 allocation"),
        "{stderr}"
    );
    assert!(cluster.holds_network(network));
    // Released by node b, it goes whole: entries, usage rows and record.
    Call::new("DEL", "c1").run(conf_b).assert_ok();
    let (ok, stdout, stderr) = forget(network, &[]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.starts_with(&format!("forgot network {network}")),
        "{stdout}"
    );
    assert!(!cluster.holds_network(network));
    // A network whose conflist is gone, named through another's on the same store.
    assert!(cluster.holds_network(&other_name));
    let (ok, _, stderr) = forget(network, &[]);
    assert!(
        !ok && stderr.contains(&format!("{named} holds nothing for network {network}")),
        "{stderr}"
    );
    // Which networks the store holds: on etcd those of the test's prefix; the
    // apiserver is shared by the whole test binary, so there it lists other tests'
    // networks too.
    match store {
        ClusterStore::Etcd(_) => assert!(
            stderr.contains(&format!("(the networks it holds: {other_name})")),
            "{stderr}"
        ),
        ClusterStore::Kubernetes => assert!(
            stderr.contains("(the networks it holds: ") && stderr.contains(&other_name),
            "{stderr}"
        ),
    }
    let (ok, stdout, stderr) = forget(&other_name, &[]);
    assert!(ok, "{stderr}");
    assert!(
        stdout.starts_with(&format!("forgot network {other_name}")),
        "{stdout}"
    );
    assert!(!cluster.holds_network(&other_name));
    if let ClusterStore::Etcd(etcd) = store {
        // Nothing else under the prefix either (etcd's key layout).
        assert!(
            etcd.keys(&cluster.prefix).is_empty(),
            "{:?}",
            etcd.keys(&cluster.prefix)
        );
    }
    assert!(
        !a.data_dir()
            .join(wasm_ipam::store::sqlite::DATABASE_FILE)
            .exists(),
        "no embedded store made on the node"
    );
}

/// `wasm-ipam release-node NODE` run on `on`'s node, with its netconf and `extra`.
fn release_node(on: &Node, conf: &Value, node: &str, extra: &[&str]) -> (bool, String, String) {
    let conf_file = write_conf(on, conf);
    let mut args: Vec<std::ffi::OsString> = vec![
        "release-node".into(),
        node.into(),
        "--netconf".into(),
        conf_file.into(),
    ];
    args.extend(on.operator_flags().into_iter().map(Into::into));
    args.extend(extra.iter().map(Into::into));
    operator_output(args)
}

/// Runs `release-node` for `node` from `a` (with `conf` and `extra`) until `node` has
/// been quiet for 2 s and it succeeds, each refusal a code 11: its stdout.
fn release_once_quiet_for_2s(a: &Node, conf: &Value, node: &str, extra: &[&str]) -> String {
    let args: Vec<&str> = ["--window", "2s"].iter().chain(extra).copied().collect();
    let waited = Instant::now();
    loop {
        let (ok, stdout, stderr) = release_node(a, conf, node, &args);
        if ok {
            return stdout;
        }
        assert!(stderr.contains("code 11"), "{stderr}");
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "node-c never counted as quiet for 2 s: {stderr}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// What `release-node` refuses, changing nothing: a live node (b), a node releasing
/// itself (c), a name no node ever called with (a typo, even with --force); and
/// `gc --network NAME` on a node, which finds no record of an etcd network there and
/// says which form names one.
fn check_refused_releases(cluster: &Cluster) {
    let (nodes, names, confs) = (&cluster.nodes, &cluster.names, &cluster.confs);
    let (a, c) = (&nodes[0], &nodes[2]);
    let network = cluster.network.as_str();
    let entries = cluster.keys("");
    let (ok, _, stderr) = release_node(a, &confs[0], &names[1], &["--window", "1h"]);
    assert!(!ok, "a live node is refused");
    assert!(
        stderr.contains("code 11")
            && stderr.contains(&format!("node {} committed a call", names[1])),
        "{stderr}"
    );
    let (ok, _, stderr) = release_node(c, &confs[2], &names[2], &["--force"]);
    assert!(!ok && stderr.contains("runs as"), "{stderr}");
    let typo = format!("{network}-9");
    let (ok, _, stderr) = release_node(a, &confs[0], &typo, &["--force"]);
    assert!(
        !ok && stderr.contains("code 7")
            && stderr.contains(&format!(
                "node {typo} has never committed to network {network}"
            ))
            && stderr.contains(&names.join(", ")),
        "{stderr}"
    );
    let valid = a.dir.path().join("valid");
    std::fs::write(&valid, "").unwrap();
    let (ok, _, stderr) = operator_output([
        "gc".as_ref(),
        "--network".as_ref(),
        network.as_ref(),
        "--valid-from".as_ref(),
        valid.as_os_str(),
        "--data-dir".as_ref(),
        a.data_dir().as_os_str(),
        "--lock-file".as_ref(),
        a.lock_file().as_os_str(),
    ]);
    assert!(
        !ok && stderr.contains("code 7")
            && stderr.contains(&format!("no store at {}", a.data_dir().display()))
            && stderr.contains("recorded in etcd, not on the node: name it with --netconf FILE"),
        "{stderr}"
    );
    assert_eq!(cluster.keys(""), entries, "nothing changed");
}

/// After node c was released: its addresses and block are gone, the others' (`kept`,
/// by container) untouched.
fn check_only_node_c_released(cluster: &Cluster, kept: &[(String, String)], c_block: &str) {
    let names = &cluster.names;
    let conf_file = cluster.conf_file(0);
    let (ok, listed, stderr) = list_json(&cluster.nodes[0], &conf_file, &[]);
    assert!(ok, "{stderr}");
    let mut rows: Vec<(String, String)> = serde_json::from_str::<Vec<Value>>(&listed)
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["containerID"].as_str().unwrap().to_string(),
                r["address"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    rows.sort();
    assert_eq!(rows, kept, "{listed}");
    let after = block_owners(cluster);
    assert!(!after.contains_key(c_block), "{after:?}");
    assert_eq!(after.len(), 2);
    assert!(cluster.keys(&format!("aff/{}/", names[2])).is_empty());
    assert!(cluster.keys(&format!("own/{}/", names[2])).is_empty());
}

/// Where there is no node to release: a store no other node shares (the embedded
/// one), and a module built against 0.2.0, which has no `nodes` export (it is named,
/// nothing runs).
fn check_no_node_to_release_on_an_embedded_store_or_an_old_module(store: &ClusterStore) {
    let solo = Node::new();
    let solo_conf = solo.netconf(
        "1.1.0",
        &host_local_module(),
        json!({"subnet": "10.97.0.0/24"}),
    );
    Call::new("ADD", "s1").run(&solo_conf).assert_ok();
    let (ok, _, stderr) = release_node(&solo, &solo_conf, "node-x", &["--force"]);
    assert!(
        !ok && stderr.contains("code 7") && stderr.contains("embedded"),
        "{stderr}"
    );
    let old = store.cluster_of(
        "e-release-old",
        &["a"],
        &legacy_v0_2_module(),
        &json!({"addresses": ["10.98.0.2/24"]}),
    );
    Call::new("ADD", "o1").run(&old.confs[0]).assert_ok();
    let gone = format!("{}-x", old.network);
    let (ok, _, stderr) = release_node(&old.nodes[0], &old.confs[0], &gone, &["--force"]);
    assert!(
        !ok && stderr.contains("code 100") && stderr.contains("does not export nodes"),
        "{stderr}"
    );
}

on_both_stores!(release_node_frees_a_gone_nodes_addresses_and_blocks_and_refuses_a_live_one);
fn release_node_frees_a_gone_nodes_addresses_and_blocks_and_refuses_a_live_one(
    store: &ClusterStore,
) {
    let suffixes = ["a", "b", "c"];
    // Four /29 blocks of 5 usable addresses each.
    let ipam = json!({"cidr": "10.96.0.0/27", "blockSize": 29});
    let nodes = store.cluster_of("e-release", &suffixes, &cluster_pool_module(), &ipam);
    let (cluster, names, confs) = (&nodes.nodes, &nodes.names, &nodes.confs);
    let mut held = Vec::new();
    for (n, conf) in confs.iter().enumerate() {
        for i in 0..2 {
            let id = format!("{}{i}", suffixes[n]);
            let address = Call::new("ADD", &id).run(conf).address().to_string();
            held.push((id, address.split('/').next().unwrap().to_string()));
        }
    }
    let owners = block_owners(&nodes);
    assert_eq!(owners.len(), 3, "one block each: {owners:?}");
    let c_block = owners
        .iter()
        .find(|(_, node)| **node == names[2])
        .map(|(block, _)| block.clone())
        .unwrap();
    let a = &cluster[0];
    // A second network on the same store, where node c runs a pod too.
    let second_name = nodes.other_name("second");
    let mut second = nodes.other_network(2, "second");
    second["ipam"]["cidr"] = "10.96.1.0/27".into();
    let second_address = Call::new("ADD", "c-second")
        .run(&second)
        .address()
        .to_string();
    check_refused_releases(&nodes);
    let entries = nodes.keys("");

    // Node c stops. Once it has been quiet for the (small) window, a dry run says what
    // would go, and changes nothing.
    let dry = release_once_quiet_for_2s(a, &confs[0], &names[2], &["--dry-run"]);
    assert_eq!(nodes.keys(""), entries, "a dry run changes nothing");
    assert!(
        dry.contains("would release 2 address(es) and 1 block(s)"),
        "{dry}"
    );

    // Node c, quiet for 8 s, calls again in the second network: every network is
    // refused, the first one untouched.
    let waited = Instant::now();
    while !release_node(a, &confs[0], &names[2], &["--window", "8s", "--dry-run"]).0 {
        assert!(
            waited.elapsed() < Duration::from_secs(90),
            "never quiet for 8 s"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    Call::new("ADD", "c-second-2").run(&second).assert_ok();
    let (ok, _, stderr) = release_node(a, &confs[0], &names[2], &["--window", "8s"]);
    assert!(
        !ok && stderr.contains("code 11") && stderr.contains(&format!("network {second_name}")),
        "{stderr}"
    );
    assert_eq!(nodes.keys(""), entries, "nothing changed");
    let stdout = release_once_quiet_for_2s(a, &confs[0], &names[2], &[]);
    assert!(
        stdout.contains("released 2 address(es) and 1 block(s)"),
        "{stdout}"
    );
    for (id, address) in &held[4..] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with("address") && l.contains(address) && l.contains(id)),
            "{address} of {id} in\n{stdout}"
        );
    }
    assert!(stdout.contains(&format!("block   {c_block}")), "{stdout}");
    // One command released node c from every network of the store.
    assert!(
        stdout.contains(&format!(
            "network {second_name}, node {}: released 2 address(es) and 1 block(s)",
            names[2]
        )) && stdout.contains(second_address.split('/').next().unwrap()),
        "{stdout}"
    );
    assert!(
        nodes
            .keys_of(&second_name, &format!("own/{}/", names[2]))
            .is_empty()
    );
    check_only_node_c_released(&nodes, &held[..4], &c_block);

    // The live nodes fill their blocks and claim the free ones, node c's among them.
    for i in 0..8 {
        for (n, conf) in confs[..2].iter().enumerate() {
            Call::new("ADD", &format!("more-{n}-{i}"))
                .run(conf)
                .assert_ok();
        }
    }
    let owners = block_owners(&nodes);
    assert_eq!(owners.len(), 4, "{owners:?}");
    assert!(names[..2].contains(&owners[&c_block]), "{owners:?}");
    check_no_node_to_release_on_an_embedded_store_or_an_old_module(store);
}
