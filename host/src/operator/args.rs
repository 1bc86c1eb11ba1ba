//! What several operator commands share: where the store and the lock are
//! (`StoreArgs`), the compile limits (`CompileArgs`), the cache they compile into, and
//! what a command prints (`Output`).

use crate::config::{DEFAULT_DATA_DIR, DEFAULT_LOCK_FILE};
use crate::error::{CniError, code};
use crate::limits::Limits;
use crate::lock;
use crate::module::cache::ModuleCache;
use crate::operator::ask::{NetworkToAsk, Note, StoreAccess};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long an operator command waits for the host-wide lock by default.
pub const LOCK_TIMEOUT_SECONDS: f64 = 30.0;

/// Where the store and the host-wide lock are: given, else a netconf's, else the
/// defaults.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct StoreArgs {
    // The defaults shown are the constants a call uses ([`StoreArgs::access_for`]).
    #[arg(long, help = netconf_else("The store's directory", "ipam.dataDir", DEFAULT_DATA_DIR))]
    pub data_dir: Option<PathBuf>,
    #[arg(long, help = netconf_else("The host-wide lock", "ipam.lockFile", DEFAULT_LOCK_FILE))]
    pub lock_file: Option<PathBuf>,
    /// Give up if the lock is not granted within this many seconds.
    #[arg(long, default_value_t = LOCK_TIMEOUT_SECONDS)]
    pub lock_timeout: f64,
}

/// A `--help` line for a flag whose default is a netconf's key, else `default`: clap's
/// own `[default: …]` would make the flag always set, hiding the netconf's.
fn netconf_else(what: &str, key: &str, default: &str) -> String {
    format!("{what} [default: with --netconf, its `{key}`; else {default}]")
}

impl StoreArgs {
    /// The store and lock given, else `netconf`'s (its `ipam.dataDir`,
    /// `ipam.lockFile` and `ipam.store`, as a call with it would use), else the
    /// defaults (the embedded store).
    pub fn access_for(&self, netconf: Option<&Path>) -> Result<StoreAccess, CniError> {
        let ipam = netconf
            .map(crate::operator::ask::read_netconf)
            .transpose()?
            .map(|conf| conf.ipam);
        let mut access = StoreAccess::embedded(
            self.data_dir
                .clone()
                .or_else(|| ipam.as_ref().map(|i| i.data_dir.clone()))
                .unwrap_or_else(|| DEFAULT_DATA_DIR.into()),
            self.lock_file
                .clone()
                .or_else(|| ipam.as_ref().map(|i| i.lock_file.clone()))
                .unwrap_or_else(|| DEFAULT_LOCK_FILE.into()),
            Duration::try_from_secs_f64(self.lock_timeout)
                .map_err(|_| CniError::config("--lock-timeout must be a number of seconds"))?,
        );
        if let Some(ipam) = ipam {
            access.adopt(&ipam);
        }
        Ok(access)
    }

    /// The network a netconf names, to ask its module on this store and lock.
    pub fn network_of(&self, netconf: &Path) -> Result<NetworkToAsk, CniError> {
        let (network, served_by) = crate::operator::ask::from_netconf(netconf)?;
        NetworkToAsk::new(&network, served_by, &self.access_for(Some(netconf))?)
    }

    /// Runs `f` under the host-wide lock; `f` gets how long it may wait for
    /// `store.lock` in turn.
    pub fn under_lock<T>(
        &self,
        access: &StoreAccess,
        f: impl FnOnce(Duration) -> Result<T, CniError>,
    ) -> Result<T, CniError> {
        let timeout = Duration::try_from_secs_f64(self.lock_timeout).ok();
        let _lock = lock::acquire(&access.lock_file, timeout)?;
        f(timeout.unwrap_or(Duration::from_secs_f64(LOCK_TIMEOUT_SECONDS)))
    }
}

/// A name the operator gave (a network, a node) that names nothing here: refused
/// rather than answered with an empty table, listing the names that do (`known`,
/// introduced by `known_as`), so a typo is seen at once. `said` says what was not
/// found, `then` what to do.
pub fn unknown<'a>(
    said: &str,
    known_as: &str,
    known: impl IntoIterator<Item = &'a str>,
    then: &str,
) -> CniError {
    let known: std::collections::BTreeSet<&str> = known.into_iter().collect();
    let known = match known.is_empty() {
        true => "none".to_string(),
        false => known.into_iter().collect::<Vec<_>>().join(", "),
    };
    CniError::config(format!("{said} ({known_as}: {known}); {then}"))
}

/// The netconf's compile limits, for commands that compile a module outside a call.
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct CompileArgs {
    /// Wall time the compiler may take (the netconf's `ipam.compileTimeoutSeconds`).
    #[arg(long)]
    pub compile_timeout_seconds: Option<f64>,
    /// Data memory the compiler may use (the netconf's `ipam.compileMemoryMiB`).
    #[arg(long)]
    pub compile_memory_mib: Option<u64>,
    /// The largest module file read (the netconf's `ipam.moduleMaxMiB`).
    #[arg(long)]
    pub module_max_mib: Option<u64>,
}

impl CompileArgs {
    pub fn limits(&self) -> Result<Limits, CniError> {
        let mut limits = Limits::default();
        if let Some(seconds) = self.compile_timeout_seconds {
            limits.compile_time = Duration::try_from_secs_f64(seconds)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| {
                    CniError::config("--compile-timeout-seconds must be a positive number")
                })?;
        }
        if let Some(mib) = self.compile_memory_mib {
            limits.compile_memory = mib.max(1) << 20;
        }
        if let Some(mib) = self.module_max_mib {
            limits.module_bytes = mib.max(1) << 20;
        }
        Ok(limits)
    }
}

/// The cache an operator command compiles into: one it cannot use (the default one,
/// root's, for a user who is not root) is an error that names the flag to pass.
pub fn open_cache(dir: &Path, instead: &str) -> Result<ModuleCache, CniError> {
    ModuleCache::open(dir)
        .map_err(|e| CniError::new(code::IO_FAILURE, format!("{}: pass {instead}", e.0)))
}

/// What an operator command prints: `text` on stdout, each note on stderr; `failed`
/// makes the exit status 1 (some of what was asked could not be answered).
#[derive(Debug, Default, PartialEq)]
pub struct Output {
    pub text: String,
    pub notes: Vec<String>,
    pub failed: bool,
}

impl From<String> for Output {
    fn from(text: String) -> Self {
        Output {
            text,
            ..Output::default()
        }
    }
}

impl Output {
    /// `text` with `notes`, failed if one of them says part of the answer is missing.
    pub fn with_notes(text: String, notes: Vec<Note>) -> Output {
        Output {
            failed: notes.iter().any(Note::fails),
            text,
            notes: notes.into_iter().map(|n| n.to_string()).collect(),
        }
    }

    /// `value` as pretty JSON ending in a newline, with `notes`.
    pub fn json(value: &impl serde::Serialize, notes: Vec<Note>) -> Output {
        let mut text = serde_json::to_string_pretty(value).expect("serialisable");
        text.push('\n');
        Output::with_notes(text, notes)
    }
}
