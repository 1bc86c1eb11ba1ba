//! Linking a compiled module (before the lock) and asking it one question
//! ([`crate::module::question`]) on a fresh instance (after the grant, bounded by the
//! deadline).
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

use crate::error::{CniError, code};
use crate::limits::Limits;
use crate::module::cache::ModuleCache;
use crate::module::contract::{Contract, Interfaces, cni_import};
use crate::module::engine::{engine, engine_error};
use crate::module::exports::{Export, Exports};
use crate::module::file::ModuleFile;
use crate::module::host::GuestState;
use crate::module::question::Question;
use crate::module::ticker::EpochTicker;
use crate::module::trap::{deadline_error, trap_error};
use crate::module::trust::{Policies, SignatureFile};
use crate::module::wasi::Link;
use std::path::Path;
use wasmtime::Engine;
use wasmtime::component::{Component, InstancePre, Linker};

pub struct ModuleHost {
    engine: Engine,
}

/// A compiled, linked module ready to instantiate.
pub struct LoadedModule {
    pre: InstancePre<GuestState>,
    exports: Exports,
    pub contract: Contract,
    /// Where it was read from, for messages.
    pub path: std::path::PathBuf,
    pub sha256: String,
    /// Whether the compiled code came from the cache (else it was compiled now).
    pub from_cache: bool,
}

impl LoadedModule {
    /// Whether the module has the optional `export`.
    pub fn exports(&self, export: Export) -> bool {
        self.exports.has(export)
    }

    /// Why the module cannot be asked `question`: it lacks the export. Checked before
    /// the module is instantiated, so nothing runs for a question the module cannot
    /// answer.
    pub fn refusal<Q: Question>(&self, question: &Q) -> Option<CniError> {
        let export = question.needs()?;
        let (interface, since) = (export.interface(), export.since());
        (!self.exports(export)).then(|| {
            CniError::new(
                code::MODULE_REJECTED,
                format!(
                    "module {} does not export {interface} (cni:ipam/{interface}@{since}; it targets {})",
                    self.path.display(),
                    self.contract.name()
                ),
            )
            .with_details(format!(
                "rebuild the module against cni:ipam@{since} or later, implementing it (docs/wit-versions.md)"
            ))
        })
    }
}

/// What a guest call left behind, whether it succeeded or not.
pub struct GuestOutcome<A> {
    /// The module's answer, or why it failed: the module's own CNI error, a trap, or
    /// the deadline.
    pub result: Result<A, CniError>,
    /// The guest's state, holding its staged store writes and captured output.
    pub state: GuestState,
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

    /// A linker with the interfaces the module imports, each linked once whatever
    /// versions of it the module imports (0.2.x of a WASI interface, 0.2.x of a
    /// `cni:ipam` one: wasmtime finds a definition by its semver-compatible name).
    fn linker(&self, interfaces: &Interfaces) -> Result<Linker<GuestState>, CniError> {
        let mut linker = Linker::new(&self.engine);
        let mut linked: Vec<*const Link> = Vec::new();
        for (name, _) in &interfaces.imports {
            let link = match crate::module::wasi::interface(name) {
                Some((_, link)) => Some(link),
                None => cni_import(name).flatten().map(|(_, _, link)| link),
            };
            if let Some(link) = link
                && !linked.contains(&(link as *const Link))
            {
                linked.push(link);
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
        policies: &Policies,
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
        // Trust before the compiler sees the bytes: an untrusted module reaches
        // nothing but the hash.
        if !policies.is_empty() {
            let signature = SignatureFile::beside(path)?;
            let bytes = || bytes.clone().map_or_else(|| module.read(), Ok);
            policies.check(path, &sha256, signature.as_ref(), bytes, cache)?;
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
        policies: &Policies,
        cache: Option<&ModuleCache>,
        limits: &Limits,
    ) -> Result<LoadedModule, CniError> {
        let compiled = self.compile(path, pinned_sha256, policies, cache, limits)?;
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
        let exports = Exports::look_up(&pre, contract, interfaces, &rejected)?;
        Ok(LoadedModule {
            pre,
            exports,
            contract,
            path: path.to_path_buf(),
            sha256: compiled.sha256,
            from_cache: compiled.from_cache,
        })
    }

    /// Instantiates the module and asks it `question`, stopping it at the deadline:
    /// the module's answer, its CNI error (checked by [`crate::module::answer`]), a
    /// refusal of a question it lacks the export for, a trap, or the deadline.
    ///
    /// Called only after the lock grant: `state` holds a deadline built from the grant.
    pub fn call<Q: Question>(
        &self,
        module: &LoadedModule,
        state: GuestState,
        question: Q,
    ) -> GuestOutcome<Q::Answer> {
        // Nothing is instantiated for a question the module lacks the export for.
        if let Some(refused) = module.refusal(&question) {
            return GuestOutcome {
                result: Err(refused),
                state,
            };
        }
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
                question.ask(&module.exports, &mut store, &instance).await
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
