//! One CNI call from start to finish, in the order that is the point of wasm-ipam.

use crate::bindings::types;
use crate::cache::ModuleCache;
use crate::cni::{self, Command, Invocation, IpamResult};
use crate::config::{self, NetConf};
use crate::deadline::Deadline;
use crate::engine::{Call, LoadedModule, ModuleHost};
use crate::error::{CniError, code};
use crate::host::{GuestLog, GuestState, GuestStore};
use crate::lock;
use crate::logging;
use crate::store::Store;
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What to print: the result (if any) or the error, tagged with the config's version.
pub struct Reply {
    pub cni_version: String,
    pub outcome: Result<Option<Value>, CniError>,
}

/// Handles one invocation: `env` looks up the CNI_* variables, `stdin` is the netconf.
pub fn handle(env: impl Fn(&str) -> Option<String>, stdin: &[u8]) -> Reply {
    let declared = config::cni_version_of(stdin);
    let cni_version = declared
        .as_ref()
        .ok()
        .filter(|v| cni::SUPPORTED_VERSIONS.contains(&v.as_str()))
        .cloned()
        .unwrap_or_else(|| cni::CURRENT_VERSION.to_string());
    Reply {
        cni_version,
        outcome: Invocation::from_env(env).and_then(|invocation| run(&invocation, declared, stdin)),
    }
}

/// What the log line says about one call besides its outcome.
#[derive(Default)]
struct Report {
    /// Set once the lock was granted.
    timings: Option<Timings>,
    /// Whether the module's compiled code came from the cache.
    from_cache: bool,
}

struct Timings {
    /// Wall-clock instant of the grant, for ordering calls across processes.
    granted: SystemTime,
    lock_wait: Duration,
    lock_hold: Duration,
    budget_used: Duration,
}

/// `declared` is the netconf's `cniVersion` as [`handle`] decoded it; VERSION needs
/// no netconf, so only the other commands fail on a netconf that does not decode.
fn run(
    invocation: &Invocation,
    declared: Result<String, CniError>,
    stdin: &[u8],
) -> Result<Option<Value>, CniError> {
    if invocation.command == Command::Version {
        return Ok(Some(cni::version_info()));
    }
    cni::check_version(invocation.command, &declared?)?;
    let conf = NetConf::parse(stdin)?;
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
        logging::init(path)?;
    }
    let started = Instant::now();
    let mut report = Report::default();
    let result = locked_call(invocation, &conf, module_config, call, &mut report);
    log_invocation(invocation, &conf, started, &report, &result);
    let result = result?;
    Ok(result.map(|r| r.to_json(&conf.cni_version)))
}

/// Parse and validate (done by the caller) → load and compile the module → take the
/// lock → the deadline starts at the grant → instantiate → call the handler → commit
/// the store → release the lock.
///
/// Why this order: compiling before the lock keeps the lock held only for guest work;
/// starting the deadline at the grant means a herd queued on the lock can never use up
/// a call's budget (Calico's DEL once started its timer before the lock and failed
/// under exactly that herd); committing only after the handler returns ok means a
/// failed or stopped guest leaves no partial state.
fn locked_call(
    invocation: &Invocation,
    conf: &NetConf,
    module_config: String,
    call: Call,
    report: &mut Report,
) -> Result<Option<IpamResult>, CniError> {
    let host = ModuleHost::new()?;
    let cache = ModuleCache::open(&conf.ipam.cache_dir)
        .inspect_err(|e| tracing::warn!(target: "cache", "{e}; compiling instead"))
        .ok();
    let module = host.load(
        &conf.ipam.module,
        conf.ipam.module_sha256.as_deref(),
        cache.as_ref(),
    )?;
    report.from_cache = module.from_cache;

    let lock = lock::acquire(&conf.ipam.lock_file, conf.ipam.lock_timeout)?;
    let deadline = Deadline::from_grant(&lock, conf.ipam.deadline);
    let mut budget_used = Duration::ZERO;
    let request = guest_request(invocation, conf, module_config, deadline);
    let result = run_guest(
        &host,
        &module,
        request,
        conf,
        deadline,
        call,
        &mut budget_used,
    );
    let lock_wait = lock.waited();
    drop(lock);
    report.timings = Some(Timings {
        granted: deadline.granted_wall(),
        lock_wait,
        lock_hold: deadline.elapsed(),
        budget_used,
    });
    result
}

/// Under the lock: open the store, instantiate and call the guest, and commit its
/// staged writes only if it returned ok with a valid result.
fn run_guest(
    host: &ModuleHost,
    module: &LoadedModule,
    request: types::Request,
    conf: &NetConf,
    deadline: Deadline,
    call: Call,
    budget_used: &mut Duration,
) -> Result<Option<IpamResult>, CniError> {
    let store = Arc::new(Store::open(&conf.ipam.data_dir)?);
    let state = GuestState::new(
        GuestStore::new(store.clone(), conf.name.clone(), deadline),
        deadline,
        GuestLog::new(deadline),
        conf.ipam.memory_limit_bytes,
    );
    let outcome = host.call(module, state, request, call);
    *budget_used = deadline.elapsed();
    log_guest_output(&outcome.state);
    let result = outcome.result?.map(module_result).transpose()?;
    store.commit(&conf.name, &outcome.state.store.into_changes())?;
    Ok(result)
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
    }
}

/// Checks what the module returned is valid CNI before anything is committed.
fn module_result(result: types::IpamResult) -> Result<IpamResult, CniError> {
    let invalid = |what: &str, value: &str| {
        CniError::new(
            code::INVALID_MODULE_RESULT,
            format!("module returned an invalid {what}: {value:?}"),
        )
    };
    let cidr = |what, s: &str| s.parse().map_err(|_| invalid(what, s));
    let ip = |what, s: &Option<String>| {
        s.as_deref()
            .map(|s| s.parse().map_err(|_| invalid(what, s)))
            .transpose()
    };
    Ok(IpamResult {
        ips: result
            .ips
            .iter()
            .map(|i| Ok((cidr("address", &i.address)?, ip("gateway", &i.gateway)?)))
            .collect::<Result<_, CniError>>()?,
        routes: result
            .routes
            .iter()
            .map(|r| Ok((cidr("route dst", &r.dst)?, ip("route gw", &r.gw)?)))
            .collect::<Result<_, CniError>>()?,
        dns: cni::Dns {
            nameservers: result.dns.nameservers,
            domain: result.dns.domain,
            search: result.dns.search,
            options: result.dns.options,
        },
    })
}

fn log_guest_output(state: &GuestState) {
    let (stdout, stderr) = state.output();
    for line in stdout.lines().filter(|l| !l.is_empty()) {
        tracing::info!(target: "guest", stream = "stdout", "{line}");
    }
    for line in stderr.lines().filter(|l| !l.is_empty()) {
        tracing::warn!(target: "guest", stream = "stderr", "{line}");
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
    let (granted, lock_wait, lock_hold, budget_used) = report
        .timings
        .as_ref()
        .map(|t| {
            let granted = t.granted.duration_since(UNIX_EPOCH).unwrap_or_default();
            (
                ms(granted),
                ms(t.lock_wait),
                ms(t.lock_hold),
                ms(t.budget_used),
            )
        })
        .unwrap_or_default();
    let (outcome, error_code, error) = match result {
        Ok(_) => ("ok", 0, String::new()),
        Err(e) => ("error", e.code, e.to_string()),
    };
    tracing::info!(
        target: "invocation",
        command = invocation.command.as_str(),
        container_id = %invocation.container_id,
        ifname = %invocation.ifname,
        network = %conf.name,
        lock_granted_unix_ms = granted,
        lock_wait_ms = lock_wait,
        lock_hold_ms = lock_hold,
        budget_used_ms = budget_used,
        budget_ms = ms(conf.ipam.deadline),
        total_ms = ms(started.elapsed()),
        module_cached = report.from_cache,
        outcome,
        error_code,
        error = %error,
    );
}
