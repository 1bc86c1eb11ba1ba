//! Operator commands (`wasm-ipam list`, `stats`, `store check/backup/restore`,
//! `import-host-local`). They take the
//! same host-wide lock as CNI calls, so they see and write a consistent store.

use crate::config::{DEFAULT_CACHE_DIR, DEFAULT_DATA_DIR, DEFAULT_LOCK_FILE};
use crate::error::CniError;
use crate::limits::Limits;
use crate::lock;
use crate::module::cache::ModuleCache;
use crate::module::engine::ModuleHost;
use crate::operator::{import, inventory, metrics};
use crate::store::{self, Store};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// wasm-ipam: a CNI IPAM plugin that runs IPAM modules as WebAssembly components.
///
/// As a CNI plugin it is run by a container runtime with CNI_COMMAND set; the
/// subcommands below are for operators.
#[derive(Parser)]
#[command(version)]
pub struct Cli {
    #[command(subcommand)]
    command: Operation,
}

/// How long an operator command waits for the host-wide lock by default.
const LOCK_TIMEOUT_SECONDS: f64 = 30.0;

#[derive(clap::Args)]
struct StoreArgs {
    /// The store's directory (the netconf's `ipam.dataDir`).
    #[arg(long, default_value = DEFAULT_DATA_DIR)]
    data_dir: PathBuf,
    /// The host-wide lock (the netconf's `ipam.lockFile`).
    #[arg(long, default_value = DEFAULT_LOCK_FILE)]
    lock_file: PathBuf,
    /// Give up if the lock is not granted within this many seconds.
    #[arg(long, default_value_t = LOCK_TIMEOUT_SECONDS)]
    lock_timeout: f64,
}

#[derive(Subcommand)]
enum Operation {
    /// Print every allocation: network, address, container id, ifname, since when.
    List {
        #[command(flatten)]
        store: StoreArgs,
        /// Only this network.
        #[arg(long)]
        network: Option<String>,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Per network capacity, in use, free, excluded and cooling down; and, from the
    /// log, lock wait / lock hold / budget used per call.
    Stats {
        #[command(flatten)]
        store: StoreArgs,
        /// The netconf's `ipam.logFile`, for call timings.
        #[arg(long)]
        log_file: Option<PathBuf>,
        /// Prometheus text format (for node_exporter's textfile collector).
        #[arg(long)]
        prometheus: bool,
    },
    /// Compile a module into the cache ahead of time (for node images and installers),
    /// checking it as a CNI call would.
    Precompile {
        /// The module's .wasm component.
        module: PathBuf,
        /// The cache directory (the netconf's `ipam.cacheDir`).
        #[arg(long, default_value = DEFAULT_CACHE_DIR)]
        cache_dir: PathBuf,
        /// Wall time the compiler may take (the netconf's `ipam.compileTimeoutSeconds`).
        #[arg(long)]
        compile_timeout_seconds: Option<f64>,
        /// Data memory the compiler may use (the netconf's `ipam.compileMemoryMiB`).
        #[arg(long)]
        compile_memory_mib: Option<u64>,
    },
    /// Check, back up or restore the store (see SECURITY.md, "When the store is
    /// damaged").
    Store {
        #[command(subcommand)]
        action: StoreAction,
    },
    /// Import host-local's on-disk allocations so a node can switch without leaking
    /// or reusing addresses.
    ImportHostLocal {
        /// host-local's dataDir (holding one directory per network).
        #[arg(long, default_value = "/var/lib/cni/networks")]
        data_dir: PathBuf,
        /// The network(s) to import.
        #[arg(long, required = true)]
        network: Vec<String>,
        /// wasm-ipam's store directory (the netconf's `ipam.dataDir`).
        #[arg(long, default_value = DEFAULT_DATA_DIR)]
        store_dir: PathBuf,
        /// The host-wide lock (the netconf's `ipam.lockFile`).
        #[arg(long, default_value = DEFAULT_LOCK_FILE)]
        lock_file: PathBuf,
    },
}

#[derive(Subcommand)]
enum StoreAction {
    /// Check the store's pages and indexes, and each network's recorded usage against
    /// its entries; exits non-zero naming every problem found.
    Check {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Write a consistent copy of the store to a new file, under the lock.
    Backup {
        #[command(flatten)]
        store: StoreArgs,
        /// The new file.
        #[arg(long)]
        to: PathBuf,
    },
    /// Put a backup in place of the store, under the lock; what was there is kept
    /// beside it.
    Restore {
        #[command(flatten)]
        store: StoreArgs,
        /// A file written by `wasm-ipam store backup`.
        #[arg(long)]
        from: PathBuf,
    },
}

/// Runs `f` under the host-wide lock, waiting at most `timeout` seconds for it; `f`
/// gets how long it may wait for `store.lock` in turn.
fn under_lock<T>(
    lock_file: &Path,
    timeout: f64,
    f: impl FnOnce(Duration) -> Result<T, CniError>,
) -> Result<T, CniError> {
    let timeout = Duration::try_from_secs_f64(timeout).ok();
    let _lock = lock::acquire(lock_file, timeout)?;
    f(timeout.unwrap_or(Duration::from_secs_f64(LOCK_TIMEOUT_SECONDS)))
}

fn with_store<T>(
    data_dir: &Path,
    lock_file: &Path,
    timeout: f64,
    f: impl FnOnce(&mut dyn Store) -> Result<T, CniError>,
) -> Result<T, CniError> {
    under_lock(lock_file, timeout, |wait| {
        f(store::open(data_dir, wait)?.as_mut())
    })
}

fn rfc3339(secs: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(secs)).to_string()
}

/// Runs an operator command; returns what to print.
pub fn run(cli: Cli) -> Result<String, CniError> {
    match cli.command {
        Operation::List {
            store,
            network,
            json,
        } => {
            let allocations =
                with_store(&store.data_dir, &store.lock_file, store.lock_timeout, |s| {
                    crate::call::test_panic("list");
                    inventory::allocations(s, network.as_deref())
                })?;
            if json {
                return Ok(serde_json::to_string_pretty(&allocations).expect("serialisable"));
            }
            let mut out = format!(
                "{:<20} {:<40} {:<64} {:<10} {}\n",
                "NETWORK", "ADDRESS", "CONTAINER ID", "IFNAME", "SINCE"
            );
            for a in allocations {
                out += &format!(
                    "{:<20} {:<40} {:<64} {:<10} {}\n",
                    a.network,
                    a.address,
                    a.container_id,
                    a.ifname,
                    a.since.map_or("-".into(), rfc3339)
                );
            }
            Ok(out)
        }
        Operation::Stats {
            store,
            log_file,
            prometheus,
        } => {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs();
            let networks =
                with_store(&store.data_dir, &store.lock_file, store.lock_timeout, |s| {
                    inventory::network_stats(s, now)
                })?;
            let log = match &log_file {
                Some(path) => std::fs::read_to_string(path).map_err(|e| {
                    CniError::new(
                        crate::error::code::IO_FAILURE,
                        format!("cannot read {}", path.display()),
                    )
                    .with_details(e)
                })?,
                None => String::new(),
            };
            let timings = metrics::call_timings(&log);
            Ok(if prometheus {
                metrics::prometheus(&networks, &timings)
            } else {
                metrics::table(&networks, &timings)
            })
        }
        Operation::Precompile {
            module,
            cache_dir,
            compile_timeout_seconds,
            compile_memory_mib,
        } => {
            let cache = ModuleCache::open(&cache_dir)
                .map_err(|e| CniError::new(crate::error::code::IO_FAILURE, e.0))?;
            let mut limits = Limits::default();
            if let Some(seconds) = compile_timeout_seconds {
                limits.compile_time = Duration::try_from_secs_f64(seconds)
                    .ok()
                    .filter(|d| !d.is_zero())
                    .ok_or_else(|| {
                        CniError::config("--compile-timeout-seconds must be a positive number")
                    })?;
            }
            if let Some(mib) = compile_memory_mib {
                limits.compile_memory = mib.max(1) << 20;
            }
            let loaded = ModuleHost::new()?.load(&module, None, Some(&cache), &limits)?;
            Ok(format!(
                "{} (sha256 {}) {} {}\n",
                module.display(),
                loaded.sha256,
                if loaded.from_cache {
                    "already in"
                } else {
                    "compiled into"
                },
                cache_dir.display()
            ))
        }
        Operation::Store { action } => store_action(action),
        Operation::ImportHostLocal {
            data_dir,
            network,
            store_dir,
            lock_file,
        } => with_store(&store_dir, &lock_file, LOCK_TIMEOUT_SECONDS, |store| {
            let mut out = String::new();
            for name in &network {
                let r = import::import_host_local(store, &data_dir.join(name), name)?;
                out += &format!(
                    "{name}: imported {} address(es) and {} last-reserved marker(s); {} already present\n",
                    r.addresses, r.last_reserved, r.already_present
                );
            }
            Ok(out)
        }),
    }
}

fn store_action(action: StoreAction) -> Result<String, CniError> {
    match action {
        StoreAction::Check { store } => {
            let (problems, entries) =
                with_store(&store.data_dir, &store.lock_file, store.lock_timeout, |s| {
                    Ok((s.check()?, s.entries(None)?.len()))
                })?;
            if problems.is_empty() {
                return Ok(format!(
                    "store {}: ok, {entries} entries\n",
                    store.data_dir.display()
                ));
            }
            Err(CniError::new(
                crate::error::code::STORE_FAILURE,
                format!(
                    "store {} is damaged: {}",
                    store.data_dir.display(),
                    problems.join("; ")
                ),
            )
            .with_details("see SECURITY.md, \"When the store is damaged\""))
        }
        StoreAction::Backup { store, to } => {
            with_store(&store.data_dir, &store.lock_file, store.lock_timeout, |s| {
                s.backup(&to)
            })?;
            Ok(format!(
                "backed up {} to {}\n",
                store.data_dir.display(),
                to.display()
            ))
        }
        StoreAction::Restore { store, from } => {
            let kept = under_lock(&store.lock_file, store.lock_timeout, |wait| {
                store::restore(&store.data_dir, &from, wait)
            })?;
            Ok(format!(
                "restored {} from {}; the store it replaced, if any, is kept as {}\n",
                store.data_dir.display(),
                from.display(),
                kept.display()
            ))
        }
    }
}
