//! wasm-ipam on a real node: kubelet and containerd 2 (built by scripts/kube-peers.sh,
//! started by scripts/kube-node.sh) run pods whose networks wasm-ipam addresses, and
//! each scenario is driven as a user drives a cluster: kubectl, crictl and the
//! operator's `wasm-ipam` commands, never the plugin called by hand.
//!
//! One node per store, shared by the scenarios in order (each leaves the node as it
//! found it: no pod of its own, the network ready); the node is always taken down,
//! also when a scenario fails. Needs root. `cargo test -p kube-e2e -- WORD` runs the
//! scenarios whose name holds WORD.

mod node;

use node::pods::{self, pod_ips};
use node::{Node, Store, wait_for, wait_for_explained};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How many pods a herd has: created at once, then deleted at once.
const HERD: usize = 60;
/// The herd on the Kubernetes store, whose node paces its requests at qps 5 and burst
/// 10: the scene this project was born from (Calico's DELs failing on client-go's
/// rate limiter during a herd of deletions), at the size its issue names.
const KUBE_HERD: usize = 200;
/// What a loaded 2-core machine may take for the herd to run or to go.
const HERD_LIMIT: Duration = Duration::from_secs(300);
/// The same for the Kubernetes store's larger herd.
const KUBE_HERD_LIMIT: Duration = Duration::from_secs(900);

/// The herd's size and time limit on `node`'s store.
fn herd(node: &Node) -> (usize, Duration) {
    match node.env("STORE") {
        "kubernetes" => (KUBE_HERD, KUBE_HERD_LIMIT),
        _ => (HERD, HERD_LIMIT),
    }
}

type Scenario = fn(&Node);

/// The scenarios of each store, in the order they run on its node.
fn scenarios(store: Store) -> Vec<(&'static str, Scenario)> {
    match store {
        Store::Local => vec![
            (
                "a_herd_of_pods_runs_with_the_addresses_the_store_records",
                herd_runs,
            ),
            (
                "a_pool_smaller_than_the_pods_fails_the_extra_pods_and_the_node_stays_ready",
                pool_too_small,
            ),
            (
                "the_herd_deleted_at_once_every_del_succeeds_and_nothing_is_left",
                herd_deleted,
            ),
            (
                "an_annotated_pod_gets_its_address_through_kubelet_and_containerd",
                annotated_pod,
            ),
            (
                "a_node_local_fault_turns_the_node_not_ready_and_repaired_ready_again",
                node_local_fault,
            ),
            (
                "containerd_restarted_mid_churn_then_gc_frees_the_leaked_and_nothing_in_use",
                restart_and_gc,
            ),
            // Last: it replaces the node.
            (
                "a_node_left_behind_is_refused_while_running_replaced_on_request_and_reclaimed_once_dead",
                node_left_behind,
            ),
        ],
        Store::Etcd | Store::Kubernetes => vec![
            (
                "a_herd_of_pods_runs_with_the_addresses_the_store_records",
                herd_runs,
            ),
            (
                "the_herd_deleted_at_once_every_del_succeeds_and_nothing_is_left",
                herd_deleted,
            ),
        ],
    }
}

fn main() {
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wanted = |name: &str| filter.is_empty() || filter.iter().any(|f| name.contains(f.as_str()));
    let mut failed = Vec::new();
    let mut passed = 0;
    for store in [Store::Local, Store::Etcd, Store::Kubernetes] {
        let chosen: Vec<_> = scenarios(store)
            .into_iter()
            .filter(|(name, _)| wanted(&format!("{}::{name}", store.name())))
            .collect();
        if chosen.is_empty() {
            continue;
        }
        let node = match std::panic::catch_unwind(|| Node::up(store)) {
            Ok(node) => node,
            Err(_) => {
                failed.push(format!("{} node: scripts/kube-node.sh up", store.name()));
                continue;
            }
        };
        for (name, scenario) in chosen {
            let full = format!("{}::{name}", store.name());
            let started = Instant::now();
            let outcome =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| scenario(&node)));
            let took = started.elapsed().as_secs_f64();
            match outcome {
                Ok(()) => {
                    passed += 1;
                    eprintln!("test {full} ... ok ({took:.1} s)");
                }
                Err(_) => {
                    eprintln!("test {full} ... FAILED ({took:.1} s)");
                    failed.push(full);
                }
            }
        }
        let mut node = node;
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| node.down())).is_err() {
            failed.push(format!("{} node: scripts/kube-node.sh down", store.name()));
        }
    }
    eprintln!(
        "\nkube: {passed} passed; {} failed{}",
        failed.len(),
        if failed.is_empty() {
            String::new()
        } else {
            format!(": {}", failed.join(", "))
        }
    );
    if passed == 0 && failed.is_empty() {
        eprintln!("kube: no scenario matched {filter:?}");
        std::process::exit(1);
    }
    std::process::exit(if failed.is_empty() { 0 } else { 1 });
}

/// Each sandbox's addresses as `wasm-ipam list` shows them, by the runtime's
/// namespace/name of the pod the sandbox belongs to.
fn recorded_by_pod(node: &Node) -> BTreeMap<String, BTreeSet<String>> {
    let sandboxes = pods::sandboxes(node);
    let mut by_pod: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for row in node.allocations() {
        let id = row["containerID"].as_str().expect("a row's containerID");
        let address = row["address"].as_str().expect("a row's address");
        let pod = sandboxes
            .get(id)
            .map(|(pod, _)| pod.clone())
            .unwrap_or_else(|| format!("(no sandbox {id})"));
        by_pod
            .entry(pod)
            .or_default()
            .insert(bare(address).to_string());
    }
    by_pod
}

fn bare(address: &str) -> &str {
    address.split('/').next().unwrap()
}

/// Lines of wasm-ipam's log so far: where a scenario's own records begin.
fn log_lines(node: &Node) -> usize {
    node.log("IPAM_LOG_FILE").lines().count()
}

/// The records of the `command` calls in wasm-ipam's log after line `from`, read line
/// by line: a line that is not JSON fails the test.
fn call_records(node: &Node, command: &str, from: usize) -> Vec<Value> {
    node.log("IPAM_LOG_FILE")
        .lines()
        .skip(from)
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("a log line that is not JSON ({e}): {line}"))
        })
        .filter(|r: &Value| r["target"] == "invocation" && r["command"] == command)
        .collect()
}

/// Prints what the `command` calls logged after line `from` cost: how many, how many
/// failed (to be retried by the runtime), and the median and largest of their times
/// and, on a cluster store, of their requests to it.
fn print_call_figures(node: &Node, command: &str, from: usize) {
    let records = call_records(node, command, from);
    let failed = records.iter().filter(|r| r["outcome"] != "ok").count();
    let prefix = match node.env("STORE") {
        "etcd" => "etcd_",
        "kubernetes" => "kube_",
        _ => "",
    };
    let mut fields = vec!["total_ms".to_string(), "lock_wait_ms".to_string()];
    if !prefix.is_empty() {
        for field in ["requests", "ms", "rate_wait_ms", "conflicts"] {
            fields.push(format!("{prefix}{field}"));
        }
    }
    let figures: Vec<String> = fields
        .iter()
        .map(|field| {
            let mut values: Vec<u64> = records
                .iter()
                .filter_map(|r| r[field].as_f64())
                .map(|v| v.round() as u64)
                .collect();
            values.sort();
            match values.last() {
                Some(max) => format!("{field} median {} max {max}", values[values.len() / 2]),
                None => format!("{field} none"),
            }
        })
        .collect();
    eprintln!(
        "kube: {} {command} calls ({failed} failed): {}",
        records.len(),
        figures.join(", ")
    );
}

fn herd_runs(node: &Node) {
    let (size, limit) = herd(node);
    let from = log_lines(node);
    let started = Instant::now();
    pods::create(node, "herd", size);
    let per_pod = pods::until_running(node, "herd", size, limit);
    let total = started.elapsed();
    let mut sorted = per_pod.clone();
    sorted.sort();
    eprintln!(
        "kube: {size} pods created at once, all Running in {:.1} s (creation to Ready: median {} s, max {} s)",
        total.as_secs_f64(),
        sorted[sorted.len() / 2].as_secs(),
        sorted.last().unwrap().as_secs()
    );
    print_call_figures(node, "ADD", from);
    let pods = pods::of_group(node, "herd");
    let recorded = recorded_by_pod(node);
    let mut seen = BTreeSet::new();
    for (name, pod) in &pods {
        let ips: BTreeSet<String> = pod_ips(pod).into_iter().collect();
        assert_eq!(ips.len(), 1, "{name}: one address per pod: {ips:?}");
        assert_eq!(
            recorded.get(&format!("default/{name}")),
            Some(&ips),
            "{name}: status.podIPs against wasm-ipam list"
        );
        for ip in &ips {
            assert!(seen.insert(ip.clone()), "{ip} handed to two pods");
            assert!(node.ping(ip), "{name} ({ip}) answers no ping from the node");
        }
    }
    assert_eq!(
        recorded.len(),
        size,
        "wasm-ipam list holds exactly the herd's pods: {:?}",
        recorded.keys().collect::<Vec<_>>()
    );
    if node.env("STORE") != "local" {
        // On a cluster store, /28 blocks hold 13 pods each: the herd spans at least five, all on one node
        // under ptp (under bridge, every pod past the first block would have failed).
        let blocks: BTreeSet<u32> = seen
            .iter()
            .map(|ip| u32::from(ip.parse::<std::net::Ipv4Addr>().unwrap()) >> 4)
            .collect();
        assert!(
            blocks.len() >= 5,
            "the herd lies in {} /28 blocks",
            blocks.len()
        );
    }
}

/// containerd's and kubelet's lines that say a network teardown (CNI DEL, or the
/// StopPodSandbox around it) failed.
fn del_failures(node: &Node) -> Vec<String> {
    let containerd = node.log("CONTAINERD_LOG");
    let kubelet = node.log("KUBELET_LOG");
    containerd
        .lines()
        .filter(|l| l.contains("level=error"))
        .filter(|l| {
            l.contains("StopPodSandbox") || l.contains("teardown") || l.contains("destroy network")
        })
        .chain(kubelet.lines().filter(|l| {
            l.starts_with('E') && (l.contains("StopPodSandbox") || l.contains("KillPodSandbox"))
        }))
        .map(String::from)
        .collect()
}

fn herd_deleted(node: &Node) {
    let (size, limit) = herd(node);
    let failures_before = del_failures(node).len();
    let herd_sandboxes: BTreeSet<String> = pods::sandboxes(node)
        .into_iter()
        .filter(|(_, (pod, ready))| *ready && pod.starts_with("default/herd-"))
        .map(|(id, _)| id)
        .collect();
    assert_eq!(herd_sandboxes.len(), size, "the herd's ready sandboxes");
    let from = log_lines(node);
    let took = pods::delete_all(node, "herd", limit);
    eprintln!(
        "kube: {size} pods deleted at once: the last sandbox torn down {:.1} s after the delete",
        took.as_secs_f64()
    );
    print_call_figures(node, "DEL", from);
    let failures: Vec<String> = del_failures(node)
        .into_iter()
        .skip(failures_before)
        .collect();
    assert!(
        failures.is_empty(),
        "teardown failures in the runtime's or kubelet's log: {failures:#?}"
    );
    // Each sandbox's DELs, read from the log line by line: every one succeeded, so
    // each sandbox's first DEL did (a DEL the runtime killed at its timeout leaves no
    // record but the runtime's error above, and is then retried).
    let records = call_records(node, "DEL", from);
    let failed: Vec<&Value> = records.iter().filter(|r| r["outcome"] != "ok").collect();
    assert!(
        failed.is_empty(),
        "DEL records that are not ok: {failed:#?}"
    );
    let mut dels_of: BTreeMap<&str, usize> = BTreeMap::new();
    for record in &records {
        *dels_of
            .entry(record["container_id"].as_str().unwrap_or_default())
            .or_default() += 1;
    }
    let missing: Vec<&String> = herd_sandboxes
        .iter()
        .filter(|id| !dels_of.contains_key(id.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "sandboxes torn down without a DEL: {missing:?}"
    );
    // How long each DEL queued for the host-wide lock, and what its budget was: the
    // budget starts at the grant, so however long the queue, every DEL had all of it.
    let figure = |field: &str| -> Vec<f64> {
        let mut values: Vec<f64> = records.iter().filter_map(|r| r[field].as_f64()).collect();
        values.sort_by(f64::total_cmp);
        values
    };
    let (waits, used, budgets) = (
        figure("lock_wait_ms"),
        figure("budget_used_ms"),
        figure("budget_ms"),
    );
    // The budget `wasm-ipam install` wrote (its default for a node), as each record
    // states it.
    let conflist: Value =
        serde_json::from_slice(&std::fs::read(node.conflist()).expect("the node's conflist"))
            .expect("the conflist is JSON");
    let installed = conflist["plugins"][0]["ipam"]["deadlineSeconds"]
        .as_f64()
        .expect("install writes deadlineSeconds");
    assert!(
        budgets.iter().all(|&b| b == installed * 1000.0),
        "each DEL's budget is the deadlineSeconds install wrote, {installed}: {budgets:?}"
    );
    eprintln!(
        "kube: {} DELs for {size} sandboxes ({} more than one), all ok: queued for the lock median {:.1} s, longest {:.1} s; then each had its budget of {:.0} s and used at most {:.1} s of it",
        records.len(),
        dels_of.values().filter(|&&n| n > 1).count(),
        waits[waits.len() / 2] / 1000.0,
        waits.last().unwrap() / 1000.0,
        budgets.last().unwrap() / 1000.0,
        used.last().unwrap() / 1000.0,
    );
    let left = node.allocations();
    assert!(
        left.is_empty(),
        "addresses left in the store after every pod went: {left:#?}"
    );
}

fn pool_too_small(node: &Node) {
    // The herd holds 60 of the /26's 61 addresses: one more pod runs, the other two
    // cannot have an address.
    let extra = ["small-0", "small-1", "small-2"];
    let stop = std::sync::atomic::AtomicBool::new(false);
    // Stops the watcher however the scope ends: a failed assertion must not leave the
    // scope waiting for it forever.
    struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let ready_while = std::thread::scope(|scope| {
        let watcher = scope.spawn(|| {
            let mut samples = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                samples.push(node.ready());
                std::thread::sleep(Duration::from_millis(500));
            }
            samples
        });
        let stopping = StopOnDrop(&stop);
        let items: Vec<Value> = extra.iter().map(|n| pods::pod(n, "small", &[])).collect();
        node.apply(&serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}));
        let failed = wait_for(
            "two pods of small failing with the CNI error",
            HERD_LIMIT,
            || {
                let pods = pods::of_group(node, "small");
                let running = pods
                    .values()
                    .filter(|p| pods::phase(p) == "Running")
                    .count();
                let events = node.kubectl_ok(&[
                "get",
                "events",
                "--field-selector",
                "reason=FailedCreatePodSandBox",
                "-o",
                "jsonpath={range .items[*]}{.involvedObject.name}{\"\\t\"}{.message}{\"\\n\"}{end}",
            ]);
                let failing: BTreeMap<&str, &str> = events
                    .lines()
                    .filter_map(|l| l.split_once('\t'))
                    .filter(|(name, _)| name.starts_with("small-"))
                    .collect();
                (running == 1 && failing.len() == 2).then(|| {
                    failing
                        .into_iter()
                        .map(|(n, m)| (n.to_string(), m.to_string()))
                        .collect::<Vec<_>>()
                })
            },
        );
        // The host-local module's words for it, as host-local's own.
        for (name, message) in &failed {
            assert!(
                message.contains("no IP addresses available in range set: 10.244.0.1-10.244.0.62"),
                "{name}'s event does not carry the module's exhaustion error: {message}"
            );
        }
        // Watched a few status updates more (kubelet reports every 10 s).
        std::thread::sleep(Duration::from_secs(12));
        drop(stopping);
        watcher.join().unwrap()
    });
    let not_ready: Vec<_> = ready_while
        .iter()
        .filter(|(status, _)| status != "True")
        .collect();
    assert!(
        not_ready.is_empty(),
        "the Node left Ready while the pool was exhausted: {not_ready:?}"
    );
    pods::delete_all(node, "small", HERD_LIMIT);
}

fn annotated_pod(node: &Node) {
    let wanted = "10.244.0.42";
    let annotation = format!("[\"{wanted}\"]");
    node.apply(&pods::pod(
        "fixed",
        "fixed",
        &[("wasm-ipam.io/ip-addrs", &annotation)],
    ));
    pods::until_running(node, "fixed", 1, HERD_LIMIT);
    let pod = &pods::of_group(node, "fixed")["fixed"];
    assert_eq!(
        pod_ips(pod),
        vec![wanted.to_string()],
        "the annotated address"
    );
    assert_eq!(
        recorded_by_pod(node).get("default/fixed"),
        Some(&BTreeSet::from([wanted.to_string()])),
        "wasm-ipam list"
    );
    assert!(node.ping(wanted));
    pods::delete_all(node, "fixed", HERD_LIMIT);
}

fn node_local_fault(node: &Node) {
    pods::create(node, "steady", 1);
    pods::until_running(node, "steady", 1, HERD_LIMIT);
    let before = pods::of_group(node, "steady")["steady-0"].clone();
    let ip = pod_ips(&before)[0].clone();

    // The module file gone (a botched upgrade): every ADD would fail, so STATUS fails.
    let conflist: Value =
        serde_json::from_str(&std::fs::read_to_string(node.conflist()).unwrap()).unwrap();
    let module = conflist["plugins"][0]["ipam"]["module"]
        .as_str()
        .unwrap()
        .to_string();
    let aside = format!("{module}.aside");
    std::fs::rename(&module, &aside).unwrap();
    let message = wait_for("the Node NotReady", Duration::from_secs(120), || {
        let (status, message) = node.ready();
        (status == "False").then_some(message)
    });
    std::fs::rename(&aside, &module).unwrap();
    assert!(
        message.contains("NetworkReady=false") && message.contains(&module),
        "the Node's message names the network and the missing module: {message}"
    );
    wait_for("the Node Ready again", Duration::from_secs(120), || {
        (node.ready().0 == "True").then_some(())
    });
    let after = pods::of_group(node, "steady")["steady-0"].clone();
    assert_eq!(pods::phase(&after), "Running");
    assert_eq!(
        pod_ips(&after),
        vec![ip.clone()],
        "the running pod kept its address"
    );
    assert_eq!(
        after["status"]["containerStatuses"][0]["restartCount"], 0,
        "the running pod was not restarted"
    );
    assert!(node.ping(&ip));
    pods::delete_all(node, "steady", HERD_LIMIT);
}

fn restart_and_gc(node: &Node) {
    // Churn: waves of pods created and deleted; containerd killed and started again
    // while the second wave is being created; then, with the third wave running, a
    // node reset (containerd, its shims and its state gone, no DEL for any sandbox):
    // kubelet makes the third wave's sandboxes anew, and the old ones' addresses leak.
    for wave in 0..3 {
        let group = format!("churn{wave}");
        pods::create(node, &group, 20);
        if wave == 1 {
            // Down mid-creation: once the runtime has made the wave's first sandbox.
            let prefix = format!("default/{group}-");
            wait_for("the wave's first sandbox", HERD_LIMIT, || {
                let sandboxes = pods::sandboxes(node);
                sandboxes
                    .values()
                    .any(|(name, _)| name.starts_with(&prefix))
                    .then_some(())
            });
            node.restart_containerd(false);
        }
        pods::until_running(node, &group, 20, HERD_LIMIT);
        if wave < 2 {
            node.kubectl_ok(&[
                "delete",
                "pods",
                "-l",
                &format!("group={group}"),
                "--wait=false",
            ]);
        }
    }
    wait_for("the deleted waves gone", HERD_LIMIT, || {
        (pods::of_group(node, "churn0").is_empty() && pods::of_group(node, "churn1").is_empty())
            .then_some(())
    });
    let before_reset: BTreeSet<String> = pods::of_group(node, "churn2")
        .values()
        .flat_map(pod_ips)
        .collect();
    node.restart_containerd(true);
    wait_for_explained(
        "the third wave's 20 sandboxes made anew and ready",
        HERD_LIMIT,
        || {
            let ready = pods::sandboxes(node)
                .values()
                .filter(|(pod, ready)| *ready && pod.starts_with("default/churn2-"))
                .count();
            let pods = pods::of_group(node, "churn2");
            let fresh = pods.values().all(|p| {
                let ips = pod_ips(p);
                pods::phase(p) == "Running"
                    && ips.len() == 1
                    && ips.iter().all(|ip| !before_reset.contains(ip))
            });
            (ready == 20 && fresh).then_some(())
        },
        || explain_pods(node, "churn2", &before_reset),
    );
    let in_use: BTreeSet<String> = pods::of_group(node, "churn2")
        .values()
        .flat_map(pod_ips)
        .collect();
    let stored_before: BTreeSet<String> = node
        .allocations()
        .iter()
        .map(|r| bare(r["address"].as_str().unwrap()).to_string())
        .collect();
    let leaked: BTreeSet<_> = stored_before.difference(&in_use).cloned().collect();
    assert!(
        before_reset.is_subset(&leaked),
        "the reset's lost sandboxes' addresses are among the leaked: {before_reset:?} not in {leaked:?}"
    );
    eprintln!(
        "kube: after the restart and the reset, {} addresses in the store, {} in use, {} leaked",
        stored_before.len(),
        in_use.len(),
        leaked.len()
    );
    let gc = node.wasm_ipam(&[
        "gc",
        "--runtime-endpoint",
        node.env("RUNTIME_ENDPOINT"),
        "--grace",
        "0s",
    ]);
    assert!(
        gc.status.success(),
        "wasm-ipam gc: {}{}",
        String::from_utf8_lossy(&gc.stdout),
        String::from_utf8_lossy(&gc.stderr)
    );
    let stored_after: BTreeSet<String> = node
        .allocations()
        .iter()
        .map(|r| bare(r["address"].as_str().unwrap()).to_string())
        .collect();
    assert_eq!(
        stored_after, in_use,
        "after gc the store holds exactly the running pods' addresses"
    );
    for ip in &in_use {
        assert!(node.ping(ip), "{ip}, in use, answers no ping after gc");
    }
    pods::delete_all(node, "churn2", HERD_LIMIT);
}

/// One node at a time on a machine: a second `up` refuses a running node (naming its
/// DIR) and leaves it running; `--replace` takes it down first; and a node whose
/// processes all died (a machine stopped, a run killed with it) is reclaimed by the
/// next `up` without being asked, so one killed run never blocks the runs after it.
fn node_left_behind(node: &Node) {
    let old_dir = node.dir.path().display().to_string();
    let (refused, said) = Node::start(Store::Local, &[]);
    assert!(
        refused.is_err(),
        "a second up beside a running node came up"
    );
    assert!(
        said.contains(&format!("DIR {old_dir}")) && said.contains("--replace"),
        "the refusal names neither the running node's DIR nor --replace: {said}"
    );
    assert_eq!(
        node.ready().0,
        "True",
        "the refused up harmed the running node"
    );

    let (replacing, said) = Node::start(Store::Local, &["--replace"]);
    let replacing = replacing.unwrap_or_else(|()| panic!("up --replace: {said}"));
    assert!(
        said.contains(&format!("replacing the running node of {old_dir}")),
        "up --replace did not say what it replaced: {said}"
    );
    assert!(
        !node.dir.path().join("pids").exists(),
        "the replaced node's processes were not stopped"
    );
    assert_eq!(replacing.ready().0, "True");

    replacing.kill_all();
    let dead_dir = replacing.dir.path().display().to_string();
    let (next, said) = Node::start(Store::Local, &[]);
    let mut next = next.unwrap_or_else(|()| panic!("up after a node died without down: {said}"));
    assert!(
        said.contains(&format!(
            "reclaiming a node left behind by a run that ended without down ({dead_dir})"
        )),
        "up did not say it reclaimed the dead node: {said}"
    );
    assert_eq!(next.ready().0, "True");
    next.down();
}

/// What a wait on `group`'s pods saw last: each pod's phase and addresses (marked
/// when one is in `stale`), the runtime's sandboxes, the store's rows, and the last
/// sandbox and network failures kubelet and containerd logged.
fn explain_pods(node: &Node, group: &str, stale: &BTreeSet<String>) -> String {
    let mut out = String::new();
    for (name, pod) in pods::of_group(node, group) {
        let ips = pod_ips(&pod);
        let old = ips.iter().any(|ip| stale.contains(ip));
        out += &format!(
            "pod {name}: {} {ips:?}{}\n",
            pods::phase(&pod),
            if old { " (an address from before)" } else { "" }
        );
    }
    let sandboxes = pods::sandboxes(node);
    let ready = sandboxes.values().filter(|(_, ready)| *ready).count();
    out += &format!(
        "sandboxes: {} ({ready} ready); rows in the store: {}\n",
        sandboxes.len(),
        node.allocations().len()
    );
    out += "kubelet:\n";
    out += &node.log_lines_with(
        "KUBELET_LOG",
        &["RunPodSandbox", "CreatePodSandbox", "KillPodSandbox"],
        10,
    );
    out += "\ncontainerd:\n";
    out += &node.log_lines_with("CONTAINERD_LOG", &["level=error"], 10);
    out
}
