//! wasm-ipam on the Kubernetes store beside whereabouts, the Kubernetes-native IPAM
//! its users know, on one real kube-apiserver (scripts/kube-peers.sh's) with both
//! plugins' CRDs applied, each plugin invoked as a runtime invokes it: the pod's
//! `K8S_POD_NAMESPACE` and `K8S_POD_NAME` in `CNI_ARGS`, whereabouts with
//! `ipam.kubernetes.kubeconfig` and `configuration_path` in its netconf.
//!
//! Two scenes, one run:
//! - sequential ADD+DEL cycles, the plugins' cycles interleaved: latency spawn to exit,
//!   and the API requests each call made;
//! - the DEL herd: N pods' addresses taken one after the other, then N DELs at once,
//!   each plugin at client-go's default rate (`qps` 5, `burst` 10: whereabouts' per
//!   process, as it sets none; wasm-ipam's for the whole node): the time to the last
//!   DEL's exit, DELs that failed, and addresses still held after (whereabouts' DEL
//!   always exits 0, so what it leaked shows only in its IPPool).
//!
//! Requests are counted the same way for both: the apiserver's audit log, one event per
//! request answered, by the identity each plugin authenticates as, within each call's
//! spawn-to-exit window.

use super::{Peer, wall_ms, warm_cache};
use crate::kube_api::{AuditEvent, KubeApi};
use crate::process::{Finished, Runner};
use crate::report::{Section, table};
use crate::setup::{Node, Paths, TempDir};
use crate::stats::{Samples, median_max, ms, p50_p99, ratio};
use serde_json::{Value, json};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

pub struct Options {
    /// Measured ADD+DEL cycles per plugin.
    pub cycles: usize,
    /// Pods whose DELs run at once.
    pub herd: usize,
}

/// wasm-ipam's node: its kubeconfig's identity is `system:node:<NODE>`.
const NODE: &str = "bench-node";
/// The identity whereabouts authenticates as (its DaemonSet's service account, in a
/// cluster; a client certificate here).
const WHEREABOUTS_USER: &str = "whereabouts";
/// The pods' namespace in `CNI_ARGS`.
const NAMESPACE: &str = "bench";
/// The network each plugin hands addresses out of (a /16: the herd fits either way).
const WASM_IPAM_RANGE: &str = "10.30.0.0/16";
const WHEREABOUTS_RANGE: &str = "10.31.0.0/16";
/// The herd's rate: client-go's defaults.
const HERD_QPS: f64 = 5.0;
const HERD_BURST: u32 = 10;
/// The cycles' rate for wasm-ipam, opened wide as in kube-store (its calls make a few
/// requests each, whereabouts' processes start with a full bucket of 10 each).
const CYCLE_QPS: f64 = 1000.0;
const CYCLE_BURST: u32 = 1000;
/// whereabouts' CRDs, as its module ships them.
const WHEREABOUTS_CRDS: [&str; 2] = [
    "crd/ippools.whereabouts.cni.cncf.io",
    "crd/overlappingrangeipreservations.whereabouts.cni.cncf.io",
];
/// What whereabouts' identity may do, as scripts/kube-node.sh --ipam whereabouts
/// grants it too (bound to the user `whereabouts`).
const WHEREABOUTS_RBAC: &str = include_str!("../../../scripts/whereabouts/rbac.yaml");

/// The directory scripts/whereabouts.sh builds whereabouts and its CRDs into.
fn whereabouts_dir() -> io::Result<PathBuf> {
    crate::setup::script_dir("scripts/whereabouts.sh")
}

/// One plugin under test: how it is called and who it is to the apiserver.
struct Plugin {
    name: &'static str,
    peer: Peer,
    /// The identity its requests carry in the audit log.
    user: String,
    node: Node,
}

impl Plugin {
    /// Calls `command` for pod `id` (its container id too), as a runtime does.
    fn call(&self, runner: &mut Runner, command: &str, id: &str) -> io::Result<Finished> {
        let args = cni_args(id);
        let mut call = self.peer.call(command, id);
        call.cni_args = Some(&args);
        runner.run(&call)
    }
}

fn cni_args(id: &str) -> String {
    format!(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE={NAMESPACE};K8S_POD_NAME={id};K8S_POD_INFRA_CONTAINER_ID={id}"
    )
}

/// wasm-ipam running cluster-pool on the Kubernetes store as `kubeconfig`, its node's
/// limiter at `qps`/`burst`.
fn wasm_ipam(
    paths: &Paths,
    cache: &TempDir,
    kubeconfig: &Path,
    label: &str,
    qps: f64,
    burst: u32,
) -> io::Result<Plugin> {
    let node = Node::new(label)?;
    let netconf = node.wasm_ipam_netconf(
        &paths.cluster_pool_module,
        cache.path(),
        cluster_pool(kubeconfig, qps, burst),
    );
    Ok(Plugin {
        name: "wasm-ipam",
        peer: Peer {
            name: "wasm-ipam",
            plugin: paths.wasm_ipam.clone(),
            netconf,
            log: Some(node.log_file()),
        },
        user: format!("system:node:{NODE}"),
        node,
    })
}

fn cluster_pool(kubeconfig: &Path, qps: f64, burst: u32) -> Value {
    json!({
        "cidr": WASM_IPAM_RANGE,
        "blockSize": 26,
        "nodeName": NODE,
        "store": {"type": "kubernetes", "kubeconfig": kubeconfig, "qps": qps, "burst": burst},
    })
}

/// whereabouts on `range` as `kubeconfig`, its flat file beside the netconf, as its
/// DaemonSet installs it; `network` names the pool (each scene its own).
fn whereabouts(
    binary: &Path,
    kubeconfig: &Path,
    label: &str,
    network: &str,
    range: &str,
) -> io::Result<Plugin> {
    let node = Node::new(label)?;
    let flat = node.dir.join("whereabouts.conf");
    std::fs::write(
        &flat,
        json!({
            "datastore": "kubernetes",
            "kubernetes": {"kubeconfig": kubeconfig},
            "log_file": node.log_file(),
            "log_level": "error",
        })
        .to_string(),
    )?;
    let netconf = node.dir.join("whereabouts.json");
    std::fs::write(
        &netconf,
        json!({
            "cniVersion": "1.0.0",
            "name": network,
            "type": "bridge",
            "ipam": {
                "type": "whereabouts",
                "range": range,
                "kubernetes": {"kubeconfig": kubeconfig},
                "configuration_path": flat,
            }
        })
        .to_string(),
    )?;
    Ok(Plugin {
        name: "whereabouts",
        peer: Peer {
            name: "whereabouts",
            plugin: binary.to_path_buf(),
            netconf,
            log: Some(node.log_file()),
        },
        user: WHEREABOUTS_USER.into(),
        node,
    })
}

/// Maps the monotonic instants the runner records to the wall clock the audit log
/// stamps requests with.
struct Clock {
    instant: Instant,
    wall: SystemTime,
}

impl Clock {
    fn now() -> Clock {
        Clock {
            instant: Instant::now(),
            wall: SystemTime::now(),
        }
    }

    fn wall(&self, at: Instant) -> SystemTime {
        self.wall + at.saturating_duration_since(self.instant)
    }

    /// `user`'s requests that arrived while `call` ran.
    fn requests(&self, events: &[AuditEvent], user: &str, call: &Finished) -> usize {
        let (from, to) = (self.wall(call.spawned), self.wall(call.ended));
        events
            .iter()
            .filter(|e| e.user == user && e.received >= from && e.received <= to)
            .count()
    }
}

/// The cycles' figures of one plugin.
struct Cycles {
    add: Samples,
    del: Samples,
    add_requests: Samples,
    del_requests: Samples,
    first: Finished,
    first_requests: usize,
    failures: usize,
    /// Requests of its identity during the cycles that fell in no call's window.
    unattributed: usize,
}

/// The herd's figures of one plugin.
struct Herd {
    wall_ms: f64,
    failed: usize,
    leaked: usize,
    requests: usize,
    longest_ms: f64,
}

pub fn run(paths: &Paths, opts: &Options) -> io::Result<Section> {
    let wb_dir = whereabouts_dir()?;
    let mut api = apiserver_with_both_plugins(paths, &wb_dir)?;
    let node_kubeconfig = api.node_kubeconfig(NODE)?;
    let wb_kubeconfig = api.client_kubeconfig("whereabouts", WHEREABOUTS_USER, &[])?;
    let version = |o: io::Result<std::process::Output>| {
        o.ok()
            .and_then(|o| serde_json::from_slice::<Value>(&o.stdout).ok())
            .and_then(|v| v["serverVersion"]["gitVersion"].as_str().map(String::from))
            .unwrap_or_else(|| "of unknown version".into())
    };
    let apiserver = version(api.kubectl(&["version", "-o", "json"]));
    let wb_binary = wb_dir.join("whereabouts");
    let cache = warm_cache(
        &paths.wasm_ipam,
        &paths.cluster_pool_module,
        cluster_pool(&node_kubeconfig, CYCLE_QPS, CYCLE_BURST),
    )?;
    let clock = Clock::now();

    // The cycles.
    let plugins = [
        wasm_ipam(
            paths,
            &cache,
            &node_kubeconfig,
            "wb-cycles-wasm-ipam",
            CYCLE_QPS,
            CYCLE_BURST,
        )?,
        whereabouts(
            &wb_binary,
            &wb_kubeconfig,
            "wb-cycles-whereabouts",
            "cycles",
            WHEREABOUTS_RANGE,
        )?,
    ];
    let cycles = run_cycles(&api, &clock, &plugins, opts)?;

    // The herd.
    let herd_cache = warm_cache(
        &paths.wasm_ipam,
        &paths.cluster_pool_module,
        cluster_pool(&node_kubeconfig, CYCLE_QPS, CYCLE_BURST),
    )?;
    let herd_plugins = [
        wasm_ipam(
            paths,
            &herd_cache,
            &node_kubeconfig,
            "wb-herd-wasm-ipam",
            HERD_QPS,
            HERD_BURST,
        )?,
        whereabouts(
            &wb_binary,
            &wb_kubeconfig,
            "wb-herd-whereabouts",
            "herd",
            "10.32.0.0/16",
        )?,
    ];
    let mut herds = Vec::new();
    for plugin in &herd_plugins {
        herds.push(del_herd(&api, &clock, paths, plugin, opts.herd)?);
    }
    Ok(section(opts, &apiserver, &cycles, &herds, &plugins, paths))
}

/// An audited apiserver with wasm-ipam's manifests and whereabouts' CRDs (from
/// `wb_dir`, once Established) and RBAC applied.
fn apiserver_with_both_plugins(paths: &Paths, wb_dir: &Path) -> io::Result<KubeApi> {
    let api = KubeApi::start_audited()?;
    super::kube_store::apply_manifests(&api, &paths.wasm_ipam)?;
    for crd in ["ippools.yaml", "overlappingrangeipreservations.yaml"] {
        api.apply(&std::fs::read_to_string(wb_dir.join(crd))?)?;
    }
    api.apply(WHEREABOUTS_RBAC)?;
    let established = api.kubectl(
        &[
            &["wait", "--for=condition=Established", "--timeout=60s"][..],
            &WHEREABOUTS_CRDS[..],
        ]
        .concat(),
    )?;
    if !established.status.success() {
        return Err(io::Error::other(format!(
            "whereabouts' CRDs never became Established: {}",
            String::from_utf8_lossy(&established.stderr)
        )));
    }
    Ok(api)
}

/// Each plugin's first ADD, then `opts.cycles` ADD+DEL cycles, the plugins'
/// interleaved; each plugin's figures, its requests from the apiserver's audit log.
fn run_cycles(
    api: &KubeApi,
    clock: &Clock,
    plugins: &[Plugin; 2],
    opts: &Options,
) -> io::Result<Vec<Cycles>> {
    eprintln!(
        "  whereabouts: {} ADD+DEL cycles per plugin, interleaved",
        opts.cycles
    );
    let mut runner = Runner::new();
    let mut firsts = Vec::new();
    for plugin in plugins {
        let first = plugin.call(&mut runner, "ADD", "first")?;
        if !first.success {
            return Err(io::Error::other(format!(
                "{}'s first ADD failed; its log: {}",
                plugin.name,
                tail(&plugin.node.log_file())
            )));
        }
        firsts.push(first);
    }
    let began = Instant::now();
    let mut calls: [Vec<(Finished, Finished)>; 2] = [Vec::new(), Vec::new()];
    for i in 0..opts.cycles {
        let id = format!("cycle-{i}");
        for p in [i % 2, 1 - i % 2] {
            let add = plugins[p].call(&mut runner, "ADD", &id)?;
            let del = plugins[p].call(&mut runner, "DEL", &id)?;
            calls[p].push((add, del));
        }
    }
    let ended = Instant::now();
    let events = api.audit_events()?;
    let during = (clock.wall(began), clock.wall(ended));
    Ok(plugins
        .iter()
        .zip(&calls)
        .zip(&firsts)
        .map(|((plugin, calls), first)| cycles_of(clock, &events, during, plugin, calls, first))
        .collect())
}

/// `plugin`'s cycles' figures: its `calls`' times and requests, its `first` ADD's,
/// and its requests `during` the cycles that fell in no call's window.
fn cycles_of(
    clock: &Clock,
    events: &[AuditEvent],
    during: (SystemTime, SystemTime),
    plugin: &Plugin,
    calls: &[(Finished, Finished)],
    first: &Finished,
) -> Cycles {
    let count = |f: &Finished| clock.requests(events, &plugin.user, f) as f64;
    let attributed: f64 = calls.iter().map(|(a, d)| count(a) + count(d)).sum();
    let (from, to) = during;
    let during = events
        .iter()
        .filter(|e| e.user == plugin.user && e.received >= from && e.received <= to)
        .count();
    Cycles {
        add: calls.iter().map(|(a, _)| a.ms()).collect(),
        del: calls.iter().map(|(_, d)| d.ms()).collect(),
        add_requests: calls.iter().map(|(a, _)| count(a)).collect(),
        del_requests: calls.iter().map(|(_, d)| count(d)).collect(),
        first: *first,
        first_requests: clock.requests(events, &plugin.user, first),
        failures: calls
            .iter()
            .map(|(a, d)| usize::from(!a.success) + usize::from(!d.success))
            .sum(),
        unattributed: during.saturating_sub(attributed as usize),
    }
}

/// `n` pods' ADDs one after the other, then their DELs at once.
fn del_herd(
    api: &KubeApi,
    clock: &Clock,
    paths: &Paths,
    plugin: &Plugin,
    n: usize,
) -> io::Result<Herd> {
    let ids: Vec<String> = (0..n).map(|i| format!("herd-{i}")).collect();
    // What the network held before (wasm-ipam's herd shares the cycles' network and
    // its first ADD's address): the herd's leak is what is held beyond it after.
    let base = held(api, paths, plugin)?;
    let mut runner = Runner::new();
    eprintln!("  whereabouts: {} ADDs with {}", n, plugin.name);
    for id in &ids {
        let add = plugin.call(&mut runner, "ADD", id)?;
        if !add.success {
            return Err(io::Error::other(format!(
                "{}'s ADD for {id} failed before the herd; its log: {}",
                plugin.name,
                tail(&plugin.node.log_file())
            )));
        }
    }
    let before = held(api, paths, plugin)?;
    if before != base + n {
        return Err(io::Error::other(format!(
            "after {n} ADDs {} holds {before} addresses, {base} before them",
            plugin.name
        )));
    }
    // The bucket full again, as after a quiet minute, for wasm-ipam's node-wide one
    // (whereabouts' start full in every process).
    std::thread::sleep(std::time::Duration::from_secs_f64(
        f64::from(HERD_BURST) / HERD_QPS,
    ));
    eprintln!("  whereabouts: {} DELs at once with {}", n, plugin.name);
    let args: Vec<String> = ids.iter().map(|id| cni_args(id)).collect();
    let done = super::herd_with_args(
        std::slice::from_ref(&plugin.peer),
        "DEL",
        &ids,
        |_, _| None,
        &args,
    )?;
    let events = api.audit_events()?;
    let first = done
        .iter()
        .map(|f| f.spawned)
        .min()
        .unwrap_or_else(Instant::now);
    let last = done
        .iter()
        .map(|f| f.ended)
        .max()
        .unwrap_or_else(Instant::now);
    let (from, to) = (clock.wall(first), clock.wall(last));
    Ok(Herd {
        wall_ms: wall_ms(&done),
        failed: done.iter().filter(|f| !f.success).count(),
        leaked: held(api, paths, plugin)?.saturating_sub(base),
        requests: events
            .iter()
            .filter(|e| e.user == plugin.user && e.received >= from && e.received <= to)
            .count(),
        longest_ms: done.iter().map(Finished::ms).fold(0.0, f64::max),
    })
}

/// The addresses `plugin` holds on its network now: wasm-ipam's `list`, whereabouts'
/// IPPool allocations in its range.
fn held(api: &KubeApi, paths: &Paths, plugin: &Plugin) -> io::Result<usize> {
    if plugin.name == "wasm-ipam" {
        return super::listed(&paths.wasm_ipam, &plugin.peer.netconf);
    }
    let out = api.kubectl(&["get", "ippools.whereabouts.cni.cncf.io", "-A", "-o", "json"])?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "kubectl get ippools: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let pools: Value = serde_json::from_slice(&out.stdout).map_err(io::Error::other)?;
    let netconf: Value = serde_json::from_str(&std::fs::read_to_string(&plugin.peer.netconf)?)
        .map_err(io::Error::other)?;
    Ok(super::whereabouts_allocations(
        &pools,
        netconf["ipam"]["range"].as_str(),
    ))
}

/// The end of a log, for an error.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join("\n")
}

fn section(
    opts: &Options,
    apiserver: &str,
    cycles: &[Cycles],
    herds: &[Herd],
    plugins: &[Plugin; 2],
    paths: &Paths,
) -> Section {
    let mut body = setup_text(opts, apiserver);
    body += &table(
        &[
            "plugin",
            "failed calls",
            "ADD p50 / p99",
            "DEL p50 / p99",
            "requests per ADD (median / max)",
            "requests per DEL (median / max)",
            "first ADD: requests (latency)",
        ],
        &cycle_rows(opts, cycles, plugins),
    );
    let unattributed: usize = cycles.iter().map(|c| c.unattributed).sum();
    if unattributed > 0 {
        body += &format!(
            "\n{unattributed} request(s) of the plugins' identities during the cycles fell \
             in no call's window.\n"
        );
    }
    body += &herd_text(opts, herds, plugins);
    body += &format!("\n{}\n", super::kube_store::machine_line(&paths.wasm_ipam));
    Section {
        title: "wasm-ipam beside whereabouts on one apiserver".into(),
        body,
        targets: Vec::new(),
    }
}

/// How both plugins were set up on the apiserver (`apiserver`, its version), what a
/// request counts as, and how the sequential calls ran.
fn setup_text(opts: &Options, apiserver: &str) -> String {
    format!(
        "One kube-apiserver {apiserver} (scripts/kube-peers.sh, on loopback, RBAC on, an \
         etcd of its own, an audit log of every request at level Metadata) serves both \
         plugins, each invoked as a runtime invokes it (`CNI_ARGS` with \
         `K8S_POD_NAMESPACE` and `K8S_POD_NAME`): wasm-ipam running `examples/cluster-pool` \
         ({WASM_IPAM_RANGE} in /26 blocks) on the Kubernetes store as \
         `system:node:{NODE}`, its CRD and RBAC applied as `wasm-ipam kubernetes \
         manifests` prints them; whereabouts v0.9.2 (scripts/whereabouts.sh, built from \
         its Go module) with its CRDs from the same module, one `range` ({WHEREABOUTS_RANGE}), \
         `ipam.kubernetes.kubeconfig` and a `configuration_path` file as its DaemonSet \
         installs them, as an identity of its own with its ClusterRole's rights. Requests \
         are the apiserver's audit events of each plugin's identity within each call's \
         spawn-to-exit window, counted the same way for both.\n\n\
         **Sequential calls.** Per plugin, a first ADD (wasm-ipam's claims the node's \
         first block, whereabouts' creates its IPPool), then {} ADD+DEL cycles, each a \
         fresh pod, the plugins' cycles interleaved (who goes first alternates). \
         wasm-ipam's node limiter is opened wide (`qps` {CYCLE_QPS}, `burst` \
         {CYCLE_BURST}), and each whereabouts process starts with client-go's full bucket \
         of 10: neither waits on a limiter here.\n\n",
        opts.cycles
    )
}

/// The cycles table's rows: each plugin's figures, then wasm-ipam's to whereabouts'.
fn cycle_rows(opts: &Options, cycles: &[Cycles], plugins: &[Plugin; 2]) -> Vec<Vec<String>> {
    let mut rows: Vec<Vec<String>> = plugins
        .iter()
        .zip(cycles)
        .map(|(plugin, c)| {
            vec![
                plugin.name.to_string(),
                format!("{} of {}", c.failures, 2 * opts.cycles),
                p50_p99(&c.add),
                p50_p99(&c.del),
                median_max(&c.add_requests),
                median_max(&c.del_requests),
                format!("{} ({})", c.first_requests, ms(c.first.ms())),
            ]
        })
        .collect();
    let (w, b) = (&cycles[0], &cycles[1]);
    rows.push(vec![
        "ratio wasm-ipam / whereabouts".into(),
        String::new(),
        format!(
            "{} / {}",
            ratio(w.add.median(), b.add.median()),
            ratio(w.add.percentile(0.99), b.add.percentile(0.99))
        ),
        format!(
            "{} / {}",
            ratio(w.del.median(), b.del.median()),
            ratio(w.del.percentile(0.99), b.del.percentile(0.99))
        ),
        ratio(w.add_requests.median(), b.add_requests.median()),
        ratio(w.del_requests.median(), b.del_requests.median()),
        String::new(),
    ]);
    rows
}

/// The DEL herd: how it ran, each plugin's figures, and how the limiters differ.
fn herd_text(opts: &Options, herds: &[Herd], plugins: &[Plugin; 2]) -> String {
    let herd_rows: Vec<Vec<String>> = plugins
        .iter()
        .zip(herds)
        .map(|(plugin, h)| {
            vec![
                plugin.name.to_string(),
                opts.herd.to_string(),
                format!("{:.1} s", h.wall_ms / 1000.0),
                format!("{:.1} s", h.longest_ms / 1000.0),
                format!("**{}**", h.failed),
                format!("**{}**", h.leaked),
                format!("{:.1}", h.requests as f64 / opts.herd as f64),
                format!("{:.0}", h.requests as f64 / (h.wall_ms / 1000.0)),
            ]
        })
        .collect();
    let mut body = format!(
        "\n**The DEL herd.** Per plugin, on a network of its own: {n} pods' ADDs one after \
         the other, then their {n} DELs spawned at once, at client-go's default rate \
         (`qps` {HERD_QPS}, `burst` {HERD_BURST}): each whereabouts process's own (it \
         sets none), wasm-ipam's node-wide limiter shared by all {n} calls. \"Leaked\": \
         addresses still held once every DEL has exited (wasm-ipam's `list`, \
         whereabouts' IPPool allocations); whereabouts' DEL exits 0 whatever happened, \
         so its failures show there.\n\n",
        n = opts.herd
    );
    body += &table(
        &[
            "plugin",
            "DELs at once",
            "spawn of the first to exit of the last",
            "longest DEL",
            "DELs that failed (exit status)",
            "addresses leaked",
            "requests per DEL",
            "the node's requests per second",
        ],
        &herd_rows,
    );
    body += &format!(
        "\nThe last column is what the apiserver saw from the node during the herd: \
         wasm-ipam's limiter is the node's, so its {n} DELs together keep to `qps` \
         {HERD_QPS} after the `burst` of {HERD_BURST} and wait for it; whereabouts' is each \
         process's, so {n} processes together may send {n} × {HERD_BURST} at once and {n} \
         × {HERD_QPS} a second.\n",
        n = opts.herd
    );
    body
}
