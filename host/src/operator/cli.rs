//! Operator commands (`wasm-ipam list`, `stats`, `store check/backup/restore`,
//! `import-host-local`, `gc`, `release-node`, ...). Those that read or write a node's
//! store take the same host-wide lock as CNI calls, so they see and write a
//! consistent store; those that touch no store (`inspect`, `pull`, `push`, `new`,
//! `try`, `install`) take none (`inspect` and `try` run on a lock and store of their
//! own).

use crate::config::{DEFAULT_CACHE_DIR, DEFAULT_DATA_DIR, DEFAULT_LOCK_FILE};
use crate::error::CniError;
use crate::limits::Limits;
use crate::lock;
use crate::module::cache::ModuleCache;
use crate::module::instance::ModuleHost;
use crate::module::trust::Policies;
use crate::operator::ask::{NetworkToAsk, StoreAndLock, asked_all};
use crate::operator::inventory::printable;
use crate::operator::runtime::Runtime;
use crate::operator::table::{Align, Table};
use crate::operator::{describe, gc, import, inventory, metrics, release_node, reserve};
use crate::store::{self, ServedBy, Store};
use clap::{Parser, Subcommand};
use std::collections::BTreeMap;
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
    /// The store's directory [default: with --netconf, its `ipam.dataDir`; else
    /// /var/lib/wasm-ipam]
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// The host-wide lock [default: with --netconf, its `ipam.lockFile`; else
    /// /run/wasm-ipam.lock]
    #[arg(long)]
    lock_file: Option<PathBuf>,
    /// Give up if the lock is not granted within this many seconds.
    #[arg(long, default_value_t = LOCK_TIMEOUT_SECONDS)]
    lock_timeout: f64,
}

/// The netconf's compile limits, for commands that compile a module outside a call.
#[derive(clap::Args)]
struct CompileArgs {
    /// Wall time the compiler may take (the netconf's `ipam.compileTimeoutSeconds`).
    #[arg(long)]
    compile_timeout_seconds: Option<f64>,
    /// Data memory the compiler may use (the netconf's `ipam.compileMemoryMiB`).
    #[arg(long)]
    compile_memory_mib: Option<u64>,
    /// The largest module file read (the netconf's `ipam.moduleMaxMiB`).
    #[arg(long)]
    module_max_mib: Option<u64>,
}

impl CompileArgs {
    fn limits(&self) -> Result<Limits, CniError> {
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

#[derive(Subcommand)]
enum Operation {
    /// Print every allocation: network, address, container id, ifname, since when, as
    /// the module serving each network reports them (its `inspect` export).
    List {
        #[command(flatten)]
        store: StoreArgs,
        /// Only this network.
        #[arg(long)]
        network: Option<String>,
        /// Ask the module this network configuration (or conflist) names, for its
        /// network, instead of the one the store recorded.
        #[arg(long)]
        netconf: Option<PathBuf>,
        /// Only allocations the module reports on this node (its `node` attribute):
        /// for a network shared by nodes through etcd, whose `list` is cluster-wide.
        #[arg(long)]
        node: Option<String>,
        /// JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// List the reservations (`wasm-ipam reserve`) instead of the allocations.
        #[arg(long)]
        reservations: bool,
    },
    /// Per network and pool capacity, in use, free, excluded and cooling down, as each
    /// network's module reports them; and, from the log, lock wait / lock hold /
    /// budget used per call.
    Stats {
        #[command(flatten)]
        store: StoreArgs,
        /// Only this network.
        #[arg(long)]
        network: Option<String>,
        /// As for `list`.
        #[arg(long)]
        netconf: Option<PathBuf>,
        /// The netconf's `ipam.logFile`, for call timings (its renamed files
        /// `<log>.1`, `<log>.2`, … are read too, as far back as the window goes).
        #[arg(long)]
        log_file: Option<PathBuf>,
        /// Timings of at most this many calls, the most recent: the log is read
        /// from its end, in time that does not grow with its length.
        #[arg(long, default_value_t = 10_000)]
        last: usize,
        /// Only calls logged within this time before now (e.g. `1h`, `30m`).
        #[arg(long, value_parser = humantime::parse_duration)]
        since: Option<Duration>,
        /// Show each pool's blocks (and their nodes) under it, when the module
        /// reports them.
        #[arg(long)]
        blocks: bool,
        /// Prometheus text format (for node_exporter's textfile collector).
        #[arg(long)]
        prometheus: bool,
        /// Each network's totals, pools (and with --blocks, blocks) as JSON, counts
        /// exact (IPv6 pools past 2^64 addresses too).
        #[arg(long, conflicts_with = "prometheus")]
        json: bool,
        /// Also count each network's leak candidates (what `wasm-ipam gc` would
        /// release now, with --grace), asking this CRI runtime.
        #[arg(long)]
        runtime_endpoint: Option<String>,
        /// As --runtime-endpoint, from a file of live container ids (podman).
        #[arg(long, conflicts_with = "runtime_endpoint")]
        valid_from: Option<PathBuf>,
        /// The leak candidates' grace period, as `gc --grace`.
        #[arg(long, default_value_t = gc::DEFAULT_GRACE.into())]
        grace: humantime::Duration,
    },
    /// Put wasm-ipam on this node (a node image's or a DaemonSet init container's
    /// step): the binary and its compiler into the CNI bin dir, the module into the
    /// module dir, the main plugins linked into the bin dir, the module compiled into
    /// the cache, and a conflist (bridge + wasm-ipam) named to sort first. Idempotent.
    Install(crate::operator::install::Install),
    /// Make one CNI call to a module as a runtime would (this binary, the CNI
    /// environment, the netconf on stdin), on a state directory of its own: no root,
    /// network namespace or main plugin. Prints the CNI result or error.
    Try(crate::operator::try_call::TryCall),
    /// Make a module project in ./NAME (Rust, or Python with componentize-py) that
    /// builds with one command and passes its own unit test.
    New(crate::operator::new::New),
    /// Remove a network whose configuration is gone: its store entries and its record.
    /// Refused while its module reports allocations, or cannot be asked, unless
    /// --force.
    Forget {
        /// The network's name.
        network: String,
        #[command(flatten)]
        store: StoreArgs,
        /// Forget it even if it may hold addresses still in use.
        #[arg(long)]
        force: bool,
    },
    /// Describe a module: digest, size, the contract it targets, its imports (each
    /// provided or not) and exports, whether the host accepts it and why not, its
    /// compile time and whether the cache holds it.
    Inspect {
        /// The module's .wasm component.
        module: PathBuf,
        /// The cache directory (the netconf's `ipam.cacheDir`).
        #[arg(long, default_value = DEFAULT_CACHE_DIR)]
        cache_dir: PathBuf,
        /// Compile without the cache (to measure the compile; nothing is stored).
        #[arg(long)]
        no_cache: bool,
        /// Judge the module by this trust policy too, besides the node's
        /// (/etc/wasm-ipam/trust.json), as the netconf's `ipam.trustPolicy` would.
        #[arg(long)]
        trust_policy: Option<PathBuf>,
        #[command(flatten)]
        compile: CompileArgs,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Compile a module into the cache ahead of time (for node images and installers),
    /// checking it as a CNI call would.
    Precompile {
        /// The module's .wasm component.
        module: PathBuf,
        /// The cache directory (the netconf's `ipam.cacheDir`).
        #[arg(long, default_value = DEFAULT_CACHE_DIR)]
        cache_dir: PathBuf,
        #[command(flatten)]
        compile: CompileArgs,
    },
    /// Fetch a module published in an OCI registry (the Wasm OCI artifact layout) and
    /// its minisign signatures; check digests, sizes and the trust policies; write it
    /// into the module dir as NAME-SHA256.wasm (and MODULE.minisig) and compile it
    /// into the cache. Prints the path and digest to put in a netconf. A refusal
    /// writes nothing. See docs/supply-chain.md.
    Pull {
        #[command(flatten)]
        pull: crate::operator::oci::pull::Pull,
        #[command(flatten)]
        compile: CompileArgs,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Publish a module to an OCI registry as a Wasm OCI artifact, with its minisign
    /// signature attached as an OCI referrer (for vendors). See docs/supply-chain.md.
    Push(crate::operator::oci::push::Push),
    /// Check, back up or restore the store (see SECURITY.md, "When the store is
    /// damaged").
    Store {
        #[command(subcommand)]
        action: StoreAction,
    },
    /// Release the addresses whose sandbox the container runtime no longer has (a DEL
    /// that never came), through each network's module's CNI GC; see docs/install.md,
    /// "Leaked addresses". Exits 0 when it ran, leaks or not; non-zero when it could
    /// not (runtime, store or module error), having released nothing the runtime did
    /// not confirm gone.
    Gc(GcArgs),
    /// Release everything a node removed from the cluster held in a network whose
    /// store nodes share (etcd): its addresses and its blocks, through the network's
    /// module (its `nodes` export). Refused for a node that committed a call within
    /// --window, unless --force; see docs/cluster.md, "A node removed from the
    /// cluster". Exits non-zero when refused or when it fails, having released nothing.
    ReleaseNode {
        /// The node's name, as its calls gave it (`ipam.nodeName`, else its hostname).
        node: String,
        /// The network's configuration (or conflist): its module and its store.
        #[arg(long)]
        netconf: PathBuf,
        #[command(flatten)]
        store: StoreArgs,
        /// Refuse a node that committed a call more recently than this.
        #[arg(long, default_value_t = release_node::DEFAULT_WINDOW.into())]
        window: humantime::Duration,
        /// Release it whenever it last called.
        #[arg(long)]
        force: bool,
        /// Print what would be released; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Keep an address or CIDR out of use in a network, on every node sharing its
    /// store, from the next ADD on (through the module's `reservations` export). An
    /// address of it in use is refused unless --force, which leaves the holder alone
    /// and keeps the address out of use once it is deleted. See docs/cluster.md.
    Reserve {
        /// An address (`10.80.0.10`) or a CIDR (`10.80.3.0/28`).
        cidr: String,
        /// The network's configuration (or conflist): its module and its store.
        #[arg(long)]
        netconf: PathBuf,
        #[command(flatten)]
        store: StoreArgs,
        /// Why: shown by `list --reservations`.
        #[arg(long, default_value = "")]
        note: String,
        /// Reserve it even if some of its addresses are in use.
        #[arg(long)]
        force: bool,
    },
    /// End the reservation of exactly this address or CIDR: its addresses can be
    /// handed out again from the next ADD on.
    Unreserve {
        cidr: String,
        #[arg(long)]
        netconf: PathBuf,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Import host-local's on-disk allocations so a node can switch without leaking
    /// or reusing addresses: the module serving the network (its `migrate` export)
    /// takes them over.
    ImportHostLocal {
        /// host-local's dataDir (holding one directory per network).
        #[arg(long, default_value = "/var/lib/cni/networks")]
        data_dir: PathBuf,
        /// The network(s) to import.
        #[arg(long, required = true)]
        network: Vec<String>,
        /// The module to import into (default: the one the store recorded for the
        /// network).
        #[arg(long)]
        module: Option<PathBuf>,
        /// The network's configuration (or conflist), giving its module and the
        /// configuration the module is told; its name must be the imported network's.
        #[arg(long, conflicts_with = "module")]
        netconf: Option<PathBuf>,
        /// wasm-ipam's store directory (the netconf's `ipam.dataDir`).
        #[arg(long, default_value = DEFAULT_DATA_DIR)]
        store_dir: PathBuf,
        /// The host-wide lock (the netconf's `ipam.lockFile`).
        #[arg(long, default_value = DEFAULT_LOCK_FILE)]
        lock_file: PathBuf,
    },
}

/// `wasm-ipam gc`'s arguments.
#[derive(clap::Args)]
struct GcArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// The container runtime's CRI socket, as crictl takes it (default:
    /// $CONTAINER_RUNTIME_ENDPOINT, else the first of containerd's and CRI-O's
    /// sockets that exists).
    #[arg(long)]
    runtime_endpoint: Option<String>,
    /// For a runtime without CRI (podman): a file of the live container ids, one per
    /// line (`podman ps -aq --no-trunc`), instead of asking a CRI runtime.
    #[arg(long, conflicts_with = "runtime_endpoint")]
    valid_from: Option<PathBuf>,
    /// The network(s) to reconcile, as the store recorded them. Networks are named: a
    /// runtime must never be asked about another runtime's containers.
    #[arg(long, required_unless_present_any = ["netconf", "all_networks"])]
    network: Vec<String>,
    /// The network configuration (or conflist) of a network to reconcile.
    #[arg(long, conflicts_with_all = ["network", "all_networks"])]
    netconf: Option<PathBuf>,
    /// Every network the store holds (only when one runtime serves them all).
    #[arg(long, conflicts_with = "network")]
    all_networks: bool,
    /// An allocation younger than this is never released: a pod being started is
    /// listed by its runtime only once its ADD has returned. `0s` only on a node where
    /// nothing is being started.
    #[arg(long, default_value_t = gc::DEFAULT_GRACE.into())]
    grace: humantime::Duration,
    /// How long the runtime may take to answer.
    #[arg(long, default_value_t = gc::DEFAULT_TIMEOUT.into())]
    timeout: humantime::Duration,
    /// Print the leaks; change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Release even when the runtime lists no sandbox at all.
    #[arg(long)]
    allow_empty: bool,
    /// JSON instead of a table.
    #[arg(long)]
    json: bool,
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

/// What an operator command prints: `text` on stdout, each note on stderr; `failed`
/// makes the exit status 1 (some of what was asked could not be answered).
#[derive(Debug, Default)]
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

impl StoreArgs {
    /// The store and lock given, else the defaults.
    fn place(&self) -> Result<StoreAndLock, CniError> {
        self.place_for(None)
    }

    /// The store and lock given, else `netconf`'s (its `ipam.dataDir` and
    /// `ipam.lockFile`, as a call with it would use), else the defaults.
    fn place_for(&self, netconf: Option<&Path>) -> Result<StoreAndLock, CniError> {
        let ipam = netconf
            .map(crate::operator::ask::read_netconf)
            .transpose()?
            .map(|conf| conf.ipam);
        Ok(StoreAndLock {
            data_dir: self
                .data_dir
                .clone()
                .or_else(|| ipam.as_ref().map(|i| i.data_dir.clone()))
                .unwrap_or_else(|| DEFAULT_DATA_DIR.into()),
            lock_file: self
                .lock_file
                .clone()
                .or_else(|| ipam.as_ref().map(|i| i.lock_file.clone()))
                .unwrap_or_else(|| DEFAULT_LOCK_FILE.into()),
            lock_timeout: Duration::try_from_secs_f64(self.lock_timeout)
                .map_err(|_| CniError::config("--lock-timeout must be a number of seconds"))?,
        })
    }
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

/// A `since` as RFC 3339, or as the number it is when no four-digit year holds it.
/// The network a netconf names, to ask its module on this node's store and lock.
fn asked_by_netconf(
    netconf: &std::path::Path,
    store: &StoreArgs,
) -> Result<NetworkToAsk, CniError> {
    let (network, served_by) = crate::operator::ask::from_netconf(netconf)?;
    NetworkToAsk::new(&network, served_by, &store.place_for(Some(netconf))?)
}

/// `value` as pretty JSON ending in a newline.
fn json_output(value: &impl serde::Serialize, notes: Vec<String>, failed: bool) -> Output {
    let mut text = serde_json::to_string_pretty(value).expect("serialisable");
    text.push('\n');
    Output {
        text,
        notes,
        failed,
    }
}

/// `list --reservations`: a table, or JSON.
fn reservation_list(
    reservations: Vec<inventory::Reservation>,
    json: bool,
    notes: Vec<String>,
) -> Output {
    let failed = !notes.is_empty();
    if json {
        return json_output(&reservations, notes, failed);
    }
    let mut table = Table::new(&[
        ("NETWORK", Align::Left),
        ("RESERVED", Align::Left),
        ("SINCE", Align::Left),
        ("HELD", Align::Right),
        ("NOTE", Align::Left),
    ]);
    for r in reservations {
        table.row(vec![
            printable(&r.network),
            printable(&r.cidr),
            inventory::since(r.since),
            r.held.len().to_string(),
            printable(&r.note),
        ]);
    }
    let text = table.render();
    Output {
        text,
        notes,
        failed,
    }
}

/// `release-node`: the network `netconf` names first (its refusal refuses all), then
/// every other network recorded in the same shared store, each as its own run.
fn release_everywhere(
    netconf: &Path,
    store: &StoreArgs,
    node: &str,
    options: &release_node::Options,
) -> Result<Output, CniError> {
    let first = asked_by_netconf(netconf, store)?;
    let mut notes = Vec::new();
    let mut failed = false;
    let mut networks = Vec::new();
    if first.shared() {
        let place = store.place_for(Some(netconf))?;
        for (name, record) in first.networks_of_store()? {
            if name == first.network {
                continue;
            }
            let asked = record
                .map_err(CniError::config)
                .and_then(|served_by| NetworkToAsk::new(&name, served_by, &place));
            match asked {
                Ok(asked) => networks.push(asked.as_node(first.node_name())),
                Err(e) => {
                    notes.push(format!("network {name}: {}", e.msg));
                    failed = true;
                }
            }
        }
    }
    networks.insert(0, first);
    for asked in &networks {
        release_node::check_quiet(asked, node, options, &mut notes)?;
    }
    let (mut text, mut never, mut known) =
        (String::new(), Vec::new(), std::collections::BTreeSet::new());
    for (n, asked) in networks.iter().enumerate() {
        match release_node::release_node(asked, node, options, &mut notes) {
            Ok(release_node::Released::Report(report)) => {
                text += &release_node::text(&asked.network, node, &report, options.dry_run);
            }
            Ok(release_node::Released::NeverSeen(nodes)) => {
                never.push(asked.network.clone());
                known.extend(nodes);
            }
            Err(e) if n == 0 => return Err(e),
            Err(e) => {
                notes.push(e.msg);
                failed = true;
            }
        }
    }
    if text.is_empty() && !failed {
        return Err(release_node::unknown(&never, &known, node));
    }
    for network in never {
        text +=
            &format!("network {network}, node {node}: never committed here; nothing to release\n");
    }
    Ok(Output {
        text,
        notes,
        failed,
    })
}

/// Runs an operator command; returns what to print.
pub fn run(cli: Cli) -> Result<Output, CniError> {
    match cli.command {
        Operation::List {
            store,
            network,
            netconf,
            node,
            json,
            reservations,
        } => {
            let place = store.place_for(netconf.as_deref())?;
            let networks = inventory::networks(&place, network.as_deref(), netconf.as_deref())?;
            let mut notes = Vec::new();
            if reservations {
                return Ok(reservation_list(
                    inventory::reservations(&place, networks, &mut notes),
                    json,
                    notes,
                ));
            }
            crate::test_hook::test_panic("list");
            let mut allocations = inventory::allocations(&place, networks, &mut notes);
            if let Some(node) = &node {
                allocations.retain(|a| a.attributes.get("node") == Some(node));
            }
            let failed = !notes.iter().all(|n| n.contains("changed since"));
            if json {
                return Ok(json_output(&allocations, notes, failed));
            }
            let text = inventory::allocation_table(&allocations);
            Ok(Output {
                text,
                notes,
                failed,
            })
        }
        Operation::Stats {
            store,
            network,
            netconf,
            log_file,
            last,
            since,
            blocks,
            prometheus,
            json,
            runtime_endpoint,
            valid_from,
            grace,
        } => {
            let place = store.place_for(netconf.as_deref())?;
            let networks = inventory::networks(&place, network.as_deref(), netconf.as_deref())?;
            let mut notes = Vec::new();
            // Only when the runtime is named: stats asks no runtime by default.
            let leaks = match (valid_from.is_some() || runtime_endpoint.is_some())
                .then(|| Runtime::chosen(valid_from.as_deref(), runtime_endpoint.as_deref()))
            {
                Some(runtime) => Some(leak_candidates(&place, networks.clone(), runtime?, *grace)?),
                None => None,
            };
            let mut stats = inventory::network_stats(&place, networks, &mut notes);
            if !blocks {
                stats.iter_mut().for_each(|n| n.blocks.clear());
            }
            if let Some((counts, leak_notes)) = leaks {
                for n in &mut stats {
                    n.leak_candidates = counts.get(&n.network).copied();
                }
                notes.extend(leak_notes);
            }
            let failed = !notes.iter().all(|n| n.contains("changed since"));
            if json {
                return Ok(json_output(&stats, notes, failed));
            }
            let window = metrics::Window {
                last,
                since: since.map(|d| SystemTime::now().checked_sub(d).unwrap_or(UNIX_EPOCH)),
            };
            let timings = match &log_file {
                Some(path) => metrics::recent_call_timings(path, window).map_err(|e| {
                    CniError::new(
                        crate::error::code::IO_FAILURE,
                        format!("cannot read {}", path.display()),
                    )
                    .with_details(e)
                })?,
                None => Vec::new(),
            };
            let text = if prometheus {
                // What the node's calls recorded for STATUS: local, so it shows even
                // when the cluster store cannot be asked.
                let conditions: Vec<_> = crate::health::all(&place.data_dir)
                    .into_iter()
                    .filter(|(n, _)| network.as_deref().is_none_or(|wanted| wanted == n))
                    .collect();
                metrics::prometheus(&stats, &conditions, &timings)
            } else {
                metrics::table(&stats, &timings, log_file.as_deref())
            };
            Ok(Output {
                text,
                notes,
                failed,
            })
        }
        Operation::Install(install) => {
            let (text, notes) = crate::operator::install::install(&install)?;
            Ok(Output {
                failed: !notes.is_empty(),
                text,
                notes,
            })
        }
        Operation::New(args) => {
            let (text, notes) = crate::operator::new::new(&args)?;
            Ok(Output {
                text,
                notes,
                failed: false,
            })
        }
        Operation::Try(args) => {
            let (text, failed) = crate::operator::try_call::try_call(&args)?;
            Ok(Output {
                text,
                notes: Vec::new(),
                failed,
            })
        }
        Operation::Forget {
            network,
            store,
            force,
        } => Ok(crate::operator::forget::forget(&store.place()?, &network, force)?.into()),
        Operation::Inspect {
            module,
            cache_dir,
            no_cache,
            trust_policy,
            compile,
            json,
        } => {
            let cache = if no_cache {
                None
            } else {
                Some(open_cache(
                    &cache_dir,
                    "--cache-dir DIR (one of your own) or --no-cache",
                )?)
            };
            let report = describe::describe(
                &module,
                &Policies::for_call(trust_policy.as_deref())?,
                cache.as_ref(),
                &compile.limits()?,
            )?;
            Ok(Output {
                failed: !report.accepted,
                text: if json {
                    let mut text = serde_json::to_string_pretty(&report).expect("serialisable");
                    text.push('\n');
                    text
                } else {
                    report.text()
                },
                notes: Vec::new(),
            })
        }
        Operation::Precompile {
            module,
            cache_dir,
            compile,
        } => {
            let cache = open_cache(&cache_dir, "--cache-dir DIR (one of your own)")?;
            let limits = compile.limits()?;
            let loaded = ModuleHost::new()?.load(
                &module,
                None,
                &Policies::for_call(None)?,
                Some(&cache),
                &limits,
            )?;
            Ok(format!(
                "{} (sha256 {}, {}) {} {}\n",
                module.display(),
                loaded.sha256,
                loaded.contract.name(),
                if loaded.from_cache {
                    "already in"
                } else {
                    "compiled into"
                },
                cache_dir.display()
            )
            .into())
        }
        Operation::Pull {
            pull,
            compile,
            json,
        } => {
            let pulled = crate::operator::oci::pull::pull(&pull, &compile.limits()?)?;
            Ok(if json {
                serde_json::to_string_pretty(&pulled).expect("serialisable") + "\n"
            } else {
                pulled.text()
            }
            .into())
        }
        Operation::Push(push) => Ok(crate::operator::oci::push::push(&push)?.into()),
        Operation::Store { action } => store_action(action).map(Output::from),
        Operation::Gc(args) => gc(args),
        Operation::ReleaseNode {
            node,
            netconf,
            store,
            window,
            force,
            dry_run,
        } => {
            let options = release_node::Options {
                window: *window,
                force,
                dry_run,
            };
            release_everywhere(&netconf, &store, &node, &options)
        }
        Operation::Reserve {
            cidr,
            netconf,
            store,
            note,
            force,
        } => {
            let net = reserve::cidr(&cidr)?;
            let asked = asked_by_netconf(&netconf, &store)?;
            let network = asked.network.clone();
            let mut notes = Vec::new();
            let made = reserve::reserve(&asked, net, &note, force, &mut notes)?;
            Ok(Output {
                text: reserve::text(&network, reserve::Change::Reserved, &made),
                notes,
                failed: false,
            })
        }
        Operation::Unreserve {
            cidr,
            netconf,
            store,
        } => {
            let net = reserve::cidr(&cidr)?;
            let asked = asked_by_netconf(&netconf, &store)?;
            let network = asked.network.clone();
            let mut notes = Vec::new();
            let ended = reserve::unreserve(&asked, net, &mut notes)?;
            Ok(Output {
                text: reserve::text(&network, reserve::Change::Unreserved, &ended),
                notes,
                failed: false,
            })
        }
        Operation::ImportHostLocal {
            data_dir,
            network,
            module,
            netconf,
            store_dir,
            lock_file,
        } => {
            let place = StoreAndLock {
                data_dir: store_dir,
                lock_file,
                lock_timeout: Duration::from_secs_f64(LOCK_TIMEOUT_SECONDS),
            };
            let named = netconf
                .as_deref()
                .map(crate::operator::ask::from_netconf)
                .transpose()?;
            let recorded = match (&module, &named) {
                (None, None) => place.served()?,
                _ => Vec::new(),
            };
            let mut out = Output::default();
            for name in &network {
                let served_by = match (&module, &named) {
                    (Some(module), _) => ServedBy {
                        // A netconf's module is absolute; --module is resolved here.
                        module: std::path::absolute(module).unwrap_or_else(|_| module.clone()),
                        sha256: String::new(),
                        contract: String::new(),
                        config: None,
                    },
                    (None, Some((of, served_by))) if of == name => served_by.clone(),
                    (None, Some((of, _))) => {
                        return Err(CniError::config(format!(
                            "--netconf configures network {of}, not {name}"
                        )));
                    }
                    (None, None) => recorded
                        .iter()
                        .find(|(n, _)| n == name)
                        .and_then(|(_, r)| r.clone().ok())
                        .ok_or_else(|| {
                            CniError::config(format!(
                                "no module is recorded for network {name}: pass --module or --netconf"
                            ))
                        })?,
                };
                let asked = NetworkToAsk::new(name, served_by, &place)?;
                let r = import::import_host_local(&asked, &data_dir.join(name), &mut out.notes)?;
                out.text += &format!(
                    "{name}: imported {} entr{} into {}; {} already present\n",
                    r.imported,
                    if r.imported == 1 { "y" } else { "ies" },
                    asked.served_by.module.display(),
                    r.already_present
                );
                out.notes
                    .extend(r.notes.iter().map(|n| format!("{name}: {}", printable(n))));
            }
            Ok(out)
        }
    }
}

/// Per network, how many allocations `gc` would release now (its dry run), and what
/// it could not tell.
fn leak_candidates(
    place: &StoreAndLock,
    networks: crate::store::Records,
    runtime: Runtime,
    grace: Duration,
) -> Result<(BTreeMap<String, u64>, Vec<String>), CniError> {
    let (asked, mut notes) = asked_all(place, networks);
    let mut counts: BTreeMap<String, u64> = asked.iter().map(|a| (a.network.clone(), 0)).collect();
    let options = gc::Options {
        runtime,
        grace,
        timeout: gc::DEFAULT_TIMEOUT,
        dry_run: true,
        allow_empty: false,
    };
    let outcome = gc::gc(asked, &options)?;
    for leak in &outcome.leaks {
        *counts.entry(leak.network.clone()).or_default() += 1;
    }
    // A network gc could not reconcile has no count, rather than a wrong zero.
    counts.retain(|network, _| !outcome.unreconciled.contains(network));
    notes.extend(
        outcome
            .notes
            .iter()
            .map(|note| format!("leak candidates: {note}")),
    );
    Ok((counts, notes))
}

fn gc(args: GcArgs) -> Result<Output, CniError> {
    let place = args.store.place_for(args.netconf.as_deref())?;
    let runtime = Runtime::chosen(args.valid_from.as_deref(), args.runtime_endpoint.as_deref())?;
    let networks = match (&args.netconf, args.all_networks) {
        (Some(_), _) => inventory::networks(&place, None, args.netconf.as_deref())?,
        (None, true) => place.served()?,
        (None, false) => {
            let mut all = place.served()?;
            for name in &args.network {
                if !all.iter().any(|(n, _)| n == name) {
                    return Err(inventory::not_recorded(name, &place));
                }
            }
            all.retain(|(n, _)| args.network.contains(n));
            all
        }
    };
    let (asked, mut notes) = asked_all(&place, networks);
    let mut failed = !notes.is_empty();
    let options = gc::Options {
        runtime,
        grace: *args.grace,
        timeout: *args.timeout,
        dry_run: args.dry_run,
        allow_empty: args.allow_empty,
    };
    let outcome = gc::gc(asked, &options)?;
    notes.extend(outcome.notes);
    failed |= !outcome.unreconciled.is_empty();
    let text = if args.json {
        let mut text = serde_json::to_string_pretty(&outcome.leaks).expect("serialisable");
        text.push('\n');
        text
    } else {
        gc::table(&outcome.leaks, args.dry_run)
    };
    Ok(Output {
        text,
        notes,
        failed,
    })
}

fn store_action(action: StoreAction) -> Result<String, CniError> {
    match action {
        StoreAction::Check { store } => {
            let place = store.place()?;
            let (problems, entries) =
                with_store(&place.data_dir, &place.lock_file, store.lock_timeout, |s| {
                    Ok((s.check()?, s.entries(None)?.len()))
                })?;
            if problems.is_empty() {
                return Ok(format!(
                    "store {}: ok, {entries} entries\n",
                    place.data_dir.display()
                ));
            }
            Err(CniError::new(
                crate::error::code::STORE_FAILURE,
                format!(
                    "store {} is damaged: {}",
                    place.data_dir.display(),
                    problems.join("; ")
                ),
            )
            .with_details("see SECURITY.md, \"When the store is damaged\""))
        }
        StoreAction::Backup { store, to } => {
            let place = store.place()?;
            with_store(&place.data_dir, &place.lock_file, store.lock_timeout, |s| {
                s.backup(&to)
            })?;
            Ok(format!(
                "backed up {} to {}\n",
                place.data_dir.display(),
                to.display()
            ))
        }
        StoreAction::Restore { store, from } => {
            let place = store.place()?;
            let kept = under_lock(&place.lock_file, store.lock_timeout, |wait| {
                store::restore(&place.data_dir, &from, wait)
            })?;
            Ok(format!(
                "restored {} from {}; the store it replaced, if any, is kept as {}\n",
                place.data_dir.display(),
                from.display(),
                kept.display()
            ))
        }
    }
}

/// The cache an operator command compiles into: one it cannot use (the default one,
/// root's, for a user who is not root) is an error that names the flag to pass.
fn open_cache(dir: &Path, instead: &str) -> Result<ModuleCache, CniError> {
    ModuleCache::open(dir).map_err(|e| {
        CniError::new(
            crate::error::code::IO_FAILURE,
            format!("{}: pass {instead}", e.0),
        )
    })
}
