//! `wasm-ipam install`: what a node image or a DaemonSet's init container runs to put
//! wasm-ipam on a node, so an operator does not repeat by hand the steps that went
//! wrong on real installs (docs/install.md):
//!
//! 1. this binary and its compiler into the CNI bin dir;
//! 2. the module into the module dir;
//! 3. the main plugins the conflist needs (`bridge` or `ptp`, `portmap`, and
//!    `loopback`, which containerd runs for every pod) present in the same bin dir: a
//!    runtime takes one bin dir, so they are linked from where the distribution put them;
//! 4. the module compiled into the cache, so the first pod does not pay for it;
//! 5. a conflist (bridge or ptp + wasm-ipam, the node's subnet or the module's own
//!    keys) named to sort first, since containerd and CRI-O use only the lexically
//!    first conflist in the conf dir;
//! 6. with `--gc-timer`, a systemd timer running `wasm-ipam gc` every few minutes, since
//!    containerd 1.6/1.7 and podman 4 never send CNI GC (docs/install.md);
//! 7. with `--kubeconfig`, for a Kubernetes store, the node's kubeconfig beside the
//!    conflist ([`node_kubeconfig`]).
//!
//! Before any step writes, the conflist is checked as the calls will read it (its
//! paths, the host's keys, an ADD and a DEL through it on a private store), so an
//! install that exits 0 never leaves a conflist every ADD refuses. Every step is
//! idempotent (a file already as wanted is left alone, and each write replaces the
//! old file atomically), says what it did, and `--dry-run` only says.

use crate::config::{DEFAULT_CACHE_DIR, DEFAULT_DATA_DIR, DEFAULT_LOCK_FILE};
use crate::error::{CniError, code};
use crate::limits::Limits;
use crate::module::cache::ModuleCache;
use crate::module::compile::COMPILER;
use crate::module::instance::ModuleHost;
use crate::module::trust::Policies;
use crate::operator::setup::cni_versions::{self, Chosen};
use crate::operator::setup::node_kubeconfig::{self, NodeKubeconfig};
use serde_json::json;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};

/// The plugin that makes the pod's interface and gives it wasm-ipam's addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum MainPlugin {
    /// Pods on one bridge holding the subnet's gateway: one gateway per node, so one
    /// subnet (or one block) per node.
    Bridge,
    /// A veth per pod, routed: the pod's gateway on its own host veth and a host route
    /// to it, so a node may hold several blocks and pools (docs/cluster.md, Routing).
    Ptp,
}

impl MainPlugin {
    pub fn name(self) -> &'static str {
        match self {
            MainPlugin::Bridge => "bridge",
            MainPlugin::Ptp => "ptp",
        }
    }

    /// The plugins the written conflist (and the runtime) needs in the bin dir.
    pub fn needed(self) -> [&'static str; 3] {
        [self.name(), "portmap", "loopback"]
    }
}

/// The `ipam` keys install writes itself: an `--ipam-config` may not set them.
const INSTALL_KEYS: &[(&str, &str)] = &[
    ("type", "(always wasm-ipam)"),
    ("module", "--module"),
    ("moduleSha256", "--module oci://…"),
    ("cacheDir", "--cache-dir"),
    ("dataDir", "--data-dir"),
    ("lockFile", "--lock-file"),
    ("logFile", "--log-file"),
    ("trustPolicy", "--trust-policy"),
];

/// Install the plugin on this node: the module (pulled and checked when it is an
/// `oci://` reference), its compiled form in the cache, and a conflist naming both,
/// each checked before anything is written; `--dry-run` prints the conflist only.
#[derive(Debug, Clone, clap::Args)]
pub struct InstallCommand {
    /// The module's .wasm component, or `oci://REGISTRY/REPO[:TAG][@sha256:DIGEST]`
    /// to pull it (as `wasm-ipam pull` does) into --module-dir.
    #[arg(long)]
    pub module: PathBuf,
    /// A trust policy the module must satisfy besides the node's; written into the
    /// conflist as `ipam.trustPolicy`, so every call checks it too.
    #[arg(long)]
    pub trust_policy: Option<PathBuf>,
    /// Pull over plain HTTP from a registry that is not on this machine.
    #[arg(long)]
    pub insecure: bool,
    /// The node's pod subnet (the conflist's range, as host-local's module reads it).
    #[arg(
        long,
        required_unless_present = "ipam_config",
        conflicts_with = "ipam_config"
    )]
    pub subnet: Option<ipnet::IpNet>,
    /// A JSON object of the module's own `ipam` keys (e.g. cluster-pool's `cidr`,
    /// `blockSize`, `nodeName` and `store`), written into the conflist instead of the
    /// --subnet's range.
    #[arg(long)]
    pub ipam_config: Option<PathBuf>,
    /// For a Kubernetes store (`"store": {"type": "kubernetes"}` in --ipam-config): the
    /// node's kubeconfig, typically the kubelet's own (`system:node:<name>` in
    /// `system:nodes`, which the RBAC of `wasm-ipam kubernetes manifests` binds).
    /// Checked against the apiserver (it must list ipamshards), then copied beside the
    /// conflist (0600, its context only, file paths absolute) as `ipam.store.kubeconfig`.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The main plugin: `ptp` for a node holding several blocks or pools.
    #[arg(long, value_enum, default_value_t = MainPlugin::Bridge)]
    pub main_plugin: MainPlugin,
    /// The network's name.
    #[arg(long, default_value = "wasm-ipam")]
    pub network: String,
    /// The bridge device (with --main-plugin bridge).
    #[arg(long, default_value = "cni0")]
    pub bridge: String,
    /// The runtime's CNI bin dir (containerd's and CRI-O's default).
    #[arg(long, default_value = "/opt/cni/bin")]
    pub bin_dir: PathBuf,
    #[arg(long, default_value = crate::operator::modules::oci::pull::DEFAULT_MODULE_DIR)]
    pub module_dir: PathBuf,
    /// The runtime's CNI conf dir.
    #[arg(long, default_value = "/etc/cni/net.d")]
    pub conf_dir: PathBuf,
    /// The conflist's file name: it must sort before every other in the conf dir.
    #[arg(long, default_value = "00-wasm-ipam.conflist")]
    pub conflist_name: String,
    #[arg(long, default_value = DEFAULT_CACHE_DIR)]
    pub cache_dir: PathBuf,
    /// Where to find the main plugins to link (Debian puts them in /usr/lib/cni).
    #[arg(long = "plugin-dir", default_values = ["/usr/lib/cni", "/usr/libexec/cni"])]
    pub plugin_dirs: Vec<PathBuf>,
    #[arg(long, help = unwritten("ipam.dataDir", DEFAULT_DATA_DIR))]
    pub data_dir: Option<PathBuf>,
    #[arg(long, help = unwritten("ipam.lockFile", DEFAULT_LOCK_FILE))]
    pub lock_file: Option<PathBuf>,
    /// The conflist's `ipam.logFile` (default: none).
    #[arg(long)]
    pub log_file: Option<PathBuf>,
    #[arg(long, help = format!(
        "Also write a systemd service and timer (`wasm-ipam-gc.{{service,timer}}` in \
         --systemd-dir) that run `wasm-ipam gc` for the network every {GC_EVERY}"
    ))]
    pub gc_timer: bool,
    #[arg(long, default_value = "/etc/systemd/system")]
    pub systemd_dir: PathBuf,
    /// The runtime's CRI socket, for the timer's `gc` (default: gc's own choice).
    #[arg(long)]
    pub runtime_endpoint: Option<String>,
    /// Say what would be done, and do nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// A `--help` line for a flag written into the conflist only when given: the default
/// shown is the constant a call uses without it.
fn unwritten(key: &str, default: &str) -> String {
    format!("The conflist's `{key}` [default: not written, so calls use {default}]")
}

/// How often the timer runs `gc`: leaks wait at least the grace period (15 minutes)
/// anyway, and each run holds the lock only briefly.
pub const GC_EVERY: &str = "5min";

/// The systemd service and timer that run `wasm-ipam gc` for the installed network.
pub fn gc_units(install: &InstallCommand) -> (String, String) {
    let mut command = vec![
        install.bin_dir.join("wasm-ipam").display().to_string(),
        "gc".into(),
        "--network".into(),
        install.network.clone(),
    ];
    let mut flag = |name: &str, value: Option<String>| {
        if let Some(value) = value {
            command.extend([format!("--{name}"), value]);
        }
    };
    flag("runtime-endpoint", install.runtime_endpoint.clone());
    flag(
        "data-dir",
        install.data_dir.as_ref().map(|p| p.display().to_string()),
    );
    flag(
        "lock-file",
        install.lock_file.as_ref().map(|p| p.display().to_string()),
    );
    let service = format!(
        "[Unit]\nDescription=Release addresses whose pod sandbox the container runtime lost (wasm-ipam gc; see wasm-ipam gc --help)\n\n[Service]\nType=oneshot\nExecStart={}\n",
        command.join(" ")
    );
    let timer = format!(
        "[Unit]\nDescription=Run wasm-ipam gc every {GC_EVERY}\n\n[Timer]\nOnBootSec={GC_EVERY}\nOnUnitActiveSec={GC_EVERY}\n\n[Install]\nWantedBy=timers.target\n"
    );
    (service, timer)
}

/// One line per step: what was done, or would be.
struct Steps {
    dry_run: bool,
    lines: Vec<String>,
}

impl Steps {
    fn done(&mut self, did: &str, would: &str) {
        self.lines
            .push(if self.dry_run { would } else { did }.to_string());
    }
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> CniError {
    move |e| CniError::new(code::IO_FAILURE, what).with_details(e)
}

/// Writes `bytes` to `path` unless it already holds them: through a temporary file in
/// the same directory renamed over it, so a reader (a runtime exec'ing the binary,
/// reading the conflist) sees the old file or the new one, never half of one.
fn put_file(path: &Path, bytes: &[u8], mode: u32, steps: &mut Steps) -> Result<(), CniError> {
    let shown = path.display();
    if fs::read(path).is_ok_and(|old| old == bytes)
        && fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o7777 == mode)
    {
        steps.done(&format!("unchanged {shown}"), &format!("unchanged {shown}"));
        return Ok(());
    }
    let exists = path.exists();
    if !steps.dry_run {
        let dir = path.parent().unwrap_or(Path::new("/"));
        fs::create_dir_all(dir).map_err(io(format!("cannot create {}", dir.display())))?;
        let temp = dir.join(format!(
            ".{}.wasm-ipam-install",
            path.file_name().unwrap_or_default().to_string_lossy()
        ));
        let _ = fs::remove_file(&temp);
        let mut file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)
            .map_err(io(format!("cannot write {}", temp.display())))?;
        file.write_all(bytes)
            .and_then(|()| file.set_permissions(fs::Permissions::from_mode(mode)))
            .and_then(|()| file.sync_all())
            .map_err(io(format!("cannot write {}", temp.display())))?;
        fs::rename(&temp, path).map_err(io(format!("cannot replace {shown}")))?;
    }
    let verb = if exists { "updated" } else { "installed" };
    steps.done(
        &format!("{verb} {shown}"),
        &format!(
            "would {} {shown}",
            if exists { "update" } else { "install" }
        ),
    );
    Ok(())
}

fn copy(from: &Path, to: &Path, mode: u32, steps: &mut Steps) -> Result<(), CniError> {
    let bytes = fs::read(from).map_err(io(format!("cannot read {}", from.display())))?;
    put_file(to, &bytes, mode, steps)
}

/// Each main plugin: present in the bin dir (an executable file, or a link to one),
/// else linked from the first plugin dir that has it; missing ones are listed.
fn main_plugins(install: &InstallCommand, steps: &mut Steps) -> Vec<String> {
    let mut missing = Vec::new();
    for plugin in install.main_plugin.needed() {
        let target = install.bin_dir.join(plugin);
        if fs::metadata(&target).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0) {
            steps.done(
                &format!("present {}", target.display()),
                &format!("present {}", target.display()),
            );
            continue;
        }
        let Some(source) = install
            .plugin_dirs
            .iter()
            .map(|d| d.join(plugin))
            .find(|p| p.is_file())
        else {
            missing.push(plugin.to_string());
            continue;
        };
        if !steps.dry_run {
            // A dangling link left by an uninstalled package goes first.
            let _ = fs::remove_file(&target);
            if let Err(e) = symlink(&source, &target) {
                missing.push(format!("{plugin} ({e})"));
                continue;
            }
        }
        steps.done(
            &format!("linked {} -> {}", target.display(), source.display()),
            &format!("would link {} -> {}", target.display(), source.display()),
        );
    }
    missing
}

/// The capability through which containerd and CRI-O hand a pod's annotations to the
/// plugin that declares it (in `runtimeConfig`); bridge passes them on to its IPAM.
pub const POD_ANNOTATIONS: &str = "io.kubernetes.cri.pod-annotations";

/// The module's keys: the --subnet's range and a default route (host-local's keys,
/// which the host-local module reads), or the --ipam-config file's object.
pub fn module_keys(
    install: &InstallCommand,
) -> Result<serde_json::Map<String, serde_json::Value>, CniError> {
    if let Some(subnet) = install.subnet {
        let default_route = if subnet.addr().is_ipv4() {
            "0.0.0.0/0"
        } else {
            "::/0"
        };
        let keys = json!({
            "ranges": [[{ "subnet": subnet.to_string() }]],
            "routes": [{ "dst": default_route }],
        });
        return Ok(keys.as_object().expect("an object").clone());
    }
    let path = install
        .ipam_config
        .as_ref()
        .ok_or_else(|| CniError::config("install needs --subnet or --ipam-config"))?;
    let text = fs::read_to_string(path).map_err(|e| {
        CniError::config(format!("cannot read --ipam-config {}", path.display())).with_details(e)
    })?;
    let keys: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        CniError::config(format!(
            "--ipam-config {} is not valid JSON",
            path.display()
        ))
        .with_details(e)
    })?;
    let serde_json::Value::Object(keys) = keys else {
        return Err(CniError::config(format!(
            "--ipam-config {} must hold a JSON object (the module's ipam keys)",
            path.display()
        )));
    };
    if let Some((key, flag)) = INSTALL_KEYS.iter().find(|(key, _)| keys.contains_key(*key)) {
        return Err(CniError::config(format!(
            "--ipam-config {} sets ipam.{key}, which install writes itself: use {flag}",
            path.display()
        )));
    }
    Ok(keys)
}

/// The conflist: the main plugin with wasm-ipam as its IPAM, then portmap; its
/// versions as `versions` chose them, and the main plugin declaring the
/// pod-annotations capability.
pub fn conflist(
    install: &InstallCommand,
    module: &Path,
    sha256: Option<&str>,
    versions: &Chosen,
) -> Result<serde_json::Value, CniError> {
    let mut ipam = json!({
        "type": "wasm-ipam",
        "module": module,
        "cacheDir": install.cache_dir,
        // A call waits at most lockTimeoutSeconds for the lock, then runs at most
        // deadlineSeconds from the grant: 105 s in all, inside kubelet's 2-minute
        // runtime request timeout, so a call that cannot finish answers "try again
        // later" while kubelet still listens instead of being cancelled. The lock is
        // the node's: a call of an etcd network that cannot reach etcd holds it
        // about its store's timeoutSeconds (5 s by default) plus its start, so 60 s
        // lets this network's calls through behind about ten of those.
        "deadlineSeconds": 45,
        "lockTimeoutSeconds": 60,
    });
    for (key, value) in module_keys(install)? {
        ipam[key] = value;
    }
    for (key, value) in [
        ("dataDir", &install.data_dir),
        ("lockFile", &install.lock_file),
        ("logFile", &install.log_file),
        ("trustPolicy", &install.trust_policy),
    ] {
        if let Some(value) = value {
            ipam[key] = json!(value);
        }
    }
    node_kubeconfig::point_store_at(
        &mut ipam,
        install.kubeconfig.as_deref(),
        &keys_flag(install),
        &kubeconfig_copy(install),
    )?;
    // A pulled module is pinned to the digest it was pulled at.
    if let Some(sha256) = sha256 {
        ipam["moduleSha256"] = json!(sha256);
    }
    let main = match install.main_plugin {
        MainPlugin::Bridge => json!({
            "type": "bridge",
            "bridge": install.bridge,
            "isGateway": true,
            "ipMasq": true,
            "capabilities": { POD_ANNOTATIONS: true },
            "ipam": ipam,
        }),
        MainPlugin::Ptp => json!({
            "type": "ptp",
            "ipMasq": true,
            "capabilities": { POD_ANNOTATIONS: true },
            "ipam": ipam,
        }),
    };
    Ok(json!({
        "cniVersion": versions.cni_version,
        "cniVersions": versions.cni_versions,
        "name": install.network,
        "plugins": [
            main,
            { "type": "portmap", "capabilities": { "portMappings": true } },
        ]
    }))
}

/// The chain's versions, each plugin asked where the runtime will find it (the bin
/// dir, else the plugin dir it is linked from); one not found is left out, said.
fn chain_versions(install: &InstallCommand, steps: &mut Steps) -> Result<Chosen, CniError> {
    let mut chain = Vec::new();
    let mut unasked = Vec::new();
    // The chain's plugins bound the conflist's versions (wasm-ipam's own are known).
    for plugin in [install.main_plugin.name(), "portmap"] {
        let found = std::iter::once(install.bin_dir.join(plugin))
            .chain(install.plugin_dirs.iter().map(|d| d.join(plugin)))
            .find(|p| p.is_file());
        match found.map(|p| cni_versions::ask(&p)) {
            Some(Ok(versions)) => chain.push((plugin.to_string(), versions)),
            Some(Err(why)) => unasked.push(why),
            None => unasked.push(format!("{plugin} not found")),
        }
    }
    let chosen = cni_versions::choose(&chain)?;
    let mut line = chosen.line();
    if !unasked.is_empty() {
        line += &format!("; not asked: {}", unasked.join("; "));
    }
    steps.done(&line, &line);
    Ok(chosen)
}

/// Conflists in the conf dir that sort before ours: a runtime would use one of them.
fn sorting_first(install: &InstallCommand) -> Vec<String> {
    let Ok(dir) = fs::read_dir(&install.conf_dir) else {
        return Vec::new();
    };
    let mut before: Vec<String> = dir
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| {
            [".conf", ".conflist", ".json"]
                .iter()
                .any(|ext| name.ends_with(ext))
                && *name < install.conflist_name
        })
        .collect();
    before.sort();
    before
}

/// Runs the install; returns what it did, one line per step, and what still keeps
/// the node from working (a main plugin missing, a conflist sorting before ours),
/// found after every step it could do was done.
impl InstallCommand {
    /// Fails (exit 1) when a step could not be done.
    pub fn run(self) -> Result<crate::operator::args::Output, CniError> {
        let (text, notes) = install(&self)?;
        Ok(crate::operator::args::Output {
            failed: !notes.is_empty(),
            text,
            notes,
        })
    }
}

pub fn install(install: &InstallCommand) -> Result<(String, Vec<String>), CniError> {
    // What the conflist will carry is checked before anything is written: an install
    // that exits 0 must leave a conflist every ADD accepts.
    check_paths(install)?;
    let mut steps = Steps {
        dry_run: install.dry_run,
        lines: Vec::new(),
    };
    let versions = chain_versions(install, &mut steps)?;
    let mut kubeconfig = None;
    let pulled = install
        .module
        .to_str()
        .is_some_and(|m| m.starts_with("oci://"));
    if !pulled {
        let file_name = install
            .module
            .file_name()
            .ok_or_else(|| CniError::config("--module must name a file"))?;
        let planned = conflist(
            install,
            &install.module_dir.join(file_name),
            None,
            &versions,
        )?;
        let netconf = check_host_keys(install, &planned)?;
        kubeconfig = check_kubeconfig(install, &netconf, &mut steps)?;
        try_conflist(install, &install.module, &planned, &mut steps)?;
    }
    let (module, pinned) = install_module(install, &mut steps)?;
    let written = conflist(install, &module, pinned.as_deref(), &versions)?;
    if pulled {
        // A pulled module exists only once pulled: it is the one thing written
        // before the check.
        let netconf = check_host_keys(install, &written)?;
        kubeconfig = check_kubeconfig(install, &netconf, &mut steps)?;
        if !install.dry_run {
            try_conflist(install, &module, &written, &mut steps)?;
        }
    }
    install_binaries(install, &mut steps)?;
    let missing = main_plugins(install, &mut steps);
    precompile(install, &module, pinned.as_deref(), &mut steps)?;
    // Before the conflist that names it.
    if let Some(kubeconfig) = kubeconfig {
        put_file(
            &kubeconfig_copy(install),
            &kubeconfig.text,
            0o600,
            &mut steps,
        )?;
    }
    let text = serde_json::to_string_pretty(&written).expect("serialisable") + "\n";
    put_file(
        &install.conf_dir.join(&install.conflist_name),
        text.as_bytes(),
        0o644,
        &mut steps,
    )?;
    if install.gc_timer {
        install_gc_timer(install, &mut steps)?;
    }
    let out = steps.lines.join("\n") + "\n";
    Ok((out, problems(install, &missing)))
}

/// Each path install writes into the conflist, with the flag that gave it, must be
/// one every call accepts (absolute: [`crate::config::absolute_path`]), since the
/// runtime reads the conflist in a working directory of its own. `kubectl config
/// set-cluster --certificate-authority` makes such a path absolute against its own
/// working directory; install refuses it instead, naming the absolute path it would
/// mean: it often runs in a DaemonSet's init container, whose working directory and
/// mounts are the container's, not the node's, so a path made absolute there could
/// name a directory the node does not have, and the refusal costs one retyped flag.
fn check_paths(install: &InstallCommand) -> Result<(), CniError> {
    // The conflist names the module in --module-dir.
    let module = install
        .module_dir
        .join(install.module.file_name().unwrap_or_default());
    let mut written = vec![
        ("--module-dir", "module", &install.module_dir, module),
        (
            "--cache-dir",
            "cacheDir",
            &install.cache_dir,
            install.cache_dir.clone(),
        ),
    ];
    for (flag, key, given) in [
        ("--data-dir", "dataDir", &install.data_dir),
        ("--lock-file", "lockFile", &install.lock_file),
        ("--log-file", "logFile", &install.log_file),
        ("--trust-policy", "trustPolicy", &install.trust_policy),
    ] {
        if let Some(given) = given {
            written.push((flag, key, given, given.clone()));
        }
    }
    if install.kubeconfig.is_some() {
        written.push((
            "--conf-dir",
            "store.kubeconfig",
            &install.conf_dir,
            kubeconfig_copy(install),
        ));
    }
    for (flag, key, given, path) in written {
        if let Err(e) = crate::config::absolute_path(key, &path) {
            let meant = std::path::absolute(given).unwrap_or_else(|_| given.clone());
            return Err(CniError::config(format!(
                "{flag} {}: every call would refuse the conflist: {}; a runtime runs the plugin in a working directory of its own (containerd's is /): did you mean {flag} {}?",
                given.display(),
                e.msg,
                meant.display()
            )));
        }
    }
    Ok(())
}

/// What a runtime hands the IPAM plugin for `conflist`: its main plugin's object with
/// the list's name and version (libcni adds them, and the main plugin passes its
/// stdin on to its IPAM unchanged).
pub fn runtime_view(conflist: &serde_json::Value) -> serde_json::Value {
    let mut plugin = conflist["plugins"][0].clone();
    plugin["name"] = conflist["name"].clone();
    plugin["cniVersion"] = conflist["cniVersion"].clone();
    plugin
}

/// Where the module's keys came from, as the operator gave them.
fn keys_flag(install: &InstallCommand) -> String {
    match (&install.subnet, &install.ipam_config) {
        (Some(subnet), _) => format!("--subnet {subnet}"),
        (None, Some(path)) => format!("--ipam-config {}", path.display()),
        (None, None) => "--subnet or --ipam-config".into(),
    }
}

/// The host's keys of `conflist`, read as every call reads them
/// ([`crate::config::NetConf`]).
fn check_host_keys(
    install: &InstallCommand,
    conflist: &serde_json::Value,
) -> Result<crate::config::NetConf, CniError> {
    let view = runtime_view(conflist);
    crate::config::NetConf::from_json(view.clone(), view.to_string().as_bytes()).map_err(|e| {
        CniError::config(format!(
            "{}: every call would refuse the conflist: {}",
            keys_flag(install),
            e.msg
        ))
    })
}

/// Where `--kubeconfig`'s copy goes: beside the conflist.
fn kubeconfig_copy(install: &InstallCommand) -> PathBuf {
    node_kubeconfig::copy_path(&install.conf_dir, &install.conflist_name)
}

/// With `--kubeconfig`: the kubeconfig read, its files checked and the apiserver
/// asked with it as the store `netconf` names (its context, its timeout), before
/// anything is written; the copy to write.
fn check_kubeconfig(
    install: &InstallCommand,
    netconf: &crate::config::NetConf,
    steps: &mut Steps,
) -> Result<Option<NodeKubeconfig>, CniError> {
    let Some(given) = &install.kubeconfig else {
        return Ok(None);
    };
    // conflist() refuses --kubeconfig for any other store.
    let crate::config::StoreConfig::Kubernetes(store) = &netconf.ipam.store else {
        return Err(CniError::config(format!(
            "--kubeconfig {}: the network's store is not the Kubernetes API",
            given.display()
        )));
    };
    let kubeconfig = node_kubeconfig::read(given, store.context.as_deref())?;
    let line = node_kubeconfig::check_apiserver(&kubeconfig, store, &netconf.ipam.node_name())?;
    steps.done(&line, &line);
    Ok(Some(kubeconfig))
}

/// An ADD then a DEL through `conflist`, made as a runtime makes them (this binary run
/// as the plugin, as `wasm-ipam try` runs it) on `module`, with a lock, store and
/// cache private to the check: the module reads its own keys only when called, so
/// this is the one way to know that its ADDs will not all be refused. Its store is the
/// private one whatever `ipam.store` says: the check writes nothing a node shares, and
/// an install does not wait for a cluster's etcd (the store's keys were read with the
/// host's).
fn try_conflist(
    install: &InstallCommand,
    module: &Path,
    conflist: &serde_json::Value,
    steps: &mut Steps,
) -> Result<(), CniError> {
    use crate::operator::modules::try_call::{CniCommand, TryCommand, try_call};
    let private = tempfile::Builder::new()
        .prefix("wasm-ipam-install-")
        .tempdir()
        .map_err(io("cannot make a private directory".into()))?;
    let mut view = runtime_view(conflist);
    if let Some(ipam) = view["ipam"].as_object_mut() {
        ipam.remove("store");
    }
    let config = private.path().join("net.json");
    fs::write(&config, view.to_string())
        .map_err(io(format!("cannot write {}", config.display())))?;
    for command in [CniCommand::Add, CniCommand::Del] {
        let call = TryCommand {
            module: module.to_path_buf(),
            command,
            id: "wasm-ipam-install-check".into(),
            ifname: "eth0".into(),
            config: Some(config.clone()),
            set: Vec::new(),
            valid: Vec::new(),
            pod: None,
            cni_args: Vec::new(),
            annotations: Vec::new(),
            runtime_config: None,
            state: Some(private.path().join("state")),
            list: false,
        };
        let (answer, failed) = try_call(&call)?;
        if failed {
            let answer: serde_json::Value = serde_json::from_str(&answer).unwrap_or_default();
            let code = answer["code"].as_u64().unwrap_or_default();
            let msg = answer["msg"].as_str().unwrap_or("no error JSON");
            // The host's keys were read already: a configuration error now is the
            // module's, about its keys.
            let blamed = match code == u64::from(code::INVALID_NETWORK_CONFIG) {
                true => keys_flag(install),
                false => format!("--module {}", install.module.display()),
            };
            return Err(CniError::config(format!(
                "{blamed}: every {} through the conflist would fail: the module answers code {code}: {msg}",
                call.command.name()
            )));
        }
    }
    let line = format!(
        "checked an ADD and a DEL through the conflist ({}, on a private store)",
        module.display()
    );
    steps.done(&line, &line);
    Ok(())
}

/// This binary and its compiler (from beside it) into the bin dir.
fn install_binaries(install: &InstallCommand, steps: &mut Steps) -> Result<(), CniError> {
    let exe = std::env::current_exe().map_err(io("cannot find this binary".into()))?;
    copy(&exe, &install.bin_dir.join("wasm-ipam"), 0o755, steps)?;
    let compiler = exe.with_file_name(COMPILER);
    if compiler.is_file() {
        copy(&compiler, &install.bin_dir.join(COMPILER), 0o755, steps)?;
    } else {
        steps.done(
            &format!("no {COMPILER} beside {}: a cache miss on this node will fail with code 5 (precompiled below)", exe.display()),
            &format!("no {COMPILER} beside {}", exe.display()),
        );
    }
    Ok(())
}

/// The module into the module dir, copied or pulled: its path there, and the digest
/// to pin when it was pulled.
fn install_module(
    install: &InstallCommand,
    steps: &mut Steps,
) -> Result<(PathBuf, Option<String>), CniError> {
    match install.module.to_str().filter(|m| m.starts_with("oci://")) {
        Some(reference) if install.dry_run => {
            crate::operator::modules::oci::reference(reference)?;
            steps.done(
                "",
                &format!(
                    "would pull {reference} into {}",
                    install.module_dir.display()
                ),
            );
            Ok((install.module_dir.join("(pulled).wasm"), None))
        }
        Some(reference) => {
            let pull = crate::operator::modules::oci::pull::Pull {
                reference: reference.to_string(),
                module_dir: install.module_dir.clone(),
                cache_dir: install.cache_dir.clone(),
                trust_policy: install.trust_policy.clone(),
                insecure: install.insecure,
            };
            let pulled = crate::operator::modules::oci::pull::pull(&pull, &Limits::default())?;
            steps.done(
                &format!(
                    "pulled {} into {} ({})",
                    pulled.reference,
                    pulled.module.display(),
                    pulled.trust
                ),
                "",
            );
            Ok((pulled.module, Some(pulled.module_sha256)))
        }
        None => {
            let file_name = install
                .module
                .file_name()
                .ok_or_else(|| CniError::config("--module must name a file"))?;
            let module = install.module_dir.join(file_name);
            copy(&install.module, &module, 0o644, steps)?;
            Ok((module, None))
        }
    }
}

/// The module compiled into the cache, so the first pod does not pay for it: from the
/// installed copy when there is one, so the cache records the path the conflist names.
fn precompile(
    install: &InstallCommand,
    module: &Path,
    pinned: Option<&str>,
    steps: &mut Steps,
) -> Result<(), CniError> {
    let pulled = install
        .module
        .to_str()
        .is_some_and(|m| m.starts_with("oci://"));
    let source = match install.dry_run && !pulled {
        true => install.module.as_path(),
        false => module,
    };
    if install.dry_run {
        steps.done(
            "",
            &format!(
                "would compile {} into {}",
                source.display(),
                install.cache_dir.display()
            ),
        );
        return Ok(());
    }
    let cache =
        ModuleCache::open(&install.cache_dir).map_err(|e| CniError::new(code::IO_FAILURE, e.0))?;
    let loaded = ModuleHost::new()?.load(
        source,
        pinned,
        &Policies::for_call(install.trust_policy.as_deref())?,
        Some(&cache),
        &Limits::default(),
    )?;
    // A pulled module was asked already, by `pull`, before it was written.
    if !pulled {
        crate::operator::modules::answers::refuse_unless_it_answers(
            &loaded,
            Some(&cache),
            &Limits::default(),
        )?;
    }
    let done = match loaded.from_cache {
        true => "already compiled",
        false => "compiled",
    };
    steps.done(
        &format!(
            "{done} {} (sha256 {}, {}) in {}",
            source.display(),
            loaded.sha256,
            loaded.contract.name(),
            install.cache_dir.display()
        ),
        "",
    );
    Ok(())
}

/// The systemd service and timer that run `wasm-ipam gc` every [`GC_EVERY`].
fn install_gc_timer(install: &InstallCommand, steps: &mut Steps) -> Result<(), CniError> {
    let (service, timer) = gc_units(install);
    for (name, text) in [
        ("wasm-ipam-gc.service", service),
        ("wasm-ipam-gc.timer", timer),
    ] {
        put_file(
            &install.systemd_dir.join(name),
            text.as_bytes(),
            0o644,
            steps,
        )?;
    }
    steps.done(
        "start the timer with: systemctl daemon-reload && systemctl enable --now wasm-ipam-gc.timer",
        "would need: systemctl daemon-reload && systemctl enable --now wasm-ipam-gc.timer",
    );
    Ok(())
}

/// What keeps the node from working as installed: main plugins found nowhere, and
/// conflists that sort before ours.
fn problems(install: &InstallCommand, missing: &[String]) -> Vec<String> {
    let mut problems = Vec::new();
    if !missing.is_empty() {
        problems.push(format!(
            "main plugins missing from {} and from {}: {} (install the distribution's CNI plugins, e.g. Debian's containernetworking-plugins)",
            install.bin_dir.display(),
            install
                .plugin_dirs
                .iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
            missing.join(", ")
        ));
    }
    let before = sorting_first(install);
    if !before.is_empty() {
        problems.push(format!(
            "{} sort(s) before {} in {}: containerd and CRI-O use only the first, so rename or remove them",
            before.join(", "),
            install.conflist_name,
            install.conf_dir.display()
        ));
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::cli::{Cli, Operation};
    use clap::Parser;

    fn install(line: &str) -> InstallCommand {
        match Cli::try_parse_from(line.split_whitespace()).map(|cli| cli.command) {
            Ok(Operation::Install(install)) => *install,
            Ok(_) => panic!("not install"),
            Err(e) => panic!("{line}: {e}"),
        }
    }

    fn versions() -> Chosen {
        cni_versions::choose(&[
            ("ptp".into(), vec!["1.0.0".into(), "1.1.0".into()]),
            ("portmap".into(), vec!["1.0.0".into(), "1.1.0".into()]),
        ])
        .unwrap()
    }

    #[test]
    fn a_cluster_network_under_ptp_carries_the_modules_keys_and_installs_own() {
        let dir = tempfile::tempdir().unwrap();
        let keys = dir.path().join("cluster.json");
        fs::write(
            &keys,
            r#"{"cidr": "10.244.0.0/16", "blockSize": 28, "store": {"type": "etcd", "endpoints": ["http://10.0.0.1:2379"]}}"#,
        )
        .unwrap();
        let install = install(&format!(
            "wasm-ipam install --module m.wasm --main-plugin ptp --ipam-config {}",
            keys.display()
        ));
        assert_eq!(install.main_plugin.needed(), ["ptp", "portmap", "loopback"]);
        let conflist = conflist(
            &install,
            Path::new("/opt/cni/wasm/m.wasm"),
            None,
            &versions(),
        )
        .unwrap();
        let main = &conflist["plugins"][0];
        assert_eq!(main["type"], "ptp");
        assert_eq!(main["capabilities"][POD_ANNOTATIONS], true);
        assert!(main.get("bridge").is_none(), "{main}");
        let ipam = &main["ipam"];
        assert_eq!(ipam["type"], "wasm-ipam");
        assert_eq!(ipam["module"], "/opt/cni/wasm/m.wasm");
        assert_eq!(ipam["blockSize"], 28);
        assert_eq!(ipam["store"]["type"], "etcd");
        assert!(ipam.get("ranges").is_none(), "no --subnet range: {ipam}");
    }

    #[test]
    fn an_ipam_config_that_sets_what_install_writes_or_is_no_object_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        for (text, says) in [
            (
                r#"{"cidr": "10.0.0.0/16", "dataDir": "/x"}"#,
                "sets ipam.dataDir, which install writes itself: use --data-dir",
            ),
            (r#"{"module": "/other.wasm"}"#, "use --module"),
            ("[1, 2]", "must hold a JSON object"),
            ("{", "is not valid JSON"),
        ] {
            let keys = dir.path().join("keys.json");
            fs::write(&keys, text).unwrap();
            let install = install(&format!(
                "wasm-ipam install --module m.wasm --ipam-config {}",
                keys.display()
            ));
            let err = module_keys(&install).expect_err(text);
            assert_eq!(err.code, code::INVALID_NETWORK_CONFIG, "{text}");
            assert!(err.msg.contains(says), "{text}: {}", err.msg);
        }
        let missing = install("wasm-ipam install --module m.wasm --ipam-config /nonexistent.json");
        assert!(
            module_keys(&missing)
                .unwrap_err()
                .msg
                .contains("cannot read --ipam-config")
        );
    }

    #[test]
    fn subnet_and_ipam_config_exclude_each_other_and_one_is_needed() {
        for line in [
            "wasm-ipam install --module m.wasm",
            "wasm-ipam install --module m.wasm --subnet 10.0.0.0/24 --ipam-config k.json",
        ] {
            assert!(
                Cli::try_parse_from(line.split_whitespace()).is_err(),
                "{line}"
            );
        }
    }
}
