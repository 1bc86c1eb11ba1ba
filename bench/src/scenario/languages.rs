//! Modules in three languages through the same wasm-ipam: a warm ADD+DEL cycle of
//! `examples/host-local` (Rust), `examples/static-go` (Go, on `guest-go/`) and, when
//! built, `examples/static-py` (Python, componentize-py), their cycles interleaved so
//! they share the machine's noise; and the Go module's first call, which compiles it,
//! beside its first call after `wasm-ipam pull` (which compiles it as it writes it).

use super::{Peer, warm_cache};
use crate::invocations;
use crate::process::{Finished, Runner};
use crate::registry::Registry;
use crate::report::{Section, Target, table};
use crate::setup::{Node, Paths, TempDir};
use crate::stats::{Samples, ms, ratio};
use serde_json::{Value, json};
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

pub struct Options {
    /// Measured ADD+DEL cycles per module.
    pub cycles: usize,
}

/// The Go module's warm cycle must take at most this multiple of the Rust module's.
const GO_RATIO_TARGET: f64 = 1.5;
/// The Go module's first call (compiling it) must take less than this.
const GO_COLD_TARGET_MS: f64 = 1000.0;
/// The Go module's first call after `pull` must take at most this share of its first
/// call that compiles it: the pull compiled it, so the node's first pod does not.
const GO_PULLED_TARGET_RATIO: f64 = 0.05;
const WARMUP_CYCLES: usize = 3;
const COLD_CALLS: usize = 5;

/// `extra`'s keys over `base`'s.
fn merged(mut base: Value, extra: Value) -> Value {
    for (k, v) in extra.as_object().into_iter().flatten() {
        base[k] = v.clone();
    }
    base
}

/// The `ipam` keys a static module answers with, in network `10.<n>.0.0/24`.
fn static_keys(n: u8) -> Value {
    json!({"addresses": [{"address": format!("10.{n}.0.5/24"), "gateway": format!("10.{n}.0.1")}]})
}

pub fn run(paths: &Paths, opts: &Options) -> io::Result<Section> {
    let modules = modules(paths);
    let mut caches = Vec::new();
    let mut nodes = Vec::new();
    let mut peers = Vec::new();
    for (name, module, extra) in &modules {
        let cache = warm_cache(&paths.wasm_ipam, module, extra.clone())?;
        let node = Node::new("languages")?;
        peers.push(Peer {
            name,
            plugin: paths.wasm_ipam.clone(),
            netconf: node.wasm_ipam_netconf(module, cache.path(), extra.clone()),
            log: Some(node.log_file()),
        });
        caches.push(cache);
        nodes.push(node);
    }
    let mut runner = Runner::new();
    let mut failures = 0;
    let (cycles, warm_go_adds) = warm_cycles(&mut runner, &peers, opts, &mut failures)?;
    let go_log = invocations::read(&nodes[1].log_file());
    let go_adds: Vec<_> = go_log
        .iter()
        .filter(|l| l.command == "ADD")
        .skip(WARMUP_CYCLES)
        .collect();
    let (cold, cold_load) = cold_go_calls(paths, &mut runner, &mut failures)?;
    let (pulled, pulled_load) = first_calls_after_pull(paths, &mut runner, &mut failures)?;
    if failures > 0 {
        return Err(io::Error::other(format!(
            "{failures} calls of the languages scenario failed"
        )));
    }

    let medians: Vec<f64> = cycles
        .iter()
        .map(|c| Samples::new(c.clone()).median())
        .collect();
    let rows = cycle_rows(&peers, &cycles, &medians);
    let split = |figure: fn(&invocations::Invocation) -> f64| {
        ms(Samples::new(go_adds.iter().map(|l| figure(l)).collect()).median())
    };
    let cold_median = Samples::new(cold).median();
    let pulled_median = Samples::new(pulled).median();
    let warm_add = Samples::new(warm_go_adds).median();
    let mut body = format!(
        "{} warm ADD+DEL cycles per module after {WARMUP_CYCLES} unmeasured, each from a \
         warm compiled-module cache, interleaved; spawn to exit of both calls.\n\n",
        opts.cycles
    );
    body += &table(&["module", "cycle p50", "cycle p90", "vs Rust"], &rows);
    if !paths.static_py_module.exists() {
        body += &format!(
            "\nstatic-py was not measured: {} was not built (componentize-py not on the PATH).\n",
            paths.static_py_module.display()
        );
    }
    body += &format!(
        "\nstatic-go's warm ADD: {} before the lock (`load_ms`), {} from the grant to the \
         guest's return (`budget_used_ms`: instantiating the component, the Go runtime's \
         `_initialize`, the handler), {} in all (`total_ms`).\n\nIts first call, compiling \
         the component into an empty cache: {} (`load_ms` {}), median of {COLD_CALLS}.\n",
        split(|l| l.load_ms),
        split(|l| l.budget_used_ms),
        split(|l| l.total_ms),
        ms(cold_median),
        ms(Samples::new(cold_load).median()),
    );
    body += &pulled_text(pulled_median, &pulled_load, cold_median, warm_add);
    Ok(Section {
        title: "Modules in Go and Python".into(),
        body,
        targets: targets(&medians, pulled_median, cold_median),
    })
}

/// The modules measured, each with its name and the `ipam` keys it needs: the Rust
/// and the Go one, and the Python one when it was built.
fn modules(paths: &Paths) -> Vec<(&'static str, PathBuf, Value)> {
    let mut modules = vec![
        (
            "host-local (Rust)",
            paths.host_local_module.clone(),
            json!({}),
        ),
        (
            "static-go (Go)",
            paths.static_go_module.clone(),
            static_keys(65),
        ),
    ];
    if paths.static_py_module.exists() {
        // The Python component's size and compile time need more than the defaults
        // (examples/static-py/README.md).
        let limits = json!({"moduleMaxMiB": 32, "compileTimeoutSeconds": 300});
        modules.push((
            "static-py (Python)",
            paths.static_py_module.clone(),
            merged(static_keys(66), limits),
        ));
    }
    modules
}

/// The warm ADD+DEL cycles of each of `peers`, after [`WARMUP_CYCLES`] unmeasured,
/// the first peer rotating: each peer's cycle times, and the Go module's (the
/// second peer's) ADD times, ms; failed calls are counted in `failures`.
fn warm_cycles(
    runner: &mut Runner,
    peers: &[Peer],
    opts: &Options,
    failures: &mut usize,
) -> io::Result<(Vec<Vec<f64>>, Vec<f64>)> {
    let mut cycles: Vec<Vec<f64>> = vec![Vec::new(); peers.len()];
    let mut warm_go_adds = Vec::new();
    for i in 0..WARMUP_CYCLES + opts.cycles {
        let id = format!("cycle-{i}");
        // Rotate who goes first, so none always follows another's exit.
        for k in 0..peers.len() {
            let p = (i + k) % peers.len();
            let add = runner.run(&peers[p].call("ADD", &id))?;
            let del = runner.run(&peers[p].call("DEL", &id))?;
            *failures += usize::from(!add.success) + usize::from(!del.success);
            if i >= WARMUP_CYCLES {
                cycles[p].push(Finished::ms(&add) + Finished::ms(&del));
                if p == 1 {
                    warm_go_adds.push(Finished::ms(&add));
                }
            }
        }
    }
    Ok((cycles, warm_go_adds))
}

/// The Go module's first call, [`COLD_CALLS`] times, each into an empty cache (so
/// it compiles the module): each one's spawn-to-exit and its `load_ms`; failed
/// calls are counted in `failures`.
fn cold_go_calls(
    paths: &Paths,
    runner: &mut Runner,
    failures: &mut usize,
) -> io::Result<(Vec<f64>, Vec<f64>)> {
    let mut cold = Vec::new();
    let mut cold_load = Vec::new();
    for i in 0..COLD_CALLS {
        let cache = TempDir::new("languages-cold-cache")?;
        let node = Node::new("languages-cold")?;
        let peer = Peer {
            name: "static-go (Go)",
            plugin: paths.wasm_ipam.clone(),
            netconf: node.wasm_ipam_netconf(&paths.static_go_module, cache.path(), static_keys(67)),
            log: Some(node.log_file()),
        };
        let done = runner.run(&peer.call("ADD", &format!("cold-{i}")))?;
        *failures += usize::from(!done.success);
        cold.push(done.ms());
        cold_load.extend(
            invocations::read(&node.log_file())
                .iter()
                .map(|l| l.load_ms),
        );
    }
    Ok((cold, cold_load))
}

/// Each module's row: its cycles' median and p90, and its median against the Rust
/// module's (the first).
fn cycle_rows(peers: &[Peer], cycles: &[Vec<f64>], medians: &[f64]) -> Vec<Vec<String>> {
    peers
        .iter()
        .zip(cycles)
        .zip(medians)
        .map(|((peer, samples), median)| {
            let samples = Samples::new(samples.clone());
            vec![
                peer.name.to_string(),
                ms(*median),
                ms(samples.percentile(0.9)),
                ratio(*median, medians[0]),
            ]
        })
        .collect()
}

/// The Go module's first call after `pull` (median `pulled_median`, its `load_ms`
/// `pulled_load`) against its compiling first call and its warm ADD.
fn pulled_text(pulled_median: f64, pulled_load: &[f64], cold_median: f64, warm_add: f64) -> String {
    format!(
        "\nIts first call after `wasm-ipam pull` (from a registry on loopback, into an empty \
         cache and module directory: the pull compiles the module into the cache): {} \
         (`load_ms` {}), median of {COLD_CALLS}: {} of the call that compiles it; a warm \
         ADD takes {} ({} of it). The call comes at once after the pull, so the cache \
         hashes the new artifact before it maps it (an artifact younger than 2 s is \
         verified, `RACY_WINDOW`): most of the difference.\n",
        ms(pulled_median),
        ms(Samples::new(pulled_load.to_vec()).median()),
        ratio(pulled_median, cold_median),
        ms(warm_add),
        ratio(warm_add, pulled_median),
    )
}

/// The scenario's targets: the Go module's warm cycle against the Rust module's
/// (`medians`, by module), its first call after `pull` against its compiling first
/// call, and that first call.
fn targets(medians: &[f64], pulled_median: f64, cold_median: f64) -> Vec<Target> {
    let go_ratio = medians[1] / medians[0];
    let pulled_ratio = pulled_median / cold_median;
    vec![
        Target {
            name: "static-go warm cycle vs the Rust module's".into(),
            goal: format!("≤ {GO_RATIO_TARGET}×"),
            measured: ratio(medians[1], medians[0]),
            pass: go_ratio <= GO_RATIO_TARGET,
            miss: format!("{} of the target", ratio(go_ratio, GO_RATIO_TARGET)),
        },
        Target {
            name: "static-go first call after pull vs its compiling first call".into(),
            goal: format!("≤ {GO_PULLED_TARGET_RATIO}×"),
            measured: ratio(pulled_median, cold_median),
            pass: pulled_ratio <= GO_PULLED_TARGET_RATIO,
            miss: format!(
                "{} of the target",
                ratio(pulled_ratio, GO_PULLED_TARGET_RATIO)
            ),
        },
        Target {
            name: "static-go first call (compile)".into(),
            goal: format!("< {}", ms(GO_COLD_TARGET_MS)),
            measured: ms(cold_median),
            pass: cold_median < GO_COLD_TARGET_MS,
            miss: format!("{} of the target", ratio(cold_median, GO_COLD_TARGET_MS)),
        },
    ]
}

/// The Go module pushed to a registry on loopback, then, COLD_CALLS times, pulled
/// into an empty cache and module directory and called once, as a node's first pod
/// after `wasm-ipam pull`: each first ADD's spawn-to-exit, and its `load_ms`.
fn first_calls_after_pull(
    paths: &Paths,
    runner: &mut Runner,
    failures: &mut usize,
) -> io::Result<(Vec<f64>, Vec<f64>)> {
    let registry = Registry::start()?;
    let reference = format!("oci://{}/bench/static-go:1", registry.address);
    wasm_ipam(
        &paths.wasm_ipam,
        &[
            "push".as_ref(),
            paths.static_go_module.as_os_str(),
            reference.as_ref(),
        ],
    )?;
    let mut first = Vec::new();
    let mut load = Vec::new();
    for i in 0..COLD_CALLS {
        let cache = TempDir::new("languages-pulled-cache")?;
        let modules = TempDir::new("languages-pulled-modules")?;
        let pulled = wasm_ipam(
            &paths.wasm_ipam,
            &[
                "pull".as_ref(),
                "--module-dir".as_ref(),
                modules.path().as_os_str(),
                "--cache-dir".as_ref(),
                cache.path().as_os_str(),
                reference.as_ref(),
            ],
        )?;
        let module: PathBuf = pulled
            .lines()
            .find_map(|l| l.strip_prefix("module    "))
            .map(|path| path.trim().into())
            .ok_or_else(|| io::Error::other(format!("pull printed no module line: {pulled}")))?;
        let node = Node::new("languages-pulled")?;
        let peer = Peer {
            name: "static-go (Go)",
            plugin: paths.wasm_ipam.clone(),
            netconf: node.wasm_ipam_netconf(&module, cache.path(), static_keys(68)),
            log: Some(node.log_file()),
        };
        let done = runner.run(&peer.call("ADD", &format!("pulled-{i}")))?;
        *failures += usize::from(!done.success);
        first.push(done.ms());
        load.extend(
            invocations::read(&node.log_file())
                .iter()
                .map(|l| l.load_ms),
        );
    }
    Ok((first, load))
}

/// `wasm-ipam ARGS`, which must succeed: its stdout.
fn wasm_ipam(binary: &Path, args: &[&std::ffi::OsStr]) -> io::Result<String> {
    let out = Command::new(binary).args(args).output()?;
    match out.status.success() {
        true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
        false => Err(io::Error::other(format!(
            "wasm-ipam {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ))),
    }
}
