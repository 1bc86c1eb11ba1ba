//! The scenarios, and what they share: a plugin to call with its netconf, a warmed
//! compiled-module cache, launching a herd of concurrent calls, and reading the lock
//! figures of a herd back from the invocation log.

pub mod busy;
pub mod churn;
pub mod engines;
pub mod etcd_churn;
pub mod etcd_herd;
pub mod herd;
pub mod kube_del_herd;
pub mod kube_node;
pub mod kube_store;
pub mod languages;
pub mod latency;
pub mod ordering;
pub mod stats_log;
pub mod store_open;
pub mod syncs;
pub mod whereabouts;

use crate::fifo::{self, Job};
use crate::invocations::{self, Invocation};
use crate::process::{Call, Finished, Runner};
use crate::setup::{Node, TempDir};
use crate::stats::Samples;
use serde_json::Value;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// A plugin under test with the netconf it is called with.
pub struct Peer {
    pub name: &'static str,
    pub plugin: PathBuf,
    pub netconf: PathBuf,
    /// Its invocation log, when it writes one (wasm-ipam, the DEL models).
    pub log: Option<PathBuf>,
}

impl Peer {
    pub fn call<'a>(&'a self, command: &'a str, container_id: &'a str) -> Call<'a> {
        Call {
            plugin: &self.plugin,
            command,
            container_id,
            netconf: &self.netconf,
            stdout: None,
            cni_args: None,
        }
    }
}

/// A compiled-module cache holding `module`'s compiled code, as a node has it long
/// after the first call: one DEL on a scratch node compiles and stores it; a second,
/// once the artifact is older than the cache's racy window, checks its digest and
/// records that check, so later calls load it by its identity without reading it. (A
/// call within the window of the artifact's writing re-hashes it, which no call of a
/// node long past its first one does.)
pub fn warm_cache(wasm_ipam: &Path, module: &Path, extra: Value) -> io::Result<TempDir> {
    let cache = TempDir::new("cache")?;
    let node = Node::new("warm")?;
    let netconf = node.wasm_ipam_netconf(module, cache.path(), extra);
    let peer = Peer {
        name: "wasm-ipam",
        plugin: wasm_ipam.to_path_buf(),
        netconf,
        log: None,
    };
    let mut runner = Runner::new();
    for id in ["warm-up", "warm-up-checked"] {
        let done = runner.run(&peer.call("DEL", id))?;
        if !done.success {
            return Err(io::Error::other(format!(
                "warming the module cache failed: {} DEL with {} did not succeed",
                wasm_ipam.display(),
                module.display()
            )));
        }
        if id == "warm-up" {
            past_racy_window(cache.path())?;
        }
    }
    Ok(cache)
}

/// Waits until every file in `dir` is older than the cache's racy window
/// (`wasm_ipam::module::cache::RACY_WINDOW`), measured by the files' own ctimes: a
/// module or artifact younger than that is hashed on every call (its recorded digest
/// could not vouch for a rewrite within the same clock tick), which a warm call on a
/// node, its module installed long before, never does.
pub fn past_racy_window(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let window = wasm_ipam::module::cache::RACY_WINDOW + std::time::Duration::from_millis(100);
    let mut newest = 0i128;
    for entry in std::fs::read_dir(dir)? {
        let meta = entry?.metadata()?;
        newest =
            newest.max(i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()));
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(io::Error::other)?
        .as_nanos() as i128;
    let left = newest + window.as_nanos() as i128 - now;
    if left > 0 {
        std::thread::sleep(std::time::Duration::from_nanos(left as u64));
    }
    Ok(())
}

/// Spawns one `command` call per id, all at once as a runtime tearing down or starting
/// a node would, then reaps them all. Results are in id order; `stdout_of` names where
/// each call's stdout goes.
pub fn herd(
    peer: &Peer,
    command: &str,
    ids: &[String],
    stdout_of: impl Fn(&str) -> Option<PathBuf>,
) -> io::Result<Vec<Finished>> {
    herd_on(std::slice::from_ref(peer), command, ids, |_, id| {
        stdout_of(id)
    })
}

/// [`herd`] spread over several nodes' peers: call `i` goes to `peers[i % len]`, and
/// `stdout_of` is given its index too.
pub fn herd_on(
    peers: &[Peer],
    command: &str,
    ids: &[String],
    stdout_of: impl Fn(usize, &str) -> Option<PathBuf>,
) -> io::Result<Vec<Finished>> {
    herd_with_args(peers, command, ids, stdout_of, &[])
}

/// [`herd_on`], call `i` with `CNI_ARGS` `args[i]` (unset past the end of `args`), as
/// a runtime names each call's pod.
pub fn herd_with_args(
    peers: &[Peer],
    command: &str,
    ids: &[String],
    stdout_of: impl Fn(usize, &str) -> Option<PathBuf>,
    args: &[String],
) -> io::Result<Vec<Finished>> {
    let mut runner = Runner::new();
    for (i, id) in ids.iter().enumerate() {
        let mut call = peers[i % peers.len()].call(command, id);
        call.stdout = stdout_of(i, id);
        call.cni_args = args.get(i).map(String::as_str);
        runner.spawn(i, &call)?;
    }
    let mut done = runner.reap_all();
    if done.len() != ids.len() {
        return Err(io::Error::other(format!(
            "{} of {} {} calls could not be reaped",
            ids.len() - done.len(),
            ids.len(),
            peers[0].name
        )));
    }
    done.sort_by_key(|f| f.tag);
    Ok(done)
}

/// How many addresses `wasm-ipam list` shows for the network of `netconf`.
pub fn listed(wasm_ipam: &Path, netconf: &Path) -> io::Result<usize> {
    let out = std::process::Command::new(wasm_ipam)
        .args(["list", "--json", "--netconf"])
        .arg(netconf)
        .output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "wasm-ipam list: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    let rows: Value = serde_json::from_slice(&out.stdout).map_err(io::Error::other)?;
    Ok(rows.as_array().map_or(0, Vec::len))
}

/// How many addresses whereabouts' IPPools (`kubectl get ippools -o json`, `pools`)
/// hand to a pod, in the pools of `range` or in all. It frees none a pod holds,
/// whether or not the pod is gone.
pub fn whereabouts_allocations(pools: &Value, range: Option<&str>) -> usize {
    pools["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| range.is_none_or(|r| p["spec"]["range"] == r))
        .map(|p| p["spec"]["allocations"].as_object().map_or(0, |a| a.len()))
        .sum()
}

/// First spawn to last reap, ms.
pub fn wall_ms(done: &[Finished]) -> f64 {
    let first = done.iter().map(|f| f.spawned).min();
    let last = done.iter().map(|f| f.ended).max();
    match (first, last) {
        (Some(a), Some(b)) => (b - a).as_secs_f64() * 1000.0,
        _ => f64::NAN,
    }
}

/// The lock as one batch of calls saw it, from the invocation log, next to what a
/// FIFO lock would have given the same calls.
#[derive(Clone, Debug, Default)]
pub struct LockFigures {
    pub waits: Samples,
    pub holds: Samples,
    pub budget_used: Samples,
    /// FIFO waits with arrivals at the spawn instants (a runtime's view).
    pub fifo_spawn: Samples,
    /// FIFO waits with arrivals when each call asked for the lock (from the log), the
    /// instant flock's own `lock_wait_ms` is measured from.
    pub fifo_request: Samples,
    /// Release to the next grant while another call was already waiting: the time the
    /// lock spends changing hands.
    pub handover: Samples,
    /// As `fifo_request`, each hold lengthened by the median handover gap: a FIFO lock
    /// that changes hands as slowly as flock did here.
    pub fifo_request_handover: Samples,
    /// Calls with a log line (those that reached the lock).
    pub logged: usize,
}

/// Matches `done` (calls made with `ids`, in order, of `command`) to their log lines.
/// Spawn arrivals are taken relative to `epoch`; the log's timestamps give the rest.
pub fn lock_figures(
    log: &Path,
    command: &str,
    ids: &[String],
    done: &[Finished],
    epoch: Instant,
) -> LockFigures {
    let lines = invocations::read(log);
    let by_id = invocations::by_container(&lines, command);
    let matched: Vec<(&Finished, &Invocation)> = ids
        .iter()
        .zip(done)
        .filter_map(|(id, f)| by_id.get(id).map(|inv| (f, inv)))
        .collect();
    let calls: Vec<&Invocation> = matched.iter().map(|(_, i)| *i).collect();
    let spawn_jobs: Vec<Job> = matched
        .iter()
        .map(|(f, inv)| Job {
            arrival_ms: (f.spawned - epoch).as_secs_f64() * 1000.0,
            hold_ms: inv.lock_hold_ms,
        })
        .collect();
    let request_jobs = |extra_ms: f64| -> Vec<Job> {
        calls
            .iter()
            .filter_map(|inv| {
                Some(Job {
                    arrival_ms: inv.requested_at_ms()?,
                    hold_ms: inv.lock_hold_ms + extra_ms,
                })
            })
            .collect()
    };
    let handover = handover_gaps(&calls);
    let median_gap = if handover.is_empty() {
        0.0
    } else {
        handover.median()
    };
    LockFigures {
        waits: calls.iter().map(|i| i.lock_wait_ms).collect(),
        holds: calls.iter().map(|i| i.lock_hold_ms).collect(),
        budget_used: calls.iter().map(|i| i.budget_used_ms).collect(),
        fifo_spawn: fifo::waits(&spawn_jobs),
        fifo_request: fifo::waits(&request_jobs(0.0)),
        fifo_request_handover: fifo::waits(&request_jobs(median_gap)),
        handover,
        logged: matched.len(),
    }
}

/// For calls in grant order: the gap from one release to the next grant, where the
/// next call had asked for the lock before the release (so the lock was not idle).
fn handover_gaps(calls: &[&Invocation]) -> Samples {
    let mut spans: Vec<(f64, f64, f64)> = calls
        .iter()
        .filter_map(|i| Some((i.granted_at_ms()?, i.logged_at_ms?, i.requested_at_ms()?)))
        .collect();
    spans.sort_by(|a, b| a.0.total_cmp(&b.0));
    spans
        .windows(2)
        .filter(|w| w[1].2 < w[0].1)
        .map(|w| (w[1].0 - w[0].1).max(0.0))
        .collect()
}

impl LockFigures {
    /// Several batches' figures together.
    pub fn pooled(&self, other: &LockFigures) -> LockFigures {
        LockFigures {
            waits: self.waits.pooled(&other.waits),
            holds: self.holds.pooled(&other.holds),
            budget_used: self.budget_used.pooled(&other.budget_used),
            fifo_spawn: self.fifo_spawn.pooled(&other.fifo_spawn),
            fifo_request: self.fifo_request.pooled(&other.fifo_request),
            handover: self.handover.pooled(&other.handover),
            fifo_request_handover: self
                .fifo_request_handover
                .pooled(&other.fifo_request_handover),
            logged: self.logged + other.logged,
        }
    }
}

/// The `addresses` of successful ADD results (stdout files), for counting distinct ones.
pub fn addresses(stdout_files: impl IntoIterator<Item = PathBuf>) -> Vec<String> {
    stdout_files
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .filter_map(|text| serde_json::from_str::<Value>(&text).ok())
        .filter_map(|v| v["ips"][0]["address"].as_str().map(str::to_string))
        .collect()
}

/// Calls whose log line says they were served from the module cache.
pub fn cached_calls(lines: &[Invocation]) -> usize {
    lines.iter().filter(|i| i.module_cached).count()
}
