//! etcd's own workings under the etcd store, against a real etcd ([`crate::etcd`]):
//! an etcd down or a member lost, the rate limiter against the deadline, a commit
//! over one transaction's limit, TLS with a client certificate, and the requests a
//! call makes, as docs/cluster.md states them.

use crate::etcd::{Etcd, last_call, node_conf};
use crate::harness::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn with_etcd_down_calls_answer_11_within_their_deadline_and_succeed_once_it_is_back() {
    let mut etcd = Etcd::start(1);
    let store = etcd.store("/d/");
    let node = Node::new();
    let mut conf = node_conf(
        &node,
        "node-a",
        &host_local_module(),
        &store,
        json!({"subnet": "10.81.0.0/24"}),
    );
    Call::new("ADD", "c1").run(&conf).assert_ok();
    let before = etcd.keys("/d/");

    etcd.kill(0);
    conf["ipam"]["deadlineSeconds"] = 3.into();
    for (command, id) in [("ADD", "c2"), ("DEL", "c1")] {
        let started = Instant::now();
        let reply = Call::new(command, id).run(&conf);
        let took = started.elapsed();
        assert_eq!(reply.error_code(), 11, "{command}: {reply:?}");
        assert!(reply.msg().contains("etcd"), "{reply:?}");
        // The deadline bounds the work under the lock; the rest is process start and
        // module load, small beside the margin.
        assert!(
            took < Duration::from_secs(3 + 10),
            "{command} took {took:?}"
        );
    }

    etcd.restart(0);
    assert_eq!(
        etcd.keys("/d/"),
        before,
        "nothing was written while etcd was down"
    );
    assert_eq!(Call::new("ADD", "c2").run(&conf).address(), "10.81.0.3/24");
    Call::new("DEL", "c1").run(&conf).assert_ok();
    let entries = etcd.keys("/d/n/testnet/e/");
    assert!(
        entries.iter().any(|k| k.contains("10.81.0.3")),
        "{entries:?}"
    );
    assert!(
        !entries.iter().any(|k| k.contains("10.81.0.2")),
        "{entries:?}"
    );
}

#[test]
fn a_three_member_cluster_keeps_serving_with_one_member_killed() {
    let mut etcd = Etcd::start(3);
    let store = etcd.store("/q/");
    let node = Node::new();
    // Each node tries the members from one picked by its name; three names that differ
    // in their last letter start at three different members, so one of them starts at
    // the member killed.
    let confs: Vec<Value> = ["node-a", "node-b", "node-c"]
        .iter()
        .map(|name| {
            node_conf(
                &node,
                name,
                &host_local_module(),
                &store,
                json!({"subnet": "10.82.0.0/24", "deadlineSeconds": 20}),
            )
        })
        .collect();
    Call::new("ADD", "c0").run(&confs[0]).assert_ok();
    etcd.kill(0);
    for i in 1..=6 {
        let reply = Call::new("ADD", &format!("c{i}")).run(&confs[i % 3]);
        assert_eq!(reply.address(), format!("10.82.0.{}/24", i + 2));
    }
    let conf = &confs[0];
    Call::new("DEL", "c3").run(conf).assert_ok();
    let held = etcd.keys("/q/n/testnet/e/ip/");
    assert_eq!(held.len(), 6, "{held:?}");
    assert!(!held.iter().any(|k| k.ends_with("10.82.0.5")), "{held:?}");
}

#[test]
fn the_rate_limiter_never_makes_a_call_outlive_its_deadline() {
    let etcd = Etcd::start(1);
    let mut store = etcd.store("/r/");
    store["qps"] = 2.into();
    store["burst"] = 2.into();
    let node = Node::new();
    // Twenty listings at two requests a second need ten seconds; the budget is two.
    let conf = node_conf(
        &node,
        "node-a",
        &probe_module(),
        &store,
        json!({"probe": {"listPrefix": "x/", "listTimes": 20}, "deadlineSeconds": 2}),
    );
    let started = Instant::now();
    let reply = Call::new("ADD", "c1").run(&conf);
    let took = started.elapsed();
    assert_eq!(reply.error_code(), 11, "{reply:?}");
    assert!(reply.msg().contains("rate limiter"), "{reply:?}");
    assert!(took < Duration::from_secs(2 + 8), "took {took:?}");
    let line = last_call(&node);
    assert!(line["lock_hold_ms"].as_f64().unwrap() < 2500.0, "{line}");

    // With a budget that covers it, the same call waits its turn and succeeds. Two
    // tokens a second: its ~9 requests need ~4 s of tokens, so however slow the
    // machine makes each request, most of that is spent waiting for the limiter.
    let mut store = etcd.store("/r2/");
    store["qps"] = 2.into();
    store["burst"] = 1.into();
    let conf = node_conf(
        &node,
        "node-a",
        &probe_module(),
        &store,
        json!({"probe": {"listPrefix": "x/", "listTimes": 6}, "deadlineSeconds": 30}),
    );
    Call::new("ADD", "c2").run(&conf).assert_ok();
    let line = last_call(&node);
    assert!(
        line["etcd_rate_wait_ms"].as_f64().unwrap() >= 1000.0,
        "{line}"
    );
}

#[test]
fn a_commit_larger_than_one_etcd_transaction_is_refused_whole() {
    let etcd = Etcd::start(1);
    let store = etcd.store("/x/");
    let node = Node::new();
    let conf = node_conf(
        &node,
        "node-a",
        &probe_module(),
        &store,
        json!({"probe": {"floodEntries": 200, "floodValueBytes": 8}}),
    );
    let reply = Call::new("ADD", "c1").run(&conf);
    assert_eq!(reply.error_code(), 105, "{reply:?}");
    assert!(reply.msg().contains("maxTxnOps"), "{reply:?}");
    assert!(etcd.keys("/x/").is_empty(), "nothing committed");
}

/// A CA, a server certificate for 127.0.0.1 and a client certificate, made with
/// openssl in `dir`.
fn certificates(dir: &Path) -> (PathBuf, PathBuf, PathBuf, PathBuf, PathBuf) {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-subj",
        "/CN=test-ca",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
    ]);
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
    )
    .unwrap();
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    for who in ["server", "client"] {
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            &format!("/CN={who}"),
            "-keyout",
            &format!("{who}.key"),
            "-out",
            &format!("{who}.csr"),
        ]);
        run(&[
            "x509",
            "-req",
            "-in",
            &format!("{who}.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            &format!("{who}.ext"),
            "-out",
            &format!("{who}.pem"),
        ]);
    }
    let p = |f: &str| dir.join(f);
    (
        p("ca.pem"),
        p("server.pem"),
        p("server.key"),
        p("client.pem"),
        p("client.key"),
    )
}

#[test]
fn tls_with_a_client_certificate() {
    let certs = tempfile::tempdir().unwrap();
    let (ca, server, server_key, client, client_key) = certificates(certs.path());
    let etcd = Etcd::start_tls(&ca, &server, &server_key);
    let url = etcd.endpoints()[0].clone();
    let node = Node::new();
    let store = json!({"type": "etcd", "endpoints": [url], "prefix": "/tls/",
        "tls": {"ca": ca, "cert": client, "key": client_key}});
    let conf = node_conf(
        &node,
        "node-a",
        &host_local_module(),
        &store,
        json!({"subnet": "10.83.0.0/24"}),
    );
    assert_eq!(Call::new("ADD", "c1").run(&conf).address(), "10.83.0.2/24");

    // Without a client certificate the server refuses the call; nothing is written.
    let store = json!({"type": "etcd", "endpoints": [url], "prefix": "/tls/", "tls": {"ca": ca}});
    let mut conf = node_conf(
        &node,
        "node-a",
        &host_local_module(),
        &store,
        json!({"subnet": "10.83.0.0/24"}),
    );
    conf["ipam"]["deadlineSeconds"] = 3.into();
    let reply = Call::new("ADD", "c2").run(&conf);
    assert!([11, 104].contains(&reply.error_code()), "{reply:?}");
    assert!(reply.msg().contains("etcd"), "{reply:?}");
}

/// The etcd requests a call makes, read from each call's log line (`etcd_requests`):
/// the figures docs/cluster.md gives, which it must state as measured here.
#[test]
fn a_calls_etcd_requests_are_what_cluster_md_says() {
    let etcd = Etcd::start(1);
    let node = Node::new();
    let ipam = json!({"cidr": "10.90.0.0/16", "blockSize": 26, "stickySeconds": 600});
    let conf = node_conf(
        &node,
        "node-a",
        &cluster_pool_module(),
        &etcd.store("/q/"),
        ipam,
    );
    let requests = |command: &str, id: &str, pod: &str| -> u64 {
        let args = format!("K8S_POD_NAMESPACE=web;K8S_POD_NAME={pod}");
        Call::new(command, id)
            .env("CNI_ARGS", args)
            .run(&conf)
            .assert_ok();
        let line = last_call(&node);
        assert_eq!(line["etcd_conflicts"], 0, "{line}");
        line["etcd_requests"].as_u64().unwrap()
    };
    let first = requests("ADD", "c0", "web-x0");
    let next: Vec<u64> = (1..4)
        .map(|i| requests("ADD", &format!("c{i}"), &format!("web-x{i}")))
        .collect();
    assert!(next.iter().all(|n| *n == next[0]), "{next:?}");
    let del = requests("DEL", "c1", "web-x1");
    // A StatefulSet's pod (its name ends in its ordinal) is sticky: its DEL keeps
    // its address for it in a `sticky/` record.
    requests("ADD", "s0", "db-0");
    let sticky_del = requests("DEL", "s0", "db-0");
    // The budget of a DEL herd, as on the Kubernetes store: a steady ADD at most 3
    // requests, a DEL at most 2 (what the node kept from earlier calls is not read
    // again).
    assert!(
        next[0] <= 3 && del <= 2 && sticky_del <= 2,
        "ADD {next:?}, DEL {del}, sticky DEL {sticky_del}"
    );
    let doc = std::fs::read_to_string(workspace().join("docs/cluster.md")).unwrap();
    let says = format!(
        "an ADD into a block the node holds makes {}, the node's first ADD, which claims a block, {first}; a DEL {del}, a sticky pod's DEL {sticky_del}",
        next[0]
    );
    assert!(
        doc.replace('\n', " ").contains(&says),
        "docs/cluster.md must say: {says}"
    );
}
