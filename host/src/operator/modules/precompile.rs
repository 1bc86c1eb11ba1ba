//! `wasm-ipam precompile MODULE`: the module compiled into the cache ahead of time
//! (node images, installers), checked as a CNI call would check it, and asked once
//! whether it answers at all ([`answers`]).

use crate::config::DEFAULT_CACHE_DIR;
use crate::error::CniError;
use crate::module::instance::ModuleHost;
use crate::module::trust::Policies;
use crate::operator::args::{CompileArgs, Output, open_cache};
use crate::operator::modules::answers;
use std::path::PathBuf;

/// Compile a module into the cache ahead of time (for node images and installers),
/// checking it as a CNI call would.
#[derive(clap::Args, Debug, PartialEq)]
pub struct PrecompileCommand {
    /// The module's .wasm component.
    pub module: PathBuf,
    /// The cache directory (the netconf's `ipam.cacheDir`).
    #[arg(long, default_value = DEFAULT_CACHE_DIR)]
    pub cache_dir: PathBuf,
    #[command(flatten)]
    pub compile: CompileArgs,
}

impl PrecompileCommand {
    pub fn run(self) -> Result<Output, CniError> {
        let cache = open_cache(&self.cache_dir, "--cache-dir DIR (one of your own)")?;
        let limits = self.compile.limits()?;
        let loaded = ModuleHost::new()?.load(
            &self.module,
            None,
            &Policies::for_call(None)?,
            Some(&cache),
            &limits,
        )?;
        answers::refuse_unless_it_answers(&loaded, Some(&cache), &limits)?;
        let done = match loaded.from_cache {
            true => "already in",
            false => "compiled into",
        };
        Ok(format!(
            "{} (sha256 {}, {}) {done} {}\n",
            self.module.display(),
            loaded.sha256,
            loaded.contract.name(),
            self.cache_dir.display()
        )
        .into())
    }
}
