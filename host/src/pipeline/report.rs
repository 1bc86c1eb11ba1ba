//! The log line every run writes, a CNI call's or an operator command's alike: what
//! ran, for which network, its outcome and where its time went, so `stats` and a
//! person reading the log see every hold of the lock.

use crate::error::CniError;
use crate::pipeline::Network;
use crate::store;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tracing::Level;

/// What the log line names a run by: the CNI command (`ADD`) or the operator's
/// (`list`), and the attachment it is for, if any.
#[derive(Debug, Clone, Default)]
pub struct Label {
    pub command: String,
    pub container_id: String,
    pub ifname: String,
    /// An operator's command, not a runtime's call: it always asks a cluster store,
    /// even one remembered silent ([`crate::store::silence`]).
    pub operator: bool,
}

impl Label {
    /// An operator command's label: no attachment.
    pub fn operator(command: &str) -> Self {
        Label {
            command: command.to_string(),
            operator: true,
            ..Label::default()
        }
    }
}

/// What the log line says about one run besides its outcome.
#[derive(Default)]
pub(super) struct Report {
    /// Set once the lock was granted.
    pub timings: Option<Timings>,
    /// Whether the module's compiled code came from the cache.
    pub from_cache: bool,
    /// Where the run found its caller gone: `queue` (it gave up its place) or `grant`
    /// (granted after, it ran nothing).
    pub abandoned: Option<&'static str>,
    pub guest: GuestReport,
}

pub(super) struct Timings {
    /// Wall-clock instant of the grant, for ordering calls across processes.
    pub granted: SystemTime,
    /// Before the lock: engine and linker set-up, reading or compiling the module.
    pub load: Duration,
    pub lock_wait: Duration,
    pub lock_hold: Duration,
    /// Of the hold: opening the store, then the grant to the guest's last return,
    /// then writing its commit.
    pub store_open: Duration,
    pub budget_used: Duration,
    pub commit: Duration,
    /// After the hold: making the commit durable.
    pub sync: Duration,
}

/// What the guest's runs under the lock measured.
#[derive(Default)]
pub(super) struct GuestReport {
    pub store_open: Duration,
    pub budget_used: Duration,
    pub commit: Duration,
    /// Guest log messages dropped past the log budget.
    pub log_dropped: u64,
    /// Attempts repeated after a conflict in a shared store.
    pub retries: u32,
    /// What the run asked of the network's store, when nodes share it.
    pub store: Option<(store::Remote, store::Figures)>,
    /// Its commit filled the store's transaction ([`super::RunOutcome::commit_was_full`]).
    pub commit_was_full: bool,
    /// What the run learned for CNI STATUS ([`crate::health`]).
    pub learned: crate::health::Learned,
}

pub(super) fn log(
    label: &Label,
    network: &Network,
    started: Instant,
    report: &Report,
    error: Option<&CniError>,
) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let timings = report.timings.as_ref();
    let phase = |f: fn(&Timings) -> Duration| timings.map(|t| ms(f(t))).unwrap_or_default();
    let granted = timings
        .map(|t| ms(t.granted.duration_since(UNIX_EPOCH).unwrap_or_default()))
        .unwrap_or_default();
    let guest = &report.guest;
    // Each shared store's figures under names of its own, as the metrics read them.
    let of = |remote| match guest.store {
        Some((of, figures)) if of == remote => figures,
        _ => store::Figures::default(),
    };
    let (etcd, kube) = (of(store::Remote::Etcd), of(store::Remote::Kubernetes));
    let level = level_of(error);
    let (outcome, error_code, error) = match error {
        None => ("ok", 0, String::new()),
        Some(e) if report.abandoned.is_some() => ("abandoned", e.code, e.to_string()),
        Some(e) => ("error", e.code, e.to_string()),
    };
    // One record, at the level its outcome deserves: `logLevel: warn` shows every
    // failed run and nothing else; `error` only what someone must repair.
    macro_rules! record {
        ($level:expr) => {
            tracing::event!(
                target: "invocation",
                $level,
                command = %label.command,
                container_id = %label.container_id,
                ifname = %label.ifname,
                network = %network.name,
                lock_granted_unix_ms = granted,
                load_ms = phase(|t| t.load),
                lock_wait_ms = phase(|t| t.lock_wait),
                lock_hold_ms = phase(|t| t.lock_hold),
                store_open_ms = phase(|t| t.store_open),
                budget_used_ms = phase(|t| t.budget_used),
                commit_ms = phase(|t| t.commit),
                sync_ms = phase(|t| t.sync),
                budget_ms = ms(network.ipam.deadline),
                total_ms = ms(started.elapsed()),
                module_cached = report.from_cache,
                abandoned_at = report.abandoned.unwrap_or_default(),
                guest_log_dropped = guest.log_dropped,
                store_retries = guest.retries,
                commit_full = guest.commit_was_full,
                etcd_requests = etcd.requests,
                etcd_conflicts = etcd.conflicts,
                etcd_ms = ms(etcd.time),
                etcd_rate_wait_ms = ms(etcd.rate_wait),
                kube_requests = kube.requests,
                kube_conflicts = kube.conflicts,
                kube_ms = ms(kube.time),
                kube_rate_wait_ms = ms(kube.rate_wait),
                outcome,
                error_code,
                error = %error,
            )
        };
    }
    match level {
        Level::ERROR => record!(Level::ERROR),
        Level::WARN => record!(Level::WARN),
        _ => record!(Level::INFO),
    }
}

/// The level of a run's record: INFO when it succeeded; ERROR for a fault of the store
/// or the sandbox (I/O, and the host's own codes: the module rejected, trapped, past
/// its deadline or limits, the store failing), which no retry of the same call gets
/// past; WARN for any other failure (the request, the pool, a busy cluster store, a
/// caller gone), which the runtime's next call or the operator's next ADD may not meet.
pub(super) fn level_of(error: Option<&CniError>) -> Level {
    match error.map(|e| e.code) {
        None => Level::INFO,
        Some(code) if code == crate::error::code::IO_FAILURE => Level::ERROR,
        Some(code) if crate::error::code::HOST_RESERVED.contains(&code) => Level::ERROR,
        Some(_) => Level::WARN,
    }
}
