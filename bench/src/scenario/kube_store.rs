//! The Kubernetes store against the etcd store, call by call: one simulated node runs
//! `examples/cluster-pool` with the same netconf on each, only `ipam.store` differing:
//! a real kube-apiserver (scripts/kube-peers.sh's, with its own etcd, RBAC on, the
//! node's kubeconfig a client certificate of `system:node:<name>` in `system:nodes`,
//! the CRD and RBAC applied as `wasm-ipam kubernetes manifests` prints them), and one
//! Debian etcd member as the etcd scenarios start it. Per store: a first ADD (it claims
//! the node's first block), then sequential ADD+DEL cycles, each a fresh container id,
//! the two stores' cycles interleaved so they share the machine's noise. From the
//! calls: spawn-to-exit latency; from wasm-ipam's log: the requests each call sent.
//! The node's rate limiter is opened wide on both stores, so the latency is the
//! store's; what the Kubernetes store's default limiter then means for a herd of DELs
//! is computed from the requests measured.

use super::{Peer, warm_cache};
use crate::etcd::Etcd;
use crate::invocations::{self, Invocation};
use crate::kube_api::KubeApi;
use crate::process::{Finished, Runner};
use crate::report::{self, Section, table};
use crate::setup::{Node, Paths, TempDir, workspace};
use crate::stats::{Samples, count, median_max, ms, p50_p99, ratio};
use serde_json::{Value, json};
use std::io;
use std::path::Path;
use std::process::Command;
use wasm_ipam::config::{
    DEFAULT_ETCD_BURST, DEFAULT_ETCD_QPS, DEFAULT_KUBERNETES_BURST, DEFAULT_KUBERNETES_QPS,
};

pub struct Options {
    /// Measured ADD+DEL cycles per store.
    pub cycles: usize,
}

/// The simulated node: its kubeconfig's identity is `system:node:<NODE>`.
const NODE: &str = "bench-node";
/// The two stores' names in the table.
const KUBERNETES: &str = "Kubernetes API";
const ETCD: &str = "etcd";
/// The node's rate limiter on both stores, opened wide: this measures the stores.
const QPS: f64 = 1000.0;
const BURST: u32 = 1000;
/// The store's CRD, as `wasm-ipam kubernetes manifests` names it.
const CRD: &str = "crd/ipamshards.ipam.wasm-ipam.dev";
/// Of kubelet's 2-minute teardown, the seconds a herd of DELs has for the limiter's
/// refill, beside its full bucket.
const TEARDOWN_SECONDS: f64 = 110.0;

/// One store under test and what its calls measured.
struct Store {
    name: &'static str,
    node: Node,
    peer: Peer,
    /// The figures this store's calls log.
    requests: fn(&Invocation) -> f64,
    store_ms: fn(&Invocation) -> f64,
    rate_wait_ms: fn(&Invocation) -> f64,
    conflicts: fn(&Invocation) -> f64,
    adds: Vec<Finished>,
    dels: Vec<Finished>,
    failures: usize,
}

impl Store {
    fn new(
        name: &'static str,
        paths: &Paths,
        cache: &TempDir,
        store: Value,
        figures: [fn(&Invocation) -> f64; 4],
    ) -> io::Result<Store> {
        let label = name.split(' ').next().unwrap_or(name).to_lowercase();
        let node = Node::new(&format!("kube-store-{label}"))?;
        let peer = Peer {
            name: "wasm-ipam",
            plugin: paths.wasm_ipam.clone(),
            netconf: node.wasm_ipam_netconf(
                &paths.cluster_pool_module,
                cache.path(),
                cluster_pool(store),
            ),
            log: Some(node.log_file()),
        };
        let [requests, store_ms, rate_wait_ms, conflicts] = figures;
        Ok(Store {
            name,
            node,
            peer,
            requests,
            store_ms,
            rate_wait_ms,
            conflicts,
            adds: Vec::new(),
            dels: Vec::new(),
            failures: 0,
        })
    }

    /// The log lines of `command` calls whose container id starts with `prefix`.
    fn lines(&self, command: &str, prefix: &str) -> Vec<Invocation> {
        invocations::read(&self.node.log_file())
            .into_iter()
            .filter(|i| i.command == command && i.container_id.starts_with(prefix))
            .collect()
    }

    /// Why a call failed, for the error: the last line of the node's log.
    fn last_log_line(&self) -> String {
        std::fs::read_to_string(self.node.log_file())
            .unwrap_or_default()
            .lines()
            .last()
            .unwrap_or("(no log)")
            .to_string()
    }
}

/// The cluster-pool module's `ipam` keys, the same on both stores but `store`.
fn cluster_pool(store: Value) -> Value {
    json!({
        "cidr": "10.30.0.0/16",
        "blockSize": 26,
        "nodeName": NODE,
        "store": store,
    })
}

/// The version etcd at `program` reports (`etcd Version: X` on its first line).
fn etcd_version(program: &Path) -> String {
    Command::new(program)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            let first = text.lines().next()?.trim().to_string();
            Some(
                first
                    .strip_prefix("etcd Version: ")
                    .map_or(first.clone(), String::from),
            )
        })
        .unwrap_or_else(|| "of unknown version".into())
}

/// The peers' versions, for the section's text.
struct Versions {
    apiserver: String,
    apiserver_etcd: String,
    etcd: String,
}

/// The CRD and the nodes' RBAC as the binary under test prints them, applied as the
/// admin; returns once the apiserver serves the CRD (its Established condition).
pub(crate) fn apply_manifests(api: &KubeApi, wasm_ipam: &Path) -> io::Result<()> {
    let out = Command::new(wasm_ipam)
        .args(["kubernetes", "manifests"])
        .output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "wasm-ipam kubernetes manifests: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    api.apply(&String::from_utf8_lossy(&out.stdout))?;
    let established =
        api.kubectl(&["wait", "--for=condition=Established", "--timeout=60s", CRD])?;
    match established.status.success() {
        true => Ok(()),
        false => Err(io::Error::other(format!(
            "{CRD} never became Established: {}",
            String::from_utf8_lossy(&established.stderr)
        ))),
    }
}

pub fn run(paths: &Paths, opts: &Options) -> io::Result<Section> {
    let mut api = KubeApi::start()?;
    apply_manifests(&api, &paths.wasm_ipam)?;
    let kubeconfig = api.node_kubeconfig(NODE)?;
    refuse_unless_the_node(&api, &kubeconfig)?;
    let versions = Versions {
        apiserver: api
            .kubectl(&["version", "-o", "json"])
            .ok()
            .and_then(|o| serde_json::from_slice::<Value>(&o.stdout).ok())
            .and_then(|v| v["serverVersion"]["gitVersion"].as_str().map(String::from))
            .unwrap_or_else(|| "of unknown version".into()),
        apiserver_etcd: etcd_version(&api.peer("etcd")),
        etcd: etcd_version(Path::new(crate::etcd::ETCD)),
    };
    let etcd = Etcd::start(1)?;
    let etcd_store = |prefix: &str| json!({"type": "etcd", "endpoints": etcd.endpoints(), "prefix": prefix, "qps": QPS, "burst": BURST});
    let cache = warm_cache(
        &paths.wasm_ipam,
        &paths.cluster_pool_module,
        cluster_pool(etcd_store("/bench-warm/")),
    )?;
    let mut stores = [
        Store::new(
            KUBERNETES,
            paths,
            &cache,
            json!({"type": "kubernetes", "kubeconfig": kubeconfig, "qps": QPS, "burst": BURST}),
            [
                |i| i.kube_requests,
                |i| i.kube_ms,
                |i| i.kube_rate_wait_ms,
                |i| i.kube_conflicts,
            ],
        )?,
        Store::new(
            ETCD,
            paths,
            &cache,
            etcd_store("/bench-kube-store/"),
            [
                |i| i.etcd_requests,
                |i| i.etcd_ms,
                |i| i.etcd_rate_wait_ms,
                |i| i.etcd_conflicts,
            ],
        )?,
    ];
    let first_adds = run_cycles(&mut stores, opts)?;
    Ok(section(
        opts,
        &stores,
        &first_adds,
        &versions,
        &paths.wasm_ipam,
    ))
}

/// Refuses a node kubeconfig (`kubeconfig`) whose identity is not
/// `system:node:NODE` in `system:nodes`, as the apiserver `api` sees it.
fn refuse_unless_the_node(api: &KubeApi, kubeconfig: &Path) -> io::Result<()> {
    let whoami = api.kubectl_with(kubeconfig, &["auth", "whoami", "-o", "json"])?;
    let identity: Value = serde_json::from_slice(&whoami.stdout).unwrap_or_default();
    let user = &identity["status"]["userInfo"];
    let in_nodes = user["groups"]
        .as_array()
        .is_some_and(|g| g.iter().any(|g| g == "system:nodes"));
    if user["username"] != format!("system:node:{NODE}") || !in_nodes {
        return Err(io::Error::other(format!(
            "the node's kubeconfig is not system:node:{NODE} in system:nodes: {}{}",
            String::from_utf8_lossy(&whoami.stdout),
            String::from_utf8_lossy(&whoami.stderr)
        )));
    }
    Ok(())
}

/// Each store's first ADD, then `opts.cycles` ADD+DEL cycles per store, the stores'
/// interleaved, recorded in each store; the first ADDs.
fn run_cycles(stores: &mut [Store; 2], opts: &Options) -> io::Result<Vec<Finished>> {
    let mut runner = Runner::new();
    let mut first_adds = Vec::new();
    for store in stores.iter() {
        let first = runner.run(&store.peer.call("ADD", "first"))?;
        if !first.success {
            return Err(io::Error::other(format!(
                "the first ADD on the {} store failed: {}",
                store.name,
                store.last_log_line()
            )));
        }
        first_adds.push(first);
    }
    eprintln!(
        "  kube-store: {} ADD+DEL cycles per store, interleaved",
        opts.cycles
    );
    for i in 0..opts.cycles {
        let id = format!("cycle-{i}");
        // Alternate who goes first, so neither always follows the other's exit.
        let (a, b) = stores.split_at_mut(1);
        let order = match i % 2 {
            0 => [&mut a[0], &mut b[0]],
            _ => [&mut b[0], &mut a[0]],
        };
        for store in order {
            let add = runner.run(&store.peer.call("ADD", &id))?;
            let del = runner.run(&store.peer.call("DEL", &id))?;
            store.failures += usize::from(!add.success) + usize::from(!del.success);
            store.adds.push(add);
            store.dels.push(del);
        }
    }
    Ok(first_adds)
}

/// What one store measured, as the table and the herd sentence use it.
struct Figures {
    add: Samples,
    del: Samples,
    add_requests: Samples,
    del_requests: Samples,
    first_requests: f64,
    add_store_ms: Samples,
    del_store_ms: Samples,
    rate_wait_ms: Samples,
    conflicts: f64,
    logged: usize,
}

fn figures(store: &Store) -> Figures {
    let (adds, dels) = (store.lines("ADD", "cycle-"), store.lines("DEL", "cycle-"));
    let of = |lines: &[Invocation], f: fn(&Invocation) -> f64| -> Samples {
        lines.iter().map(f).collect()
    };
    let first = store.lines("ADD", "first");
    Figures {
        add: store.adds.iter().map(Finished::ms).collect(),
        del: store.dels.iter().map(Finished::ms).collect(),
        add_requests: of(&adds, store.requests),
        del_requests: of(&dels, store.requests),
        first_requests: first.first().map_or(f64::NAN, store.requests),
        add_store_ms: of(&adds, store.store_ms),
        del_store_ms: of(&dels, store.store_ms),
        rate_wait_ms: of(&adds, store.rate_wait_ms).pooled(&of(&dels, store.rate_wait_ms)),
        conflicts: adds.iter().chain(&dels).map(store.conflicts).sum(),
        logged: adds.len() + dels.len(),
    }
}

/// The command, the machine and the binary, on one line: this section may be run on
/// its own and placed beside a full run's sections.
pub(crate) fn machine_line(wasm_ipam: &Path) -> String {
    let command = std::env::var("WASM_IPAM_BENCH_COMMAND").unwrap_or_else(|_| {
        let args: Vec<String> = std::env::args().skip(1).collect();
        format!("wasm-ipam-bench {}", args.join(" "))
    });
    let revision = std::env::var("WASM_IPAM_BENCH_REVISION")
        .unwrap_or_else(|_| report::revision(&workspace()));
    let machine: Vec<String> = report::machine()
        .lines()
        .filter_map(|l| l.strip_prefix("- "))
        .map(String::from)
        .collect();
    format!(
        "Command: `{command}`. Machine: {}. wasm-ipam revision as built: {revision} (`{}`).",
        machine.join(", "),
        wasm_ipam.display()
    )
}

fn section(
    opts: &Options,
    stores: &[Store; 2],
    first_adds: &[Finished],
    versions: &Versions,
    wasm_ipam: &Path,
) -> Section {
    let [kube, etcd] = [figures(&stores[0]), figures(&stores[1])];
    let mut body = setup_text(opts, versions);
    body += &table(
        &[
            "store",
            "failed calls",
            "ADD p50 / p99",
            "DEL p50 / p99",
            "requests per ADD (median / max)",
            "requests per DEL (median / max)",
            "first ADD: requests (latency)",
            "store time p50, ADD / DEL",
            "conflicts / limiter wait max",
        ],
        &rows(opts, stores, [&kube, &etcd], first_adds),
    );
    let logged = 4 * opts.cycles;
    if kube.logged + etcd.logged < logged {
        body += &format!(
            "\n{} of the {logged} measured calls left no log line; their requests are not \
             counted.\n",
            logged - kube.logged - etcd.logged
        );
    }
    body += &del_herd_text(&kube, &etcd);
    body += &format!("\n{}\n", machine_line(wasm_ipam));
    Section {
        title: "The Kubernetes store vs the etcd store".into(),
        body,
        targets: Vec::new(),
    }
}

/// How the two stores were set up (their `versions`) and measured.
fn setup_text(opts: &Options, versions: &Versions) -> String {
    format!(
        "One simulated node runs `examples/cluster-pool` (10.30.0.0/16 in /26 blocks, \
         `nodeName` {NODE}) from a warm cache with the same netconf on two stores, only \
         `ipam.store` differing: the Kubernetes API (kube-apiserver {} from \
         scripts/kube-peers.sh on loopback, with an etcd {} of its own at its default \
         settings, certificates from a CA generated for the run, RBAC and the Node \
         authorizer on, anonymous requests off; the CRD and the nodes' RBAC applied by \
         the admin as `wasm-ipam kubernetes manifests` prints them, the CRD waited on \
         until Established; the node's kubeconfig a client certificate of \
         `system:node:{NODE}` in group `system:nodes`, as its kubelet's) and one etcd \
         member on loopback (Debian's etcd-server {}, default settings), as the etcd \
         scenarios start it. Both stores' commits wait for etcd's fsync. Per \
         store, a first ADD claims the node's first block, then {} ADD+DEL cycles, each \
         a fresh container id, the stores' cycles interleaved (who goes first \
         alternates). Latency is spawn to exit; requests, store time, conflicts and \
         limiter waits are per call, from wasm-ipam's log (`kube_requests`, `kube_ms`, \
         `kube_conflicts`, `kube_rate_wait_ms`; `etcd_requests`, `etcd_ms`, \
         `etcd_conflicts`, `etcd_rate_wait_ms`).\n\n\
         Both stores keep their defaults but the node's rate limiter: `qps` {QPS} and \
         `burst` {BURST} on each (the defaults: Kubernetes {DEFAULT_KUBERNETES_QPS} and \
         {DEFAULT_KUBERNETES_BURST}, etcd {DEFAULT_ETCD_QPS} and {DEFAULT_ETCD_BURST}), \
         so the latency below is the store's, not the limiter's; the last column shows \
         the longest any measured call waited for it.\n\n",
        versions.apiserver, versions.apiserver_etcd, versions.etcd, opts.cycles,
    )
}

/// The table's rows: each store's figures (`kube`'s, then `etcd`'s), then the
/// Kubernetes store's to the etcd store's.
fn rows(
    opts: &Options,
    stores: &[Store; 2],
    [kube, etcd]: [&Figures; 2],
    first_adds: &[Finished],
) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = stores
        .iter()
        .zip([kube, etcd])
        .zip(first_adds)
        .map(|((store, f), first)| {
            vec![
                store.name.to_string(),
                format!("{} of {}", store.failures, 2 * opts.cycles),
                p50_p99(&f.add),
                p50_p99(&f.del),
                median_max(&f.add_requests),
                median_max(&f.del_requests),
                format!("{} ({})", count(f.first_requests), ms(first.ms())),
                format!(
                    "{} / {}",
                    ms(f.add_store_ms.median()),
                    ms(f.del_store_ms.median())
                ),
                format!("{} / {}", count(f.conflicts), ms(f.rate_wait_ms.max())),
            ]
        })
        .collect();
    let both = |f: fn(&Figures) -> f64| ratio(f(kube), f(etcd));
    rows.push(vec![
        "ratio Kubernetes / etcd".into(),
        String::new(),
        format!(
            "{} / {}",
            both(|f| f.add.median()),
            both(|f| f.add.percentile(0.99))
        ),
        format!(
            "{} / {}",
            both(|f| f.del.median()),
            both(|f| f.del.percentile(0.99))
        ),
        format!(
            "{} / {}",
            both(|f| f.add_requests.median()),
            both(|f| f.add_requests.max())
        ),
        format!(
            "{} / {}",
            both(|f| f.del_requests.median()),
            both(|f| f.del_requests.max())
        ),
        both(|f| f.first_requests),
        format!(
            "{} / {}",
            both(|f| f.add_store_ms.median()),
            both(|f| f.del_store_ms.median())
        ),
        String::new(),
    ]);
    rows
}

/// How many DELs at once fit kubelet's teardown at each store's default rate
/// limit, at the requests per DEL measured here.
fn del_herd_text(kube: &Figures, etcd: &Figures) -> String {
    let per_del = kube.del_requests.median();
    let worst = kube.del_requests.max();
    let grant = DEFAULT_KUBERNETES_QPS * TEARDOWN_SECONDS + f64::from(DEFAULT_KUBERNETES_BURST);
    let etcd_grant = DEFAULT_ETCD_QPS * TEARDOWN_SECONDS + f64::from(DEFAULT_ETCD_BURST);
    format!(
        "\nWhat this means for a herd of DELs at the Kubernetes store's defaults: a node's \
         limiter (`qps` {DEFAULT_KUBERNETES_QPS}, `burst` {DEFAULT_KUBERNETES_BURST}) \
         grants {DEFAULT_KUBERNETES_QPS} × {TEARDOWN_SECONDS} + {DEFAULT_KUBERNETES_BURST} \
         = {grant:.0} requests within kubelet's 2-minute teardown, so at {} request(s) per \
         DEL sent here (median; {} at most) a herd of N DELs fits only if N × {} ≤ \
         {grant:.0}, i.e. N ≤ {:.0} pods deleted at once ({:.0} at the most requests a DEL sent), \
         where the etcd store at its default `qps` {DEFAULT_ETCD_QPS} fits {:.0} ({} \
         requests per DEL).\n",
        count(per_del),
        count(worst),
        count(per_del),
        (grant / per_del).floor(),
        (grant / worst).floor(),
        (etcd_grant / etcd.del_requests.median()).floor(),
        count(etcd.del_requests.median()),
    )
}
