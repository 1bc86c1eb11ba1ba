//! Loading a module (before the lock) and running one handler call in it (after the
//! grant, bounded by the deadline).
//!
//! Loading reads, digests, compiles and links the component, so a module that is
//! corrupt, pinned to another digest or imports what the host does not provide is
//! refused before anything waits for or holds the lock. Reading is bounded (a regular
//! file no larger than `moduleMaxMiB`) and compiling is too (see [`crate::module::compile`]).
//!
//! A call is bounded by its [`Limits`]: the guest's memories and tables are summed by
//! the store's limiter, and every transfer from the guest to the host (a host call's
//! arguments, the handler's result or error) is bounded by wasmtime's hostcall fuel,
//! set to `hostMemoryLimitMiB`, before the host copies it.

use crate::call::deadline::Deadline;
use crate::error::{CniError, code};
use crate::limits::{
    Limits, MAX_ERROR_DETAILS_BYTES, MAX_INSTANCES, MAX_MEMORIES, MAX_TABLES, truncated,
};
use crate::module::bindings::{self, handler, inspect, migrate, types, v0_1};
use crate::module::cache::ModuleCache;
use crate::module::file::ModuleFile;
use crate::module::host::{DeadlineExceeded, GuestState, LimitExceeded};
use crate::module::wasi::Link;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use wasmtime::component::{Component, HasSelf, InstancePre, Linker, types::ComponentItem};
use wasmtime::{Config, Engine};

/// How often the epoch advances; a running guest yields to the host this often, which
/// is when the deadline timer can stop it.
const EPOCH_TICK: Duration = Duration::from_millis(5);

/// How much of a trap's backtrace goes to the log (deep recursion makes long ones).
const TRAP_LOG_BYTES: usize = 16 << 10;

/// A version of the `cni:ipam` contract the host runs (docs/wit-versions.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contract {
    V0_1,
    V0_2,
}

impl Contract {
    /// Newest first: a module exporting both handlers is run as the newer.
    pub const RUN: [Contract; 2] = [Contract::V0_2, Contract::V0_1];

    pub fn version(self) -> &'static str {
        match self {
            Contract::V0_1 => "0.1.0",
            Contract::V0_2 => "0.2.0",
        }
    }

    /// `cni:ipam@0.2.0`.
    pub fn name(self) -> String {
        format!("cni:ipam@{}", self.version())
    }

    fn export(self, interface: &str) -> String {
        format!("cni:ipam/{interface}@{}", self.version())
    }
}

/// The `cni:ipam` interfaces a module may import, by full name, with how to link each
/// (0.1.0's are forwarded to 0.2.0's implementations, `module/host/v0_1.rs`). Besides
/// these and `types` (types only, nothing to link), it may import WASI 0.2 (linked
/// with no capabilities; see [`crate::module::wasi`]), which Rust's std for
/// wasm32-wasip2 imports as soon as a module formats or panics.
const CNI_INTERFACES: &[(&str, Link)] = &[
    ("cni:ipam/store@0.2.0", |l| {
        bindings::store::add_to_linker::<_, HasSelf<_>>(l, |s: &mut GuestState| &mut s.store)
    }),
    ("cni:ipam/deadline@0.2.0", |l| {
        bindings::deadline::add_to_linker::<_, HasSelf<_>>(l, |s: &mut GuestState| &mut s.deadline)
    }),
    ("cni:ipam/log@0.2.0", |l| {
        bindings::log::add_to_linker::<_, HasSelf<_>>(l, |s: &mut GuestState| &mut s.log)
    }),
    ("cni:ipam/store@0.1.0", |l| {
        v0_1::store::add_to_linker::<_, HasSelf<_>>(l, |s: &mut GuestState| &mut s.store)
    }),
    ("cni:ipam/deadline@0.1.0", |l| {
        v0_1::deadline::add_to_linker::<_, HasSelf<_>>(l, |s: &mut GuestState| &mut s.deadline)
    }),
    ("cni:ipam/log@0.1.0", |l| {
        v0_1::log::add_to_linker::<_, HasSelf<_>>(l, |s: &mut GuestState| &mut s.log)
    }),
];
const CNI_TYPES: &[&str] = &["cni:ipam/types@0.2.0", "cni:ipam/types@0.1.0"];

pub struct ModuleHost {
    engine: Engine,
}

/// What a component imports and exports, and whether the host can run it: everything
/// `wasm-ipam inspect` shows, and what [`ModuleHost::load`] refuses a module for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interfaces {
    /// Each import, with whether the host provides it.
    pub imports: Vec<(String, bool)>,
    pub exports: Vec<String>,
    /// The contract whose handler it exports, newest first.
    pub contract: Option<Contract>,
    pub inspect: bool,
    pub migrate: bool,
}

impl Interfaces {
    fn of(engine: &Engine, component: &Component) -> Self {
        let ty = component.component_type();
        let imports: Vec<(String, bool)> = ty
            .imports(engine)
            .map(|(name, item)| {
                let instance = matches!(item.ty, ComponentItem::ComponentInstance(_));
                let provided = instance
                    && (crate::module::wasi::interface(name).is_some()
                        || CNI_INTERFACES.iter().any(|(n, _)| *n == name)
                        || CNI_TYPES.contains(&name));
                (name.to_string(), provided)
            })
            .collect();
        let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
        let exported = |name: String| exports.contains(&name);
        let contract = Contract::RUN
            .into_iter()
            .find(|c| exported(c.export("handler")));
        Interfaces {
            contract,
            inspect: exported(Contract::V0_2.export("inspect")),
            migrate: exported(Contract::V0_2.export("migrate")),
            imports,
            exports,
        }
    }

    /// Why the host refuses the module, if it does.
    pub fn refusal(&self) -> Option<(String, String)> {
        let missing: Vec<&str> = self
            .imports
            .iter()
            .filter(|(_, provided)| !provided)
            .map(|(name, _)| name.as_str())
            .collect();
        if !missing.is_empty() {
            return Some((
                format!("imports what the host does not provide: {}", missing.join(", ")),
                "the host provides cni:ipam/{store,deadline,log} at 0.2.0 and 0.1.0, and WASI 0.2 with no capabilities".into(),
            ));
        }
        if self.contract.is_none() {
            return Some((
                "does not export cni:ipam/handler@0.2.0 (or @0.1.0)".into(),
                format!("it exports: {}", self.exports.join(", ")),
            ));
        }
        None
    }
}

/// The exports a call reaches, looked up once per load.
enum Handler {
    V0_1(v0_1::handler::GuestIndices),
    V0_2(handler::GuestIndices),
}

/// A compiled, linked module ready to instantiate.
pub struct LoadedModule {
    pre: InstancePre<GuestState>,
    handler: Handler,
    inspect: Option<inspect::GuestIndices>,
    migrate: Option<migrate::GuestIndices>,
    pub contract: Contract,
    pub sha256: String,
    /// Whether the compiled code came from the cache (else it was compiled now).
    pub from_cache: bool,
}

impl LoadedModule {
    pub fn exports_inspect(&self) -> bool {
        self.inspect.is_some()
    }
    pub fn exports_migrate(&self) -> bool {
        self.migrate.is_some()
    }
}

/// The handler call to make.
#[derive(Clone)]
pub enum Call {
    Add,
    Del,
    Check,
    Gc(Vec<types::Attachment>),
    Status,
}

/// What to ask a module.
pub enum Work {
    /// A CNI command.
    Handle(types::Request, Call),
    /// `inspect.allocations`.
    Allocations(inspect::Context),
    /// `inspect.pools`.
    Pools(inspect::Context),
    /// `migrate.import-state`.
    Import(Import),
}

pub struct Import {
    pub format: String,
    pub network: String,
    pub config: Option<String>,
    pub files: Vec<migrate::StateFile>,
}

/// What a module answered, by the [`Work`] asked.
pub enum Answer {
    /// For ADD the result, otherwise `None`.
    Handled(Option<types::IpamResult>),
    Allocations(Vec<inspect::Allocation>),
    Pools(Vec<inspect::Pool>),
    Imported(migrate::ImportReport),
}

/// What a guest call left behind, whether it succeeded or not.
pub struct GuestOutcome {
    /// The module's answer, or why it failed: the module's own CNI error, a trap, or
    /// the deadline.
    pub result: Result<Answer, CniError>,
    /// The guest's state, holding its staged store writes and captured output.
    pub state: GuestState,
}

/// The one engine configuration, shared by calls and the compiler
/// (`wasm-ipam-compile`) so artifacts compiled by one load in the other. Change
/// [`ENGINE_SETTINGS`] with it: the cache keys artifacts by them.
pub fn config() -> Config {
    let mut config = Config::new();
    config.epoch_interruption(true);
    config
}

/// What [`config`] sets, for the cache key.
pub const ENGINE_SETTINGS: &str = "epoch_interruption";
/// The wasmtime release this host is built with, for the cache key; a unit test keeps
/// it equal to Cargo.lock's, so an upgrade changes every key.
pub const WASMTIME_VERSION: &str = "48.0.8";

/// What compiled code depends on besides the module: wasmtime's release, the settings
/// and the target. wasmtime still checks an artifact's own header when loading it
/// (settings, CPU features), so a key that failed to change would be refused, not run.
pub fn engine_identity() -> String {
    format!(
        "wasmtime {WASMTIME_VERSION}; {ENGINE_SETTINGS}; {}-{}",
        std::env::consts::ARCH,
        std::env::consts::OS
    )
}

pub fn engine() -> Result<Engine, CniError> {
    Engine::new(&config()).map_err(engine_error)
}

/// The module's compiled code and what the host made of it, before linking.
pub struct Compiled {
    pub component: Component,
    pub sha256: String,
    pub size: u64,
    pub from_cache: bool,
    pub interfaces: Interfaces,
}

impl ModuleHost {
    pub fn new() -> Result<Self, CniError> {
        Ok(ModuleHost { engine: engine()? })
    }

    /// A linker with the interfaces the module imports (each linked once, whatever
    /// 0.2.x versions of a WASI interface it imports).
    fn linker(&self, interfaces: &Interfaces) -> Result<Linker<GuestState>, CniError> {
        let mut linker = Linker::new(&self.engine);
        let mut wasi = Vec::new();
        for (name, _) in &interfaces.imports {
            let link = match crate::module::wasi::interface(name) {
                Some((interface, link)) if !wasi.contains(interface) => {
                    wasi.push(*interface);
                    Some(link)
                }
                Some(_) => None,
                None => CNI_INTERFACES
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, link)| link),
            };
            if let Some(link) = link {
                link(&mut linker).map_err(engine_error)?;
            }
        }
        Ok(linker)
    }

    /// Reads, verifies and compiles (or loads from `cache`) the module at `path`, and
    /// lists its imports and exports.
    pub fn compile(
        &self,
        path: &Path,
        pinned_sha256: Option<&str>,
        cache: Option<&ModuleCache>,
        limits: &Limits,
    ) -> Result<Compiled, CniError> {
        let module = ModuleFile::open(path, limits.module_bytes)?;
        let (sha256, bytes) = module.sha256(cache)?;
        if let Some(pinned) = pinned_sha256
            && pinned != sha256
        {
            return Err(CniError::new(
                code::MODULE_DIGEST_MISMATCH,
                format!("module {} does not match ipam.moduleSha256", path.display()),
            )
            .with_details(format!("expected sha256 {pinned}, found {sha256}")));
        }
        let read = || bytes.map_or_else(|| module.read(), Ok);
        let (component, from_cache) =
            crate::module::compile::compiled(&self.engine, read, &sha256, path, cache, limits)?;
        let interfaces = Interfaces::of(&self.engine, &component);
        Ok(Compiled {
            component,
            sha256,
            size: module.size(),
            from_cache,
            interfaces,
        })
    }

    /// [`ModuleHost::compile`], then refuses a module the host cannot run and links it.
    pub fn load(
        &self,
        path: &Path,
        pinned_sha256: Option<&str>,
        cache: Option<&ModuleCache>,
        limits: &Limits,
    ) -> Result<LoadedModule, CniError> {
        let compiled = self.compile(path, pinned_sha256, cache, limits)?;
        self.link(path, compiled)
    }

    /// Links a compiled module and looks up its exports, or says why it cannot run.
    pub fn link(&self, path: &Path, compiled: Compiled) -> Result<LoadedModule, CniError> {
        let interfaces = &compiled.interfaces;
        let (Some(contract), None) = (interfaces.contract, interfaces.refusal()) else {
            let (msg, details) = interfaces.refusal().unwrap_or_default();
            return Err(CniError::new(
                code::MODULE_REJECTED,
                format!("module {} {msg}", path.display()),
            )
            .with_details(details));
        };
        let rejected = |what: &str, e: wasmtime::Error| {
            CniError::new(
                code::MODULE_REJECTED,
                format!("module {} {what}", path.display()),
            )
            .with_details(format!("{e:#}"))
        };
        let pre = self
            .linker(interfaces)?
            .instantiate_pre(&compiled.component)
            .map_err(|e| rejected("cannot be linked", e))?;
        let handler_export = format!("does not export {}", contract.export("handler"));
        let handler = match contract {
            Contract::V0_1 => Handler::V0_1(
                v0_1::handler::GuestIndices::new(&pre).map_err(|e| rejected(&handler_export, e))?,
            ),
            Contract::V0_2 => Handler::V0_2(
                handler::GuestIndices::new(&pre).map_err(|e| rejected(&handler_export, e))?,
            ),
        };
        let inspect = match interfaces.inspect {
            true => Some(inspect::GuestIndices::new(&pre).map_err(|e| {
                rejected("exports cni:ipam/inspect@0.2.0 without its functions", e)
            })?),
            false => None,
        };
        let migrate = match interfaces.migrate {
            true => Some(migrate::GuestIndices::new(&pre).map_err(|e| {
                rejected("exports cni:ipam/migrate@0.2.0 without its functions", e)
            })?),
            false => None,
        };
        Ok(LoadedModule {
            pre,
            handler,
            inspect,
            migrate,
            contract,
            sha256: compiled.sha256,
            from_cache: compiled.from_cache,
        })
    }

    /// Instantiates the module and asks it `work`, stopping it at the deadline.
    ///
    /// Called only after the lock grant: `state` holds a deadline built from the grant.
    pub fn call(&self, module: &LoadedModule, state: GuestState, work: Work) -> GuestOutcome {
        let deadline = state.deadline;
        let transfer_limit = state.transfer_limit;
        let mut store = wasmtime::Store::new(&self.engine, state);
        store.limiter(|s| s.limiter());
        store.set_hostcall_fuel(transfer_limit);
        store.set_epoch_deadline(1);
        store.epoch_deadline_async_yield_and_update(1);
        let _ticker = EpochTicker::start(self.engine.clone());

        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
        {
            Ok(runtime) => runtime,
            Err(e) => {
                let err = CniError::new(code::IO_FAILURE, "cannot start the async runtime")
                    .with_details(e);
                return GuestOutcome {
                    result: Err(err),
                    state: store.into_data(),
                };
            }
        };
        let outcome = runtime.block_on(async {
            tokio::time::timeout(deadline.remaining(), async {
                let instance = module.pre.instantiate_async(&mut store).await?;
                ask(module, &mut store, &instance, work).await
            })
            .await
        });
        let state = store.into_data();
        let result = match outcome {
            Ok(Ok(answer)) => answer,
            Ok(Err(trap)) => Err(trap_error(&trap, &state, deadline, transfer_limit)),
            Err(_elapsed) => Err(deadline_error(deadline)),
        };
        GuestOutcome { result, state }
    }
}

type Store = wasmtime::Store<GuestState>;

/// Calls the export `work` names in `instance`: the module's answer, its CNI error
/// (checked by [`crate::call::answer::module_error`]), or a trap.
async fn ask(
    module: &LoadedModule,
    store: &mut Store,
    instance: &wasmtime::component::Instance,
    work: Work,
) -> wasmtime::Result<Result<Answer, CniError>> {
    let module_error = crate::call::answer::module_error;
    let not_exported = |what: &str| {
        CniError::new(
            code::MODULE_REJECTED,
            format!(
                "this module does not export cni:ipam/{what}@0.2.0 (it targets {})",
                module.contract.name()
            ),
        )
    };
    Ok(match work {
        Work::Handle(request, call) => match &module.handler {
            Handler::V0_2(indices) => {
                let h = indices.load(&mut *store, instance)?;
                let s = &mut *store;
                match call {
                    Call::Add => h.call_add(s, &request).await?.map(Some),
                    Call::Del => h.call_del(s, &request).await?.map(|()| None),
                    Call::Check => h.call_check(s, &request).await?.map(|()| None),
                    Call::Gc(valid) => h.call_gc(s, &request, &valid).await?.map(|()| None),
                    Call::Status => h.call_status(s, &request).await?.map(|()| None),
                }
                .map(Answer::Handled)
                .map_err(module_error)
            }
            Handler::V0_1(indices) => {
                let h = indices.load(&mut *store, instance)?;
                let s = &mut *store;
                let request = v0_1_convert::request(request);
                match call {
                    Call::Add => h
                        .call_add(s, &request)
                        .await?
                        .map(|r| Some(v0_1_convert::result(r))),
                    Call::Del => h.call_del(s, &request).await?.map(|()| None),
                    Call::Check => h.call_check(s, &request).await?.map(|()| None),
                    Call::Gc(valid) => {
                        let valid: Vec<_> =
                            valid.into_iter().map(v0_1_convert::attachment).collect();
                        h.call_gc(s, &request, &valid).await?.map(|()| None)
                    }
                    Call::Status => h.call_status(s, &request).await?.map(|()| None),
                }
                .map(Answer::Handled)
                .map_err(|e| module_error(v0_1_convert::error(e)))
            }
        },
        Work::Allocations(context) => match &module.inspect {
            Some(indices) => indices
                .load(&mut *store, instance)?
                .call_allocations(&mut *store, &context)
                .await?
                .map(Answer::Allocations)
                .map_err(module_error),
            None => Err(not_exported("inspect")),
        },
        Work::Pools(context) => match &module.inspect {
            Some(indices) => indices
                .load(&mut *store, instance)?
                .call_pools(&mut *store, &context)
                .await?
                .map(Answer::Pools)
                .map_err(module_error),
            None => Err(not_exported("inspect")),
        },
        Work::Import(import) => match &module.migrate {
            Some(indices) => indices
                .load(&mut *store, instance)?
                .call_import_state(
                    &mut *store,
                    &import.format,
                    &import.network,
                    import.config.as_deref(),
                    &import.files,
                )
                .await?
                .map(Answer::Imported)
                .map_err(module_error),
            None => Err(not_exported("migrate")),
        },
    })
}

/// 0.2.0's types to 0.1.0's and back, for a 0.1.0 module's handler.
mod v0_1_convert {
    use crate::module::bindings::{types, v0_1::types as old};

    pub fn request(r: types::Request) -> old::Request {
        old::Request {
            command: match r.command {
                types::Command::Add => old::Command::Add,
                types::Command::Del => old::Command::Del,
                types::Command::Check => old::Command::Check,
                types::Command::Gc => old::Command::Gc,
                types::Command::Status => old::Command::Status,
            },
            container_id: r.container_id,
            netns: r.netns,
            ifname: r.ifname,
            args: r.args,
            network_name: r.network_name,
            cni_version: r.cni_version,
            config: r.config,
            prev_result: r.prev_result,
            lock_granted_at: old::WallInstant {
                seconds: r.lock_granted_at.seconds,
                nanoseconds: r.lock_granted_at.nanoseconds,
            },
        }
    }

    pub fn attachment(a: types::Attachment) -> old::Attachment {
        old::Attachment {
            container_id: a.container_id,
            ifname: a.ifname,
        }
    }

    pub fn result(r: old::IpamResult) -> types::IpamResult {
        types::IpamResult {
            ips: r
                .ips
                .into_iter()
                .map(|i| types::IpConfig {
                    address: i.address,
                    gateway: i.gateway,
                })
                .collect(),
            routes: r
                .routes
                .into_iter()
                .map(|r| types::Route {
                    dst: r.dst,
                    gw: r.gw,
                    mtu: None,
                    advmss: None,
                    priority: None,
                    table: None,
                    scope: None,
                })
                .collect(),
            dns: types::Dns {
                nameservers: r.dns.nameservers,
                domain: r.dns.domain,
                search: r.dns.search,
                options: r.dns.options,
            },
        }
    }

    pub fn error(e: old::Error) -> types::Error {
        types::Error {
            code: e.code,
            msg: e.msg,
            details: e.details,
        }
    }
}

fn deadline_error(deadline: Deadline) -> CniError {
    CniError::new(
        code::DEADLINE_EXCEEDED,
        format!(
            "module stopped at its deadline: {:?} budget used up {:?} after the lock was granted",
            deadline.budget(),
            deadline.elapsed()
        ),
    )
    .with_details("the deadline counts from the lock grant; time spent waiting for the lock is not part of it")
}

/// Names why the guest stopped: the deadline, a resource limit, the store, or a trap
/// (with the last line the guest wrote to stderr, which holds a Rust panic message).
fn trap_error(
    trap: &wasmtime::Error,
    state: &GuestState,
    deadline: Deadline,
    transfer_limit: usize,
) -> CniError {
    if trap.downcast_ref::<DeadlineExceeded>().is_some() {
        return deadline_error(deadline);
    }
    if let Some(limit) = trap.downcast_ref::<LimitExceeded>() {
        return CniError::new(code::LIMIT_EXCEEDED, limit.to_string());
    }
    if let Some(err) = trap.downcast_ref::<CniError>() {
        return err.clone();
    }
    if let Some(limit) = wasmtime_limit(trap, transfer_limit) {
        return CniError::new(code::LIMIT_EXCEEDED, limit).with_details(trap.root_cause());
    }
    // A Rust guest's panic message is on its stderr; the trap itself only says
    // "unreachable". The full backtrace goes to the log with the guest's output.
    let (_, stderr) = state.output();
    let panic_message: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
        .collect();
    tracing::warn!(target: "guest", "trap: {}", truncated(&format!("{trap:?}"), TRAP_LOG_BYTES));
    let trap = trap.root_cause();
    let details = if panic_message.is_empty() {
        trap.to_string()
    } else {
        format!("{}; {trap}", panic_message.join(" "))
    };
    CniError::new(code::MODULE_TRAPPED, "module trapped")
        .with_details(truncated(&details, MAX_ERROR_DETAILS_BYTES))
}

/// wasmtime's own limit errors carry no type to match, only their text (the
/// hostile-module suite triggers both, so an upgrade that rewords them fails there).
fn wasmtime_limit(trap: &wasmtime::Error, transfer_limit: usize) -> Option<String> {
    let text = trap.root_cause().to_string();
    if text.contains("fuel allocated for hostcalls has been exhausted") {
        return Some(format!(
            "module passed the host more than ipam.hostMemoryLimitMiB ({} MiB) in one transfer (a host call's arguments, or its result or error)",
            transfer_limit >> 20
        ));
    }
    if text.starts_with("resource limit exceeded:") {
        return Some(format!(
            "module created more instances, memories or tables than the host allows ({MAX_INSTANCES} instances, {MAX_MEMORIES} memories, {MAX_TABLES} tables)"
        ));
    }
    None
}

fn engine_error(e: wasmtime::Error) -> CniError {
    CniError::new(
        code::MODULE_REJECTED,
        "cannot set up the WebAssembly engine",
    )
    .with_details(e)
}

/// Advances the engine's epoch every tick while a guest runs, so a guest that never
/// calls the host still yields and the deadline timer can fire.
struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    fn start(engine: Engine) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(EPOCH_TICK);
                engine.increment_epoch();
            }
        });
        EpochTicker { stop }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
