//! The one WebAssembly engine configuration and what compiled code depends on: shared
//! by calls and the compiler (`wasm-ipam-compile`), so artifacts compiled by one load
//! in the other, and keyed in the cache by [`engine_identity`].

use crate::error::{CniError, code};
use wasmtime::{Config, Engine};

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

pub fn engine_error(e: wasmtime::Error) -> CniError {
    CniError::new(
        code::MODULE_REJECTED,
        "cannot set up the WebAssembly engine",
    )
    .with_details(e)
}
