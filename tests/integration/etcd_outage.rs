//! The etcd store when etcd is down, frozen or losing members, against a real etcd
//! (the `Etcd` helper of [`crate::etcd`]): a call that cannot reach etcd answers code
//! 11 within `ipam.store.timeoutSeconds` and frees the node's lock, calls queued
//! behind it answer at once from the silence it met, a cluster that loses one member of three
//! fails no call, and the log holds only wasm-ipam's and the module's lines.

use crate::etcd::{Etcd, node_conf};
use crate::fair_lock::{queue_dir, wait_until_queued};
use crate::harness::*;
use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// `ipam.store.timeoutSeconds`' default, as docs/cluster.md states it.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);
/// Beyond a bound: process start, module load and the log, on a loaded 2-core CI.
const MARGIN: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy)]
enum Outage {
    /// Killed: connections are refused at once.
    Stopped,
    /// SIGSTOP: connections are accepted and never answered.
    Frozen,
}

impl Outage {
    fn begin(self, etcd: &mut Etcd) {
        match self {
            Outage::Stopped => etcd.kill(0),
            Outage::Frozen => etcd.freeze(0),
        }
    }

    fn end(self, etcd: &mut Etcd) {
        match self {
            Outage::Stopped => etcd.restart(0),
            Outage::Frozen => {
                etcd.thaw(0);
                etcd.wait_until_healthy();
            }
        }
    }
}

/// After `outage`, as a runtime does: the ADD of `id` with `conf` is tried again
/// until it succeeds, which it does once the remembered silence has lapsed (the
/// store's timeoutSeconds), each refusal a code 11. The address it got.
fn add_until_served_again(conf: &Value, id: &str, outage: Outage) -> String {
    let back = Instant::now();
    loop {
        let reply = Call::new("ADD", id).run(conf);
        if reply.success {
            return reply.address().to_string();
        }
        assert_eq!(reply.error_code(), 11, "{outage:?}: {reply:?}");
        assert!(
            back.elapsed() < DEFAULT_TIMEOUT + MARGIN,
            "{outage:?}: still refused {:?} after etcd came back: {reply:?}",
            back.elapsed()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// With the one member stopped, then frozen: one ADD at the defaults answers 11
/// within `timeoutSeconds`; 20 calls queued on the node's lock behind it answer at
/// once from the silence it met (at most two of them ask etcd), and a host-local
/// network on the same lock, queued behind 5 of them, is served within that bound;
/// once etcd is back a call succeeds within `timeoutSeconds` and the store holds
/// exactly what succeeded.
#[test]
fn an_unreachable_etcd_costs_each_call_its_timeout_not_its_deadline() {
    let _serial = exclusive();
    let mut etcd = Etcd::start(1);
    let node = Node::new();
    let subnet = json!({"subnet": "10.83.0.0/24"});
    let conf = node_conf(
        &node,
        "node-a",
        &host_local_module(),
        &etcd.store("/o/"),
        subnet,
    );
    // The queued calls' bound, shorter than the default to keep the test short.
    let queued_timeout = Duration::from_secs(2);
    let mut queued_conf = conf.clone();
    queued_conf["ipam"]["store"]["timeoutSeconds"] = 2.into();
    let mut local = node.netconf(
        "1.1.0",
        &host_local_module(),
        json!({"subnet": "10.84.0.0/24"}),
    );
    local["name"] = "local".into();
    Call::new("ADD", "c0").run(&conf).assert_ok();
    let mut held = vec!["10.83.0.2".to_string()];

    for (round, outage) in [Outage::Stopped, Outage::Frozen].into_iter().enumerate() {
        outage.begin(&mut etcd);
        let started = Instant::now();
        let lone = Call::new("ADD", "lone").run(&conf);
        let took = started.elapsed();
        assert_eq!(lone.error_code(), 11, "{outage:?}: {lone:?}");
        assert!(lone.msg().contains("timeoutSeconds (5 s)"), "{lone:?}");
        assert!(took < DEFAULT_TIMEOUT + MARGIN, "{outage:?}: took {took:?}");
        let line = node.log_lines("invocation").pop().unwrap();
        let hold = line["lock_hold_ms"].as_f64().unwrap();
        assert!(hold < 5000.0 + 1000.0, "{outage:?}: {line}");
        eprintln!("{outage:?}: one ADD answered 11 in {took:?}, holding the lock {hold} ms");

        // The test holds the queue's first place, so the calls queue in the order
        // spawned; the host-local call joins after the first five.
        let first = wasm_ipam::lock::queue::Ticket::take(&queue_dir(&node)).unwrap();
        let mut etcd_calls = Vec::new();
        let mut local_call = None;
        for i in 0..20 {
            if i == 5 {
                let id = format!("local{round}");
                local_call = Some(Call::new("ADD", &id).spawn(&local));
                wait_until_queued(&node, i + 2);
            }
            let id = format!("q{round}-{i}");
            etcd_calls.push(Call::new("ADD", &id).spawn(&queued_conf));
            wait_until_queued(&node, i + 2 + usize::from(i >= 5));
        }
        let released = Instant::now();
        drop(first);
        let local_reply = reply(local_call.unwrap().wait_with_output().unwrap());
        let local_took = released.elapsed();
        let local_address = local_reply.address().to_string();
        let mut last = Duration::ZERO;
        let mut asked = 0;
        for child in etcd_calls {
            let reply = reply(child.wait_with_output().unwrap());
            assert_eq!(reply.error_code(), 11, "{outage:?}: {reply:?}");
            if !reply.msg().contains("failed a call") {
                asked += 1;
            }
            last = released.elapsed();
        }
        eprintln!(
            "{outage:?}: host-local served after {local_took:?}, 20 queued calls answered after {last:?}, {asked} of them asking etcd"
        );
        // The silence one call met is remembered for its timeoutSeconds: the rest of
        // the queue answers at once (a slow machine may let the memory lapse once).
        assert!(asked <= 2, "{outage:?}: {asked} calls waited for etcd");
        let bound = queued_timeout * 2 + MARGIN;
        assert!(last < bound, "{outage:?}: the 20 took {last:?}");
        assert!(
            local_took < bound,
            "{outage:?}: host-local waited {local_took:?}"
        );
        assert!(local_address.starts_with("10.84.0."), "{local_address}");

        outage.end(&mut etcd);
        let address = add_until_served_again(&conf, &format!("back{round}"), outage);
        held.push(address.split('/').next().unwrap().to_string());
        let mut entries: Vec<String> = etcd
            .keys("/o/n/testnet/e/ip/")
            .into_iter()
            .map(|k| k.rsplit('/').next().unwrap().to_string())
            .collect();
        entries.sort();
        let mut expected = held.clone();
        expected.sort();
        assert_eq!(
            entries, expected,
            "{outage:?}: exactly what succeeded is held"
        );
    }
    let distinct: std::collections::BTreeSet<_> = held.iter().collect();
    assert_eq!(
        distinct.len(),
        held.len(),
        "no address held twice: {held:?}"
    );
}

/// Three nodes' calls, spread over the members by their names.
fn three_node_confs(etcd: &Etcd, prefix: &str, node: &Node, ipam: Value) -> Vec<Value> {
    let store = etcd.store(prefix);
    ["node-a", "node-b", "node-c"]
        .iter()
        .map(|name| node_conf(node, name, &host_local_module(), &store, ipam.clone()))
        .collect()
}

/// A three-member cluster with a follower stopped, then with its leader frozen (an
/// election follows): every call succeeds, and every address is held once.
#[test]
fn a_three_member_cluster_fails_no_call_with_a_member_stopped_or_frozen() {
    let _serial = exclusive();
    let mut etcd = Etcd::start(3);
    let node = Node::new();
    let confs = three_node_confs(&etcd, "/m/", &node, json!({"subnet": "10.85.0.0/24"}));
    Call::new("ADD", "c0").run(&confs[0]).assert_ok();
    let mut added = 1;
    let mut add_six = |etcd: &Etcd, phase: &str| {
        for i in 0..6 {
            let id = format!("{phase}{i}");
            let started = Instant::now();
            let reply = Call::new("ADD", &id).run(&confs[i % 3]);
            reply.assert_ok();
            added += 1;
            eprintln!("{phase}: ADD {id} in {:?}", started.elapsed());
        }
        let held = etcd.keys("/m/n/testnet/e/ip/");
        assert_eq!(held.len(), added, "{phase}: {held:?}");
    };

    let leader = etcd.leader();
    let follower = (leader + 1) % 3;
    etcd.kill(follower);
    add_six(&etcd, "stopped");
    etcd.restart(follower);

    let leader = etcd.leader();
    etcd.freeze(leader);
    add_six(&etcd, "frozen");
    etcd.thaw(leader);
    etcd.wait_until_healthy();
    add_six(&etcd, "back");
}

/// A TCP relay to an etcd member that can be told to drop the member's answers once
/// a request carrying given bytes has passed: a partition that lets that request
/// reach the member and applies it, but loses its reply (and every later one).
struct Relay {
    port: u16,
    /// Once set, the first request holding these bytes starts the cut.
    cut_after: Arc<Mutex<Option<Vec<u8>>>>,
    cut: Arc<AtomicBool>,
    /// Bytes of answers relayed.
    answered: Arc<AtomicU64>,
}

impl Relay {
    fn to(member: &str) -> Relay {
        let target = member.trim_start_matches("http://").to_string();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let relay = Relay {
            port: listener.local_addr().unwrap().port(),
            cut_after: Arc::default(),
            cut: Arc::default(),
            answered: Arc::default(),
        };
        let (cut_after, cut, answered) = (
            relay.cut_after.clone(),
            relay.cut.clone(),
            relay.answered.clone(),
        );
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let client = client.unwrap();
                let member = TcpStream::connect(&target).unwrap();
                let (mut from, mut to) = (client.try_clone().unwrap(), member.try_clone().unwrap());
                let (cut_after, cut_asked) = (cut_after.clone(), cut.clone());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n @ 1..) = from.read(&mut buf) {
                        let marker = cut_after.lock().unwrap().clone();
                        if marker.is_some_and(|m| buf[..n].windows(m.len()).any(|w| w == m)) {
                            cut_asked.store(true, Ordering::SeqCst);
                        }
                        if to.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
                let (mut from, mut to) = (member, client);
                let (cut, answered) = (cut.clone(), answered.clone());
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n @ 1..) = from.read(&mut buf) {
                        if cut.load(Ordering::SeqCst) {
                            continue;
                        }
                        answered.fetch_add(n as u64, Ordering::SeqCst);
                        if to.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        relay
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// A commit that reached etcd and was applied, whose answer was lost, is sent again
/// to the next member: the resend's compare on the node's own usage row fails, since
/// the first send rewrote it, and the else-branch's read of that row shows the first
/// send's row, so the call succeeds without running its handler again (which would
/// have read the counter at 1 and set it to 2). The counter says the commit applied
/// exactly once.
#[test]
fn a_commit_whose_answer_was_lost_is_resent_and_applies_once() {
    let _serial = exclusive();
    let etcd = Etcd::start(3);
    let relays: Vec<Relay> = etcd.endpoints().iter().map(|e| Relay::to(e)).collect();
    let store = json!({
        "type": "etcd",
        "endpoints": relays.iter().map(Relay::endpoint).collect::<Vec<_>>(),
        "prefix": "/a/",
    });
    let node = Node::new();
    // The handler reads the counter, then sleeps: meanwhile the test arms the relay
    // of the member it reads from to cut the answers from the commit on, the one
    // request naming the node's usage row by its key.
    let probe = json!({"probe": {"counter": "n", "sleepMs": 2000}});
    let conf = node_conf(&node, "node-a", &probe_module(), &store, probe);
    let child = Call::new("ADD", "c1").spawn(&conf);
    wait_until(
        "the call connected to a member",
        Duration::from_secs(60),
        || relays.iter().any(|r| r.answered.load(Ordering::SeqCst) > 0),
    );
    let used = relays
        .iter()
        .find(|r| r.answered.load(Ordering::SeqCst) > 0)
        .unwrap();
    *used.cut_after.lock().unwrap() = Some(b"/a/n/testnet/u/node-a".to_vec());
    let reply = reply(child.wait_with_output().unwrap());
    assert!(
        used.cut.load(Ordering::SeqCst),
        "the commit was sent to the member cut"
    );
    assert_eq!(reply.address(), "10.0.0.0/8", "the counter read 0");
    assert_eq!(
        etcd.ctl(&["get", "--print-value-only", "/a/n/testnet/e/n"])
            .trim(),
        "1"
    );
    let line = node.log_lines("invocation").pop().unwrap();
    assert_eq!(line["store_retries"], 0, "{line}");
    assert_eq!(line["etcd_conflicts"], 0, "{line}");
    eprintln!("{line}");
}

/// 300 calls on the etcd store (ADD and DEL of 150 pods): every line of the log is
/// wasm-ipam's own or the module's, and each call's invocation record is there; with
/// `WASM_IPAM_LOG=h2=debug`, the etcd client's HTTP/2 lines are written too.
#[test]
fn the_log_holds_only_our_lines_and_the_modules_unless_asked() {
    let _serial = exclusive();
    let etcd = Etcd::start(1);
    let node = Node::new();
    let conf = node_conf(
        &node,
        "node-a",
        &host_local_module(),
        &etcd.store("/l/"),
        json!({"subnet": "10.86.0.0/24"}),
    );
    let started = Instant::now();
    // Four at a time: the calls queue on the node's lock, their starts overlap.
    std::thread::scope(|s| {
        for worker in 0..4 {
            let conf = &conf;
            s.spawn(move || {
                for pod in (worker..150).step_by(4) {
                    let id = format!("pod{pod}");
                    Call::new("ADD", &id).run(conf).assert_ok();
                    Call::new("DEL", &id).run(conf).assert_ok();
                }
            });
        }
    });
    eprintln!("300 calls in {:?}", started.elapsed());
    let text = std::fs::read_to_string(node.log_file()).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let own = |target: &str| {
        wasm_ipam::logging::OWN_TARGETS
            .iter()
            .any(|t| target.starts_with(t))
    };
    for line in &lines {
        let target = line["target"].as_str().expect("every line has a target");
        assert!(own(target), "a line not ours: {line}");
    }
    let calls = node.log_lines("invocation");
    assert_eq!(calls.len(), 300, "{} lines in all", lines.len());
    assert!(calls.iter().all(|c| c["outcome"] == "ok"));
    eprintln!("{} lines for 300 calls", lines.len());

    let before = lines.len();
    Call::new("ADD", "traced")
        .env("WASM_IPAM_LOG", "h2=debug")
        .run(&conf)
        .assert_ok();
    let text = std::fs::read_to_string(node.log_file()).unwrap();
    let added: Vec<Value> = text
        .lines()
        .skip(before)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        added
            .iter()
            .any(|l| l["target"].as_str().unwrap().starts_with("h2")),
        "{added:?}"
    );
    assert!(added.iter().any(|l| l["target"] == "invocation"));
}
