//! One CNI call from start to finish, in the order that is the point of wasm-ipam:
//! here the pipeline, in `deadline` the budget that starts at the grant, in `answer`
//! the checks on what a module returns.

pub(crate) mod answer;
pub mod caller;
pub mod deadline;

use crate::cni::{self, Command, Invocation, IpamResult};
use crate::config::{self, NetConf};
use crate::error::CniError;
use crate::lock;
use crate::logging;
use crate::module::bindings::types;
use crate::module::cache::ModuleCache;
use crate::module::engine::{Answer, Call, LoadedModule, ModuleHost, Work};
use crate::module::host::{GuestLog, GuestState, GuestStore};
use crate::store::{self, Quota, ServedBy, Written};
use deadline::Deadline;
use serde_json::Value;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What to print: the result (if any) or the error, tagged with the config's version.
pub struct Reply {
    pub cni_version: String,
    pub outcome: Result<Option<Value>, CniError>,
}

/// The cniVersion this process answers in, once [`handle`] has decoded the netconf:
/// for an answer that must be made without a [`Reply`] (a panic's).
static REPLY_VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();

pub fn reply_version() -> String {
    REPLY_VERSION
        .get()
        .cloned()
        .unwrap_or_else(|| cni::CURRENT_VERSION.to_string())
}

/// Handles one invocation: `env` looks up the CNI_* variables, `stdin` is the netconf.
pub fn handle(env: impl Fn(&str) -> Option<String>, stdin: &[u8]) -> Reply {
    let json = config::decode(stdin);
    let cni_version = json
        .as_ref()
        .ok()
        .map(config::cni_version_of)
        .filter(|v| cni::SUPPORTED_VERSIONS.contains(&v.as_str()))
        .unwrap_or_else(|| cni::CURRENT_VERSION.to_string());
    let _ = REPLY_VERSION.set(cni_version.clone());
    Reply {
        cni_version,
        outcome: Invocation::from_env(env).and_then(|invocation| run(&invocation, json, stdin)),
    }
}

/// What the log line says about one call besides its outcome.
#[derive(Default)]
struct Report {
    /// Set once the lock was granted.
    timings: Option<Timings>,
    /// Whether the module's compiled code came from the cache.
    from_cache: bool,
    /// Guest log messages dropped past the call's log budget.
    log_dropped: u64,
    /// Where the call found its caller gone: `queue` (it gave up its place) or `grant`
    /// (granted after, it ran nothing).
    abandoned: Option<&'static str>,
    /// Handler runs repeated after a conflict in a shared store.
    retries: u32,
    /// What the call did with etcd, when the network's store is etcd.
    etcd: Option<store::etcd::Figures>,
}

struct Timings {
    /// Wall-clock instant of the grant, for ordering calls across processes.
    granted: SystemTime,
    /// Before the lock: engine and linker set-up, reading or compiling the module.
    load: Duration,
    lock_wait: Duration,
    lock_hold: Duration,
    /// Of the hold: opening the store, then the grant to the guest's return, then
    /// writing its commit.
    store_open: Duration,
    budget_used: Duration,
    commit: Duration,
    /// After the hold: making the commit durable.
    sync: Duration,
}

/// `json` is the netconf as [`handle`] decoded it, once; VERSION needs no netconf, so
/// only the other commands fail on a netconf that does not decode.
fn run(
    invocation: &Invocation,
    json: Result<Value, CniError>,
    stdin: &[u8],
) -> Result<Option<Value>, CniError> {
    if invocation.command == Command::Version {
        return Ok(Some(cni::version_info()));
    }
    let json = json?;
    cni::check_version(invocation.command, &config::cni_version_of(&json))?;
    let conf = NetConf::from_json(json, stdin)?;
    let module_config = conf.module_config()?;
    let call = match invocation.command {
        Command::Add => Call::Add,
        Command::Del => Call::Del,
        Command::Check => Call::Check,
        Command::Status => Call::Status,
        Command::Gc => Call::Gc(
            conf.valid_attachments()?
                .into_iter()
                .map(|a| types::Attachment {
                    container_id: a.container_id,
                    ifname: a.ifname,
                })
                .collect(),
        ),
        Command::Version => unreachable!("answered above"),
    };
    if let Some(path) = &conf.ipam.log_file {
        logging::init(path, conf.ipam.limits.log_rotation);
    }
    let started = Instant::now();
    let (result, report) = locked_call(invocation, &conf, module_config, call);
    log_invocation(invocation, &conf, started, &report, &result);
    let result = result?;
    Ok(result.map(|r| r.to_json(&conf.cni_version)))
}

/// Parse and validate (done by the caller) → load and compile the module → take the
/// lock (unless the caller has gone: see [`caller`]) → the deadline starts at the
/// grant → instantiate → call the handler → write the commit → release the lock →
/// sync the commit.
///
/// Why this order: compiling before the lock keeps the lock held only for guest work;
/// starting the deadline at the grant means a herd queued on the lock can never use up
/// a call's budget (Calico's DEL once started its timer before the lock and failed
/// under exactly that herd); committing only after the handler returns ok, and only
/// before the deadline, means a failed or stopped guest leaves no partial state and the
/// lock is held no longer than the deadline plus the commit's last writes; syncing the
/// commit after the release lets the next call go on while this one waits for the
/// disk (see [`store::Written`]: the answer still waits for it).
fn locked_call(
    invocation: &Invocation,
    conf: &NetConf,
    module_config: String,
    call: Call,
) -> (Result<Option<IpamResult>, CniError>, Report) {
    let mut report = Report::default();
    let loading = Instant::now();
    let module = match load(conf) {
        Ok(module) => module,
        Err(e) => return (Err(e), report),
    };
    report.from_cache = module.module.from_cache;
    let load = loading.elapsed();
    let lock =
        match lock::acquire_unless(&conf.ipam.lock_file, conf.ipam.lock_timeout, &caller::gone) {
            Ok(Some(lock)) if !caller::gone() => lock,
            Ok(granted) => {
                report.abandoned = Some(if granted.is_some() { "grant" } else { "queue" });
                return (Err(abandoned()), report);
            }
            Err(e) => return (Err(e), report),
        };
    let deadline = Deadline::from_grant(&lock, conf.ipam.deadline);
    let request = guest_request(invocation, conf, module_config, deadline);
    let (result, guest) = run_guest(&module, request, conf, deadline, call);
    let lock_wait = lock.waited();
    drop(lock);
    let lock_hold = deadline.elapsed();
    // The next call may go on now, reading what this one wrote; this one answers
    // only once its commit is on disk.
    let result = result.and_then(|(result, written)| written.sync().map(|()| result));
    report.log_dropped = guest.log_dropped;
    report.retries = guest.retries;
    report.etcd = guest.etcd;
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
    (result, report)
}

/// The answer of a call whose caller has gone: nobody reads it, but the log and a
/// runtime that did would both see why nothing was done.
fn abandoned() -> CniError {
    CniError::new(
        crate::error::code::TRY_AGAIN_LATER,
        format!(
            "the caller (pid {}) is gone: the call gave up before running the module; nothing was changed",
            caller::parent().unwrap_or_default()
        ),
    )
}

/// Before the lock: read, verify and compile (or fetch from the cache) the module.
fn load(conf: &NetConf) -> Result<Loaded, CniError> {
    let host = ModuleHost::new()?;
    let cache = ModuleCache::open(&conf.ipam.cache_dir)
        .inspect_err(|e| tracing::warn!(target: "cache", "{e}; compiling instead"))
        .ok();
    let module = host.load(
        &conf.ipam.module,
        conf.ipam.module_sha256.as_deref(),
        cache.as_ref(),
        &conf.ipam.limits,
    )?;
    Ok(Loaded { host, module })
}

/// The engine and the module it compiled, ready to instantiate under the lock.
struct Loaded {
    host: ModuleHost,
    module: LoadedModule,
}

/// What the guest's run measured, for the log line.
#[derive(Default)]
struct GuestReport {
    store_open: Duration,
    budget_used: Duration,
    commit: Duration,
    log_dropped: u64,
    /// Handler runs repeated after a conflict in a shared store.
    retries: u32,
    etcd: Option<store::etcd::Figures>,
}

/// Under the lock: open the store, then run the guest until it commits, fails, or
/// (in a shared store, when another writer changed what it read) runs out of time to
/// try again on a fresh instance. The commit is synced by the caller once the lock
/// is released.
fn run_guest(
    loaded: &Loaded,
    request: types::Request,
    conf: &NetConf,
    deadline: Deadline,
    call: Call,
) -> (Outcome, GuestReport) {
    let mut report = GuestReport::default();
    // The request carries the node's name already (a hostname lookup otherwise).
    let mut store = match store::open_with(
        &conf.ipam.store,
        &conf.ipam.data_dir,
        &request.node_name,
        deadline.remaining(),
    ) {
        Ok(store) => store,
        Err(e) => return (Err(e), report),
    };
    report.store_open = deadline.elapsed();
    test_panic("under-lock");
    let result = loop {
        let (result, back) = attempt(loaded, &request, conf, deadline, &call, store, &mut report);
        store = back;
        if result.is_err() && store.conflicted() && !deadline.expired() {
            report.retries += 1;
            store.begin();
            continue;
        }
        break result;
    };
    report.etcd = store.etcd_figures();
    (result, report)
}

/// A guest run's outcome: the result and its written commit, or why not.
type Outcome = Result<(Option<IpamResult>, Written), CniError>;

/// One run of the guest on a fresh instance: its staged writes are written as one
/// commit only if it returned ok with a valid result, before the deadline and within
/// the network's store quota.
fn attempt(
    loaded: &Loaded,
    request: &types::Request,
    conf: &NetConf,
    deadline: Deadline,
    call: &Call,
    store: Box<dyn store::Store>,
    report: &mut GuestReport,
) -> (Outcome, Box<dyn store::Store>) {
    let limits = &conf.ipam.limits;
    let state = GuestState::new(
        GuestStore::new(store, conf.name.clone(), deadline, limits.host_memory),
        deadline,
        GuestLog::new(deadline, limits.log_bytes),
        limits,
    );
    let work = Work::Handle(request.clone(), call.clone());
    let mut outcome = loaded.host.call(&loaded.module, state, work);
    report.budget_used = deadline.elapsed();
    outcome.state.log_output();
    report.log_dropped += outcome.state.log.dropped();
    let quota = Quota {
        entries: limits.store_entries,
        bytes: limits.store_bytes,
    };
    let (mut store, changes) = outcome.state.store.into_parts();
    let result = outcome
        .result
        .and_then(|answer| match answer {
            Answer::Handled(r) => r.map(answer::checked_result).transpose(),
            _ => unreachable!("a handler call answers Handled"),
        })
        .and_then(|result| {
            store.record_served_by(&conf.name, &served_by(conf, &loaded.module));
            let written =
                store.commit_written(&conf.name, &changes, quota, &|| deadline.expired())?;
            test_panic("after-commit");
            Ok((result, written))
        });
    report.commit = deadline.elapsed() - report.budget_used;
    (result, store)
}

/// What the store records of the module serving this network, for `list` and `stats`.
fn served_by(conf: &NetConf, module: &LoadedModule) -> ServedBy {
    ServedBy {
        module: conf.ipam.module.clone(),
        sha256: module.sha256.clone(),
        contract: module.contract.name(),
        config: Some(conf.network_config()),
    }
}

/// Debug builds only (the test suite's binary): panics at `point` when
/// `WASM_IPAM_TEST_PANIC` names it, standing in for a bug there, so the tests can see
/// what a panic leaves behind. Compiled out of release builds.
#[track_caller]
pub fn test_panic(point: &str) {
    #[cfg(debug_assertions)]
    if std::env::var("WASM_IPAM_TEST_PANIC").is_ok_and(|p| p == point) {
        panic!("WASM_IPAM_TEST_PANIC at {point}");
    }
    #[cfg(not(debug_assertions))]
    let _ = point;
}

fn guest_request(
    invocation: &Invocation,
    conf: &NetConf,
    config: String,
    deadline: Deadline,
) -> types::Request {
    let granted = deadline
        .granted_wall()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    types::Request {
        command: match invocation.command {
            Command::Add => types::Command::Add,
            Command::Del => types::Command::Del,
            Command::Check => types::Command::Check,
            Command::Gc => types::Command::Gc,
            Command::Status | Command::Version => types::Command::Status,
        },
        container_id: invocation.container_id.clone(),
        netns: invocation.netns.clone(),
        ifname: invocation.ifname.clone(),
        args: invocation.args.clone(),
        network_name: conf.name.clone(),
        cni_version: conf.cni_version.clone(),
        config,
        prev_result: conf.prev_result.clone(),
        lock_granted_at: types::WallInstant {
            seconds: granted.as_secs(),
            nanoseconds: granted.subsec_nanos(),
        },
        node_name: conf.ipam.node_name(),
    }
}

fn log_invocation(
    invocation: &Invocation,
    conf: &NetConf,
    started: Instant,
    report: &Report,
    result: &Result<Option<IpamResult>, CniError>,
) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let timings = report.timings.as_ref();
    let phase = |f: fn(&Timings) -> Duration| timings.map(|t| ms(f(t))).unwrap_or_default();
    let granted = timings
        .map(|t| ms(t.granted.duration_since(UNIX_EPOCH).unwrap_or_default()))
        .unwrap_or_default();
    let etcd = report.etcd.unwrap_or_default();
    let (outcome, error_code, error) = match result {
        Ok(_) => ("ok", 0, String::new()),
        Err(e) if report.abandoned.is_some() => ("abandoned", e.code, e.to_string()),
        Err(e) => ("error", e.code, e.to_string()),
    };
    tracing::info!(
        target: "invocation",
        command = invocation.command.as_str(),
        container_id = %invocation.container_id,
        ifname = %invocation.ifname,
        network = %conf.name,
        lock_granted_unix_ms = granted,
        load_ms = phase(|t| t.load),
        lock_wait_ms = phase(|t| t.lock_wait),
        lock_hold_ms = phase(|t| t.lock_hold),
        store_open_ms = phase(|t| t.store_open),
        budget_used_ms = phase(|t| t.budget_used),
        commit_ms = phase(|t| t.commit),
        sync_ms = phase(|t| t.sync),
        budget_ms = ms(conf.ipam.deadline),
        total_ms = ms(started.elapsed()),
        module_cached = report.from_cache,
        abandoned_at = report.abandoned.unwrap_or_default(),
        guest_log_dropped = report.log_dropped,
        store_retries = report.retries,
        etcd_requests = etcd.requests,
        etcd_conflicts = etcd.conflicts,
        etcd_ms = ms(etcd.etcd_time),
        etcd_rate_wait_ms = ms(etcd.rate_wait),
        outcome,
        error_code,
        error = %error,
    );
}
