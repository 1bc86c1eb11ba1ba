//! The one locked run of a module, for every caller: a CNI call and each operator
//! command that asks a module (`list`, `stats`, `forget`, `import-host-local`, `gc`,
//! `release-node`). The order is the point of wasm-ipam, so it is written once, in
//! [`run`]:
//!
//! load the module (before the lock) → take the host-wide lock (unless the caller has
//! gone) → the deadline starts at the grant → open the store → attempt: instantiate,
//! ask, check the answer, write the commit (again on a fresh instance if a shared
//! store's commit conflicted, while the deadline allows) → release the lock → sync
//! the commit → the log line.
//!
//! Why this order: compiling before the lock keeps the lock held only for guest work;
//! starting the deadline at the grant means a herd queued on the lock can never use up
//! a call's budget (Calico's DEL once started its timer before the lock and failed
//! under exactly that herd); committing only after the module answers ok, and only
//! before the deadline, means a failed or stopped guest leaves no partial state and the
//! lock is held no longer than the deadline plus the commit's last writes; syncing the
//! commit after the release lets the next call go on while this one waits for the
//! disk (see [`store::Written`]: the answer still waits for it).

mod report;
#[cfg(test)]
mod tests;

use crate::config::{HostIpamConfig, NetConf, StoreConfig};
use crate::error::{CniError, code};
use crate::health::{self, Condition, StoreSeen};
use crate::lock::{self, deadline::Deadline};
use crate::logging;
use crate::module::bindings::types;
use crate::module::cache::ModuleCache;
use crate::module::host::{GuestLine, GuestLog, GuestState, GuestStore};
use crate::module::instance::{LoadedModule, ModuleHost};
use crate::module::question::Question;
use crate::module::trust::Policies;
use crate::store::{
    self, AttachmentChange, AttachmentRecord, Changes, Quota, ServedBy, Written, silence,
};
use crate::test_hook::test_panic;
pub use report::Label;
use report::{GuestReport, Report, Timings};
use std::time::{Duration, Instant, UNIX_EPOCH};

/// What a run needs to know of the network it runs for: its name, its host settings
/// (module, limits, budget, lock, store, log) and the configuration recorded with
/// each commit, for the operators' commands to find the module again.
#[derive(Debug, Clone)]
pub struct Network {
    pub name: String,
    pub ipam: HostIpamConfig,
    /// [`NetConf::network_config`], when the host has one.
    pub config: Option<String>,
    /// Whether the run may create the network's store: a CNI call does; an operator
    /// command that only reads does not.
    pub store_if_missing: store::IfMissing,
}

impl Network {
    /// A CNI call's network: its store is created on the first call.
    pub fn of(conf: &NetConf) -> Self {
        Network {
            name: conf.name.clone(),
            ipam: conf.ipam.clone(),
            config: Some(conf.network_config()),
            store_if_missing: store::IfMissing::Create,
        }
    }
}

/// Where a request or context says when the lock was granted, before the grant: the
/// pipeline stamps every [`Question`] with the grant ([`Session::ask`]) before the module
/// sees it.
pub const UNTIL_GRANTED: types::WallInstant = types::WallInstant {
    seconds: 0,
    nanoseconds: 0,
};

/// Whether a run may change the store. A read-only run's module is refused every
/// write (`read-only`), and nothing is committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writes {
    ReadOnly,
    /// Read-only, and what it reads is left out of the attempt's commit (neither
    /// compared nor counted against the store's transaction): for an answer the
    /// writing ask reads again where it acts (gc's list of allocations: the module's
    /// GC reads each one it releases).
    ReadOnlyUntracked,
    Commit,
}

/// What a run did: the answer (or why not), and the digest of the module it loaded.
pub struct RunOutcome<T> {
    pub result: Result<T, CniError>,
    /// Set once the module was read.
    pub sha256: Option<String>,
    /// The engine and the module it loaded: freed with the `RunOutcome`, unless the caller
    /// exits next ([`RunOutcome::leave_loaded_to_exit`]).
    loaded: Option<LoadedEngine>,
    /// It committed, and its commit filled the store's transaction to within
    /// [`FULL_MARGIN`] keys: a module that bounds its work by `commit-room` may have
    /// left some for another run (gc and release-node run again while this holds).
    pub commit_was_full: bool,
}

/// How close to the store's transaction limit a commit must come to be
/// [`RunOutcome::commit_was_full`]: more than any one unit of a module's bounded work needs.
pub const FULL_MARGIN: u64 = 8;

impl<T> RunOutcome<T> {
    /// For a caller whose process exits once it has answered (a CNI call): the loaded
    /// module is left to the exit instead of being freed: freeing it (its type tables,
    /// the engine's registrations of its types, its code mapping) would be work on
    /// every call's path; the exit frees it all at once.
    pub fn leave_loaded_to_exit(&mut self) {
        std::mem::forget(self.loaded.take());
    }
}

/// Runs `steps` against `network`'s module under the host-wide lock, in the order the
/// module's header gives, and writes the run's log line. `steps` asks the module
/// through a [`Session`] (once, or more for a decision that needs several answers
/// under one hold, as `gc` does); it may run again on a fresh instance after a
/// conflict, so it must only decide from what it is told. `caller_gone` says whether
/// whoever asked has gone (a CNI call's runtime): then nothing is run.
pub fn run<T>(
    network: &Network,
    label: &Label,
    caller_gone: &dyn Fn() -> bool,
    steps: impl Fn(&mut Session) -> Result<T, CniError>,
) -> RunOutcome<T> {
    let ipam = &network.ipam;
    let open = |wait| {
        store::select::open(
            &ipam.store,
            &ipam.data_dir,
            &ipam.node_name(),
            wait,
            network.store_if_missing,
        )
    };
    run_on(network, label, caller_gone, &open, steps)
}

/// Opens the network's store under the lock, given the budget left for it.
type OpenStore<'a> = &'a dyn Fn(Duration) -> Result<Box<dyn store::Store>, CniError>;

/// [`run`] with the store `open` gives: the network's own, or a test's.
fn run_on<T>(
    network: &Network,
    label: &Label,
    caller_gone: &dyn Fn() -> bool,
    open: OpenStore,
    steps: impl Fn(&mut Session) -> Result<T, CniError>,
) -> RunOutcome<T> {
    if let Some(path) = &network.ipam.log_file {
        // A log that cannot be opened costs one line on stderr, never the answer.
        logging::init(
            path,
            network.ipam.limits.log_rotation,
            network.ipam.log_level,
        );
    }
    let started = Instant::now();
    let mut report = Report::default();
    let (result, loaded) = locked(network, label, caller_gone, open, &steps, &mut report);
    report::log(label, network, started, &report, result.as_ref().err());
    let now = report.timings.as_ref().map_or(0, |t| {
        t.granted
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs()
    });
    if let Err(e) = health::record(
        &network.ipam.data_dir,
        &network.name,
        &report.guest.learned,
        now,
    ) {
        tracing::warn!(target: "status", "cannot record what this call learned for STATUS: {e}");
    }
    RunOutcome {
        commit_was_full: result.is_ok() && report.guest.commit_was_full,
        result,
        sha256: loaded.as_ref().map(|l| l.module.sha256.clone()),
        loaded,
    }
}

fn locked<T>(
    network: &Network,
    label: &Label,
    caller_gone: &dyn Fn() -> bool,
    open: OpenStore,
    steps: &dyn Fn(&mut Session) -> Result<T, CniError>,
    report: &mut Report,
) -> (Result<T, CniError>, Option<LoadedEngine>) {
    let ipam = &network.ipam;
    let loading = Instant::now();
    let loaded = match load(ipam) {
        Ok(loaded) => loaded,
        Err(e) => return (Err(e), None),
    };
    report.from_cache = loaded.module.from_cache;
    let load = loading.elapsed();
    let lock = match lock::acquire_unless(&ipam.lock_file, ipam.lock_timeout, caller_gone) {
        Ok(Some(lock)) if !caller_gone() => lock,
        Ok(granted) => {
            report.abandoned = Some(if granted.is_some() { "grant" } else { "queue" });
            return (Err(abandoned()), Some(loaded));
        }
        Err(e) => return (Err(e), Some(loaded)),
    };
    let deadline = Deadline::from_grant(&lock, ipam.deadline);
    let mut guest = GuestReport::default();
    let result = match remembered_silence(ipam, label) {
        Some(e) => {
            guest.learned.store = StoreSeen::Unreached(Condition::of(&e));
            Err(e)
        }
        None => {
            silence::take_heard();
            // A runtime's call tells its store so (see `Shared::serve_runtime`).
            let for_runtime = |wait| {
                open(wait).map(|mut store| {
                    if let Some(shared) = store.shared_mut() {
                        shared.serve_runtime();
                    }
                    store
                })
            };
            let open: OpenStore = match label.operator {
                true => open,
                false => &for_runtime,
            };
            let result = attempts(&loaded, network, deadline, open, steps, &mut guest)
                .map_err(|e| naming_the_budget(e, ipam.deadline));
            note_silence(ipam, &result);
            result
        }
    };
    let lock_wait = lock.waited();
    drop(lock);
    let lock_hold = deadline.elapsed();
    // The next call may go on now, reading what this one wrote; this one answers
    // only once its commit is on disk.
    let result = result.and_then(|(answer, written)| written.sync().map(|()| answer));
    report.timings = Some(Timings {
        granted: deadline.granted_wall(),
        load,
        lock_wait,
        lock_hold,
        store_open: guest.store_open,
        budget_used: guest.budget_used,
        commit: guest.commit,
        sync: deadline.elapsed() - lock_hold,
    });
    report.guest = guest;
    (result, Some(loaded))
}

/// A deadline error (103) names the key that sets the budget and its value, so the
/// operator reading it in the runtime's event knows what to raise: the guest, the
/// commit and the store each stop at the deadline without knowing which key set it.
fn naming_the_budget(e: CniError, budget: std::time::Duration) -> CniError {
    if e.code != code::DEADLINE_EXCEEDED {
        return e;
    }
    CniError {
        msg: format!(
            "{} (ipam.deadlineSeconds is {}; raise it if the module needs longer)",
            e.msg,
            budget.as_secs_f64()
        ),
        ..e
    }
}

/// A runtime's call on a cluster store that a call before it, within the store's
/// `timeoutSeconds`, found silent: answered at once, so the calls queued behind a
/// frozen store do not each wait for it under the lock.
fn remembered_silence(ipam: &HostIpamConfig, label: &Label) -> Option<CniError> {
    let (store, window) = ipam.store.remote().filter(|_| !label.operator)?;
    let (msg, ago) = silence::recalled(&ipam.data_dir, &store, window)?;
    Some(CniError::new(
        code::TRY_AGAIN_LATER,
        format!(
            "the store failed a call {:.1} s ago, after trying it for its timeout ({msg}); for ipam.store.timeoutSeconds ({} s) after that, calls on it answer at once so that those queued behind do not each wait for it. This call sent nothing and changed nothing; a call after that window asks the store again",
            ago.as_secs_f64(),
            window.as_secs_f64()
        ),
    ))
}

/// Records what this run heard from its cluster store: a silence it answered code 11
/// for, or an answer, which clears one.
fn note_silence<T>(ipam: &HostIpamConfig, result: &Result<T, CniError>) {
    let Some((store, _)) = ipam.store.remote() else {
        return;
    };
    match (silence::take_heard(), result) {
        (Some(true), _) => silence::record(&ipam.data_dir, &store, None),
        (Some(false), Err(e)) if e.code == code::TRY_AGAIN_LATER => {
            silence::record(&ipam.data_dir, &store, Some(&e.msg))
        }
        _ => {}
    }
}

/// The answer of a call whose caller has gone: nobody reads it, but the log and a
/// runtime that did would both see why nothing was done.
fn abandoned() -> CniError {
    CniError::new(
        code::TRY_AGAIN_LATER,
        format!(
            "the caller (pid {}) is gone: the call gave up before running the module; nothing was changed",
            crate::caller::parent().unwrap_or_default()
        ),
    )
}

/// The engine and the module it compiled, ready to instantiate under the lock.
struct LoadedEngine {
    host: ModuleHost,
    module: LoadedModule,
}

/// Whether the network's module can be run: read, verified against its pin and
/// trust policy, and compiled (or found in the cache), as a call does before the
/// lock; nothing is instantiated. For CNI STATUS.
pub fn check_module(ipam: &HostIpamConfig) -> Result<(), CniError> {
    // Left to the exit, as a call's is (see `RunOutcome::leave_loaded_to_exit`).
    load(ipam).map(std::mem::forget)
}

/// Before the lock: read, verify and compile (or fetch from the cache) the module.
fn load(ipam: &HostIpamConfig) -> Result<LoadedEngine, CniError> {
    let host = ModuleHost::new()?;
    let cache = ModuleCache::open(&ipam.cache_dir)
        .inspect_err(|e| tracing::warn!(target: "cache", "{e}; compiling instead"))
        .ok();
    let policies = Policies::for_call(ipam.trust_policy.as_deref())?;
    let module = host.load(
        &ipam.module,
        ipam.module_sha256.as_deref(),
        &policies,
        cache.as_ref(),
        &ipam.limits,
    )?;
    Ok(LoadedEngine { host, module })
}

/// Under the lock: open the store, then run `steps` until its commit is written, it
/// fails, or (in a shared store, when another writer changed what it read) the
/// deadline leaves no time to try again on a fresh instance.
fn attempts<T>(
    loaded: &LoadedEngine,
    network: &Network,
    deadline: Deadline,
    open: OpenStore,
    steps: &dyn Fn(&mut Session) -> Result<T, CniError>,
    report: &mut GuestReport,
) -> Result<(T, Written), CniError> {
    let ipam = &network.ipam;
    let mut store = match open(deadline.remaining()) {
        Ok(store) => store,
        Err(e) => {
            if !matches!(ipam.store, StoreConfig::Embedded) {
                report.learned.store = StoreSeen::Unreached(Condition::of(&e));
            }
            return Err(e);
        }
    };
    report.store_open = deadline.elapsed();
    test_panic("under-lock");
    let result = loop {
        report.learned.degraded = None;
        let mut session = Session {
            loaded,
            network,
            deadline,
            store: Some(store),
            staged: None,
            forgotten: None,
            log: Vec::new(),
            report,
        };
        let result = steps(&mut session).and_then(|answer| session.commit().map(|w| (answer, w)));
        store = session
            .store
            .take()
            .expect("a session gives its store back");
        let log = std::mem::take(&mut session.log);
        if let (Err(_), Some(shared)) = (&result, store.shared_mut()) {
            // An error decided from a node-local copy (see `Shared::confirm_reads`) is
            // confirmed as an answer is: a copy found stale runs the call again. Not
            // after a request the store left unanswered: that one already took its time.
            let unanswered = matches!(shared.seen(), StoreSeen::Unreached(_));
            if !shared.conflicted() && !unanswered {
                let _ = shared.confirm_reads();
            }
            if shared.conflicted() && !deadline.expired() {
                // Run again on a fresh snapshot: this attempt's messages go with its
                // writes.
                report.retries += 1;
                shared.begin();
                continue;
            }
        }
        log.iter().for_each(GuestLine::emit);
        break result;
    };
    if let Some(shared) = store.shared() {
        report.store = Some((shared.remote(), shared.figures()));
        report.learned.store = shared.seen();
    }
    result
}

/// One attempt under the lock: each [`Session::ask`] runs the module on a fresh
/// instance over the same store, so what several answers say is one snapshot.
pub struct Session<'a> {
    loaded: &'a LoadedEngine,
    network: &'a Network,
    deadline: Deadline,
    /// Lent to each instance while it runs.
    store: Option<Box<dyn store::Store>>,
    /// The writes of the one ask that may write, once it answered ok, with what they
    /// change of the host's attachment records.
    staged: Option<(Changes, Option<AttachmentChange>)>,
    /// A removal of the network ([`Session::forget_network`]), to sync after release.
    forgotten: Option<Written>,
    /// The module's log messages of this attempt, written once it is decided.
    log: Vec<GuestLine>,
    report: &'a mut GuestReport,
}

impl Session<'_> {
    /// The module asked, for what it exports.
    pub fn module(&self) -> &LoadedModule {
        &self.loaded.module
    }

    /// When the lock was granted, in Unix seconds: "now" for what a run decides.
    pub fn granted_unix(&self) -> u64 {
        since_epoch(self.deadline).as_secs()
    }

    /// Asks the module `work` on a fresh instance. `work` is stamped with the grant
    /// (a request's `lock-granted-at`, an inspect context's `now`). With
    /// [`Writes::Commit`] its writes are staged for the commit if it answers ok; one
    /// ask per attempt may write.
    pub fn ask<Q: Question>(&mut self, mut work: Q, writes: Writes) -> Result<Q::Answer, CniError> {
        if let Some(refusal) = self.loaded.module.refusal(&work) {
            return Err(refusal);
        }
        if writes == Writes::Commit && self.staged.is_some() {
            return Err(CniError::new(
                code::INTERNAL_ERROR,
                "a run asked its module to write twice (a bug)",
            ));
        }
        work.stamp(granted_at(self.deadline));
        let attachment = work.attachment_change();
        let ipam = &self.network.ipam;
        let limits = &ipam.limits;
        let store = self.store.take().expect("the session holds its store");
        let mut guest_store = GuestStore::new(
            store,
            self.network.name.clone(),
            self.deadline,
            limits.host_memory,
        );
        guest_store = match writes {
            Writes::ReadOnly => guest_store.read_only(),
            Writes::ReadOnlyUntracked => guest_store.untracked(),
            Writes::Commit => guest_store,
        };
        let state = GuestState::new(
            guest_store,
            self.deadline,
            GuestLog::new(self.deadline, limits.log_bytes),
            limits,
        );
        let mut outcome = self.loaded.host.call(&self.loaded.module, state, work);
        self.report.budget_used = self.deadline.elapsed();
        outcome.state.log_output();
        self.report.log_dropped += outcome.state.log.dropped();
        self.log.extend(outcome.state.log.take_lines());
        if let Some(degraded) = outcome.state.readiness.take()
            && writes == Writes::Commit
        {
            self.report.learned.degraded = Some(degraded);
        }
        let (store, changes) = outcome.state.store.into_parts();
        self.store = Some(store);
        let answer = outcome.result?;
        if writes == Writes::Commit {
            self.staged = Some((changes, attachment));
        }
        Ok(answer)
    }

    /// The host's records of the network's attachments (when each ADD committed, in
    /// which network namespace), as of this attempt.
    pub fn attachments(&self) -> Result<Vec<AttachmentRecord>, CniError> {
        let store = self.store.as_ref().expect("the session holds its store");
        match store.local() {
            Some(local) => local.attachments(&self.network.name),
            None => Ok(Vec::new()),
        }
    }

    /// When each node last committed to the network, as of this attempt's snapshot
    /// ([`store::last_commits`]).
    pub fn last_commits(&self) -> Result<Vec<(String, Option<u64>)>, CniError> {
        let store = self.store.as_ref().expect("the session holds its store");
        store::last_commits(store.as_ref(), &self.network.name)
    }

    /// Removes the network whole (its entries, usage and record) in one durable
    /// transaction of its own: `forget`'s, decided from what this session's module
    /// answered under the same hold of the lock.
    pub fn forget_network(&mut self) -> Result<u64, CniError> {
        let store = self.store.as_mut().expect("the session holds its store");
        let (removed, written) = store.forget(&self.network.name)?;
        self.forgotten = Some(written);
        Ok(removed)
    }

    /// Writes the staged changes as one commit, with the record of the module serving
    /// the network, within the network's quota and before the deadline.
    fn commit(&mut self) -> Result<Written, CniError> {
        self.report.commit_was_full = false;
        if let Some(written) = self.forgotten.take() {
            return Ok(written);
        }
        let Some((changes, attachment)) = self.staged.take() else {
            // Nothing staged: the commit of no changes, which confirms the reads.
            let store = self.store.as_mut().expect("the session holds its store");
            let quota = Quota::UNLIMITED;
            return store.commit_written(&self.network.name, &Changes::new(), quota, &|| false);
        };
        let began = self.deadline.elapsed();
        let ipam = &self.network.ipam;
        let store = self.store.as_mut().expect("the session holds its store");
        store.record_served_by(
            &self.network.name,
            &ServedBy {
                module: ipam.module.clone(),
                sha256: self.loaded.module.sha256.clone(),
                contract: self.loaded.module.contract.name(),
                config: self.network.config.clone(),
            },
        );
        if let (Some(change), Some(local)) = (attachment, store.local_mut()) {
            local.record_attachment(&self.network.name, change);
        }
        let quota = Quota {
            entries: ipam.limits.store_entries,
            bytes: ipam.limits.store_bytes,
        };
        self.report.commit_was_full = store
            .commit_room(&self.network.name, &changes)
            .is_some_and(|room| room < FULL_MARGIN);
        let deadline = self.deadline;
        let written =
            store.commit_written(&self.network.name, &changes, quota, &|| deadline.expired());
        test_panic("after-commit");
        self.report.commit = self.deadline.elapsed() - began;
        written
    }
}

/// The grant as time since the Unix epoch.
fn since_epoch(deadline: Deadline) -> std::time::Duration {
    deadline
        .granted_wall()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// When the lock was granted, as a module is told it.
fn granted_at(deadline: Deadline) -> types::WallInstant {
    let granted = since_epoch(deadline);
    types::WallInstant {
        seconds: granted.as_secs(),
        nanoseconds: granted.subsec_nanos(),
    }
}
