//! Herds: N concurrent ADDs, then N concurrent DELs of the same containers (distinct
//! ids, one /16), for wasm-ipam and host-local, as when a node starts or drains many
//! pods at once. Reports wall time, throughput, failures, distinct addresses, per-call
//! latency, and (from wasm-ipam's log) lock hold and the lock-wait distribution next
//! to what a FIFO lock would have given the same arrivals.

use super::{LockFigures, Peer, addresses, herd, lock_figures, wall_ms, warm_cache};
use crate::process::Finished;
use crate::report::{Section, Target, table};
use crate::setup::{Node, Paths, TempDir};
use crate::stats::{Samples, ms, ratio};
use serde_json::json;
use std::collections::{BTreeMap, HashSet};
use std::io;
use std::path::Path;
use std::time::Instant;

pub struct Options {
    /// Herd sizes N.
    pub sizes: Vec<usize>,
    /// Herds per size and plugin (the wall-time figures are medians over them).
    pub repeats: usize,
}

/// Herd sizes with a target: each one's ADD+DEL wall time must be at most this
/// fraction of host-local's (BENCHMARKS.md's "Targets" table).
const WALL_RATIO_TARGETS: [(usize, f64); 2] = [(1000, 0.5), (200, 0.8)];

/// One phase (all ADDs or all DELs) of one herd.
struct Phase {
    wall_ms: f64,
    done: Vec<Finished>,
    lock: Option<LockFigures>,
}

/// Picks one phase of a herd.
type PhaseOf = fn(&Herd) -> &Phase;

impl Phase {
    fn failures(&self) -> usize {
        self.done.iter().filter(|f| !f.success).count()
    }
    fn add(herd: &Herd) -> &Phase {
        &herd.add
    }
    fn del(herd: &Herd) -> &Phase {
        &herd.del
    }
}

/// One herd: N ADDs then N DELs.
struct Herd {
    add: Phase,
    del: Phase,
    distinct: usize,
}

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Plugin {
    WasmIpam,
    HostLocal,
}

impl Plugin {
    fn name(self) -> &'static str {
        match self {
            Plugin::WasmIpam => "wasm-ipam",
            Plugin::HostLocal => "host-local",
        }
    }
}

pub fn run(paths: &Paths, opts: &Options) -> io::Result<Section> {
    let cache = warm_cache(&paths.wasm_ipam, &paths.host_local_module, json!({}))?;
    let mut results: BTreeMap<(usize, Plugin), Vec<Herd>> = BTreeMap::new();
    let mut turn = 0;
    for &n in &opts.sizes {
        for rep in 0..opts.repeats {
            // Alternate which plugin goes first, so neither always runs second.
            let order = if turn % 2 == 0 {
                [Plugin::WasmIpam, Plugin::HostLocal]
            } else {
                [Plugin::HostLocal, Plugin::WasmIpam]
            };
            turn += 1;
            for plugin in order {
                eprintln!(
                    "  herd: {} N={n} ({}/{})",
                    plugin.name(),
                    rep + 1,
                    opts.repeats
                );
                let herd = one_herd(paths, &cache, plugin, n, rep)?;
                results.entry((n, plugin)).or_default().push(herd);
            }
        }
    }
    Ok(section(opts, &results))
}

fn one_herd(
    paths: &Paths,
    cache: &TempDir,
    plugin: Plugin,
    n: usize,
    rep: usize,
) -> io::Result<Herd> {
    let node = Node::new("herd")?;
    let peer = match plugin {
        Plugin::WasmIpam => Peer {
            name: "wasm-ipam",
            plugin: paths.wasm_ipam.clone(),
            netconf: node.wasm_ipam_netconf(&paths.host_local_module, cache.path(), json!({})),
            log: Some(node.log_file()),
        },
        Plugin::HostLocal => Peer {
            name: "host-local",
            plugin: paths.host_local.clone(),
            netconf: node.host_local_netconf(),
            log: None,
        },
    };
    let ids: Vec<String> = (0..n).map(|i| format!("herd-{n}-{rep}-{i}")).collect();
    let epoch = Instant::now();
    let adds = herd(&peer, "ADD", &ids, |id| Some(node.out(id)))?;
    let distinct = addresses(
        ids.iter()
            .zip(&adds)
            .filter(|(_, f)| f.success)
            .map(|(id, _)| node.out(id)),
    )
    .into_iter()
    .collect::<HashSet<_>>()
    .len();
    let dels = herd(&peer, "DEL", &ids, |_| None)?;
    let figures = |log: &Path, command: &str, done: &[Finished]| {
        lock_figures(log, command, &ids, done, epoch)
    };
    Ok(Herd {
        add: Phase {
            wall_ms: wall_ms(&adds),
            lock: peer.log.as_deref().map(|l| figures(l, "ADD", &adds)),
            done: adds,
        },
        del: Phase {
            wall_ms: wall_ms(&dels),
            lock: peer.log.as_deref().map(|l| figures(l, "DEL", &dels)),
            done: dels,
        },
        distinct,
    })
}

/// Median over repeats of a per-herd figure.
fn median_of(herds: &[Herd], f: impl Fn(&Herd) -> f64) -> f64 {
    herds.iter().map(f).collect::<Samples>().median()
}

/// Per-call latencies of one phase, pooled over repeats.
fn latencies(herds: &[Herd], phase: impl Fn(&Herd) -> &Phase) -> Samples {
    herds
        .iter()
        .flat_map(|h| phase(h).done.iter().map(Finished::ms))
        .collect()
}

fn pooled_lock(herds: &[Herd], phase: impl Fn(&Herd) -> &Phase) -> Option<LockFigures> {
    herds
        .iter()
        .filter_map(|h| phase(h).lock.clone())
        .reduce(|a, b| a.pooled(&b))
}

fn section(opts: &Options, results: &BTreeMap<(usize, Plugin), Vec<Herd>>) -> Section {
    let mut tables = Tables::default();
    let mut wasm_failures = 0;
    let mut wasm_calls = 0;
    let mut targets = Vec::new();
    for &n in &opts.sizes {
        let (Some(w), Some(h)) = (
            results.get(&(n, Plugin::WasmIpam)),
            results.get(&(n, Plugin::HostLocal)),
        ) else {
            continue;
        };
        for (plugin, herds) in [(Plugin::WasmIpam, w), (Plugin::HostLocal, h)] {
            let failures = tables.add_plugin(n, plugin, herds);
            if plugin == Plugin::WasmIpam {
                wasm_failures += failures;
                wasm_calls += 2 * n * herds.len();
            }
        }
        tables.rows.push(ratio_row(n, w, h));
        for (phase_name, phase) in [("ADD", Phase::add as PhaseOf), ("DEL", Phase::del)] {
            if let Some(row) = lock_row(n, phase_name, w, phase) {
                tables.lock_rows.push(row);
            }
        }
        if let Some(target) = wall_target(n, w, h) {
            targets.push(target);
        }
    }
    targets.push(Target {
        name: "wasm-ipam failures, ADD/DEL herds".into(),
        goal: "0".into(),
        measured: format!("{wasm_failures} of {wasm_calls} calls"),
        pass: wasm_failures == 0,
        miss: format!("{wasm_failures} failed"),
    });
    Section {
        title: "Herds".into(),
        body: tables.text(opts),
        targets,
    }
}

/// A herd's ADD and DEL wall time together, ms.
fn total(h: &Herd) -> f64 {
    h.add.wall_ms + h.del.wall_ms
}

/// The section's tables' rows: herds, throughput, and wasm-ipam's lock.
#[derive(Default)]
struct Tables {
    rows: Vec<Vec<String>>,
    lock_rows: Vec<Vec<String>>,
    throughput_rows: Vec<Vec<String>>,
}

impl Tables {
    /// Adds `plugin`'s row to the herds table and to the throughput table for herds
    /// of `n`; its failed calls.
    fn add_plugin(&mut self, n: usize, plugin: Plugin, herds: &[Herd]) -> usize {
        let fails =
            |phase: fn(&Herd) -> &Phase| herds.iter().map(|h| phase(h).failures()).sum::<usize>();
        let (add_fail, del_fail) = (fails(|h| &h.add), fails(|h| &h.del));
        let add_lat = latencies(herds, |h| &h.add);
        let del_lat = latencies(herds, |h| &h.del);
        let min_distinct = herds.iter().map(|h| h.distinct).min().unwrap_or(0);
        self.rows.push(vec![
            n.to_string(),
            plugin.name().into(),
            ms(median_of(herds, |h| h.add.wall_ms)),
            ms(median_of(herds, |h| h.del.wall_ms)),
            ms(median_of(herds, total)),
            format!("{add_fail} / {del_fail}"),
            format!("{min_distinct} of {n}"),
            format!(
                "{} / {}",
                ms(add_lat.median()),
                ms(add_lat.percentile(0.99))
            ),
            format!(
                "{} / {}",
                ms(del_lat.median()),
                ms(del_lat.percentile(0.99))
            ),
        ]);
        self.throughput_rows.push(vec![
            n.to_string(),
            plugin.name().into(),
            format!(
                "{:.0}",
                n as f64 / median_of(herds, |h| h.add.wall_ms) * 1000.0
            ),
            format!(
                "{:.0}",
                n as f64 / median_of(herds, |h| h.del.wall_ms) * 1000.0
            ),
        ]);
        add_fail + del_fail
    }

    /// The section's text: how the herds ran, and the three tables.
    fn text(&self, opts: &Options) -> String {
        let mut body = format!(
            "Each herd spawns N ADDs at once (distinct container ids, subnet 10.22.0.0/16), \
             reaps them all, then spawns N DELs at once. {} herds per size and plugin, the \
             plugins' herds interleaved; wall times are medians over them, latencies pooled \
             over them. wasm-ipam runs `examples/host-local` from a warm cache.\n\n",
            opts.repeats
        );
        body += &table(
            &[
                "N",
                "plugin",
                "ADD wall",
                "DEL wall",
                "ADD+DEL wall",
                "failed ADD / DEL",
                "distinct addresses (worst herd)",
                "ADD p50 / p99",
                "DEL p50 / p99",
            ],
            &self.rows,
        );
        body += "\n### Throughput\n\nCalls per second (N / median wall time of the phase).\n\n";
        body += &table(
            &["N", "plugin", "ADD calls/s", "DEL calls/s"],
            &self.throughput_rows,
        );
        body += LOCK_TABLE_INTRO;
        body += &table(
            &[
                "N",
                "phase",
                "hold p50",
                "budget used p50",
                "lock held",
                "handover p50",
                "measured wait p50 / p99 / max",
                "FIFO wait p50 / p99 / max",
                "max measured / max FIFO",
                "same, FIFO from lock request",
            ],
            &self.lock_rows,
        );
        body
    }
}

/// What the lock table's columns are.
const LOCK_TABLE_INTRO: &str = "\n### wasm-ipam's lock in the herds\n\nFrom its log, pooled over the \
             herds: time under the lock (`lock_hold_ms`); from grant to the guest's \
             return (`budget_used_ms`); how much of the phase's wall time the lock was \
             held (the rest it was free or changing hands: the calls are then limited by \
             the CPU work outside the lock, not by the lock); the median gap from one \
             release to the next grant while calls were waiting; and the wait for the \
             lock (`lock_wait_ms`) next to the waits a FIFO lock would have given the \
             same calls, simulated with arrivals at the spawn instants and service = each \
             call's measured hold. The last column uses arrivals at the instant each call \
             asked for the lock (from the log) instead, the instant wasm-ipam's own \
             `lock_wait_ms` counts from (process start and module load, slowed by CPU \
             contention in a herd, come before it).\n\n";

/// The herds table's ratio row for herds of `n`: wasm-ipam's (`w`) figures to
/// host-local's (`h`).
fn ratio_row(n: usize, w: &[Herd], h: &[Herd]) -> Vec<String> {
    vec![
        n.to_string(),
        "ratio".into(),
        ratio(
            median_of(w, |h| h.add.wall_ms),
            median_of(h, |h| h.add.wall_ms),
        ),
        ratio(
            median_of(w, |h| h.del.wall_ms),
            median_of(h, |h| h.del.wall_ms),
        ),
        ratio(median_of(w, total), median_of(h, total)),
        String::new(),
        String::new(),
        ratio(
            latencies(w, |h| &h.add).median(),
            latencies(h, |h| &h.add).median(),
        ),
        ratio(
            latencies(w, |h| &h.del).median(),
            latencies(h, |h| &h.del).median(),
        ),
    ]
}

/// The lock table's row for `phase` (named `phase_name`) of wasm-ipam's herds `w`
/// of `n`; none when their log says nothing of the lock.
fn lock_row(n: usize, phase_name: &str, w: &[Herd], phase: PhaseOf) -> Option<Vec<String>> {
    let lock = pooled_lock(w, phase)?;
    let walls: f64 = w.iter().map(|h| phase(h).wall_ms).sum();
    let triple = |s: &Samples| {
        format!(
            "{} / {} / {}",
            ms(s.median()),
            ms(s.percentile(0.99)),
            ms(s.max())
        )
    };
    Some(vec![
        n.to_string(),
        phase_name.into(),
        ms(lock.holds.median()),
        ms(lock.budget_used.median()),
        format!("{:.0}%", lock.holds.sum() / walls * 100.0),
        ms(lock.handover.median()),
        triple(&lock.waits),
        triple(&lock.fifo_spawn),
        ratio(lock.waits.max(), lock.fifo_spawn.max()),
        ratio(lock.waits.max(), lock.fifo_request.max()),
    ])
}

/// The wall-time target of herds of `n`, if [`WALL_RATIO_TARGETS`] sets one:
/// wasm-ipam's (`w`) ADD+DEL wall time against host-local's (`h`).
fn wall_target(n: usize, w: &[Herd], h: &[Herd]) -> Option<Target> {
    let &(_, goal) = WALL_RATIO_TARGETS.iter().find(|(size, _)| *size == n)?;
    let (wt, ht) = (median_of(w, total), median_of(h, total));
    let r = wt / ht;
    Some(Target {
        name: format!("herd of {n} ADDs + {n} DELs, wall time"),
        goal: format!("≤ {goal}× host-local"),
        measured: format!("{r:.2}× ({} vs {})", ms(wt), ms(ht)),
        pass: r <= goal,
        miss: format!("{:.2}× the target, {} over", r / goal, ms(wt - goal * ht)),
    })
}
