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
use crate::module::bindings::{self, IpamModulePre, types};
use crate::module::cache::ModuleCache;
use crate::module::file::ModuleFile;
use crate::module::host::{DeadlineExceeded, GuestState, LimitExceeded};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use wasmtime::component::{HasSelf, Linker, types::ComponentItem};
use wasmtime::{Config, Engine};

/// How often the epoch advances; a running guest yields to the host this often, which
/// is when the deadline timer can stop it.
const EPOCH_TICK: Duration = Duration::from_millis(5);

/// How much of a trap's backtrace goes to the log (deep recursion makes long ones).
const TRAP_LOG_BYTES: usize = 16 << 10;

/// The interfaces of ours a module may import. Besides these, it may import WASI 0.2
/// (linked with no capabilities; see [`crate::module::wasi`]), which Rust's std for
/// wasm32-wasip2 imports as soon as a module formats or panics.
const CNI_IMPORTS: &str = "cni:ipam/";

pub struct ModuleHost {
    engine: Engine,
}

/// A compiled, linked module ready to instantiate.
pub struct LoadedModule {
    pre: IpamModulePre<GuestState>,
    pub sha256: String,
    /// Whether the compiled code came from the cache (else it was compiled now).
    pub from_cache: bool,
}

/// The handler call to make.
pub enum Call {
    Add,
    Del,
    Check,
    Gc(Vec<types::Attachment>),
    Status,
}

/// What a guest call left behind, whether it succeeded or not.
pub struct GuestOutcome {
    /// The handler's answer (for ADD the result, otherwise `None`), or why it failed:
    /// the module's own CNI error, a trap, or the deadline.
    pub result: Result<Option<types::IpamResult>, CniError>,
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

impl ModuleHost {
    pub fn new() -> Result<Self, CniError> {
        Ok(ModuleHost { engine: engine()? })
    }

    /// A linker with our interfaces and the WASI interfaces in `wasi` (each linked
    /// once, whatever versions of it are imported).
    fn linker(&self, wasi: &[crate::module::wasi::Link]) -> Result<Linker<GuestState>, CniError> {
        let mut linker = Linker::new(&self.engine);
        let l = &mut linker;
        bindings::store::add_to_linker::<_, HasSelf<_>>(l, |s: &mut GuestState| &mut s.store)
            .map_err(engine_error)?;
        bindings::deadline::add_to_linker::<_, HasSelf<_>>(l, |s: &mut GuestState| &mut s.deadline)
            .map_err(engine_error)?;
        bindings::log::add_to_linker::<_, HasSelf<_>>(l, |s: &mut GuestState| &mut s.log)
            .map_err(engine_error)?;
        for link in wasi {
            link(l).map_err(engine_error)?;
        }
        Ok(linker)
    }

    /// Reads, verifies, compiles (or loads from `cache`) and links the module at `path`.
    pub fn load(
        &self,
        path: &Path,
        pinned_sha256: Option<&str>,
        cache: Option<&ModuleCache>,
        limits: &Limits,
    ) -> Result<LoadedModule, CniError> {
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
        let rejected = |msg: String, e: wasmtime::Error| {
            CniError::new(code::MODULE_REJECTED, msg).with_details(format!("{e:#}"))
        };
        let read = || bytes.map_or_else(|| module.read(), Ok);
        let (component, from_cache) =
            crate::module::compile::compiled(&self.engine, read, &sha256, path, cache, limits)?;
        let mut unsupported = Vec::new();
        let (mut wasi, mut links) = (Vec::new(), Vec::new());
        for (name, item) in component.component_type().imports(&self.engine) {
            match (&item.ty, crate::module::wasi::interface(name)) {
                (ComponentItem::ComponentInstance(_), Some(interface)) => {
                    // Once per interface, whichever 0.2.x versions are imported.
                    if !wasi.contains(&interface.0) {
                        wasi.push(interface.0);
                        links.push(interface.1);
                    }
                }
                (ComponentItem::ComponentInstance(_), None) if name.starts_with(CNI_IMPORTS) => {}
                _ => unsupported.push(name.to_string()),
            }
        }
        if !unsupported.is_empty() {
            return Err(CniError::new(
                code::MODULE_REJECTED,
                format!(
                    "module {} imports what the host does not provide: {}",
                    path.display(),
                    unsupported.join(", ")
                ),
            )
            .with_details(
                "the host provides cni:ipam/{store,deadline,log} and WASI 0.2 with no capabilities",
            ));
        }
        let pre = self
            .linker(&links)?
            .instantiate_pre(&component)
            .map_err(|e| rejected(format!("module {} cannot be linked", path.display()), e))?;
        let pre = IpamModulePre::new(pre).map_err(|e| {
            rejected(
                format!(
                    "module {} does not export cni:ipam/handler@0.1.0",
                    path.display()
                ),
                e,
            )
        })?;
        Ok(LoadedModule {
            pre,
            sha256,
            from_cache,
        })
    }

    /// Instantiates the module and calls its handler, stopping it at the deadline.
    ///
    /// Called only after the lock grant: `state` holds a deadline built from the grant.
    pub fn call(
        &self,
        module: &LoadedModule,
        state: GuestState,
        request: types::Request,
        call: Call,
    ) -> GuestOutcome {
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
                let handler = instance.cni_ipam_handler();
                wasmtime::Result::Ok(match call {
                    Call::Add => handler.call_add(&mut store, &request).await?.map(Some),
                    Call::Del => handler.call_del(&mut store, &request).await?.map(|()| None),
                    Call::Check => handler
                        .call_check(&mut store, &request)
                        .await?
                        .map(|()| None),
                    Call::Gc(valid) => handler
                        .call_gc(&mut store, &request, &valid)
                        .await?
                        .map(|()| None),
                    Call::Status => handler
                        .call_status(&mut store, &request)
                        .await?
                        .map(|()| None),
                })
            })
            .await
        });
        let state = store.into_data();
        let result = match outcome {
            Ok(Ok(answer)) => answer.map_err(crate::call::answer::module_error),
            Ok(Err(trap)) => Err(trap_error(&trap, &state, deadline, transfer_limit)),
            Err(_elapsed) => Err(deadline_error(deadline)),
        };
        GuestOutcome { result, state }
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
