//! The etcd store (`"store": {"type": "etcd"}`) against a real etcd: Debian's
//! etcd-server, started by each test on loopback on free ports in a temporary
//! directory, and killed when the test ends. Nodes are simulated as the cluster
//! issue asks: each has its own lock file, data dir and `nodeName`.
//!
//! The tests of features a module or an operator sees (a shared pool, blocks per node,
//! `list --node`, `forget` and the store commands, `release-node`) run on the
//! Kubernetes store too ([`crate::cluster_store`]); those of etcd's own workings
//! (transactions and their limits, members lost, TLS, the rate limiter, the requests a
//! call makes) run on etcd only.

use crate::cluster_store::{Cluster, ClusterStore, on_both_stores};
use crate::harness::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ETCD: &str = "/usr/bin/etcd";
const ETCDCTL: &str = "/usr/bin/etcdctl";

/// An etcd cluster of one or more members on loopback.
pub struct Etcd {
    dir: tempfile::TempDir,
    members: Vec<Member>,
    token: String,
    /// CA, server certificate and key, when clients must speak TLS with a client
    /// certificate signed by the CA.
    tls: Option<(PathBuf, PathBuf, PathBuf)>,
}

struct Member {
    name: String,
    client: u16,
    peer: u16,
    child: Option<Child>,
}

impl Etcd {
    /// Starts `members` members and waits until the cluster answers.
    pub fn start(members: usize) -> Etcd {
        Etcd::started(members, None)
    }

    /// Starts a one-member etcd serving TLS: server certificate `cert`/`key`, clients
    /// must present a certificate signed by `ca`.
    pub fn start_tls(ca: &Path, cert: &Path, key: &Path) -> Etcd {
        Etcd::started(1, Some((ca.into(), cert.into(), key.into())))
    }

    fn started(members: usize, tls: Option<(PathBuf, PathBuf, PathBuf)>) -> Etcd {
        assert!(
            Path::new(ETCD).exists() && Path::new(ETCDCTL).exists(),
            "the etcd tests need Debian's etcd-server and etcd-client (scripts/test.sh installs them)"
        );
        let dir = tempfile::tempdir().unwrap();
        let token = format!(
            "wasm-ipam-test-{}-{}",
            std::process::id(),
            dir.path().file_name().unwrap().to_string_lossy()
        );
        let mut etcd = Etcd {
            dir,
            members: (0..members)
                .map(|i| Member {
                    name: format!("m{i}"),
                    client: free_port(),
                    peer: free_port(),
                    child: None,
                })
                .collect(),
            token,
            tls,
        };
        for i in 0..members {
            etcd.spawn(i);
        }
        etcd.wait_healthy();
        etcd
    }

    fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    fn spawn(&mut self, i: usize) {
        let cluster: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect();
        let m = &self.members[i];
        let client_url = format!("{}://127.0.0.1:{}", self.scheme(), m.client);
        let peer_url = format!("http://127.0.0.1:{}", m.peer);
        let log = std::fs::File::create(self.dir.path().join(format!("{}.log", m.name))).unwrap();
        let mut cmd = Command::new(ETCD);
        cmd.arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(self.dir.path().join(&m.name))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &cluster.join(",")])
            .args(["--initial-cluster-token", &self.token])
            .args(["--initial-cluster-state", "new"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if let Some((ca, cert, key)) = &self.tls {
            cmd.arg("--cert-file")
                .arg(cert)
                .arg("--key-file")
                .arg(key)
                .arg("--trusted-ca-file")
                .arg(ca)
                .arg("--client-cert-auth");
        }
        self.members[i].child = Some(cmd.spawn().expect("etcd starts"));
    }

    /// Every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("{}://127.0.0.1:{}", self.scheme(), m.client))
            .collect()
    }

    /// The `ipam.store` for these endpoints under `prefix`.
    pub fn store(&self, prefix: &str) -> Value {
        json!({"type": "etcd", "endpoints": self.endpoints(), "prefix": prefix})
    }

    /// Kills member `i` at once, as a crash would.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops member `i` with SIGSTOP, as a frozen or partitioned member: the kernel
    /// still accepts connections to it, and nothing answers them.
    pub fn freeze(&mut self, i: usize) {
        self.signal(i, libc::SIGSTOP);
    }

    /// Lets a frozen member `i` run again (SIGCONT).
    pub fn thaw(&mut self, i: usize) {
        self.signal(i, libc::SIGCONT);
    }

    fn signal(&self, i: usize, signal: libc::c_int) {
        let child = self.members[i].child.as_ref().expect("member is running");
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        // SAFETY: kill(2) on our own child, which has not been waited for.
        assert_eq!(
            unsafe { libc::kill(pid, signal) },
            0,
            "signal {signal} to {pid}"
        );
    }

    /// The index of the member that is the cluster's leader now.
    pub fn leader(&self) -> usize {
        let status: Value =
            serde_json::from_str(&self.ctl(&["endpoint", "status", "-w", "json"])).unwrap();
        let statuses = status.as_array().unwrap();
        let leader = statuses[0]["Status"]["leader"].as_u64().unwrap();
        let endpoint = statuses
            .iter()
            .find(|s| s["Status"]["header"]["member_id"].as_u64() == Some(leader))
            .expect("the leader answers")["Endpoint"]
            .as_str()
            .unwrap()
            .to_string();
        self.endpoints()
            .iter()
            .position(|e| *e == endpoint)
            .unwrap()
    }

    /// Waits until every live member answers (after a thaw or an election).
    pub fn wait_until_healthy(&self) {
        self.wait_healthy();
    }

    /// Starts member `i` again on its data and ports, and waits until it answers.
    pub fn restart(&mut self, i: usize) {
        self.spawn(i);
        self.wait_healthy();
    }

    /// `etcdctl` aimed at the live members (with the server's certificate as its
    /// client certificate under TLS: the test CA signs it for both uses).
    fn etcdctl(&self) -> Command {
        let live: Vec<String> = self
            .endpoints()
            .into_iter()
            .zip(&self.members)
            .filter(|(_, m)| m.child.is_some())
            .map(|(url, _)| url)
            .collect();
        let mut cmd = Command::new(ETCDCTL);
        cmd.arg("--endpoints")
            .arg(live.join(","))
            .env("ETCDCTL_API", "3");
        if let Some((ca, cert, key)) = &self.tls {
            cmd.arg("--cacert")
                .arg(ca)
                .arg("--cert")
                .arg(cert)
                .arg("--key")
                .arg(key);
        }
        cmd
    }

    /// `etcdctl` against the live members; stdout.
    pub fn ctl(&self, args: &[&str]) -> String {
        let out = self.etcdctl().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// The keys under `prefix`, in order.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        self.ctl(&["get", "--prefix", "--keys-only", prefix])
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    }

    fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ok = self
                .etcdctl()
                .args(["endpoint", "health"])
                .stderr(Stdio::null())
                .stdout(Stdio::null())
                .status()
                .unwrap()
                .success();
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "etcd never became healthy: {}",
                std::fs::read_to_string(self.dir.path().join("m0.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

/// A node of the simulated cluster, named `name`.
pub fn node_conf(node: &Node, name: &str, module: &Path, store: &Value, ipam: Value) -> Value {
    let mut conf = node.netconf("1.1.0", module, ipam);
    conf["ipam"]["nodeName"] = name.into();
    conf["ipam"]["store"] = store.clone();
    conf
}

/// An operator command on `node`'s lock and data dir, with `conf_file` as its netconf.
pub fn operator_on(node: &Node, conf_file: &Path, args: &[&str]) -> (bool, String, String) {
    let mut all: Vec<std::ffi::OsString> = args.iter().map(|a| a.into()).collect();
    all.extend([
        "--netconf".into(),
        conf_file.into(),
        "--lock-file".into(),
        node.lock_file().into(),
        "--data-dir".into(),
        node.data_dir().into(),
    ]);
    operator_output(all)
}

/// `wasm-ipam list --json --netconf CONF_FILE EXTRA` on `node`'s lock and data dir.
pub fn list_json(node: &Node, conf_file: &Path, extra: &[&str]) -> (bool, String, String) {
    let mut args = vec!["list", "--json"];
    args.extend_from_slice(extra);
    operator_on(node, conf_file, &args)
}

pub fn write_conf(node: &Node, conf: &Value) -> PathBuf {
    let path = node.dir.path().join("net.conf");
    std::fs::write(&path, conf.to_string()).unwrap();
    path
}

/// The last invocation line of a node's log.
fn last_call(node: &Node) -> Value {
    node.log_lines("invocation").pop().expect("a logged call")
}

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

/// One call of the history: when it ran (as the test saw it) and what it answered.
struct Event {
    id: String,
    start: Instant,
    end: Instant,
    node: usize,
    value: Option<u64>,
}

/// The number a probe's `counter`/`append` call read, from its ADD's address.
fn value_of(reply: &Reply) -> u64 {
    let ip = reply.address().split('/').next().unwrap();
    let o: Vec<u64> = ip.split('.').map(|x| x.parse().unwrap()).collect();
    (o[1] << 16) | (o[2] << 8) | o[3]
}

/// Runs `per_node` ADDs on each of `nodes` simulated nodes of `network` at once (each
/// node's calls all started together, so they queue on its lock while the nodes race
/// each other in the store); every `fail_every`th call of a node fails after writing
/// (the host must commit none of it).
fn history<'s>(
    store: &'s ClusterStore,
    network: &str,
    probe: Value,
    nodes: usize,
    per_node: usize,
    fail_every: usize,
) -> (Vec<Event>, Cluster<'s>) {
    let suffixes: Vec<String> = (0..nodes).map(|n| format!("node-{n}")).collect();
    let suffixes: Vec<&str> = suffixes.iter().map(String::as_str).collect();
    let ipam = json!({"probe": probe, "deadlineSeconds": 60});
    let cluster = store.cluster_of(network, &suffixes, &probe_module(), &ipam);
    let started = Instant::now();
    let events = std::thread::scope(|s| {
        let mut handles = Vec::new();
        for (n, conf) in cluster.confs.iter().enumerate() {
            for i in 0..per_node {
                let mut conf = conf.clone();
                let fails = fail_every > 0 && i % fail_every == fail_every - 1;
                if fails {
                    conf["ipam"]["probe"]["then"] = "error".into();
                }
                handles.push(s.spawn(move || {
                    let id = format!("n{n}c{i}");
                    let start = Instant::now();
                    let reply = Call::new("ADD", &id).run(&conf);
                    let end = Instant::now();
                    let value = if fails {
                        assert_eq!(reply.error_code(), 142, "{reply:?}");
                        None
                    } else {
                        Some(value_of(&reply))
                    };
                    Event {
                        id,
                        start,
                        end,
                        node: n,
                        value,
                    }
                }));
            }
        }
        handles
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    eprintln!("{} calls in {:?}", events.len(), started.elapsed());
    (events, cluster)
}

/// The history checker: the committed calls' values are exactly 0..n, each once (no
/// lost update, no phantom), and respect real time: a call that ended before another
/// began read a smaller value (strict serializability of the register or set).
fn check_history(events: &[Event]) -> u64 {
    let mut values: Vec<u64> = events.iter().filter_map(|e| e.value).collect();
    values.sort_unstable();
    let n = values.len() as u64;
    let readers = |v: u64| -> Vec<&str> {
        events
            .iter()
            .filter(|e| e.value == Some(v))
            .map(|e| e.id.as_str())
            .collect()
    };
    let twice: Vec<(u64, Vec<&str>)> = values
        .windows(2)
        .filter(|w| w[0] == w[1])
        .map(|w| (w[0], readers(w[0])))
        .collect();
    assert_eq!(
        values,
        (0..n).collect::<Vec<_>>(),
        "each value read exactly once; read by more than one call: {twice:?}"
    );
    for a in events {
        for b in events {
            if let (Some(va), Some(vb)) = (a.value, b.value)
                && a.end < b.start
            {
                assert!(
                    va < vb,
                    "call on node {} ended before one on node {} began, yet read {va} >= {vb}",
                    a.node,
                    b.node
                );
            }
        }
    }
    n
}

fn retries(cluster: &[Node]) -> (u64, u64) {
    let lines: Vec<Value> = cluster
        .iter()
        .flat_map(|n| n.log_lines("invocation"))
        .collect();
    let total = lines
        .iter()
        .map(|l| l["store_retries"].as_u64().unwrap())
        .sum();
    let most = lines
        .iter()
        .map(|l| l["store_retries"].as_u64().unwrap())
        .max()
        .unwrap_or(0);
    (total, most)
}

on_both_stores!(concurrent_read_modify_writes_across_nodes_are_serializable);
fn concurrent_read_modify_writes_across_nodes_are_serializable(store: &ClusterStore) {
    let probe = json!({"counter": "ctr", "sleepMs": 20});
    let (events, cluster) = history(store, "e-counter", probe, 3, 12, 4);
    let committed = check_history(&events);
    assert_eq!(committed, 27);
    assert_eq!(
        cluster.values("ctr")["ctr"],
        27,
        "the failed calls committed nothing"
    );
    let (total, most) = retries(&cluster.nodes);
    eprintln!("conflict retries: {total} in all, at most {most} in one call");
    assert!(total > 0, "three nodes racing on one key must conflict");
    // Bounded, on etcd: a conflict is another node's commit landing during an
    // attempt, and each commit can cut short at most one attempt on each of the two
    // other nodes. The Kubernetes store's commits lock what they change over several
    // writes, and a call meeting a lock runs again after a pause, as often as the lock
    // lasts: its retries count waits as well as conflicts.
    if store.is_etcd() {
        assert!(
            total <= 2 * committed,
            "{total} retries for {committed} commits"
        );
    }
}

on_both_stores!(concurrent_appends_under_a_listed_prefix_are_serializable);
fn concurrent_appends_under_a_listed_prefix_are_serializable(store: &ClusterStore) {
    let probe = json!({"append": "m/", "sleepMs": 20});
    let (events, cluster) = history(store, "e-append", probe, 3, 10, 5);
    let committed = check_history(&events);
    assert_eq!(committed, 24);
    assert_eq!(cluster.keys("m/").len(), 24, "one entry per committed call");
    let (total, _) = retries(&cluster.nodes);
    assert!(
        total > 0,
        "three nodes appending under one prefix must conflict"
    );
}

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

    let backup = a.dir.path().join("backup");
    let (ok, _, stderr) = operator_on(
        a,
        &conf_file,
        &["store", "backup", "--to", &backup.to_string_lossy()],
    );
    assert!(
        !ok && stderr.contains("code 7")
            && stderr.contains(&named)
            && stderr.contains("copies the embedded store only"),
        "{stderr}"
    );
    assert!(!backup.exists(), "nothing written");
    std::fs::write(&backup, "anything").unwrap();
    let (ok, _, restore) = operator_on(
        a,
        &conf_file,
        &["store", "restore", "--from", &backup.to_string_lossy()],
    );
    assert!(!ok && restore.contains("code 7"), "{restore}");
    // What keeps each store, and so what backs it up and restores it, is the store's.
    match store {
        ClusterStore::Etcd(etcd) => {
            let endpoint = &etcd.endpoints()[0];
            assert!(
                stderr.contains(&format!("etcdctl --endpoints {endpoint} snapshot save")),
                "{stderr}"
            );
            assert!(
                restore.contains(&named) && restore.contains("etcdutl snapshot restore"),
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
        "--lock-file".into(),
        on.lock_file().into(),
        "--data-dir".into(),
        on.data_dir().into(),
    ];
    args.extend(extra.iter().map(Into::into));
    operator_output(args)
}

/// Each block's node, from cluster-pool's `blk/` records under `prefix`.
fn block_owners(cluster: &Cluster) -> std::collections::BTreeMap<String, String> {
    cluster
        .values("blk/")
        .into_iter()
        .map(|(key, record)| {
            (
                key["blk/".len()..].to_string(),
                record["node"].as_str().unwrap().to_string(),
            )
        })
        .collect()
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
    let network = nodes.network.as_str();
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
    let (a, c) = (&cluster[0], &cluster[2]);
    // A second network on the same store, where node c runs a pod too.
    let second_name = nodes.other_name("second");
    let mut second = nodes.other_network(2, "second");
    second["ipam"]["cidr"] = "10.96.1.0/27".into();
    let second_address = Call::new("ADD", "c-second")
        .run(&second)
        .address()
        .to_string();

    // Node b called a moment ago: refused, nothing released.
    let entries = nodes.keys("");
    let (ok, _, stderr) = release_node(a, &confs[0], &names[1], &["--window", "1h"]);
    assert!(!ok, "a live node is refused");
    assert!(
        stderr.contains("code 11")
            && stderr.contains(&format!("node {} committed a call", names[1])),
        "{stderr}"
    );
    // A node cannot release itself.
    let (ok, _, stderr) = release_node(c, &confs[2], &names[2], &["--force"]);
    assert!(!ok && stderr.contains("runs as"), "{stderr}");
    // A name no node ever called with (a typo) is an error, even with --force.
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
    // `gc --network NAME` finds no record of an etcd network on the node: it says
    // which form names one.
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
    assert_eq!(nodes.keys(""), entries, "nothing changed");

    // Node c stops. Once it has been quiet for the (small) window, a dry run says what
    // would go, and changes nothing.
    let waited = Instant::now();
    let dry = loop {
        let (ok, stdout, stderr) =
            release_node(a, &confs[0], &names[2], &["--window", "2s", "--dry-run"]);
        if ok {
            break stdout;
        }
        assert!(stderr.contains("code 11"), "{stderr}");
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "node-c never counted as quiet for 2 s: {stderr}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
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
    let waited = Instant::now();
    let stdout = loop {
        let (ok, stdout, stderr) = release_node(a, &confs[0], &names[2], &["--window", "2s"]);
        if ok {
            break stdout;
        }
        assert!(stderr.contains("code 11"), "{stderr}");
        assert!(
            waited.elapsed() < Duration::from_secs(60),
            "node-c never counted as quiet for 2 s: {stderr}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
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

    // Its addresses and block are gone; the others' are untouched.
    let conf_file = nodes.conf_file(0);
    let (ok, listed, stderr) = list_json(a, &conf_file, &[]);
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
    assert_eq!(rows, held[..4], "{listed}");
    let after = block_owners(&nodes);
    assert!(!after.contains_key(&c_block), "{after:?}");
    assert_eq!(after.len(), 2);
    assert!(nodes.keys(&format!("aff/{}/", names[2])).is_empty());
    assert!(nodes.keys(&format!("own/{}/", names[2])).is_empty());

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

    // A store no other node shares has no node to release.
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

    // A module built against 0.2.0 has no `nodes` export: it is named, nothing runs.
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
