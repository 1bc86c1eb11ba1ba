//! Whether a module answers at all, asked before a node relies on it: `inspect`,
//! `precompile`, `pull` and `install` ask a module that exports
//! `cni:ipam/capabilities` (0.2.2) that question once, through the same locked
//! pipeline as any question to a module, on a private lock and store that exist only
//! for it (the answer is the module's alone: it reads no store).
//!
//! Compiling and linking say only that the module's exports are there. A module whose
//! code never registered its handler (a Go module without `ipam.Export`) has them all,
//! and fails every call with 102; asked here, it says so (the SDK's panic names the
//! missing registration) and is refused before any pod depends on it.

use crate::config::HostIpamConfig;
use crate::error::{CniError, code};
use crate::limits::Limits;
use crate::module::bindings::capabilities::Function;
use crate::module::cache::ModuleCache;
use crate::module::exports::Export;
use crate::module::instance::LoadedModule;
use crate::module::question::Capabilities;
use crate::pipeline::{self, Label, Network, Writes};
use std::path::Path;

/// The module's answer to `capabilities.functions`.
pub fn capabilities(
    path: &Path,
    cache: Option<&ModuleCache>,
    limits: &Limits,
) -> Result<Vec<Function>, CniError> {
    let private = tempfile::tempdir().map_err(|e| {
        CniError::new(code::IO_FAILURE, "cannot make a private directory").with_details(e)
    })?;
    let module = std::path::absolute(path).map_err(|e| {
        CniError::new(
            code::IO_FAILURE,
            format!("cannot resolve {}", path.display()),
        )
        .with_details(e)
    })?;
    let mut ipam = HostIpamConfig::defaults(module)?;
    ipam.lock_file = private.path().join("ipam.lock");
    ipam.data_dir = private.path().join("data");
    ipam.cache_dir = match cache {
        Some(cache) => cache.dir().to_path_buf(),
        None => private.path().join("cache"),
    };
    ipam.limits = *limits;
    let network = Network {
        name: "inspect".to_string(),
        ipam,
        config: None,
        // Its own store, in a directory made for this run and removed after it.
        store_if_missing: crate::store::IfMissing::Create,
    };
    let ran = pipeline::run(
        &network,
        &Label::operator("inspect"),
        &|| false,
        |session| session.ask(Capabilities, Writes::ReadOnly),
    );
    ran.result
}

/// Refuses (code 100) a module that exports `capabilities` and fails to answer it:
/// every call of it would fail the same way.
pub fn refuse_unless_it_answers(
    loaded: &LoadedModule,
    cache: Option<&ModuleCache>,
    limits: &Limits,
) -> Result<(), CniError> {
    if !loaded.exports(Export::Capabilities) {
        return Ok(());
    }
    capabilities(&loaded.path, cache, limits)
        .map(drop)
        .map_err(|e| does_not_answer(&loaded.path, &e))
}

/// The refusal of a module that failed its first question with `e`.
pub fn does_not_answer(path: &Path, e: &CniError) -> CniError {
    CniError::new(
        code::MODULE_REJECTED,
        format!(
            "{} does not answer: asked which functions are its own, it failed with {}: {}; every call of it would fail the same way",
            path.display(),
            e.code,
            e.msg
        ),
    )
    .with_details(&e.details)
}
