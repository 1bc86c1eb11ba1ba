//! The pre-fix ordering: herds of DELs that each hold the host-wide lock ~100 ms with
//! a 2 s budget. wasm-ipam (probe module, `spinMs: 100`, `deadlineSeconds: 2`) starts
//! the budget at the grant; `prefix_del` models Calico's old DEL, whose timer started
//! before the lock; `postfix_del` is that model with the timer at the grant, the
//! control showing the model fails only because of where its timer starts.

use super::{LockFigures, Peer, herd, lock_figures, wall_ms, warm_cache};
use crate::report::{Section, Target, table};
use crate::setup::{Node, Paths};
use crate::stats::ms;
use serde_json::{Value, json};
use std::io;
use std::path::PathBuf;
use std::time::Instant;

pub struct Options {
    /// Herd sizes (DELs at once).
    pub sizes: Vec<usize>,
}

/// Guest work under the lock per call, ms.
const SPIN_MS: u64 = 100;
/// The budget per call, s.
const BUDGET_S: u64 = 2;

fn probe_ipam() -> Value {
    json!({"deadlineSeconds": BUDGET_S, "probe": {"spinMs": SPIN_MS}})
}

struct Outcome {
    n: usize,
    plugin: &'static str,
    failures: usize,
    wall_ms: f64,
    lock: LockFigures,
}

pub fn run(paths: &Paths, opts: &Options) -> io::Result<Section> {
    let cache = warm_cache(&paths.wasm_ipam, &paths.probe_module, probe_ipam())?;
    let plugins: [(&'static str, &PathBuf); 3] = [
        ("wasm-ipam", &paths.wasm_ipam),
        ("prefix_del (timer before lock)", &paths.prefix_del),
        ("postfix_del (timer after lock)", &paths.postfix_del),
    ];
    let mut outcomes = Vec::new();
    for &n in &opts.sizes {
        for (name, plugin) in plugins {
            eprintln!("  ordering: {name} N={n}");
            let node = Node::new("ordering")?;
            // One netconf for all three: the models read the same lockFile,
            // deadlineSeconds and probe.spinMs (and write the same log fields).
            let peer = Peer {
                name,
                plugin: plugin.clone(),
                netconf: node.wasm_ipam_netconf(&paths.probe_module, cache.path(), probe_ipam()),
                log: Some(node.log_file()),
            };
            let ids: Vec<String> = (0..n).map(|i| format!("del-{n}-{i}")).collect();
            let epoch = Instant::now();
            let done = herd(&peer, "DEL", &ids, |_| None)?;
            outcomes.push(Outcome {
                n,
                plugin: name,
                failures: done.iter().filter(|f| !f.success).count(),
                wall_ms: wall_ms(&done),
                lock: lock_figures(&node.log_file(), "DEL", &ids, &done, epoch),
            });
        }
    }
    Ok(section(opts, &outcomes))
}

fn section(opts: &Options, outcomes: &[Outcome]) -> Section {
    let rows: Vec<Vec<String>> = outcomes
        .iter()
        .map(|o| {
            let lock = &o.lock;
            vec![
                o.n.to_string(),
                o.plugin.into(),
                format!("**{}** of {}", o.failures, o.n),
                ms(o.wall_ms),
                format!("{:.1}", o.n as f64 / o.wall_ms * 1000.0),
                ms(lock.holds.median()),
                format!("{} / {}", ms(lock.waits.median()), ms(lock.waits.max())),
            ]
        })
        .collect();
    let wasm: Vec<&Outcome> = outcomes
        .iter()
        .filter(|o| o.plugin == "wasm-ipam")
        .collect();
    let wasm_failures: usize = wasm.iter().map(|o| o.failures).sum();
    let wasm_calls: usize = wasm.iter().map(|o| o.n).sum();
    let mut body = format!(
        "Herds of {} DELs at once on one lock, each doing {SPIN_MS} ms of work under \
         the lock with a {BUDGET_S} s budget. wasm-ipam runs the probe module \
         (`probe.spinMs: {SPIN_MS}`, `deadlineSeconds: {BUDGET_S}`); the models read the \
         same netconf and busy-wait the same {SPIN_MS} ms under the same flock, failing \
         if the budget is spent at any point after the grant. A call that fails at the \
         grant releases the lock at once, so the herd drains quickly after the budget \
         runs out.\n\n",
        opts.sizes
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(" and ")
    );
    body += &table(
        &[
            "N",
            "plugin",
            "failed",
            "wall",
            "calls/s",
            "hold p50",
            "lock wait p50 / max",
        ],
        &rows,
    );
    Section {
        title: "Pre-fix ordering (timer before the lock)".into(),
        body,
        targets: vec![Target {
            name: "wasm-ipam failures, probe DEL herds".into(),
            goal: "0".into(),
            measured: format!("{wasm_failures} of {wasm_calls} calls"),
            pass: wasm_failures == 0,
            miss: format!("{wasm_failures} failed"),
        }],
    }
}
