//! `wasm-ipam-bench`: runs the benchmark scenarios against the real binaries and
//! writes BENCHMARKS.md (`all`), or runs one scenario and prints its section (e.g.
//! `churn`, to re-run against another lock). `./bench/run.sh` builds everything first.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;
use wasm_ipam_bench::report::{self, Section};
use wasm_ipam_bench::scenario::{
    busy, churn, engines, etcd_churn, etcd_herd, herd, kube_del_herd, kube_node, kube_store,
    languages, latency, ordering, stats_log, store_open, whereabouts,
};
use wasm_ipam_bench::setup::{Paths, workspace};

const USAGE: &str = "\
usage: wasm-ipam-bench <all|latency|languages|busy|herd|etcd-herd|etcd-churn|kube-store|kube-node|kube-del-herd|whereabouts|ordering|churn|engines|store-open|stats-log> [options]

  all          run every scenario and write the report (--out)
  latency      warm ADD+DEL cycles, cold first calls, peak memory
  languages    warm ADD+DEL cycles of modules in Rust, Go and Python; the Go one's first call
  busy         warm ADD+DEL cycles while another writer fsyncs on the same disk
  herd         N concurrent ADDs then DELs, wasm-ipam vs host-local
  etcd-herd    the herd on the etcd store (cluster-pool, 1 and 3 nodes) vs host-local
  etcd-churn   pod churn of simulated nodes with named pools on a 3-member etcd
  kube-store   ADD and DEL cycles on the Kubernetes store (a real kube-apiserver) vs etcd
  kube-node    pods created then deleted at once under kubelet and containerd 2, vs host-local
  kube-del-herd  the DEL herd under kubelet at qps 5, burst 10: the Kubernetes store vs etcd
  whereabouts  ADD/DEL cycles and a DEL herd on one apiserver: the Kubernetes store vs whereabouts
  ordering     DEL herds: wasm-ipam vs the pre-fix / post-fix timer models
  churn        sustained churn: wasm-ipam's and a bare flock's lock-wait tails vs a simulated FIFO
  engines      one call's store work, process per call: redb (v0.1) vs SQLite
  store-open   opening the store vs its write-ahead log's size, and the fold's cost
  stats-log    `wasm-ipam stats` on a 1 MiB and a 200 MiB log

options (defaults in brackets):
  --out FILE                 report for `all` [<workspace>/BENCHMARKS.md]
  --wasm-ipam PATH           [<workspace>/target/release/wasm-ipam]
  --host-local-module PATH   [<workspace>/target/wasm32-wasip2/release/host_local.wasm]
  --probe-module PATH        [<workspace>/target/wasm32-wasip2/release/probe.wasm]
  --cluster-pool-module PATH [<workspace>/target/wasm32-wasip2/release/cluster_pool.wasm]
  --static-go-module PATH    [<workspace>/target/modules/go/static_go.wasm]
  --static-py-module PATH    [<workspace>/target/modules/bench/static_py.wasm; skipped if absent]
  --host-local PATH          [/usr/lib/cni/host-local]
  --language-cycles N        languages: ADD+DEL cycles per module [100]
  --cycles N                 latency: ADD+DEL cycles per plugin [200]
  --cold-calls N             latency: first calls per plugin [10]
  --herd-sizes N,N           herd sizes [200,1000]
  --herd-repeats N           herds per size and plugin [3]
  --etcd-herd-size N         etcd-herd: calls per phase [300]
  --etcd-herd-repeats N      etcd-herd: herds per configuration [2]
  --etcd-churn-nodes N       etcd-churn: simulated nodes [10]
  --etcd-churn-pods N        etcd-churn: pods each node starts and stops [100]
  --kube-store-cycles N      kube-store: ADD+DEL cycles per store [100]
  --kube-pods N              kube-node: pods created, then deleted, at once [100]
  --kube-herd-pods N         kube-del-herd: pods created, then deleted, at once [200]
  --whereabouts-cycles N     whereabouts: ADD+DEL cycles per plugin [100]
  --whereabouts-herd N       whereabouts: DELs at once [200]
  --ordering-sizes N,N       ordering herd sizes [100,500]
  --seconds S                churn: how long calls arrive [30]
  --interval-ms MS           churn: time between arrivals [15]
  --spin-ms MS               churn: guest work under the lock [20]
  --engine-cycles N          engines: ADD+DEL cycles per engine [200]
  --store-opens N            store-open: opens timed before each commit [100]
  --store-folds N            store-open: folds to go through [5]
  --busy-cycles N            busy: ADD+DEL cycles per plugin [100]
  --stats-runs N             stats-log: stats runs per log [5]
";

/// The scenarios `all` runs, in order.
const SCENARIOS: [&str; 15] = [
    "latency",
    "languages",
    "busy",
    "herd",
    "etcd-herd",
    "etcd-churn",
    "kube-store",
    "kube-node",
    "kube-del-herd",
    "whereabouts",
    "ordering",
    "churn",
    "engines",
    "store-open",
    "stats-log",
];

struct Args {
    scenario: String,
    out: PathBuf,
    paths: Paths,
    latency: latency::Options,
    herd: herd::Options,
    etcd_herd: etcd_herd::Options,
    etcd_churn: etcd_churn::Options,
    kube_store: kube_store::Options,
    kube_node: kube_node::Options,
    kube_del_herd: kube_del_herd::Options,
    whereabouts: whereabouts::Options,
    ordering: ordering::Options,
    churn: churn::Options,
    engines: engines::Options,
    languages: languages::Options,
    store_open: store_open::Options,
    busy: busy::Options,
    stats_log: stats_log::Options,
}

fn parse(argv: &[String]) -> Result<Args, String> {
    let mut it = argv.iter();
    let scenario = it.next().ok_or("no scenario given")?.clone();
    if !SCENARIOS.contains(&scenario.as_str()) && scenario != "all" {
        return Err(format!("unknown scenario {scenario:?}"));
    }
    let mut args = Args::defaults(scenario);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        args.set(flag, value)?;
    }
    Ok(args)
}

impl Args {
    /// Every option's default (as USAGE lists them), for `scenario`.
    fn defaults(scenario: String) -> Args {
        Args {
            scenario,
            out: workspace().join("BENCHMARKS.md"),
            paths: Paths::defaults(),
            latency: latency::Options {
                cycles: 200,
                cold_calls: 10,
            },
            herd: herd::Options {
                sizes: vec![200, 1000],
                repeats: 3,
            },
            etcd_herd: etcd_herd::Options {
                size: 300,
                repeats: 2,
            },
            etcd_churn: etcd_churn::Options {
                nodes: 10,
                pods: 100,
            },
            kube_store: kube_store::Options { cycles: 100 },
            kube_node: kube_node::Options { pods: 100 },
            kube_del_herd: kube_del_herd::Options { pods: 200 },
            whereabouts: whereabouts::Options {
                cycles: 100,
                herd: 200,
            },
            ordering: ordering::Options {
                sizes: vec![100, 500],
            },
            churn: churn::Options {
                seconds: 30.0,
                interval_ms: 15.0,
                spin_ms: 20,
            },
            engines: engines::Options { cycles: 200 },
            languages: languages::Options { cycles: 100 },
            store_open: store_open::Options {
                opens: 100,
                folds: 5,
            },
            busy: busy::Options { cycles: 100 },
            stats_log: stats_log::Options { runs: 5 },
        }
    }

    /// Sets option `flag` to `value`; an unknown option, or a value that is not what
    /// it takes, is refused.
    fn set(&mut self, flag: &str, value: &str) -> Result<(), String> {
        let num = |v: &str| {
            v.parse::<f64>()
                .map_err(|_| format!("{flag}: not a number"))
        };
        let count = |v: &str| {
            v.parse::<usize>()
                .map_err(|_| format!("{flag}: not a count"))
        };
        let counts = |v: &str| v.split(',').map(count).collect::<Result<Vec<_>, _>>();
        match flag {
            "--out" => self.out = value.into(),
            "--wasm-ipam" => self.paths.wasm_ipam = value.into(),
            "--host-local-module" => self.paths.host_local_module = value.into(),
            "--probe-module" => self.paths.probe_module = value.into(),
            "--host-local" => self.paths.host_local = value.into(),
            "--static-go-module" => self.paths.static_go_module = value.into(),
            "--static-py-module" => self.paths.static_py_module = value.into(),
            "--language-cycles" => self.languages.cycles = count(value)?,
            "--cycles" => self.latency.cycles = count(value)?,
            "--cold-calls" => self.latency.cold_calls = count(value)?,
            "--herd-sizes" => self.herd.sizes = counts(value)?,
            "--herd-repeats" => self.herd.repeats = count(value)?,
            "--etcd-herd-size" => self.etcd_herd.size = count(value)?,
            "--etcd-herd-repeats" => self.etcd_herd.repeats = count(value)?,
            "--etcd-churn-nodes" => self.etcd_churn.nodes = count(value)?,
            "--etcd-churn-pods" => self.etcd_churn.pods = count(value)?,
            "--kube-store-cycles" => self.kube_store.cycles = count(value)?,
            "--kube-pods" => self.kube_node.pods = count(value)?,
            "--kube-herd-pods" => self.kube_del_herd.pods = count(value)?,
            "--whereabouts-cycles" => self.whereabouts.cycles = count(value)?,
            "--whereabouts-herd" => self.whereabouts.herd = count(value)?,
            "--cluster-pool-module" => self.paths.cluster_pool_module = value.into(),
            "--ordering-sizes" => self.ordering.sizes = counts(value)?,
            "--seconds" => self.churn.seconds = num(value)?,
            "--interval-ms" => self.churn.interval_ms = num(value)?,
            "--spin-ms" => self.churn.spin_ms = count(value)? as u64,
            "--engine-cycles" => self.engines.cycles = count(value)?,
            "--store-opens" => self.store_open.opens = count(value)?,
            "--store-folds" => self.store_open.folds = count(value)?,
            "--busy-cycles" => self.busy.cycles = count(value)?,
            "--stats-runs" => self.stats_log.runs = count(value)?,
            _ => return Err(format!("unknown option {flag}")),
        }
        Ok(())
    }
}

/// Runs one scenario by name, logging progress on stderr.
fn scenario(name: &str, args: &Args) -> Result<Section, String> {
    eprintln!("wasm-ipam-bench: {name}");
    let started = Instant::now();
    let section = match name {
        "latency" => latency::run(&args.paths, &args.latency),
        "languages" => languages::run(&args.paths, &args.languages),
        "herd" => herd::run(&args.paths, &args.herd),
        "etcd-herd" => etcd_herd::run(&args.paths, &args.etcd_herd),
        "etcd-churn" => etcd_churn::run(&args.paths, &args.etcd_churn),
        "kube-store" => kube_store::run(&args.paths, &args.kube_store),
        "kube-node" => kube_node::run(&args.paths, &args.kube_node),
        "kube-del-herd" => kube_del_herd::run(&args.paths, &args.kube_del_herd),
        "whereabouts" => whereabouts::run(&args.paths, &args.whereabouts),
        "ordering" => ordering::run(&args.paths, &args.ordering),
        "churn" => churn::run(&args.paths, &args.churn),
        "engines" => engines::run(&args.engines),
        "store-open" => store_open::run(&args.store_open),
        "busy" => busy::run(&args.paths, &args.busy),
        "stats-log" => stats_log::run(&args.paths.wasm_ipam, &args.stats_log),
        other => return Err(format!("unknown scenario {other:?}")),
    }
    .map_err(|e| format!("{name}: {e}"))?;
    eprintln!(
        "wasm-ipam-bench: {name} took {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(section)
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    if argv
        .first()
        .is_some_and(|a| ["-h", "--help", "help"].contains(&a.as_str()))
    {
        print!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let args = match parse(&argv) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("wasm-ipam-bench: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = args.paths.check(&args.scenario) {
        eprintln!("wasm-ipam-bench: {e}");
        return ExitCode::FAILURE;
    }
    let started = Instant::now();
    // The tree as built: run.sh records it before building (others commit while the
    // suite runs); otherwise take it now, before measuring.
    let revision = std::env::var("WASM_IPAM_BENCH_REVISION")
        .unwrap_or_else(|_| report::revision(&workspace()));
    let names: Vec<&str> = if args.scenario == "all" {
        SCENARIOS.to_vec()
    } else {
        vec![args.scenario.as_str()]
    };
    let mut sections = Vec::new();
    for name in names {
        match scenario(name, &args) {
            Ok(section) => sections.push(section),
            Err(e) => {
                eprintln!("wasm-ipam-bench: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let command = std::env::var("WASM_IPAM_BENCH_COMMAND")
        .unwrap_or_else(|_| format!("wasm-ipam-bench {}", argv.join(" ")));
    let preamble = format!(
        "Machine:\n\n{}\nwasm-ipam revision as built: {} (`{}`); the whole run took {:.0} \
         s.\n",
        report::machine(),
        revision,
        args.paths.wasm_ipam.display(),
        started.elapsed().as_secs_f64()
    );
    let doc = report::document(&command, &preamble, &sections);
    if args.scenario == "all" {
        if let Err(e) = std::fs::write(&args.out, &doc) {
            eprintln!("wasm-ipam-bench: write {}: {e}", args.out.display());
            return ExitCode::FAILURE;
        }
        eprintln!("wasm-ipam-bench: wrote {}", args.out.display());
    } else {
        print!("{doc}");
    }
    ExitCode::SUCCESS
}
