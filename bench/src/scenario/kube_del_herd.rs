//! The DEL herd this project exists for, on a real node: kubelet and containerd 2
//! (scripts/kube-node.sh) with wasm-ipam running cluster-pool on a cluster store whose
//! node-wide rate limiter is at `qps` 5 and `burst` 10, N pods created at once and
//! then deleted at once. Calico's DELs failed in this scene ("client rate limiter Wait
//! returned an error: context deadline exceeded"). The same scene on the Kubernetes
//! store, on the etcd store, and with whereabouts as the node's IPAM, one node after
//! the other in the same run; what each DEL did is read from wasm-ipam's log, line by
//! line (whereabouts': its IPPools after, and its error lines), and what the runtime
//! said from containerd's and kubelet's.

use super::kube_node::KubeNode;
use crate::report::{Section, table};
use crate::setup::Paths;
use crate::stats::{Samples, ratio};
use serde_json::Value;
use std::io;
use std::time::Duration;

pub struct Options {
    /// Pods created at once, then deleted at once.
    pub pods: usize,
}

/// The rate every node of the scene runs at.
const QPS: &str = "5";
const BURST: &str = "10";

/// What one store's node measured.
struct Measured {
    all_running: Duration,
    all_deleted: Duration,
    dels: usize,
    dels_failed: usize,
    /// containerd's and kubelet's error lines about a teardown, after the delete.
    runtime_errors: usize,
    leaked: usize,
    lock_wait_ms: Samples,
    requests: Samples,
    rate_wait_ms: Samples,
}

/// The node's IPAM in one scene.
#[derive(Clone, Copy, PartialEq)]
enum Ipam {
    /// wasm-ipam on this cluster store.
    WasmIpam(&'static str),
    /// whereabouts v0.9.2 in the Kubernetes API (scripts/kube-node.sh --ipam whereabouts).
    Whereabouts,
}

impl Ipam {
    fn name(self) -> &'static str {
        match self {
            Ipam::WasmIpam("kubernetes") => "wasm-ipam, Kubernetes store",
            Ipam::WasmIpam(_) => "wasm-ipam, etcd store",
            Ipam::Whereabouts => "whereabouts v0.9.2",
        }
    }
}

pub fn run(paths: &Paths, opts: &Options) -> io::Result<Section> {
    let mut rows = Vec::new();
    let mut measured = Vec::new();
    for ipam in [
        Ipam::WasmIpam("kubernetes"),
        Ipam::WasmIpam("etcd"),
        Ipam::Whereabouts,
    ] {
        let m = on_a_node(paths, ipam, opts.pods)?;
        rows.push(row(opts, ipam, &m));
        measured.push(m);
    }
    // Ratios of wasm-ipam on the Kubernetes store against each other node; the lock
    // and request columns only where both are wasm-ipam's (whereabouts logs neither).
    let k = &measured[0];
    for (label, other, logged) in [
        ("ratio Kubernetes / etcd", &measured[1], true),
        (
            "ratio wasm-ipam Kubernetes / whereabouts",
            &measured[2],
            false,
        ),
    ] {
        let both = |row: String| if logged { row } else { String::new() };
        rows.push(vec![
            label.into(),
            String::new(),
            ratio(k.all_running.as_secs_f64(), other.all_running.as_secs_f64()),
            ratio(k.all_deleted.as_secs_f64(), other.all_deleted.as_secs_f64()),
            String::new(),
            String::new(),
            both(ratio(k.lock_wait_ms.max(), other.lock_wait_ms.max())),
            both(ratio(k.requests.median(), other.requests.median())),
            String::new(),
        ]);
    }
    Ok(Section {
        title: "The DEL herd on a real node at qps 5, burst 10".into(),
        body: body(opts, &rows),
        targets: Vec::new(),
    })
}

/// One node's row: `ipam`'s figures `m`, those from wasm-ipam's log only for it.
fn row(opts: &Options, ipam: Ipam, m: &Measured) -> Vec<String> {
    // What wasm-ipam's log says of each DEL; whereabouts logs no such record.
    let logged = |s: String| match ipam {
        Ipam::Whereabouts => "n/a".to_string(),
        Ipam::WasmIpam(_) => s,
    };
    vec![
        ipam.name().to_string(),
        opts.pods.to_string(),
        format!("{:.1} s", m.all_running.as_secs_f64()),
        format!("{:.1} s", m.all_deleted.as_secs_f64()),
        match ipam {
            Ipam::Whereabouts => format!(
                "({} error lines in its log) / {}",
                m.dels_failed, m.runtime_errors
            ),
            Ipam::WasmIpam(_) => {
                format!("**{}** of {} / {}", m.dels_failed, m.dels, m.runtime_errors)
            }
        },
        format!("**{}**", m.leaked),
        logged(format!(
            "{:.1} s / {:.1} s",
            m.lock_wait_ms.median() / 1000.0,
            m.lock_wait_ms.max() / 1000.0
        )),
        logged(format!(
            "{:.0} / {:.0}",
            m.requests.median(),
            m.requests.max()
        )),
        logged(format!("{:.0} ms", m.rate_wait_ms.max())),
    ]
}

/// The section's text: how the nodes ran and what each column is, then the table of
/// `rows`.
fn body(opts: &Options, rows: &[Vec<String>]) -> String {
    format!(
        "A one-node cluster of real processes (scripts/kube-node.sh: kube-apiserver, kubelet \
         and containerd 2 built from their Go modules, ptp as the main plugin), wasm-ipam \
         running `examples/cluster-pool` (10.244.0.0/16 in /26 blocks) on a cluster store \
         with the node's rate limiter at `qps` {QPS} and `burst` {BURST} (the Kubernetes \
         store with the kubelet's credentials, the etcd store on the cluster's etcd); \
         the budget as `wasm-ipam install` writes it (`deadlineSeconds` 45 from the lock \
         grant, `lockTimeoutSeconds` 60). {n} pods \
         created with one `kubectl apply`, then deleted with one `kubectl delete`, first \
         on the Kubernetes store, then on a fresh node on the etcd store, then on a \
         fresh node with whereabouts v0.9.2 as its IPAM instead (scripts/whereabouts.sh, \
         built from its Go module; its CRDs and its ClusterRole applied, bound to an \
         identity of its own, as its DaemonSet's service account is (the kubelet's may \
         not use its Lease: NodeRestriction keeps a node to its own Lease in \
         kube-node-lease), the pod CIDR as its range; client-go's default rate, `qps` 5 and \
         `burst` 10, in each of its processes, as it sets none). whereabouts' DEL exits \
         0 whatever happened and logs no per-call record: its failures show as \
         addresses its IPPools still hold after every pod went, and as error lines in \
         its own log. All deleted: \
         the delete to the last sandbox torn down and every pod gone from the API. DELs \
         failed: wasm-ipam's DEL records that are not ok, of all DEL records, and the \
         error lines about a teardown in containerd's and kubelet's logs (a DEL the \
         runtime killed at kubelet's 2-minute `runtimeRequestTimeout` leaves no record \
         of its own, only those). Leaked: `wasm-ipam list` after every pod went. Lock \
         wait, requests and limiter wait per DEL from its log record (`lock_wait_ms`, \
         `kube_requests`/`etcd_requests`, `kube_rate_wait_ms`/`etcd_rate_wait_ms`).\n\n{}",
        table(
            &[
                "store",
                "pods",
                "all Running",
                "all deleted",
                "DELs failed / runtime errors",
                "leaked",
                "DEL lock wait p50 / max",
                "requests per DEL p50 / max",
                "limiter wait per DEL max",
            ],
            rows
        ),
        n = opts.pods
    )
}

fn on_a_node(paths: &Paths, ipam: Ipam, pods: usize) -> io::Result<Measured> {
    let (store, flags) = match ipam {
        Ipam::WasmIpam(store) => (store, vec!["--store", store]),
        Ipam::Whereabouts => (
            "kubernetes",
            vec!["--store", "kubernetes", "--ipam", "whereabouts"],
        ),
    };
    let label = match ipam {
        Ipam::WasmIpam(store) => format!("del-herd-{store}"),
        Ipam::Whereabouts => "del-herd-whereabouts".into(),
    };
    let node = KubeNode::up(
        paths,
        &label,
        &[&flags[..], &["--qps", QPS, "--burst", BURST]].concat(),
        &paths.cluster_pool_module,
    )?;
    let all_running = node.run_pods(pods)?.into_iter().max().unwrap_or_default();

    let log_from = read(&node.env("IPAM_LOG_FILE"))
        .unwrap_or_default()
        .lines()
        .count();
    let errors_before = runtime_errors(&node)?;
    let all_deleted = node.delete_pods()?;
    let runtime_errors = runtime_errors(&node)? - errors_before;
    if ipam == Ipam::Whereabouts {
        let log = node.dir.join("whereabouts/whereabouts.log");
        return Ok(Measured {
            all_running,
            all_deleted,
            dels: 0,
            dels_failed: std::fs::read_to_string(log)
                .unwrap_or_default()
                .lines()
                .count(),
            runtime_errors,
            leaked: whereabouts_leaked(&node)?,
            lock_wait_ms: Samples::default(),
            requests: Samples::default(),
            rate_wait_ms: Samples::default(),
        });
    }
    let prefix = match store {
        "kubernetes" => "kube_",
        _ => "etcd_",
    };
    let records: Vec<Value> = read(&node.env("IPAM_LOG_FILE"))?
        .lines()
        .skip(log_from)
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["target"] == "invocation" && r["command"] == "DEL")
        .collect();
    let field =
        |name: &str| Samples::new(records.iter().filter_map(|r| r[name].as_f64()).collect());
    Ok(Measured {
        all_running,
        all_deleted,
        dels: records.len(),
        dels_failed: records.iter().filter(|r| r["outcome"] != "ok").count(),
        runtime_errors,
        leaked: leaked(paths, &node)?,
        lock_wait_ms: field("lock_wait_ms"),
        requests: field(&format!("{prefix}requests")),
        rate_wait_ms: field(&format!("{prefix}rate_wait_ms")),
    })
}

fn read(path: &str) -> io::Result<String> {
    std::fs::read_to_string(path)
}

/// The addresses whereabouts' IPPools still hand to a pod.
fn whereabouts_leaked(node: &KubeNode) -> io::Result<usize> {
    let pools = node.kubectl(&["get", "ippools.whereabouts.cni.cncf.io", "-A", "-o", "json"])?;
    let pools: Value = serde_json::from_str(&pools).map_err(io::Error::other)?;
    Ok(super::whereabouts_allocations(&pools, None))
}

/// containerd's and kubelet's error lines about tearing a sandbox's network down.
fn runtime_errors(node: &KubeNode) -> io::Result<usize> {
    let containerd = read(&node.env("CONTAINERD_LOG"))?;
    let kubelet = read(&node.env("KUBELET_LOG"))?;
    let teardown = |l: &str| {
        l.contains("StopPodSandbox")
            || l.contains("KillPodSandbox")
            || l.contains("teardown")
            || l.contains("destroy network")
    };
    Ok(containerd
        .lines()
        .filter(|l| l.contains("level=error") && teardown(l))
        .count()
        + kubelet
            .lines()
            .filter(|l| l.starts_with('E') && teardown(l))
            .count())
}

/// The addresses `wasm-ipam list` still shows for the node's network.
fn leaked(paths: &Paths, node: &KubeNode) -> io::Result<usize> {
    let conf_dir = node.env("CNI_CONF_DIR");
    let conflist = std::fs::read_dir(&conf_dir)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "conflist"))
        .ok_or_else(|| io::Error::other(format!("no conflist in {conf_dir}")))?;
    super::listed(&paths.wasm_ipam, &conflist)
}
