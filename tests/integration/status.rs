//! CNI STATUS as kubelet meets it: it fails (code 50) only for this node's own faults,
//! answers ready for what fails only some ADDs (a range exhausted, the cluster store
//! unreachable) while logging and exporting it, fails for those too under
//! `strictStatus`, and answers at once while a herd waits for the lock.

use crate::fair_lock::wait_until_queued;
use crate::harness::*;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

fn prometheus(node: &Node) -> String {
    let mut args = vec!["stats".to_string(), "--prometheus".into()];
    args.extend(node.operator_flags());
    operator_command(args)
}

fn strict(conf: &Value) -> Value {
    let mut strict = conf.clone();
    strict["ipam"]["strictStatus"] = true.into();
    strict
}

#[test]
fn an_exhausted_range_keeps_status_ready_and_shows_in_the_log_and_the_metric() {
    let node = Node::new();
    let conf = node.netconf(
        "1.1.0",
        &host_local_module(),
        json!({"ranges": [[{"subnet": "10.1.5.0/29", "rangeStart": "10.1.5.2", "rangeEnd": "10.1.5.3"}], [{"subnet": "fd15::/64"}]]}),
    );
    let metric =
        "wasm_ipam_status_conditions{network=\"testnet\",source=\"module\",code=\"999\"} 1";
    Call::new("ADD", "c1").run(&conf).assert_ok();
    Call::new("STATUS", "").run(&strict(&conf)).assert_ok();
    // The second ADD takes the range's last address: every later ADD fails.
    Call::new("ADD", "c2").run(&conf).assert_ok();
    assert_eq!(Call::new("ADD", "c3").run(&conf).error_code(), 999);
    Call::new("STATUS", "").run(&conf).assert_ok();
    assert!(prometheus(&node).contains(metric), "{}", prometheus(&node));
    let warned = node.log_lines("status");
    assert!(
        warned.iter().any(|l| l["level"] == "WARN"
            && l["message"]
                .as_str()
                .is_some_and(|m| m.contains("range set 0 (10.1.5.2-10.1.5.3)"))),
        "{warned:?}"
    );
    // The spec's strict reading, opted in: not available.
    let refused = Call::new("STATUS", "").run(&strict(&conf));
    assert_eq!(refused.error_code(), 50, "{refused:?}");
    assert!(refused.msg().contains("range set 0"), "{}", refused.msg());
    // A DEL frees an address: the condition is gone, strict or not.
    Call::new("DEL", "c1").run(&conf).assert_ok();
    Call::new("STATUS", "").run(&strict(&conf)).assert_ok();
    assert!(!prometheus(&node).contains("source=\"module\""));
}

#[test]
fn status_fails_for_this_node_s_own_faults() {
    let node = Node::new();
    let dir = node.data_dir().parent().unwrap().to_path_buf();
    // A module pinned by digest, then replaced by another: it fails verification.
    let module = dir.join("pinned.wasm");
    std::fs::copy(host_local_module(), &module).unwrap();
    let sha = sha256_hex(&module);
    let conf = node.netconf(
        "1.1.0",
        &module,
        json!({"subnet": "10.1.6.0/24", "moduleSha256": sha}),
    );
    Call::new("ADD", "c1").run(&conf).assert_ok();
    Call::new("STATUS", "").run(&conf).assert_ok();
    std::fs::copy(minimal_module(), &module).unwrap();
    let replaced = Call::new("STATUS", "").run(&conf);
    assert_eq!(replaced.error_code(), 50, "{replaced:?}");
    assert!(
        replaced.msg().contains("this node cannot serve ADDs"),
        "{}",
        replaced.msg()
    );
    std::fs::copy(host_local_module(), &module).unwrap();
    Call::new("STATUS", "").run(&conf).assert_ok();

    // The module missing.
    let mut missing = conf.clone();
    missing["ipam"]["module"] = dir.join("gone.wasm").to_string_lossy().into();
    missing["ipam"]
        .as_object_mut()
        .unwrap()
        .remove("moduleSha256");
    assert_eq!(Call::new("STATUS", "").run(&missing).error_code(), 50);

    // The lock file where none can be made (its directory is a file).
    std::fs::write(dir.join("a-file"), b"").unwrap();
    let mut no_lock = conf.clone();
    no_lock["ipam"]["lockFile"] = dir.join("a-file/ipam.lock").to_string_lossy().into();
    assert_eq!(Call::new("STATUS", "").run(&no_lock).error_code(), 50);

    // The store overwritten: damaged, and STATUS says so without opening it.
    let db = node
        .data_dir()
        .join(wasm_ipam::store::sqlite::DATABASE_FILE);
    let mut bytes = std::fs::read(&db).unwrap();
    bytes[..16].copy_from_slice(b"not a store here");
    std::fs::write(&db, bytes).unwrap();
    let damaged = Call::new("STATUS", "").run(&conf);
    assert_eq!(damaged.error_code(), 50, "{damaged:?}");
    assert!(damaged.msg().contains("store.sqlite"), "{}", damaged.msg());
}

/// A cluster store that refuses connections (etcd stopped): the call that met it
/// fails with 11, and STATUS then answers ready within a second, exporting it.
#[test]
fn an_unreachable_cluster_store_keeps_status_ready() {
    let node = Node::new();
    let mut conf = node.netconf(
        "1.1.0",
        &cluster_pool_module(),
        json!({"nodeName": "node-a", "pools": [{"name": "default", "cidr": "10.80.0.0/16"}]}),
    );
    conf["ipam"]["store"] =
        json!({"type": "etcd", "endpoints": ["http://127.0.0.1:1"], "timeoutSeconds": 1});
    assert_eq!(Call::new("ADD", "c1").run(&conf).error_code(), 11);
    let started = Instant::now();
    Call::new("STATUS", "").run(&conf).assert_ok();
    let took = started.elapsed();
    assert!(took < Duration::from_secs(1), "STATUS took {took:?}");
    // The node's only store is etcd: its network is named by its netconf. Its pools
    // cannot be read (exit 1, saying why), and what the node's calls recorded shows.
    let conf_file = node.dir.path().join("net.conf");
    std::fs::write(&conf_file, conf.to_string()).unwrap();
    let (ok, stdout, stderr) = operator_output([
        "stats".as_ref(),
        "--prometheus".as_ref(),
        "--netconf".as_ref(),
        conf_file.as_os_str(),
    ]);
    let metric = "wasm_ipam_status_conditions{network=\"testnet\",source=\"store\",code=\"11\"} 1";
    assert!(!ok && stderr.contains("network testnet"), "{stderr}");
    assert!(stdout.contains(metric), "{stdout}");
    assert_eq!(Call::new("STATUS", "").run(&strict(&conf)).error_code(), 50);
    // TLS files this node cannot read are its own fault.
    conf["ipam"]["store"]["endpoints"] = json!(["https://127.0.0.1:1"]);
    conf["ipam"]["store"]["tls"] = json!({"ca": node.data_dir().join("no-ca.pem")});
    assert_eq!(Call::new("STATUS", "").run(&conf).error_code(), 50);
}

/// What a module reports is bounded: a flood of conditions with codes no module may
/// use keeps 16 of them, as code 107, each message cut.
#[test]
fn a_module_s_degraded_report_is_bounded() {
    let node = Node::new();
    let huge = format!("0:{}", "x".repeat(2_000));
    let conf = node.netconf(
        "1.1.0",
        &probe_module(),
        json!({"probe": {"degraded": [huge], "degradedCopies": 1000}}),
    );
    Call::new("ADD", "c1").run(&conf).assert_ok();
    let metric =
        "wasm_ipam_status_conditions{network=\"testnet\",source=\"module\",code=\"107\"} 16";
    assert!(prometheus(&node).contains(metric), "{}", prometheus(&node));
    let refused = Call::new("STATUS", "").run(&strict(&conf));
    assert_eq!(refused.error_code(), 50);
    assert!(refused.msg().len() < 2048, "{}", refused.msg().len());
    let record = std::fs::metadata(node.data_dir().join("status/testnet.json")).unwrap();
    assert!(record.len() < 40_000, "{} bytes", record.len());
}

/// 1000 calls queued on the lock (held by another tool) do not slow STATUS: it takes
/// no lock and reads no store.
#[test]
fn status_answers_within_a_second_while_a_thousand_calls_wait() {
    let _serial = exclusive();
    let node = Node::new();
    let conf = node.netconf(
        "1.1.0",
        &minimal_module(),
        json!({"addresses": ["10.1.7.2/16"]}),
    );
    Call::new("ADD", "warm").run(&conf).assert_ok();
    let held = node.hold_lock();
    let mut herd = Vec::new();
    for i in 0..1000 {
        herd.push(Call::new("ADD", &format!("c{i}")).spawn(&conf));
    }
    wait_until_queued(&node, 1000);
    let mut slowest = Duration::ZERO;
    for _ in 0..3 {
        let started = Instant::now();
        Call::new("STATUS", "").run(&conf).assert_ok();
        slowest = slowest.max(started.elapsed());
    }
    for child in &mut herd {
        let _ = child.kill();
    }
    for mut child in herd {
        let _ = child.wait();
    }
    drop(held);
    assert!(
        slowest < Duration::from_secs(1),
        "STATUS took {slowest:?} with 1000 calls queued"
    );
}
