//! The Kubernetes store (`"store": {"type": "kubernetes"}`) against a real
//! kube-apiserver and its etcd (scripts/kube-peers.sh, started by [`KubeApi`]), with
//! RBAC on: the CRD and the nodes' RBAC applied as `wasm-ipam kubernetes manifests`
//! prints them, and each simulated node calling with a kubeconfig of its own identity
//! (`system:node:<name>` in `system:nodes`), as a kubelet's credentials are.

use crate::etcd::{list_json, operator_on, write_conf};
use crate::fair_lock::{queue_dir, wait_until_queued};
use crate::harness::*;
use crate::kube_api::KubeApi;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The shared apiserver, with the store's CRD and RBAC applied (once).
pub fn api() -> &'static KubeApi {
    static READY: OnceLock<()> = OnceLock::new();
    let api = KubeApi::shared();
    READY.get_or_init(|| apply_manifests(api));
    api
}

fn apply_manifests(api: &KubeApi) {
    let manifests = operator_output(["kubernetes", "manifests"]);
    assert!(manifests.0, "{}", manifests.2);
    api.apply(&manifests.1);
    let established = api.kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/ipamshards.ipam.wasm-ipam.dev",
    ]);
    assert!(
        established.status.success(),
        "{}",
        String::from_utf8_lossy(&established.stderr)
    );
}

/// A node's kubeconfig: the identity its kubelet has.
pub fn node_kubeconfig(api: &KubeApi, node: &str) -> PathBuf {
    api.kubeconfig_for(&format!("system:node:{node}"), &["system:nodes"])
}

fn store(kubeconfig: &Path) -> Value {
    json!({"type": "kubernetes", "kubeconfig": kubeconfig})
}

/// `nodes` simulated nodes of network `network` on the shared apiserver, running
/// cluster-pool with these `ipam` keys.
fn cluster(network: &str, nodes: usize, ipam: &Value) -> (Vec<Node>, Vec<Value>) {
    let api = api();
    let cluster: Vec<Node> = (0..nodes).map(|_| Node::new()).collect();
    let confs = cluster
        .iter()
        .enumerate()
        .map(|(n, node)| {
            let name = format!("{network}-node-{n}");
            let mut conf = node.netconf("1.1.0", &cluster_pool_module(), ipam.clone());
            conf["name"] = network.into();
            conf["ipam"]["nodeName"] = name.clone().into();
            conf["ipam"]["store"] = store(&node_kubeconfig(api, &name));
            conf
        })
        .collect();
    (cluster, confs)
}

/// The objects of `network` as the admin reads them: name → spec.
pub fn objects(network: &str) -> BTreeMap<String, Value> {
    objects_on(api(), network)
}

/// [`objects`] on the apiserver `api`.
fn objects_on(api: &KubeApi, network: &str) -> BTreeMap<String, Value> {
    let out = api.kubectl(&["get", "ipamshards", "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["spec"]["network"] == network)
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_string(),
                o["spec"].clone(),
            )
        })
        .collect()
}

/// Every entry of `network`'s objects, by key; panics on a key held twice.
pub fn entries(network: &str) -> BTreeMap<String, Value> {
    entries_of(&objects(network))
}

/// The entries of `objects` (name → spec), by key; panics on a key held twice.
fn entries_of(objects: &BTreeMap<String, Value>) -> BTreeMap<String, Value> {
    let mut all = BTreeMap::new();
    for spec in objects.values() {
        for entry in spec["entries"].as_array().into_iter().flatten() {
            let key = entry["key"].as_str().unwrap().to_string();
            let value: Value = serde_json::from_str(entry["value"].as_str().unwrap_or("null"))
                .unwrap_or(Value::Null);
            assert!(all.insert(key.clone(), value).is_none(), "{key} twice");
        }
    }
    all
}

/// The addresses the blocks of `network` hand out, with their holder.
fn held(network: &str) -> BTreeMap<String, String> {
    held_in(&entries(network))
}

/// The addresses the blocks among `entries` hand out, with their holder.
fn held_in(entries: &BTreeMap<String, Value>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (key, block) in entries {
        if !key.starts_with("blk/") {
            continue;
        }
        for (ip, holder) in block["ips"].as_object().into_iter().flatten() {
            let id = holder["id"].as_str().unwrap_or_default().to_string();
            assert!(out.insert(ip.clone(), id).is_none(), "{ip} held twice");
        }
    }
    out
}

/// No object of `network` is locked.
fn unlocked(network: &str) -> bool {
    objects(network).values().all(|s| s.get("lock").is_none())
}

fn kube_requests(node: &Node) -> Vec<u64> {
    node.log_lines("invocation")
        .iter()
        .map(|l| l["kube_requests"].as_u64().unwrap())
        .collect()
}

#[test]
fn adds_and_dels_on_two_nodes_go_to_the_api_and_each_node_writes_its_own_objects() {
    let network = "k-basic";
    let ipam = json!({"cidr": "10.70.0.0/16", "blockSize": 26});
    let (nodes, confs) = cluster(network, 2, &ipam);
    let a = Call::new("ADD", "pod-a")
        .run(&confs[0])
        .address()
        .to_string();
    let b = Call::new("ADD", "pod-b")
        .run(&confs[1])
        .address()
        .to_string();
    assert_ne!(a, b);
    // Again for the same container: the same address, nothing new.
    assert_eq!(Call::new("ADD", "pod-a").run(&confs[0]).address(), a);
    let holders = held(network);
    assert_eq!(holders.len(), 2, "{holders:?}");
    assert_eq!(holders[a.split('/').next().unwrap()], "pod-a");
    // Each node's records lie in objects of their own: own/<node> and aff/<node>.
    let keys = entries(network);
    for n in 0..2 {
        let node = format!("{network}-node-{n}");
        assert!(keys.contains_key(&format!("own/{node}/pod-{}/eth0", ["a", "b"][n])));
        assert!(keys.keys().any(|k| k.starts_with(&format!("aff/{node}/"))));
    }
    assert!(unlocked(network));
    // kubectl shows the objects with their network, role, group and size.
    let table = api().kubectl(&["get", "ipamshards"]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(
        table.lines().next().unwrap().contains("NETWORK")
            && table.contains(network)
            && table.contains("ENTRIES"),
        "{table}"
    );
    // A second pod in the node's block, and its DEL: the steady state.
    // At logLevel debug, each request is a line of its own (target `store`).
    let mut debug = confs[0].clone();
    debug["ipam"]["logLevel"] = "debug".into();
    let before = nodes[0].log_lines("store").len();
    Call::new("ADD", "pod-c").run(&debug).assert_ok();
    Call::new("DEL", "pod-c").run(&debug).assert_ok();
    let lines = nodes[0].log_lines("store");
    for line in &lines[before..] {
        eprintln!("{line}");
    }
    // Every call's log record states the API requests it made.
    let requests = kube_requests(&nodes[0]);
    assert_eq!(requests.len(), 4);
    assert!(requests.iter().all(|&r| r > 0), "{requests:?}");
    eprintln!(
        "API requests per call on node 0 (first ADD, ADD again, a steady ADD, its DEL): {requests:?}"
    );
    // The budget of a DEL herd: a steady ADD at most 3 requests, its DEL at most 2
    // (the node's home is cached; the commit is one write of it).
    assert!(
        requests[2] <= 3 && requests[3] <= 2,
        "steady ADD and DEL: {requests:?}"
    );
    assert_eq!(
        lines.len() - before,
        (requests[2] + requests[3]) as usize,
        "one debug line per request"
    );

    // list reads the cluster through the module's inspect export.
    let conf_file = write_conf(&nodes[0], &confs[0]);
    let (ok, stdout, stderr) = list_json(&nodes[0], &conf_file, &[]);
    assert!(ok, "{stderr}");
    let rows: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(rows.len(), 2, "{stdout}");

    Call::new("DEL", "pod-a").run(&confs[0]).assert_ok();
    Call::new("DEL", "pod-b").run(&confs[1]).assert_ok();
    Call::new("DEL", "pod-b").run(&confs[1]).assert_ok();
    assert!(held(network).is_empty());
    assert!(!entries(network).keys().any(|k| k.starts_with("own/")));
    let (ok, stdout, stderr) = operator_on(&nodes[0], &conf_file, &["store", "check"]);
    assert!(ok, "{stdout}{stderr}");
}

/// Three nodes racing for blocks of one pool, 40 ADDs each at once: every address
/// distinct, every call answered ok the first time (what a runtime sees), nothing
/// locked after.
#[test]
fn three_nodes_claiming_blocks_at_once_all_succeed_first_time_with_distinct_addresses() {
    let network = "k-storm";
    let ipam = json!({"cidr": "10.71.0.0/16", "blockSize": 27, "deadlineSeconds": 120, "lockTimeoutSeconds": 600});
    let (nodes, mut confs) = cluster(network, 3, &ipam);
    // The node's limiter at its default (5/s) would make this a test of the limiter:
    // 40 ADDs of about 20 requests each on one node.
    for conf in &mut confs {
        conf["ipam"]["store"]["qps"] = 200.into();
    }
    let per_node = 40;
    let started = Instant::now();
    let replies: Vec<Reply> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .flat_map(|n| (0..per_node).map(move |i| (n, i)))
            .map(|(n, i)| {
                let conf = &confs[n];
                s.spawn(move || Call::new("ADD", &format!("n{n}-c{i}")).run(conf))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let failed: Vec<&Reply> = replies.iter().filter(|r| !r.success).collect();
    let total = replies.len();
    eprintln!(
        "{total} ADDs on 3 nodes in {:?}: {} failed",
        started.elapsed(),
        failed.len()
    );
    assert!(
        failed.len() * 100 <= total,
        "more than 1% failed: {:?}",
        failed.first()
    );
    let distinct: BTreeSet<&str> = replies
        .iter()
        .filter(|r| r.success)
        .map(|r| r.address())
        .collect();
    assert_eq!(distinct.len(), total - failed.len());
    assert!(unlocked(network));
    assert_eq!(held(network).len(), total - failed.len());
    let retries: u64 = nodes
        .iter()
        .flat_map(|n| n.log_lines("invocation"))
        .map(|l| l["store_retries"].as_u64().unwrap())
        .sum();
    eprintln!("conflict retries: {retries}");
}

/// A call killed right after each of its API writes in turn, and a call whose write
/// landed but whose answer was lost: the next call (or `store check`) finishes or
/// undoes the commit; no address is doubled or lost, nothing stays locked. Both kinds
/// of commit: a node's first ADD, which claims a block (several objects, through
/// locks and a decision), and a steady ADD (one write of the node's home).
#[test]
fn a_kill_after_any_write_of_a_commit_and_a_lost_answer_leave_nothing_doubled_or_lost() {
    let network = "k-kill";
    let ipam = json!({"cidr": "10.72.0.0/16", "blockSize": 28});
    // Node 0 is warm (its block claimed: its ADDs are steady); each node after it
    // is fresh for one claiming ADD.
    let (nodes, confs) = cluster(network, 48, &ipam);
    Call::new("ADD", "warm").run(&confs[0]).assert_ok();
    let mut fresh = confs[1..].iter();
    let mut killed: Vec<(String, &Value, usize)> = Vec::new();
    let mut writes = BTreeMap::new();
    for (kind, steady) in [("claim", false), ("steady", true)] {
        for n in 1..=24 {
            let conf = match steady {
                true => &confs[0],
                false => fresh.next().expect("a fresh node"),
            };
            let id = format!("kill-{kind}-{n}");
            let reply = Call::new("ADD", &id)
                .env("WASM_IPAM_TEST_KILL_AFTER_WRITE", n.to_string())
                .run(conf);
            if reply.success {
                // Past the commit's last write: every write was made.
                writes.insert(kind, n - 1);
                break;
            }
            killed.push((id.clone(), conf, n));
            // The runtime tries again (ADD), and the pod is deleted later: both work.
            let again = Call::new("ADD", &id).run(conf);
            let address = again.address().to_string();
            let holders = held(network);
            assert_eq!(
                holders
                    .get(address.split('/').next().unwrap())
                    .map(String::as_str),
                Some(id.as_str()),
                "after a kill at write {n} of a {kind} ADD: {holders:?}"
            );
            assert!(unlocked(network), "after a kill at write {n}");
            // Another node sees the same and allocates something else.
            let other = Call::new("ADD", &format!("other-{kind}-{n}")).run(&confs[0]);
            assert_ne!(other.address(), address);
        }
    }
    eprintln!("writes per ADD: {writes:?}");
    assert_eq!(writes.get("steady"), Some(&1), "a steady ADD is one write");
    assert!(
        writes.get("claim").is_some_and(|&w| w >= 3),
        "a claiming ADD writes several objects: {writes:?}"
    );
    // Killed DELs: the address is freed once, by the DEL the runtime repeats.
    for (id, conf, n) in &killed {
        // A DEL makes fewer writes than an ADD: one killed past its last write
        // succeeded, and the DEL the runtime repeats is a DEL of nothing.
        Call::new("DEL", id)
            .env("WASM_IPAM_TEST_KILL_AFTER_WRITE", n.to_string())
            .run(conf);
        Call::new("DEL", id).run(conf).assert_ok();
        assert!(!held(network).values().any(|h| h == id), "{id} after DEL");
    }
    // A lost answer after each write: the call either succeeds or fails with 11, and
    // the state agrees with what the runtime was told.
    for (kind, steady) in [("claim", false), ("steady", true)] {
        for n in 1..=writes[kind] {
            let conf = match steady {
                true => &confs[0],
                false => fresh.next().expect("a fresh node"),
            };
            let id = format!("lost-{kind}-{n}");
            let reply = Call::new("ADD", &id)
                .env("WASM_IPAM_TEST_LOSE_ANSWER_OF_WRITE", n.to_string())
                .run(conf);
            if !reply.success {
                assert_eq!(reply.error_code(), 11, "{reply:?}");
            }
            let again = Call::new("ADD", &id).run(conf);
            if reply.success {
                assert_eq!(reply.address(), again.address());
            }
            assert!(unlocked(network), "after a lost answer at write {n}");
        }
    }
    // Everything held is held once (held() asserts), each pod has one address.
    let holders = held(network);
    let mut per_pod: BTreeMap<&str, usize> = BTreeMap::new();
    for id in holders.values() {
        *per_pod.entry(id).or_default() += 1;
    }
    assert!(per_pod.values().all(|&c| c == 1), "{per_pod:?}");
    let conf_file = write_conf(&nodes[0], &confs[0]);
    let (ok, stdout, stderr) = operator_on(&nodes[0], &conf_file, &["store", "check"]);
    assert!(ok, "{stdout}{stderr}");
}

/// 401, 403 and a server the kubeconfig's CA did not sign: each a clear error naming
/// the kubeconfig (and for 403 the verb, the resource and the command that prints the
/// RBAC); a kubeconfig missing, malformed or naming a context it lacks likewise.
#[test]
fn bad_credentials_and_bad_kubeconfigs_are_named_with_what_to_do() {
    let api = api();
    let node = Node::new();
    let run = |kubeconfig: &Path, extra: Value| {
        let mut conf = node.netconf(
            "1.1.0",
            &cluster_pool_module(),
            json!({"cidr": "10.73.0.0/16"}),
        );
        conf["name"] = "k-auth".into();
        conf["ipam"]["nodeName"] = "k-auth-node".into();
        let mut s = store(kubeconfig);
        for (k, v) in extra.as_object().unwrap() {
            s[k] = v.clone();
        }
        conf["ipam"]["store"] = s;
        Call::new("ADD", "pod").run(&conf)
    };
    let reply = run(&api.kubeconfig_bad_token(), json!({}));
    assert!(
        reply.msg().contains("401") && reply.msg().contains("kubeconfig"),
        "{reply:?}"
    );
    let nobody = api.kubeconfig_for("nobody", &[]);
    let reply = run(&nobody, json!({}));
    assert!(
        reply.msg().contains("403")
            && reply.msg().contains("ipamshards")
            && reply.msg().contains("wasm-ipam kubernetes manifests"),
        "{reply:?}"
    );
    let reply = run(&api.kubeconfig_wrong_ca(), json!({}));
    assert!(reply.msg().contains("certificate"), "{reply:?}");
    let missing = node.dir.path().join("missing.kubeconfig");
    let reply = run(&missing, json!({}));
    assert_eq!(reply.error_code(), 7);
    assert!(
        reply.msg().contains(&*missing.to_string_lossy()),
        "{reply:?}"
    );
    let malformed = node.dir.path().join("malformed.kubeconfig");
    std::fs::write(&malformed, "clusters: [{{{").unwrap();
    let reply = run(&malformed, json!({}));
    assert_eq!(reply.error_code(), 7, "{reply:?}");
    let reply = run(
        &node_kubeconfig(api, "k-auth-node"),
        json!({"context": "nowhere"}),
    );
    assert_eq!(reply.error_code(), 7, "{reply:?}");
    assert!(reply.msg().contains("nowhere"), "{reply:?}");
    // Nothing was written by any of them.
    assert!(objects("k-auth").is_empty());
}

/// The node's limiter on this store: a call whose requests cannot get their tokens
/// within its budget answers 11 at once, naming the limiter, holding the lock no longer
/// than the budget and committing nothing; with room in the budget the same call waits
/// for its tokens after the lock and succeeds, and its log record says how long.
#[test]
fn the_rate_limiter_answers_11_at_once_when_its_wait_cannot_fit_the_budget() {
    let network = "k-rate";
    let (nodes, mut confs) = cluster(network, 1, &json!({"cidr": "10.77.0.0/16"}));
    // A node's first ADD makes about twenty requests: at two a second after a burst
    // of two, about nine seconds of tokens; the budget is two.
    confs[0]["ipam"]["store"]["qps"] = 2.into();
    confs[0]["ipam"]["store"]["burst"] = 2.into();
    confs[0]["ipam"]["deadlineSeconds"] = 2.into();
    let started = Instant::now();
    let reply = Call::new("ADD", "pod").run(&confs[0]);
    let took = started.elapsed();
    assert_eq!(reply.error_code(), 11, "{reply:?}");
    assert!(
        reply.msg().contains("rate limiter (qps 2, burst 2)") && reply.msg().contains("budget"),
        "{reply:?}"
    );
    assert!(took < Duration::from_secs(2 + 8), "took {took:?}");
    let line = nodes[0].log_lines("invocation").pop().unwrap();
    assert!(line["lock_hold_ms"].as_f64().unwrap() < 2500.0, "{line}");
    assert!(entries(network).is_empty(), "nothing committed");

    // Room in the budget: the call waits for its tokens and succeeds.
    confs[0]["ipam"]["deadlineSeconds"] = 60.into();
    Call::new("ADD", "pod").run(&confs[0]).assert_ok();
    let line = nodes[0].log_lines("invocation").pop().unwrap();
    let waited = line["kube_rate_wait_ms"].as_f64().unwrap();
    let made = line["kube_requests"].as_u64().unwrap();
    eprintln!("{made} requests, {waited} ms waiting for the limiter");
    assert!(waited >= 1000.0, "{line}");
    Call::new("DEL", "pod").run(&confs[0]).assert_ok();
}

/// An object edited by hand to hold one key twice is refused by the apiserver itself
/// (the entries are a map keyed by key); one whose entry's key belongs to another
/// group is named by the call, which changes nothing.
#[test]
fn a_doubled_entry_is_refused_by_the_apiserver_and_a_misplaced_one_named() {
    let network = "k-schema";
    let (_nodes, confs) = cluster(network, 1, &json!({"cidr": "10.74.0.0/16"}));
    let given = Call::new("ADD", "pod").run(&confs[0]);
    given.assert_ok();
    // The node's home, which holds its own records.
    let (name, spec) = objects(network)
        .into_iter()
        .find(|(_, s)| s["role"] == "node")
        .unwrap();
    // The object's entries replaced, as an operator's kubectl patch does.
    let patch = |entries: Value| {
        let patch = json!({"spec": {"entries": entries}});
        api().kubectl(&[
            "patch",
            "ipamshards",
            &name,
            "--type=merge",
            "-p",
            &patch.to_string(),
        ])
    };
    let entry = spec["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["key"].as_str().unwrap().starts_with("own/"))
        .unwrap()
        .clone();
    let out = patch(json!([entry.clone(), entry]));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Duplicate value"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut moved = entry.clone();
    moved["key"] = "blk/elsewhere/x".into();
    let out = patch(json!([moved]));
    assert!(out.status.success());
    let reply = Call::new("ADD", "pod").run(&confs[0]);
    assert_eq!(reply.error_code(), 104, "{reply:?}");
    assert!(
        reply.msg().contains(&name) && reply.msg().contains("edited by hand"),
        "{reply:?}"
    );
    // Put back as the operator would: the call then finds its address again, nothing
    // lost, and the other tests' `check` sees a sound store.
    let out = patch(spec["entries"].clone());
    assert!(out.status.success(), "{out:?}");
    let again = Call::new("ADD", "pod").run(&confs[0]);
    again.assert_ok();
    assert_eq!(again.address(), given.address());
}

/// The apiserver stopped, then frozen: an ADD answers 11 within `timeoutSeconds` (plus
/// the call's own start); ten ADDs queued behind it answer at once from the silence
/// it met, and a call of another network (the embedded store, same node lock) queued
/// behind three of them is served within that bound; STATUS contacts no store and
/// stays ready; after recovery a call succeeds within `timeoutSeconds`, and what
/// answered 11 left nothing behind.
#[test]
fn with_the_apiserver_stopped_or_frozen_calls_answer_11_within_the_timeout_and_recover() {
    let mut own = KubeApi::start();
    apply_manifests(&own);
    let node = Node::new();
    let name = "k-outage-node";
    let kubeconfig = own.kubeconfig_for(&format!("system:node:{name}"), &["system:nodes"]);
    let timeout = Duration::from_secs(2);
    let margin = Duration::from_secs(5);
    let mut conf = node.netconf(
        "1.1.0",
        &cluster_pool_module(),
        json!({"cidr": "10.75.0.0/16", "deadlineSeconds": 30}),
    );
    conf["name"] = "k-outage".into();
    conf["ipam"]["nodeName"] = name.into();
    conf["ipam"]["store"] =
        json!({"type": "kubernetes", "kubeconfig": kubeconfig, "timeoutSeconds": 2});
    let mut local = node.netconf(
        "1.1.0",
        &host_local_module(),
        json!({"subnet": "10.76.0.0/24"}),
    );
    local["name"] = "k-outage-local".into();
    // The first write after the CRD is established waits while the apiserver readies
    // its storage (about 2 s here): that call gets room, the test is about the outage.
    let mut first = conf.clone();
    first["ipam"]["store"]["timeoutSeconds"] = 20.into();
    Call::new("ADD", "before").run(&first).assert_ok();
    for outage in ["stopped", "frozen"] {
        match outage {
            "stopped" => own.stop(),
            _ => own.freeze(),
        }
        let started = Instant::now();
        let lone = Call::new("ADD", &format!("during-{outage}")).run(&conf);
        let took = started.elapsed();
        assert_eq!(lone.error_code(), 11, "{outage}: {lone:?}");
        assert!(took < timeout + margin, "{outage}: the call took {took:?}");
        let status = Call::new("STATUS", "").run(&conf);
        assert!(status.success, "STATUS contacts no store: {status:?}");
        eprintln!("{outage}: an ADD answered 11 after {took:?}");

        // The test holds the queue's first place, so the calls queue in the order
        // spawned; the other network's call joins after the first three.
        let ticket = wasm_ipam::lock::queue::Ticket::take(&queue_dir(&node)).unwrap();
        let mut queued = Vec::new();
        let mut local_call = None;
        for i in 0..10 {
            if i == 3 {
                local_call = Some(Call::new("ADD", &format!("local-{outage}")).spawn(&local));
                wait_until_queued(&node, i + 2);
            }
            queued.push(Call::new("ADD", &format!("queued-{outage}-{i}")).spawn(&conf));
            wait_until_queued(&node, i + 2 + usize::from(i >= 3));
        }
        let released = Instant::now();
        drop(ticket);
        let local_reply = reply(local_call.unwrap().wait_with_output().unwrap());
        let local_took = released.elapsed();
        local_reply.assert_ok();
        let mut asked = 0;
        let mut last = Duration::ZERO;
        for child in queued {
            let answer = reply(child.wait_with_output().unwrap());
            assert_eq!(answer.error_code(), 11, "{outage}: {answer:?}");
            if !answer.msg().contains("failed a call") {
                asked += 1;
            }
            last = released.elapsed();
        }
        eprintln!(
            "{outage}: the other network served after {local_took:?}, 10 queued ADDs answered after {last:?}, {asked} of them asking the apiserver"
        );
        assert!(
            asked <= 2,
            "{outage}: {asked} calls waited for the apiserver"
        );
        assert!(
            last < timeout * 2 + margin,
            "{outage}: the queue took {last:?}"
        );
        assert!(
            local_took < timeout * 2 + margin,
            "{outage}: the other network waited {local_took:?}"
        );

        match outage {
            "stopped" => own.restart(),
            _ => own.thaw(),
        }
        own.wait_ready().unwrap();
        // As a runtime does: tried again until it succeeds, within the remembered
        // silence's window and one timeout.
        let back = Instant::now();
        loop {
            let again = Call::new("ADD", &format!("during-{outage}")).run(&conf);
            if again.success {
                break;
            }
            assert_eq!(again.error_code(), 11, "{outage}: {again:?}");
            assert!(
                back.elapsed() < timeout * 2 + margin,
                "{outage}: still refused {:?} after the apiserver came back: {again:?}",
                back.elapsed()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    // Exactly the three attachments that succeeded hold addresses; the queued ADDs
    // that answered 11 left nothing.
    let held = held_in(&entries_of(&objects_on(&own, "k-outage")));
    let mut holders: Vec<&str> = held.values().map(String::as_str).collect();
    holders.sort();
    eprintln!("held after the outages: {held:?}");
    assert_eq!(holders.len(), 3, "{held:?}");
    Call::new("DEL", "before").run(&conf).assert_ok();
}

/// The apiserver answering 500 to every write of the store's objects (an admission
/// webhook that cannot be reached, with `failurePolicy: Fail`): an ADD answers 11 at
/// once, naming the answer and the apiserver's message, and leaves nothing behind;
/// once the webhook is gone the same ADD succeeds.
#[test]
fn writes_answered_500_fail_the_call_at_once_with_the_apiservers_words_and_leave_nothing() {
    let own = KubeApi::start();
    apply_manifests(&own);
    let node = Node::new();
    let name = "k-500-node";
    let kubeconfig = own.kubeconfig_for(&format!("system:node:{name}"), &["system:nodes"]);
    let mut conf = node.netconf(
        "1.1.0",
        &cluster_pool_module(),
        json!({"cidr": "10.78.0.0/16"}),
    );
    conf["name"] = "k-500".into();
    conf["ipam"]["nodeName"] = name.into();
    conf["ipam"]["store"] =
        json!({"type": "kubernetes", "kubeconfig": kubeconfig, "timeoutSeconds": 20});
    Call::new("ADD", "before").run(&conf).assert_ok();
    let before = entries_of(&objects_on(&own, "k-500"));
    conf["ipam"]["store"]["timeoutSeconds"] = 2.into();
    own.apply(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata:
  name: wasm-ipam-test-unreachable
webhooks:
- name: unreachable.test.wasm-ipam.dev
  clientConfig:
    url: https://127.0.0.1:1/validate
  rules:
  - apiGroups: ["ipam.wasm-ipam.dev"]
    apiVersions: ["*"]
    operations: ["CREATE", "UPDATE", "DELETE"]
    resources: ["ipamshards"]
  failurePolicy: Fail
  sideEffects: None
  admissionReviewVersions: ["v1"]
  timeoutSeconds: 1
"#,
    );
    // The webhook takes effect once the apiserver's informer has it: wait for a write
    // of the admin's to be refused.
    let started = Instant::now();
    loop {
        let out = own.kubectl(&[
            "annotate",
            "ipamshards",
            "--all",
            "--overwrite",
            "wasm-ipam.dev/probe=1",
        ]);
        if !out.status.success() {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the webhook never applied"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let started = Instant::now();
    let refused = Call::new("ADD", "during").run(&conf);
    let took = started.elapsed();
    assert_eq!(refused.error_code(), 11, "{refused:?}");
    assert!(
        refused.msg().contains("HTTP 500")
            && refused.msg().contains("webhook")
            && refused.msg().contains("nothing was committed"),
        "{refused:?}"
    );
    assert!(took < Duration::from_secs(2 + 5), "took {took:?}");
    eprintln!(
        "an ADD met 500s and answered 11 after {took:?}: {}",
        refused.msg()
    );
    assert_eq!(entries_of(&objects_on(&own, "k-500")), before);
    assert!(
        objects_on(&own, "k-500")
            .values()
            .all(|s| s.get("lock").is_none())
    );

    let out = own.kubectl(&[
        "delete",
        "validatingwebhookconfiguration",
        "wasm-ipam-test-unreachable",
    ]);
    assert!(out.status.success(), "{out:?}");
    let back = Instant::now();
    loop {
        let again = Call::new("ADD", "during").run(&conf);
        if again.success {
            break;
        }
        assert_eq!(again.error_code(), 11, "{again:?}");
        assert!(back.elapsed() < Duration::from_secs(30), "{again:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let held = held_in(&entries_of(&objects_on(&own, "k-500")));
    assert_eq!(held.len(), 2, "{held:?}");
}

/// The per-object limits and names: 4097 entries for one group are refused before any
/// write (code 105, naming the limit) and 4096 are taken; a network whose name is no
/// DNS label on its own (`k-limits-`) still makes names the apiserver accepts.
#[test]
fn a_group_over_4096_entries_is_refused_whole_and_any_network_name_is_stored() {
    let api = api();
    let node = Node::new();
    let name = "k-limits-node";
    let kubeconfig = node_kubeconfig(api, name);
    let writes = |n: usize| -> Vec<String> { (0..n).map(|i| format!("g/one/{i:05}=x")).collect() };
    let mut conf = node.netconf(
        "1.1.0",
        &probe_module(),
        json!({"probe": {"write": writes(4097)}}),
    );
    conf["name"] = "k-limits-".into();
    conf["ipam"]["nodeName"] = name.into();
    conf["ipam"]["store"] =
        json!({"type": "kubernetes", "kubeconfig": kubeconfig, "qps": 1000, "burst": 1000});
    let refused = Call::new("ADD", "over").run(&conf);
    assert_eq!(refused.error_code(), 105, "{refused:?}");
    assert!(
        refused.msg().contains("4097") && refused.msg().contains("4096"),
        "{refused:?}"
    );
    assert!(objects("k-limits-").is_empty(), "nothing written");
    conf["ipam"]["probe"]["write"] = json!(writes(4096));
    Call::new("ADD", "at").run(&conf).assert_ok();
    let stored = entries("k-limits-");
    assert_eq!(
        stored.keys().filter(|k| k.starts_with("g/one/")).count(),
        4096
    );
}

/// CNI GC, as a runtime sends it, on this store: of five attachments on a node, the
/// three it does not list are released, their addresses free again, the two it lists
/// kept; a GC again changes nothing.
#[test]
fn cni_gc_releases_what_the_runtime_no_longer_runs_and_keeps_the_rest() {
    let network = "k-gc";
    let (nodes, confs) = cluster(network, 1, &json!({"cidr": "10.79.0.0/16"}));
    let mut added = BTreeMap::new();
    for n in 0..5 {
        let id = format!("pod-{n}");
        let address = Call::new("ADD", &id).run(&confs[0]).address().to_string();
        added.insert(id, address);
    }
    assert_eq!(held(network).len(), 5);
    let mut gc = confs[0].clone();
    gc["cni.dev/valid-attachments"] = json!([
        {"containerID": "pod-1", "ifname": "eth0"},
        {"containerID": "pod-3", "ifname": "eth0"},
    ]);
    for _ in 0..2 {
        Call::new("GC", "").run(&gc).assert_ok();
        let holders: BTreeSet<String> = held(network).into_values().collect();
        assert_eq!(
            holders,
            BTreeSet::from(["pod-1".to_string(), "pod-3".to_string()])
        );
        let own: Vec<String> = entries(network)
            .into_keys()
            .filter(|k| k.starts_with("own/"))
            .collect();
        assert_eq!(own.len(), 2, "{own:?}");
    }
    // A kept attachment still answers its ADD with its address; a new pod is served.
    assert_eq!(
        Call::new("ADD", "pod-1").run(&confs[0]).address(),
        added["pod-1"]
    );
    Call::new("ADD", "pod-5").run(&confs[0]).assert_ok();
    assert_eq!(held(network).len(), 3);
    let conf_file = write_conf(&nodes[0], &confs[0]);
    let (ok, stdout, stderr) = operator_on(&nodes[0], &conf_file, &["store", "check"]);
    assert!(ok, "{stdout}{stderr}");
}

/// A network of more objects than one list answer holds (the store lists 500 a
/// page): `store check` counts every entry of every page, and `forget` removes every
/// object of every page.
#[test]
fn lists_of_several_pages_are_read_whole_by_check_and_forget() {
    // An apiserver of its own: a forget cut short leaves the network's usage rows
    // and entries apart until it is run again, which the other tests' `store check`
    // across the shared apiserver would report.
    let own = KubeApi::start();
    apply_manifests(&own);
    let network = "k-pages";
    let node = Node::new();
    let name = "k-pages-node";
    let kubeconfig = own.kubeconfig_for(&format!("system:node:{name}"), &["system:nodes"]);
    let mut conf = node.netconf(
        "1.1.0",
        &cluster_pool_module(),
        json!({"cidr": "10.81.0.0/16"}),
    );
    conf["name"] = network.into();
    conf["ipam"]["nodeName"] = name.into();
    // A short deadline and a faster rate than the default, so each forget below gets
    // through a few hundred objects in a few seconds.
    conf["ipam"]["deadlineSeconds"] = json!(8);
    conf["ipam"]["store"] = json!({"type": "kubernetes", "kubeconfig": kubeconfig, "qps": 25});
    let conf_file = write_conf(&node, &conf);
    // A reservation is a group of its own (an operator's command started it): its
    // object is the model of 700 more, written as the admin would.
    let (ok, out, err) = operator_on(
        &node,
        &conf_file,
        &["reserve", "10.81.0.0/28", "--note", "seed"],
    );
    assert!(ok, "{out}{err}");
    let out = own.kubectl(&["get", "ipamshards", "-o", "json"]);
    assert!(out.status.success());
    let all: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ours: Vec<&Value> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["spec"]["network"] == network)
        .collect();
    let model = ours
        .iter()
        .find(|o| o["spec"]["group"].as_str().unwrap().starts_with("rsv/"))
        .expect("the reservation's object");
    let home = ours
        .iter()
        .find(|o| o["spec"]["role"] == "node")
        .expect("the node's home");
    let seeded = 700;
    let mut items = Vec::new();
    let mut bytes = 0;
    for i in 0..seeded {
        let key = format!("rsv/10.{}.{}.0/24", 100 + i / 256, i % 256);
        let group = key.rsplit_once('/').unwrap().0.to_string();
        let value = "{\"note\":\"seeded\"}";
        bytes += key.len() + value.len();
        items.push(json!({
            "apiVersion": model["apiVersion"],
            "kind": model["kind"],
            "metadata": {"name": format!("k-pages.seed-{i}"), "labels": model["metadata"]["labels"]},
            "spec": {"role": "entries", "network": network, "group": group, "size": 1,
                     "entries": [{"key": key, "value": value}]},
        }));
    }
    // The node's usage row counts them, as commits writing them would have.
    let mut usage = home["spec"]["usage"].clone();
    usage["entries"] = json!(usage["entries"].as_i64().unwrap() + seeded as i64);
    usage["bytes"] = json!(usage["bytes"].as_i64().unwrap() + bytes as i64);
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    let file = node.dir.path().join("seed.json");
    std::fs::write(&file, list.to_string()).unwrap();
    let out = own.kubectl(&["create", "-f", &file.to_string_lossy()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Entries no usage row counts yet: check names the mismatch (code 104).
    let (ok, stdout, stderr) = operator_on(&node, &conf_file, &["store", "check"]);
    assert!(
        !ok && stderr.contains("code 104")
            && stderr.contains(&format!("network \"{network}\": its usage records")),
        "{stdout}{stderr}"
    );
    let patch = json!({"spec": {"usage": usage}});
    let out = own.kubectl(&[
        "patch",
        "ipamshards",
        home["metadata"]["name"].as_str().unwrap(),
        "--type=merge",
        "-p",
        &patch.to_string(),
    ]);
    assert!(out.status.success(), "{out:?}");
    assert!(objects_on(&own, network).len() > 700);

    // check reads every page: the entries it counts agree with the usage rows.
    let (ok, stdout, stderr) = operator_on(&node, &conf_file, &["store", "check"]);
    assert!(ok, "{stdout}{stderr}");
    let held = entries_of(&objects_on(&own, network)).len();
    assert!(held > seeded, "{held}");
    // forget lists the network's objects page by page and removes them all, one
    // request each: at 25 a second after a burst of 100, about 300 fit one command's
    // 8 s, and the command says how far it got and to run it again.
    let mut runs = Vec::new();
    loop {
        let (ok, stdout, stderr) = operator_on(&node, &conf_file, &["forget", network]);
        runs.push(ok);
        if ok {
            assert!(
                stdout.starts_with(&format!("forgot network {network}")),
                "{stdout}"
            );
            break;
        }
        let said = format!("objects of network {network:?}");
        assert!(
            stderr.contains("code 11")
                && stderr.contains(&said)
                && stderr.contains("run the same command again to remove the rest"),
            "{stderr}"
        );
        assert!(runs.len() < 6, "{runs:?}");
    }
    eprintln!("forget of {held} entries in {} runs", runs.len());
    assert!(
        runs.len() >= 2,
        "a removal cut short was run again: {runs:?}"
    );
    assert!(objects_on(&own, network).is_empty(), "every page removed");
}

/// The priority level of the node's requests in the 429 test: no seats of its own,
/// none to borrow, and no queue.
const NO_SEATS: &str = "wasm-ipam-test-no-seats";

/// The sum of the apiserver's metric `name` over the series of priority level
/// `level`, as the admin reads /metrics.
fn level_metric(api: &KubeApi, name: &str, level: &str) -> f64 {
    let out = api.kubectl(&["get", "--raw", "/metrics"]);
    assert!(out.status.success(), "{out:?}");
    let series = format!("priority_level=\"{level}\"");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(&series))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
        .sum()
}

/// A `kubectl` the test started, killed and reaped when dropped.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The apiserver answering 429 (API Priority and Fairness on, the node's user routed
/// to a level of no seats that rejects rather than queues): an ADD waits out each
/// `Retry-After` after the lock while the retry fits, answers 11 at once when it does
/// not (within `timeoutSeconds`, or within the call's budget), naming the answer,
/// and leaves nothing behind; once the node's requests are served again the same ADD
/// succeeds and the store checks sound.
///
/// A level of zero seats still serves a request when none of its own runs (the
/// apiserver lets a request wider than the limit through alone), so one request of
/// another user routed to it is kept running: a ConfigMap create held by mutating
/// webhooks whose address accepts connections and never completes TLS (10 s each).
#[test]
fn answers_429_are_waited_out_after_the_lock_and_one_that_cannot_fit_answers_11_at_once() {
    // Measures time against bounds of a second or so.
    let _heavy = exclusive();
    let own = KubeApi::start_with(&["--enable-priority-and-fairness=true"]);
    apply_manifests(&own);
    let network = "k-429";
    let name = "k-429-node";
    let user = format!("system:node:{name}");
    let kubeconfig = own.kubeconfig_for(&user, &["system:nodes"]);
    let holder_user = "wasm-ipam-test-holder";
    let holder = own.kubeconfig_for(holder_user, &[]);
    let node = Node::new();
    let mut conf = node.netconf(
        "1.1.0",
        &cluster_pool_module(),
        json!({"cidr": "10.88.0.0/16"}),
    );
    conf["name"] = network.into();
    conf["ipam"]["nodeName"] = name.into();
    conf["ipam"]["store"] =
        json!({"type": "kubernetes", "kubeconfig": kubeconfig, "timeoutSeconds": 3});

    let never_answers = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = never_answers.local_addr().unwrap().port();
    let webhooks: String = (0..4)
        .map(|i| {
            format!(
                r#"- name: hold-{i}.test.wasm-ipam.dev
  clientConfig:
    url: https://127.0.0.1:{port}/hold
  rules:
  - apiGroups: [""]
    apiVersions: ["v1"]
    operations: ["CREATE"]
    resources: ["configmaps"]
  objectSelector:
    matchLabels: {{wasm-ipam-test/hold: "yes"}}
  failurePolicy: Ignore
  sideEffects: None
  admissionReviewVersions: ["v1"]
  timeoutSeconds: 30
"#
            )
        })
        .collect();
    // The test's flow schema, ahead of every other, puts what `rules` match in the
    // level without seats.
    let flow_schema = |rules: &str| {
        format!(
            r#"apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata:
  name: wasm-ipam-test-429
spec:
  priorityLevelConfiguration:
    name: {NO_SEATS}
  matchingPrecedence: 100
  distinguisherMethod:
    type: ByUser
  rules:
{rules}"#
        )
    };
    let all_to_no_seats = flow_schema(&format!(
        r#"  - subjects:
    - kind: User
      user:
        name: "{user}"
    - kind: User
      user:
        name: {holder_user}
    resourceRules:
    - verbs: ["*"]
      apiGroups: ["*"]
      resources: ["*"]
      clusterScope: true
      namespaces: ["*"]
    nonResourceRules:
    - verbs: ["*"]
      nonResourceURLs: ["*"]
"#
    ));
    own.apply(&format!(
        r#"apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata:
  name: {NO_SEATS}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 0
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse:
      type: Reject
---
{all_to_no_seats}---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {holder_user}
  namespace: default
rules:
- apiGroups: [""]
  resources: [configmaps]
  verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {holder_user}
  namespace: default
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {holder_user}
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: User
  name: {holder_user}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: wasm-ipam-test-hold
webhooks:
{webhooks}"#
    ));
    // The flow schema is in effect once the apiserver has marked it not dangling.
    let out = own.kubectl(&[
        "wait",
        "--for=jsonpath={.status.conditions[?(@.type==\"Dangling\")].status}=False",
        "--timeout=60s",
        "flowschema/wasm-ipam-test-429",
    ]);
    assert!(out.status.success(), "{out:?}");
    let held_cm = node.dir.path().join("hold.json");
    std::fs::write(
        &held_cm,
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"generateName": "hold-", "labels": {"wasm-ipam-test/hold": "yes"}}})
        .to_string(),
    )
    .unwrap();
    // Held once the level shows a request running; one that ended first met the
    // webhooks before the apiserver had them, and is sent again.
    const EXECUTING: &str = "apiserver_flowcontrol_current_executing_requests";
    const REJECTED: &str = "apiserver_flowcontrol_rejected_requests_total";
    let started = Instant::now();
    let mut holding = loop {
        let mut running = Running(
            std::process::Command::new(crate::kube_api::peers().join("kubectl"))
                .arg("--kubeconfig")
                .arg(&holder)
                .args([
                    "create",
                    "--raw",
                    "/api/v1/namespaces/default/configmaps",
                    "-f",
                ])
                .arg(&held_cm)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        );
        let holds = loop {
            if level_metric(&own, EXECUTING, NO_SEATS) >= 1.0 {
                break true;
            }
            if running.0.try_wait().unwrap().is_some() {
                break false;
            }
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "no request of {holder_user} held level {NO_SEATS} in 60 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        if holds {
            break running;
        }
    };
    let held_since = Instant::now();

    // What is left of timeoutSeconds (3 s) takes two waits of Retry-After (1 s): the
    // third 429 answers 11 at once, not at the end of the 3 s.
    let rejected = level_metric(&own, REJECTED, NO_SEATS);
    let started = Instant::now();
    let refused = Call::new("ADD", "pod").run(&conf);
    let took = started.elapsed();
    let record = node.log_lines("invocation").pop().unwrap();
    let rejected = level_metric(&own, REJECTED, NO_SEATS) - rejected;
    eprintln!("timeoutSeconds 3: answered after {took:?}: {refused:?}\n{record}");
    let asked = |msg: &str| -> u64 {
        let (_, after) = msg
            .split_once("asks to retry after ")
            .unwrap_or_else(|| panic!("no Retry-After named: {msg}"));
        after.split(' ').next().unwrap().parse().unwrap()
    };
    let check = |reply: &Reply, record: &Value, bound_ms: f64| {
        assert_eq!(reply.error_code(), 11, "{reply:?}");
        let msg = reply.msg();
        assert!(
            msg.contains("HTTP 429") && msg.contains("nothing was committed"),
            "{reply:?}"
        );
        assert!(!msg.contains("ran out"), "waited to the end: {reply:?}");
        // The apiserver's Retry-After: whole seconds, at least one.
        let retry_after = asked(msg);
        assert!(retry_after >= 1, "{reply:?}");
        let retry_after = retry_after as f64 * 1000.0;
        let requests = record["kube_requests"].as_u64().unwrap();
        let hold = record["lock_hold_ms"].as_f64().unwrap();
        // Sent again after each wait that fitted, and no more.
        assert!(requests >= 2, "{record}");
        assert!((requests - 1) as f64 * retry_after < bound_ms, "{record}");
        // The waits were made under the lock, and it was let go before the bound;
        // the call's record counts them as waits, as the rate limiter's.
        assert!(hold >= (requests - 1) as f64 * retry_after, "{record}");
        let waited = record["kube_rate_wait_ms"].as_f64().unwrap();
        assert!(waited >= (requests - 1) as f64 * retry_after, "{record}");
        assert!(hold < bound_ms, "{record}");
        requests
    };
    let requests = check(&refused, &record, 3000.0);
    assert_eq!(rejected, requests as f64, "the apiserver's 429s: {record}");
    assert!(took < Duration::from_secs(3 + 2), "took {took:?}");

    // The call's budget is the bound (deadlineSeconds 2.5): once a Retry-After cannot
    // come within what is left of it, 11 at once.
    let mut short = conf.clone();
    short["ipam"]["deadlineSeconds"] = json!(2.5);
    short["ipam"]["store"]["timeoutSeconds"] = json!(2.5);
    let started = Instant::now();
    let refused = Call::new("ADD", "pod").run(&short);
    let took = started.elapsed();
    let record = node.log_lines("invocation").pop().unwrap();
    eprintln!("deadlineSeconds 2.5: answered after {took:?}: {refused:?}\n{record}");
    check(&refused, &record, 2500.0);
    assert!(
        record["budget_used_ms"].as_f64().unwrap() < 2500.0,
        "{record}"
    );
    assert!(
        holding.0.try_wait().unwrap().is_none(),
        "the held request ended after {:?}: the node's requests may have been served",
        held_since.elapsed()
    );
    assert!(objects_on(&own, network).is_empty(), "nothing committed");

    // Writes alone refused: the node's reads are served, its first write (the home's
    // create) meets the 429s, and the call still answers 11 before its bound with
    // nothing committed.
    own.apply(&flow_schema(&format!(
        r#"  - subjects:
    - kind: User
      user:
        name: {holder_user}
    resourceRules:
    - verbs: ["*"]
      apiGroups: ["*"]
      resources: ["*"]
      clusterScope: true
      namespaces: ["*"]
  - subjects:
    - kind: User
      user:
        name: "{user}"
    resourceRules:
    - verbs: [create, update, delete]
      apiGroups: ["*"]
      resources: ["*"]
      clusterScope: true
      namespaces: ["*"]
"#
    )));
    // The apiserver takes the new rules up on its own time: until then the reads are
    // still refused.
    let changed = Instant::now();
    let (refused, record) = loop {
        let refused = Call::new("ADD", "pod").run(&conf);
        let record = node.log_lines("invocation").pop().unwrap();
        assert_eq!(refused.error_code(), 11, "{refused:?}");
        if !refused.msg().contains("get ipamshards") {
            break (refused, record);
        }
        assert!(
            changed.elapsed() < Duration::from_secs(30),
            "the node's reads still refused 30 s after the flow schema changed"
        );
    };
    eprintln!("writes refused: {refused:?}\n{record}");
    assert!(
        refused.msg().contains("post ipamshards") || refused.msg().contains("put ipamshards"),
        "{refused:?}"
    );
    let msg = refused.msg();
    assert!(
        msg.contains("HTTP 429")
            && msg.contains("nothing was committed")
            && !msg.contains("ran out"),
        "{refused:?}"
    );
    // The write's bound is timeoutSeconds (3 s) from its first try: two waits of a
    // second fit in it, and they are counted as waits; the reads before it were served.
    let waited = record["kube_rate_wait_ms"].as_f64().unwrap();
    let hold = record["lock_hold_ms"].as_f64().unwrap();
    assert!(waited >= 2000.0 && hold < 3000.0 + 1000.0, "{record}");
    assert!(record["kube_requests"].as_u64().unwrap() >= 4, "{record}");
    assert!(
        holding.0.try_wait().unwrap().is_none(),
        "the held request ended after {:?}",
        held_since.elapsed()
    );
    assert!(objects_on(&own, network).is_empty(), "nothing committed");

    // Served again: the same ADD succeeds, and the store is sound.
    drop(holding);
    let out = own.kubectl(&["delete", "flowschema", "wasm-ipam-test-429"]);
    assert!(out.status.success(), "{out:?}");
    let back = Instant::now();
    loop {
        let again = Call::new("ADD", "pod").run(&conf);
        if again.success {
            break;
        }
        assert_eq!(again.error_code(), 11, "{again:?}");
        assert!(back.elapsed() < Duration::from_secs(30), "{again:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "served again {:?} after the flow schema's removal",
        back.elapsed()
    );
    let held = held_in(&entries_of(&objects_on(&own, network)));
    assert_eq!(held.values().collect::<Vec<_>>(), ["pod"], "{held:?}");
    let conf_file = write_conf(&node, &conf);
    let (ok, stdout, stderr) = operator_on(&node, &conf_file, &["store", "check"]);
    assert!(ok, "{stdout}{stderr}");
    Call::new("DEL", "pod").run(&conf).assert_ok();
    drop(never_answers);
}

/// The apiserver's counter `apiserver_flowcontrol_dispatched_requests_total` of the
/// requests flow schema `schema` classified and level `level` dispatched.
fn dispatched(api: &KubeApi, schema: &str, level: &str) -> f64 {
    let out = api.kubectl(&["get", "--raw", "/metrics"]);
    assert!(out.status.success(), "{out:?}");
    let (schema, level) = (
        format!("flow_schema=\"{schema}\""),
        format!("priority_level=\"{level}\""),
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("apiserver_flowcontrol_dispatched_requests_total{"))
        .filter(|l| l.contains(&schema) && l.contains(&level))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
        .sum()
}

/// With API Priority and Fairness on and the manifests applied, a node's requests are
/// classified by the flow schema `wasm-ipam kubernetes manifests` prints into its own
/// priority level: the apiserver dispatched there exactly the requests the node's
/// ADD and DEL logged, none of them through the built-in `system-nodes` (which takes
/// the group's other requests) or `global-default`, and rejected none.
#[test]
fn the_nodes_requests_are_classified_by_the_shipped_flow_schema_into_its_priority_level() {
    // The name the manifests give the priority level and the flow schema.
    const FLOW_NAME: &str = "wasm-ipam";
    let own = KubeApi::start_with(&["--enable-priority-and-fairness=true"]);
    apply_manifests(&own);
    // In effect once the apiserver has marked it not dangling (its level exists).
    let out = own.kubectl(&[
        "wait",
        "--for=jsonpath={.status.conditions[?(@.type==\"Dangling\")].status}=False",
        "--timeout=60s",
        &format!("flowschema/{FLOW_NAME}"),
    ]);
    assert!(out.status.success(), "{out:?}");
    let precedence = |schema: &str| -> u32 {
        let out = own.kubectl(&[
            "get",
            "flowschema",
            schema,
            "-o",
            "jsonpath={.spec.matchingPrecedence}",
        ]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).parse().unwrap()
    };
    let (ours, system_nodes) = (precedence(FLOW_NAME), precedence("system-nodes"));
    eprintln!("matchingPrecedence: {FLOW_NAME} {ours}, system-nodes {system_nodes}");
    assert!(
        ours < system_nodes,
        "{ours} does not win over {system_nodes}"
    );
    eprintln!(
        "the level's nominal seats: {}",
        level_metric(&own, "apiserver_flowcontrol_nominal_limit_seats", FLOW_NAME)
    );

    let network = "k-apf";
    let name = "k-apf-node";
    let node = Node::new();
    let mut conf = node.netconf(
        "1.1.0",
        &cluster_pool_module(),
        json!({"cidr": "10.89.0.0/16"}),
    );
    conf["name"] = network.into();
    conf["ipam"]["nodeName"] = name.into();
    conf["ipam"]["store"] = store(&node_kubeconfig(&own, name));

    let counts = || {
        [
            dispatched(&own, FLOW_NAME, FLOW_NAME),
            dispatched(&own, "system-nodes", "system"),
            dispatched(&own, "global-default", "global-default"),
            level_metric(
                &own,
                "apiserver_flowcontrol_rejected_requests_total",
                FLOW_NAME,
            ),
        ]
    };
    let before = counts();
    Call::new("ADD", "pod").run(&conf).assert_ok();
    Call::new("ADD", "pod-2").run(&conf).assert_ok();
    Call::new("DEL", "pod").run(&conf).assert_ok();
    let after = counts();
    let made: u64 = kube_requests(&node).iter().sum();
    let seen: Vec<f64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    eprintln!(
        "requests logged {made} ({:?}); dispatched by {FLOW_NAME}, system-nodes, global-default, rejected: {seen:?}",
        kube_requests(&node)
    );
    assert!(made > 0);
    assert_eq!(seen, [made as f64, 0.0, 0.0, 0.0], "logged {made}");

    // Without the flow schema the same requests go to `system-nodes` (once the
    // apiserver has dropped it: a DEL again until one is classified there whole).
    let out = own.kubectl(&["delete", "flowschema", FLOW_NAME]);
    assert!(out.status.success(), "{out:?}");
    let started = Instant::now();
    loop {
        let before = counts();
        Call::new("DEL", "pod-2").run(&conf).assert_ok();
        let made = *kube_requests(&node).last().unwrap() as f64;
        let seen: Vec<f64> = counts().iter().zip(before).map(|(a, b)| a - b).collect();
        if made > 0.0 && seen[..2] == [0.0, made] {
            eprintln!(
                "without it, after {:?}: {made} requests by system-nodes",
                started.elapsed()
            );
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the node's DEL ({made} requests) was not classified by system-nodes within 30 s of the flow schema's removal: {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
