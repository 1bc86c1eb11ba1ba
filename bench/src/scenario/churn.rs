//! Sustained churn: wasm-ipam DELs (probe module, `spinMs` of guest work under the
//! lock) arriving at a steady interval shorter than the lock can serve them, for a
//! bounded time. A bare flock(2) grants the lock to waiters in no particular order, so
//! the unluckiest call can be overtaken again and again; this compares the measured
//! lock-wait distribution of wasm-ipam's lock (its FIFO ticket queue, then the flock)
//! and of a bare flock (the `postfix_del` model under the same arrivals) with what a
//! FIFO lock would give the same arrivals and hold times (see [`crate::fifo`]).
//!
//! It is its own subcommand (`wasm-ipam-bench churn`) so it can be re-run against a
//! wasm-ipam built with a different lock.

use super::{Peer, lock_figures, wall_ms, warm_cache};
use crate::process::Runner;
use crate::report::{Section, Target, table};
use crate::setup::{Node, Paths};
use crate::stats::{Samples, ms, ratio};
use serde_json::json;
use std::io;
use std::time::{Duration, Instant};

pub struct Options {
    /// How long calls keep arriving, s.
    pub seconds: f64,
    /// Time between arrivals, ms.
    pub interval_ms: f64,
    /// Guest work under the lock per call, ms.
    pub spin_ms: u64,
}

/// Each call's budget, s: generous, so no call fails for its queueing (the budget
/// starts at the grant anyway); failures would mean something else went wrong.
const BUDGET_S: u64 = 60;
/// If the measured worst wait exceeds FIFO's by more than this factor, a FIFO queue lock
/// is worth building.
const FAIRNESS_LIMIT: f64 = 1.5;

/// One lock under churn: what it measured, with its FIFO simulations.
struct Arm {
    lock: super::LockFigures,
    count: usize,
    failures: usize,
    peak_running: usize,
    spread: f64,
    wall: f64,
}

/// Sends `count` DELs through `peer` at the churn's steady interval; reaps them all.
fn run_arm(peer: &Peer, log: &std::path::Path, opts: &Options) -> io::Result<Arm> {
    let count = (opts.seconds * 1000.0 / opts.interval_ms).floor() as usize;
    let ids: Vec<String> = (0..count).map(|i| format!("churn-{i}")).collect();
    let interval = Duration::from_secs_f64(opts.interval_ms / 1000.0);
    let mut runner = Runner::new();
    let mut done = Vec::with_capacity(count);
    let mut peak_running = 0;
    let epoch = Instant::now();
    for (i, id) in ids.iter().enumerate() {
        // Reap what has finished, then sleep until this call is due.
        while let Some(f) = runner.reap(false) {
            done.push(f);
        }
        let due = epoch + interval * i as u32;
        if let Some(early) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(early);
        }
        runner.spawn(i, &peer.call("DEL", id))?;
        peak_running = peak_running.max(runner.running());
    }
    done.extend(runner.reap_all());
    if done.len() != count {
        return Err(io::Error::other(format!(
            "{} of {count} churn calls could not be reaped",
            count - done.len()
        )));
    }
    done.sort_by_key(|f| f.tag);
    let spread = match (done.first(), done.last()) {
        (Some(a), Some(b)) if count > 1 => {
            (b.spawned - a.spawned).as_secs_f64() * 1000.0 / (count - 1) as f64
        }
        _ => f64::NAN,
    };
    Ok(Arm {
        lock: lock_figures(log, "DEL", &ids, &done, epoch),
        count,
        failures: done.iter().filter(|f| !f.success).count(),
        peak_running,
        spread,
        wall: wall_ms(&done),
    })
}

pub fn run(paths: &Paths, opts: &Options) -> io::Result<Section> {
    let ipam = json!({"deadlineSeconds": BUDGET_S, "probe": {"spinMs": opts.spin_ms}});
    let cache = warm_cache(&paths.wasm_ipam, &paths.probe_module, ipam.clone())?;
    let node = Node::new("churn")?;
    let peer = Peer {
        name: "wasm-ipam",
        plugin: paths.wasm_ipam.clone(),
        netconf: node.wasm_ipam_netconf(&paths.probe_module, cache.path(), ipam.clone()),
        log: Some(node.log_file()),
    };
    eprintln!("  churn: wasm-ipam");
    let arm = run_arm(&peer, &node.log_file(), opts)?;
    // The same arrivals through a bare flock(2): the model DEL with the same work
    // under the lock, to show what the lock order is without wasm-ipam's queue.
    let bare_node = Node::new("churn-flock")?;
    let bare_peer = Peer {
        name: "postfix_del (bare flock)",
        plugin: paths.postfix_del.clone(),
        netconf: bare_node.wasm_ipam_netconf(&paths.probe_module, cache.path(), ipam),
        log: Some(bare_node.log_file()),
    };
    eprintln!("  churn: bare flock model");
    let bare = run_arm(&bare_peer, &bare_node.log_file(), opts)?;
    Ok(section(opts, &arm, &bare))
}

/// The section: wasm-ipam's lock (`arm`) and the bare flock's (`bare`) under the
/// same arrivals, each against a FIFO lock's simulation, and the verdict.
fn section(opts: &Options, arm: &Arm, bare: &Arm) -> Section {
    let (lock, count, failures) = (&arm.lock, arm.count, arm.failures);
    let worst = lock.waits.max() / lock.fifo_spawn.max();
    let unfair = worst > FAIRNESS_LIMIT;
    let mut body = setup_text(opts, arm);
    body += &waits_table(arm, bare);
    body += &format!(
        "\nThe bare-flock rows send the same arrivals through `postfix_del`, a model DEL \
         that takes a plain flock(2) on the same kind of lock file with the same work under \
         it (hold p50 {}); {} of {} failed. Its worst wait is {} its own FIFO simulation's \
         (wasm-ipam's: {}).\n",
        ms(bare.lock.holds.median()),
        bare.failures,
        bare.count,
        ratio(bare.lock.waits.max(), bare.lock.fifo_spawn.max()),
        ratio(lock.waits.max(), lock.fifo_spawn.max()),
    );
    body += &verdict_text(opts, lock, worst, unfair);
    Section {
        title: "Sustained churn: the lock vs FIFO".into(),
        body,
        targets: vec![Target {
            name: "churn: worst lock wait vs FIFO's".into(),
            goal: format!("≤ {FAIRNESS_LIMIT}× (else build a FIFO queue lock)"),
            measured: format!(
                "{worst:.2}× ({} vs {}); {failures} of {count} calls failed",
                ms(lock.waits.max()),
                ms(lock.fifo_spawn.max())
            ),
            pass: !unfair && failures == 0,
            miss: if unfair {
                format!("{:.2}× over the limit", worst / FAIRNESS_LIMIT)
            } else {
                format!("{failures} calls failed")
            },
        }],
    }
}

/// How the churn ran (the arrivals, the load they offered, what `arm` measured of
/// them) and what the FIFO rows simulate.
fn setup_text(opts: &Options, arm: &Arm) -> String {
    let (lock, count, failures, peak_running, spread) = (
        &arm.lock,
        arm.count,
        arm.failures,
        arm.peak_running,
        arm.spread,
    );
    format!(
        "wasm-ipam DELs running the probe module (`spinMs: {}`) arrive every {} ms \
         (achieved: every {:.2} ms on average) for {} s: {count} calls, each holding the \
         lock for {} (p50), so the offered load is {:.2}× what the lock can serve and a \
         queue builds up (at most {peak_running} calls running at once). Every call is \
         reaped; {failures} failed; last reaped {} after the first arrival; {} of {count} \
         logged. While calls waited, the lock took {} (p50) to change hands. \
         \"Measured\" is the lock of the wasm-ipam binary under test, from its log \
         (`lock_wait_ms`).\n\n\
         The FIFO rows simulate a FIFO lock serving the same calls for the same measured \
         hold times (`lock_hold_ms`), handing over with no gap: first with arrivals at \
         the spawn instants (the specified comparison), then with arrivals when each call \
         asked for the lock (from the log, the instant `lock_wait_ms` counts from), then \
         that again with each hold lengthened by the measured median handover gap (a \
         FIFO lock that changes hands as slowly as the measured one did).\n\n",
        opts.spin_ms,
        opts.interval_ms,
        spread,
        opts.seconds,
        ms(lock.holds.median()),
        lock.holds.median() / opts.interval_ms,
        ms(arm.wall),
        lock.logged,
        ms(lock.handover.median()),
    )
}

/// The lock waits of wasm-ipam (`arm`) and of the bare flock (`bare`), each beside
/// the FIFO simulations of the same calls.
fn waits_table(arm: &Arm, bare: &Arm) -> String {
    let lock = &arm.lock;
    let row = |name: &str, measured: &Samples, s: &Samples| {
        vec![
            name.to_string(),
            ms(s.median()),
            ms(s.percentile(0.99)),
            ms(s.max()),
            ratio(measured.max(), s.max()),
        ]
    };
    table(
        &[
            "lock",
            "wait p50",
            "wait p99",
            "wait max",
            "max measured / max",
        ],
        &[
            row(
                "wasm-ipam (queue + flock), measured",
                &lock.waits,
                &lock.waits,
            ),
            row("FIFO, arrivals at spawn", &lock.waits, &lock.fifo_spawn),
            row(
                "FIFO, arrivals at lock request",
                &lock.waits,
                &lock.fifo_request,
            ),
            row(
                "FIFO, arrivals at lock request, measured handover gap",
                &lock.waits,
                &lock.fifo_request_handover,
            ),
            row(
                "bare flock (model), measured",
                &bare.lock.waits,
                &bare.lock.waits,
            ),
            row(
                "FIFO for the model's arrivals at spawn",
                &bare.lock.waits,
                &bare.lock.fifo_spawn,
            ),
        ],
    )
}

/// Whether the worst measured wait (`worst`× FIFO's) warrants a FIFO queue lock,
/// and how to run this scenario alone.
fn verdict_text(opts: &Options, lock: &super::LockFigures, worst: f64, unfair: bool) -> String {
    format!(
        "\n**Verdict:** the worst measured wait is {worst:.2}× the worst FIFO wait (arrivals \
         at spawn), {} {FAIRNESS_LIMIT}×{}. Against arrivals at the lock request it is \
         {}, and {} when the FIFO lock is charged the measured handover gap.\n\nRe-run this \
         scenario alone (e.g. against a wasm-ipam with a FIFO queue lock): \
         `bench/target/release/wasm-ipam-bench churn [--wasm-ipam PATH] \
         [--probe-module PATH] [--seconds {}] [--interval-ms {}] [--spin-ms {}]` (prints \
         this section).\n",
        if unfair { "more than" } else { "within" },
        if unfair {
            ": the lock's grant order costs the unluckiest call more than the load \
             does, so a FIFO queue lock is warranted"
        } else {
            ""
        },
        ratio(lock.waits.max(), lock.fifo_request.max()),
        ratio(lock.waits.max(), lock.fifo_request_handover.max()),
        opts.seconds,
        opts.interval_ms,
        opts.spin_ms,
    )
}
