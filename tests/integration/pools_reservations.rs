//! `examples/cluster-pool`'s reservations on each cluster store ([`crate::pools`]):
//! a reservation made while nodes churn is never handed out and no address is held
//! twice; reserving addresses in use needs `--force`, and bad input is refused before
//! the lock.

use crate::cluster_store::{Cluster, ClusterStore, on_both_stores};
use crate::etcd::{list_json, operator_on};
use crate::harness::*;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

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

/// Node 0 borrows (its pods from the 27th on) only once nodes 1 and 2 have each made
/// [`OTHERS_ADDED`] ADDs, so 15 pods live, more than one block holds: else a node 0
/// that ran ahead could find every other node's claimed block full while the pool's
/// free addresses lie in blocks they had not claimed yet, and its ADD is refused with
/// 143, rightly (seen once under a loaded suite).
const BORROWS_FROM: usize = 26;
const OTHERS_ADDED: usize = 22;

/// Node `n`'s part of the churn, with `conf`: nodes 1 and 2 ADD 24 pods each and DEL
/// every third one's predecessor; node 0 ADDs 30 and keeps them, more than its two
/// blocks hold, so it borrows. Each node says on `ready` when it has 5 pods, and
/// counts its ADDs in `added[n]`.
fn churn_on_node(
    n: usize,
    conf: &Value,
    ready: std::sync::mpsc::Sender<()>,
    added: &[AtomicUsize; 3],
) -> Vec<Hold> {
    let mut holds: Vec<Hold> = Vec::new();
    let (pods, deletes) = if n == 0 { (30, false) } else { (24, true) };
    for i in 0..pods {
        if n == 0 && i == BORROWS_FROM {
            wait_until(
                &format!("nodes 1 and 2 made {OTHERS_ADDED} ADDs"),
                Duration::from_secs(300),
                || {
                    added[1..]
                        .iter()
                        .all(|a| a.load(Ordering::SeqCst) >= OTHERS_ADDED)
                },
            );
        }
        let pod = format!("n{n}-p{i}");
        let add_start = Instant::now();
        let reply = Call::new("ADD", &pod).run(conf);
        let address = reply.assert_ok().address().to_string();
        added[n].fetch_add(1, Ordering::SeqCst);
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
}

/// Runs the churn on the cluster's three nodes and reserves 10.84.0.96/28 with
/// `--force` once every node has 5 pods, while the churn goes on: every pod's hold,
/// and when the reservation was made.
fn churn_and_reserve(cluster: &Cluster, conf_file: &Path) -> (Vec<Hold>, Instant) {
    let added: [AtomicUsize; 3] = Default::default();
    let (ready, started) = std::sync::mpsc::channel();
    let mut reserved_at = None;
    let holds = std::thread::scope(|s| {
        let workers: Vec<_> = (0..3)
            .map(|n| {
                let (conf, ready, added) = (&cluster.confs[n], ready.clone(), &added);
                s.spawn(move || churn_on_node(n, conf, ready, added))
            })
            .collect();
        for _ in 0..3 {
            started.recv().unwrap();
        }
        let (ok, out, stderr) = operator_on(
            &cluster.nodes[0],
            conf_file,
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
    (holds, reserved_at.unwrap())
}

/// `list --reservations` shows the reservation, with what of it pods still hold:
/// those addresses.
fn check_reservation_listed(
    cluster: &Cluster,
    conf_file: &Path,
    holds: &[Hold],
) -> BTreeSet<String> {
    let (ok, out, stderr) = operator_on(
        &cluster.nodes[1],
        conf_file,
        &["list", "--reservations", "--json"],
    );
    assert!(ok, "{stderr}");
    let listed: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(listed.len(), 1, "{out}");
    assert_eq!(
        (listed[0]["cidr"].as_str(), listed[0]["note"].as_str()),
        (Some("10.84.0.96/28"), Some("VIPs"))
    );
    let held_now: BTreeSet<String> = holds
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
    held_now
}

/// stats: the pool's reserved and borrowed addresses, as list and the holds say; the
/// table has the same columns for people, and `stats --blocks` shows the reservation.
fn check_pool_figures(cluster: &Cluster, conf_file: &Path, held_now: &BTreeSet<String>) {
    let nodes = &cluster.nodes;
    let (ok, prom, stderr) = operator_on(&nodes[2], conf_file, &["stats", "--prometheus"]);
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
    let (_, list, _) = list_json(&nodes[0], conf_file, &[]);
    let borrowed = serde_json::from_str::<Vec<Value>>(&list)
        .unwrap()
        .iter()
        .filter(|r| r["attributes"]["borrowed"] == "yes")
        .count() as u64;
    assert!(borrowed > 0, "node 0 borrowed: {list}");
    let (ok, table, stderr) = operator_on(&nodes[0], conf_file, &["list"]);
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
    let (ok, table, stderr) = operator_on(&nodes[0], conf_file, &["stats", "--blocks"]);
    assert!(ok, "{stderr}");
    assert!(table.contains("    block 10.84.0."), "{table}");
    assert!(
        table.contains(&format!("({})", cluster.names[0])) && table.contains("RESERVED"),
        "{table}"
    );
}

/// At 40% (42 of 104; 62 at the end) the pool warned: once per crossing.
fn check_warned_once_per_crossing(cluster: &Cluster) {
    let lines: Vec<String> = cluster
        .nodes
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
}

/// A pod asking for a reserved address is refused; once unreserved it gets it, and
/// `unreserve` names the addresses pods still hold. (When node 2's pods came to hold
/// the whole of it before the reservation, one of them is deleted first: the address
/// stays reserved.)
fn check_reserved_refused_until_unreserved(
    cluster: &Cluster,
    conf_file: &Path,
    holds: &[Hold],
    mut held_now: BTreeSet<String>,
) {
    let (nodes, confs) = (&cluster.nodes, &cluster.confs);
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
    let (ok, out, stderr) = operator_on(&nodes[1], conf_file, &["unreserve", "10.84.0.96/28"]);
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
    let (ok, _, stderr) = operator_on(&nodes[1], conf_file, &["unreserve", "10.84.0.96/28"]);
    assert!(!ok && stderr.contains("is not reserved"), "{stderr}");
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
    let conf_file = cluster.conf_file(0);
    let (holds, reserved_at) = churn_and_reserve(&cluster, &conf_file);
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
    let held_now = check_reservation_listed(&cluster, &conf_file, &holds);
    check_pool_figures(&cluster, &conf_file, &held_now);
    check_warned_once_per_crossing(&cluster);
    check_reserved_refused_until_unreserved(&cluster, &conf_file, &holds, held_now);
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
