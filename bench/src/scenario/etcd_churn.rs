//! Pod churn on the etcd store as a cluster makes it: simulated nodes (each its own
//! lock file, data dir, log and `nodeName`) on a 3-member etcd, each starting and
//! stopping its pods through `examples/cluster-pool` with named pools chosen by the
//! pod's namespace, all nodes at once. From outside, each call's wall latency; from
//! wasm-ipam's logs, its etcd requests, time in etcd, conflicts and retries. Every pod
//! is sticky (`stickySeconds` with `stickyPods: all`, the costliest choice), and halfway through the whole etcd cluster is frozen for [`OUTAGE`]. Then what must
//! hold after churn: no failed call but during the outage (and those answered within
//! the store's bound), every address from its pod's pool, no address held by two pods
//! at once, and no attachment left after the last DEL (a DEL that failed in the outage
//! is sent again, as a runtime does).

use super::{Peer, wall_ms, warm_cache};
use crate::etcd::Etcd;
use crate::invocations::{self, Invocation};
use crate::process::{Finished, Runner};
use crate::report::{Section, Target, table};
use crate::setup::{Node, Paths};
use crate::stats::{Samples, ms};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::io;
use std::net::IpAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

pub struct Options {
    /// Simulated nodes.
    pub nodes: usize,
    /// Pods each node starts and stops.
    pub pods: usize,
}

/// etcd members: the smallest cluster that survives losing one, so every commit waits
/// for a second member's fsync as in production.
const MEMBERS: usize = 3;
/// Pods a node keeps running: once it has this many, each new pod follows the DEL of
/// its oldest.
const ALIVE: usize = 10;
/// Calls a node has running at once. A kubelet starts and stops a node's pods in
/// parallel workers, and wasm-ipam's node lock then serves them one at a time; two
/// keep the lock busy (one call's start-up overlaps the other's turn) without a queue
/// that would measure the lock instead of the store.
const IN_FLIGHT: usize = 2;
/// How long the whole cluster is frozen, halfway through the churn.
const OUTAGE: Duration = Duration::from_secs(10);
/// `stickySeconds` (with `stickyPods: all`): every pod keeps its addresses this long
/// after its DEL.
const STICKY_SECONDS: u64 = 30;
/// The store's bound on a call that cannot reach etcd (`ipam.store.timeoutSeconds`).
const STORE_TIMEOUT: Duration = Duration::from_secs(5);

/// A named pool of the netconf (docs/cluster.md, "Pools per namespace or pod").
struct Pool {
    name: &'static str,
    cidrs: &'static [&'static str],
    namespaces: &'static [&'static str],
}

/// Two tenants' pools and a dual-stack default, as docs/cluster.md's example.
const POOLS: [Pool; 3] = [
    Pool {
        name: "team-a",
        cidrs: &["10.81.0.0/16"],
        namespaces: &["team-a", "team-a-ci"],
    },
    Pool {
        name: "team-b",
        cidrs: &["10.82.0.0/16"],
        namespaces: &["team-b"],
    },
    Pool {
        name: DEFAULT_POOL,
        cidrs: &["10.80.0.0/16", "fd80::/48"],
        namespaces: &[],
    },
];
const DEFAULT_POOL: &str = "default";
/// The pods' namespaces, in turn: "web" is listed by no pool, so its pods take the
/// default.
const NAMESPACES: [&str; 4] = ["team-a", "team-a-ci", "team-b", "web"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CniCommand {
    Add,
    Del,
}

impl CniCommand {
    fn name(self) -> &'static str {
        match self {
            CniCommand::Add => "ADD",
            CniCommand::Del => "DEL",
        }
    }
}

/// One node's calls in the order its runtime makes them: pods start one after
/// another; once `alive` run, the oldest one's DEL comes before each new ADD; at the
/// end the last ones are deleted.
fn schedule(pods: usize, alive: usize) -> Vec<(CniCommand, usize)> {
    let mut calls = Vec::with_capacity(2 * pods);
    for pod in 0..pods {
        if pod >= alive {
            calls.push((CniCommand::Del, pod - alive));
        }
        calls.push((CniCommand::Add, pod));
    }
    calls.extend((pods.saturating_sub(alive)..pods).map(|pod| (CniCommand::Del, pod)));
    calls
}

/// The pool a pod of `namespace` draws from.
fn pool_for(namespace: &str) -> &'static Pool {
    POOLS
        .iter()
        .find(|p| p.namespaces.contains(&namespace))
        .or_else(|| POOLS.iter().find(|p| p.name == DEFAULT_POOL))
        .expect("POOLS has the default")
}

/// Whether `cidr` ("10.81.0.0/16", "fd80::/48") holds `ip`.
fn contains(cidr: &str, ip: IpAddr) -> bool {
    let Some((net, len)) = cidr.split_once('/') else {
        return false;
    };
    let (Ok(net), Ok(len)) = (net.parse::<IpAddr>(), len.parse::<u32>()) else {
        return false;
    };
    // Both as the top bits of a u128, so one mask serves both families.
    let bits = |ip: IpAddr| match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)) << 96,
        IpAddr::V6(a) => u128::from(a),
    };
    net.is_ipv4() == ip.is_ipv4()
        && (bits(net) ^ bits(ip))
            .checked_shr(128 - len.min(128))
            .unwrap_or(0)
            == 0
}

/// The cluster-pool `ipam` keys of node `node` on `etcd` under `prefix`.
fn ipam(etcd: &Etcd, prefix: &str, node: &str) -> Value {
    let pools: Vec<Value> = POOLS
        .iter()
        .map(|p| {
            json!({"name": p.name, "cidr": p.cidrs, "namespaces": p.namespaces,
                   "default": p.name == DEFAULT_POOL})
        })
        .collect();
    json!({
        "pools": pools,
        "blockSize": 26,
        "stickySeconds": STICKY_SECONDS,
        "stickyPods": "all",
        "nodeName": node,
        // Every member, as a node is configured in production; the rate limiter opened
        // wide as in the herd, so the store is measured, not the limiter.
        "store": {"type": "etcd", "endpoints": etcd.endpoints(), "prefix": prefix,
                  "qps": 100000, "burst": 100000,
                  "timeoutSeconds": STORE_TIMEOUT.as_secs()},
    })
}

/// A node under churn: its files and netconf, and where it is in its schedule.
struct NodeRun {
    node: Node,
    peer: Peer,
    /// The next call of the schedule to start.
    next: usize,
    running: usize,
    /// Pods whose ADD has returned (so their DEL may start).
    added: Vec<bool>,
}

/// One finished call of the churn.
struct Record {
    node: usize,
    pod: usize,
    command: CniCommand,
    done: Finished,
}

fn container_id(node: usize, pod: usize) -> String {
    format!("churn-{node}-{pod}")
}

/// When the cluster was frozen and thawed.
struct Window {
    from: Instant,
    to: Instant,
}

impl Window {
    fn overlaps(&self, done: &Finished) -> bool {
        done.spawned < self.to && done.ended > self.from
    }
}

/// Runs every node's schedule at once, each node with up to [`IN_FLIGHT`] calls
/// running, a new one as soon as one ends; freezes `etcd` for [`OUTAGE`] once half
/// the calls have ended.
fn churn(
    runs: &mut [NodeRun],
    calls: &[(CniCommand, usize)],
    etcd: &Etcd,
) -> io::Result<(Vec<Record>, Window)> {
    let mut runner = Runner::new();
    let total = runs.len() * calls.len();
    let mut frozen: Option<Instant> = None;
    let mut window: Option<Window> = None;
    // By tag: which node and which call of its schedule.
    let mut spawned: Vec<(usize, usize)> = Vec::new();
    let mut records = Vec::with_capacity(runs.len() * calls.len());
    loop {
        for (n, run) in runs.iter_mut().enumerate() {
            while run.running < IN_FLIGHT && run.next < calls.len() {
                let (command, pod) = calls[run.next];
                if command == CniCommand::Del && !run.added[pod] {
                    break;
                }
                let id = container_id(n, pod);
                let args = format!(
                    "K8S_POD_NAMESPACE={};K8S_POD_NAME=pod-{n}-{pod}",
                    NAMESPACES[pod % NAMESPACES.len()]
                );
                let mut call = run.peer.call(command.name(), &id);
                call.cni_args = Some(&args);
                call.stdout = (command == CniCommand::Add).then(|| run.node.out(&id));
                runner.spawn(spawned.len(), &call)?;
                spawned.push((n, run.next));
                run.next += 1;
                run.running += 1;
            }
        }
        let Some(done) = runner.reap(true) else {
            break;
        };
        if frozen.is_none() && window.is_none() && records.len() >= total / 2 {
            etcd.freeze();
            frozen = Some(Instant::now());
        }
        if let Some(from) = frozen.filter(|from| from.elapsed() >= OUTAGE) {
            etcd.thaw();
            window = Some(Window {
                from,
                to: Instant::now(),
            });
            frozen = None;
        }
        let (n, i) = spawned[done.tag];
        let (command, pod) = calls[i];
        runs[n].running -= 1;
        // A runtime sends DEL after a failed ADD too.
        if command == CniCommand::Add {
            runs[n].added[pod] = true;
        }
        records.push(Record {
            node: n,
            pod,
            command,
            done,
        });
    }
    if let Some(from) = frozen {
        etcd.thaw();
        window = Some(Window {
            from,
            to: Instant::now(),
        });
    }
    if records.len() != total {
        return Err(io::Error::other(format!(
            "{} of {total} churn calls never ran or could not be reaped",
            total - records.len()
        )));
    }
    let window = window.ok_or_else(|| io::Error::other("the churn ended before its outage"))?;
    Ok((records, window))
}

/// Sends each DEL that failed again, one at a time, until it succeeds (a runtime
/// retries a failed DEL); each retry is a record of its own.
fn retry_failed_dels(runs: &[NodeRun], records: &mut Vec<Record>) -> io::Result<()> {
    let failed: Vec<(usize, usize)> = records
        .iter()
        .filter(|r| r.command == CniCommand::Del && !r.done.success)
        .map(|r| (r.node, r.pod))
        .collect();
    let mut runner = Runner::new();
    for (node, pod) in failed {
        for _ in 0..5 {
            let id = container_id(node, pod);
            let args = format!(
                "K8S_POD_NAMESPACE={};K8S_POD_NAME=pod-{node}-{pod}",
                NAMESPACES[pod % NAMESPACES.len()]
            );
            let mut call = runs[node].peer.call(CniCommand::Del.name(), &id);
            call.cni_args = Some(&args);
            runner.spawn(0, &call)?;
            let done = runner
                .reap(true)
                .ok_or_else(|| io::Error::other("a retried DEL could not be reaped"))?;
            let success = done.success;
            records.push(Record {
                node,
                pod,
                command: CniCommand::Del,
                done,
            });
            if success {
                break;
            }
        }
    }
    Ok(())
}

/// Every address of an ADD result (stdout file); none if it is not one.
fn result_addresses(stdout: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(stdout).unwrap_or_default();
    let result: Value = serde_json::from_str(&text).unwrap_or_default();
    result["ips"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ip| ip["address"].as_str().map(str::to_string))
        .collect()
}

/// How many holdings overlap an earlier holding of the same address. A holding is
/// (address, from, to), from its ADD's return (the address was committed by then) to
/// its DEL's spawn (it was not released before): two that overlap were surely held
/// at one instant.
fn held_twice(holdings: &mut [(String, Instant, Instant)]) -> usize {
    holdings.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut twice = 0;
    for (i, (address, from, _)) in holdings.iter().enumerate() {
        let overlaps = holdings[..i]
            .iter()
            .rev()
            .take_while(|h| &h.0 == address)
            .any(|h| h.2 > *from);
        twice += usize::from(overlaps);
    }
    twice
}

/// The attachments `wasm-ipam list --json` shows on the store of `node`'s netconf.
fn attachments_left(wasm_ipam: &Path, node: &Node, netconf: &Path) -> io::Result<usize> {
    let out = Command::new(wasm_ipam)
        .arg("list")
        .arg("--json")
        .arg("--netconf")
        .arg(netconf)
        .arg("--lock-file")
        .arg(node.dir.join("ipam.lock"))
        .arg("--data-dir")
        .arg(node.dir.join("data"))
        .output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "wasm-ipam list after the churn failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let rows: Vec<Value> = serde_json::from_slice(&out.stdout)
        .map_err(|e| io::Error::other(format!("wasm-ipam list --json: {e}")))?;
    Ok(rows.len())
}

/// One row of the table: the calls of one CNI command, with their log lines.
fn row(command: CniCommand, records: &[Record], lines: &[Invocation]) -> Vec<String> {
    let calls: Vec<&Record> = records.iter().filter(|r| r.command == command).collect();
    let lines: Vec<&Invocation> = lines
        .iter()
        .filter(|l| l.command == command.name())
        .collect();
    let wall: Samples = calls.iter().map(|r| r.done.ms()).collect();
    let requests: Samples = lines.iter().map(|l| l.etcd_requests).collect();
    let etcd_ms: Samples = lines.iter().map(|l| l.etcd_ms).collect();
    let total = |f: fn(&Invocation) -> f64| -> u64 {
        lines.iter().map(|l| f(l)).collect::<Samples>().sum() as u64
    };
    vec![
        command.name().to_string(),
        format!("{} ({} logged)", calls.len(), lines.len()),
        calls.iter().filter(|r| !r.done.success).count().to_string(),
        format!("{} / {}", ms(wall.median()), ms(wall.percentile(0.99))),
        // A count, not a time: its mean times the calls is the load etcd served.
        format!(
            "{:.0} / {:.1}",
            requests.median(),
            requests.sum() / requests.len() as f64
        ),
        format!(
            "{} / {}",
            ms(etcd_ms.median()),
            ms(etcd_ms.percentile(0.99))
        ),
        format!(
            "{} / {}",
            total(|l| l.etcd_conflicts),
            total(|l| l.store_retries)
        ),
    ]
}

pub fn run(paths: &Paths, opts: &Options) -> io::Result<Section> {
    if opts.nodes == 0 || opts.pods == 0 {
        return Err(io::Error::other(
            "etcd churn needs at least one node and one pod",
        ));
    }
    let etcd = Etcd::start(MEMBERS)?;
    let cache = warm_cache(
        &paths.wasm_ipam,
        &paths.cluster_pool_module,
        ipam(&etcd, "/bench-churn-warm/", "warm"),
    )?;
    let mut runs = node_runs(paths, opts, &etcd, cache.path())?;
    let calls = schedule(opts.pods, ALIVE);
    eprintln!(
        "  etcd churn: {} nodes × {} pods on {MEMBERS} etcd members, frozen for {} s halfway",
        opts.nodes,
        opts.pods,
        OUTAGE.as_secs()
    );
    let (mut records, window) = churn(&mut runs, &calls, &etcd)?;
    let wall = wall_ms(&records.iter().map(|r| r.done).collect::<Vec<_>>());
    let churned = records.len();
    // What failed: outside the outage (none may), and in it (each within the bound,
    // with a second for the process and the lock queue's turn of the other call).
    let (failed_outside, failed_in) = failures_by_outage(&records, &window);
    let slowest_failed = failed_in.iter().copied().fold(0.0, f64::max);
    let bound_ms = (IN_FLIGHT as f64 * STORE_TIMEOUT.as_secs_f64() + 1.0) * 1000.0;
    retry_failed_dels(&runs, &mut records)?;
    let (wrong_pool, mut holdings) = addresses_held(&runs, &records)?;
    let distinct = holdings
        .iter()
        .map(|h| h.0.as_str())
        .collect::<HashSet<_>>()
        .len();
    let twice = held_twice(&mut holdings);
    let left = attachments_left(&paths.wasm_ipam, &runs[0].node, &runs[0].peer.netconf)?;
    let retried = records.len() - churned;
    let failed_retries = records[churned..]
        .iter()
        .filter(|r| !r.done.success)
        .count();
    let lines: Vec<Invocation> = runs
        .iter()
        .flat_map(|r| invocations::read(&r.node.log_file()))
        .collect();

    let mut body = setup_text(opts, wall, churned);
    body += &calls_table(&records, &lines);
    let checks = format!(
        "{failed_outside} calls failed outside the outage, {} in it (the slowest answered \
         in {:.1} s); {retried} failed DELs sent again, {failed_retries} of those failed; \
         {wrong_pool} ADD results outside their namespace's pool; {distinct} distinct \
         addresses handed out, {twice} held by two pods at once; {left} attachments \
         listed after the last DEL",
        failed_in.len(),
        slowest_failed / 1000.0
    );
    body += &format!(
        "\nChecked after the churn: {checks}. An address counts as held from its ADD's \
         return to its DEL's start; the attachments are what `wasm-ipam list --json` \
         shows on the store.\n"
    );
    let pass = failed_outside == 0
        && slowest_failed <= bound_ms
        && failed_retries == 0
        && wrong_pool == 0
        && twice == 0
        && left == 0;
    Ok(Section {
        title: format!(
            "Pod churn on a {MEMBERS}-member etcd: {} nodes × {} pods",
            opts.nodes, opts.pods
        ),
        body,
        targets: vec![target(bound_ms, checks, pass)],
    })
}

/// The calls that failed outside the outage `window` (how many), and those in it
/// (each one's time, ms).
fn failures_by_outage(records: &[Record], window: &Window) -> (usize, Vec<f64>) {
    let failed_outside = records
        .iter()
        .filter(|r| !r.done.success && !window.overlaps(&r.done))
        .count();
    let failed_in: Vec<f64> = records
        .iter()
        .filter(|r| !r.done.success && window.overlaps(&r.done))
        .map(|r| r.done.ms())
        .collect();
    (failed_outside, failed_in)
}

/// The ADDs' and the DELs' figures: calls, failures, wall latency, and the
/// datastore's figures from the log `lines`.
fn calls_table(records: &[Record], lines: &[Invocation]) -> String {
    table(
        &[
            "call",
            "calls",
            "failed",
            "wall p50 / p99",
            "etcd requests p50 / mean",
            "etcd time p50 / p99",
            "conflicts / retries (all calls)",
        ],
        &[
            row(CniCommand::Add, records, lines),
            row(CniCommand::Del, records, lines),
        ],
    )
}

/// Each of `opts.nodes` nodes, its netconf naming `etcd` and the module cache at
/// `cache`, at the start of its schedule.
fn node_runs(paths: &Paths, opts: &Options, etcd: &Etcd, cache: &Path) -> io::Result<Vec<NodeRun>> {
    (0..opts.nodes)
        .map(|n| {
            let node = Node::new("etcd-churn")?;
            let netconf = node.wasm_ipam_netconf(
                &paths.cluster_pool_module,
                cache,
                ipam(etcd, "/bench-churn/", &format!("churn-node-{n}")),
            );
            let peer = Peer {
                name: "wasm-ipam",
                plugin: paths.wasm_ipam.clone(),
                netconf,
                log: Some(node.log_file()),
            };
            Ok(NodeRun {
                node,
                peer,
                next: 0,
                running: 0,
                added: vec![false; opts.pods],
            })
        })
        .collect()
}

/// An address a pod held: from its ADD's return to its DEL's start.
type Holding = (String, Instant, Instant);

/// Each pod's ADD and DEL, for its addresses and when it held them: the ADD results
/// not one address per family of their namespace's pool, each inside it; and each
/// address with the ADD's return and the DEL's start.
fn addresses_held(runs: &[NodeRun], records: &[Record]) -> io::Result<(usize, Vec<Holding>)> {
    let mut wrong_pool = 0;
    let mut holdings = Vec::new();
    for add in records
        .iter()
        .filter(|r| r.command == CniCommand::Add && r.done.success)
    {
        let run = &runs[add.node];
        let addresses = result_addresses(&run.node.out(&container_id(add.node, add.pod)));
        let pool = pool_for(NAMESPACES[add.pod % NAMESPACES.len()]);
        let in_pool = |a: &String| {
            let ip = a.split('/').next().and_then(|ip| ip.parse::<IpAddr>().ok());
            ip.is_some_and(|ip| pool.cidrs.iter().any(|c| contains(c, ip)))
        };
        // One address per family of the pool, each inside it.
        if addresses.len() != pool.cidrs.len() || !addresses.iter().all(in_pool) {
            wrong_pool += 1;
        }
        let del = records
            .iter()
            .find(|r| {
                r.command == CniCommand::Del
                    && r.node == add.node
                    && r.pod == add.pod
                    && r.done.success
            })
            .ok_or_else(|| io::Error::other("a pod was added but never deleted"))?;
        holdings.extend(
            addresses
                .into_iter()
                .map(|a| (a, add.done.ended, del.done.spawned)),
        );
    }
    Ok((wrong_pool, holdings))
}

/// How the churn was set up and run: `wall` ms for the `churned` calls.
fn setup_text(opts: &Options, wall: f64, churned: usize) -> String {
    format!(
        "{nodes} simulated nodes (each its own lock, data dir, log and `nodeName`) share a \
         {MEMBERS}-member etcd cluster on loopback (Debian's etcd-server 3.4, default \
         settings: every commit waits for a quorum's fsync, the members sharing this \
         machine's disk). Each node's `store.endpoints` lists all {MEMBERS} members and \
         its rate limiter is opened wide (`qps`, `burst` 100000), as in the herd above. \
         wasm-ipam runs `examples/cluster-pool` from a warm cache with named pools in /26 \
         blocks: team-a (10.81.0.0/16; namespaces team-a, team-a-ci), team-b \
         (10.82.0.0/16; team-b) and a dual-stack default (10.80.0.0/16, fd80::/48); the \
         pods' namespaces (`K8S_POD_NAMESPACE` in `CNI_ARGS`) take turns among team-a, \
         team-a-ci, team-b and web (listed by no pool: the default).\n\n\
         Each node runs {pods} pods: it starts them one after another and, once {ALIVE} \
         run, deletes its oldest before each new one, then deletes the last {ALIVE}. A \
         node has up to {IN_FLIGHT} calls running, a new one as soon as one ends (a \
         kubelet starts and stops pods in parallel workers; wasm-ipam's node lock then \
         serves them one at a time), and a pod's DEL starts only after its ADD returned. \
         All nodes churn at once: {calls} calls in {:.1} s ({:.0} calls/s). Every pod is \
         sticky (`stickySeconds` {STICKY_SECONDS} with `stickyPods: all`, the costliest \
         choice: every pod's addresses are kept for it after its DEL). Once half the calls \
         have ended, every etcd member is frozen (SIGSTOP: connections accepted, nothing \
         answered) for {outage} s; the store's bound (`timeoutSeconds` {timeout}) ends a \
         call that cannot reach it, and each DEL that failed is sent again afterwards, as \
         a runtime does. Wall latency is spawn to exit (lock wait included); datastore \
         figures are per call, from wasm-ipam's log (`etcd_requests`, `etcd_ms`, \
         `etcd_conflicts`, `store_retries`).\n\n",
        wall / 1000.0,
        churned as f64 / (wall / 1000.0),
        nodes = opts.nodes,
        pods = opts.pods,
        calls = churned,
        outage = OUTAGE.as_secs(),
        timeout = STORE_TIMEOUT.as_secs(),
    )
}

/// The scenario's target: calls fail only in the outage, each within `bound_ms`,
/// and addresses stay exclusive (`checks` says what was measured).
fn target(bound_ms: f64, checks: String, pass: bool) -> Target {
    Target {
        name: "etcd churn with an outage: calls fail only in it, fast; addresses stay exclusive"
            .into(),
        goal: format!(
            "0 failed outside the outage, each failed one within {:.0} s, 0 outside their pool, 0 held twice, 0 left",
            bound_ms / 1000.0
        ),
        measured: checks,
        pass,
        miss: if pass {
            String::new()
        } else {
            "see the etcd churn section".into()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_schedule_adds_then_deletes_every_pod_once_with_at_most_alive_running() {
        for (pods, alive) in [(100, 10), (5, 10), (10, 10), (1, 1)] {
            let calls = schedule(pods, alive);
            assert_eq!(calls.len(), 2 * pods);
            let mut running = HashSet::new();
            let mut deleted = HashSet::new();
            for (command, pod) in calls {
                match command {
                    CniCommand::Add => assert!(running.insert(pod) && !deleted.contains(&pod)),
                    CniCommand::Del => assert!(running.remove(&pod) && deleted.insert(pod)),
                }
                assert!(running.len() <= alive);
            }
            assert!(running.is_empty());
            assert_eq!(deleted.len(), pods);
        }
    }

    #[test]
    fn pools_hold_their_addresses_by_prefix_and_family() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(contains("10.81.0.0/16", ip("10.81.255.3")));
        assert!(!contains("10.81.0.0/16", ip("10.82.0.1")));
        assert!(contains("fd80::/48", ip("fd80:0:0:12::5")));
        assert!(!contains("fd80::/48", ip("fd80:0:1::5")));
        assert!(!contains("10.0.0.0/8", ip("::a00:1")));
        assert!(contains("0.0.0.0/0", ip("192.0.2.1")));
        assert_eq!(pool_for("team-a-ci").name, "team-a");
        assert_eq!(pool_for("web").name, DEFAULT_POOL);
    }

    #[test]
    fn an_address_is_held_twice_only_when_two_holdings_overlap() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let h = |a: &str, from: u64, to: u64| (a.to_string(), at(from), at(to));
        // Reused after its release, and another address at the same time: fine.
        let mut fine = vec![h("a", 0, 10), h("a", 10, 20), h("b", 5, 15)];
        assert_eq!(held_twice(&mut fine), 0);
        // The third holding of "a" starts before the first one's ends.
        let mut bad = vec![h("a", 0, 30), h("a", 10, 20), h("a", 25, 40)];
        assert_eq!(held_twice(&mut bad), 2);
    }
}
