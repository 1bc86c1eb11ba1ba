//! `wasm-ipam try MODULE ADD|DEL|CHECK|GC|STATUS`: one CNI call to a module, for its
//! author, without root, a network namespace or a main plugin. It is made exactly as
//! a runtime makes it: this same binary is run with the CNI environment and the
//! netconf on stdin, so the call goes through `call::handle` and the one pipeline
//! (lock, deadline, store, commit) and answers what a runtime would read.
//!
//! The netconf it writes keeps everything under one state directory (lock, store,
//! cache, log), private and removed afterwards, or kept with `--state` so a sequence
//! of calls shares a store, as the calls of one node do.

use crate::cni::CURRENT_VERSION;
use crate::error::{CniError, code};
use serde_json::{Map, Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The CNI commands a runtime sends to an IPAM plugin (VERSION needs no module).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum CniCommand {
    #[value(name = "ADD")]
    Add,
    #[value(name = "DEL")]
    Del,
    #[value(name = "CHECK")]
    Check,
    #[value(name = "GC")]
    Gc,
    #[value(name = "STATUS")]
    Status,
}

impl CniCommand {
    pub fn name(self) -> &'static str {
        match self {
            CniCommand::Add => "ADD",
            CniCommand::Del => "DEL",
            CniCommand::Check => "CHECK",
            CniCommand::Gc => "GC",
            CniCommand::Status => "STATUS",
        }
    }
}

/// Run one CNI call (ADD, DEL, CHECK, GC, STATUS) on a module, as a runtime would run
/// the plugin, on a private lock and store: print its result or error.
#[derive(Debug, Clone, clap::Args)]
pub struct TryCommand {
    /// The module's .wasm component.
    pub module: PathBuf,
    /// The CNI command.
    #[arg(ignore_case = true)]
    pub command: CniCommand,
    /// The container id (`CNI_CONTAINERID`).
    #[arg(long, default_value = "pod1")]
    pub id: String,
    /// The interface (`CNI_IFNAME`).
    #[arg(long, default_value = "eth0")]
    pub ifname: String,
    /// A network configuration to start from (its `ipam` holds the module's keys);
    /// the module and the state paths are set over it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// An `ipam` key, `KEY=JSON` (a value that is not JSON is taken as a string):
    /// `--set start=10.99.0.10 --set prefixLen=24`. Repeatable; set over `--config`.
    #[arg(long = "set", value_name = "KEY=JSON")]
    pub set: Vec<String>,
    /// The pod, `NAMESPACE/NAME`: CNI_ARGS as kubelet's runtime passes them
    /// (`IgnoreUnknown=1;K8S_POD_NAMESPACE=…;K8S_POD_NAME=…;K8S_POD_INFRA_CONTAINER_ID=<--id>`).
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub pod: Option<String>,
    /// A CNI_ARGS pair, `KEY=VALUE` (repeatable; after `--pod`'s): `--arg IP=10.99.0.20`.
    #[arg(long = "arg", value_name = "KEY=VALUE")]
    pub cni_args: Vec<String>,
    /// A pod annotation, `KEY=VALUE` (repeatable), passed as containerd passes them:
    /// in `runtimeConfig["io.kubernetes.cri.pod-annotations"]`.
    #[arg(long = "annotation", value_name = "KEY=VALUE")]
    pub annotations: Vec<String>,
    /// `runtimeConfig` keys, a JSON object merged over the configuration's
    /// (`--runtime-config '{"ips": ["10.99.0.20/24"]}'`).
    #[arg(long, value_name = "JSON")]
    pub runtime_config: Option<String>,
    /// GC: an attachment that is still valid, `ID` or `ID/IFNAME` (repeatable); every
    /// other is released.
    #[arg(long = "valid", value_name = "ID[/IFNAME]")]
    pub valid: Vec<String>,
    /// Keep the lock, store, cache and log in this directory (made if missing, and
    /// kept), so successive calls share a store. Default: a private directory removed
    /// after the call.
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// Print the allocations after the call (`wasm-ipam list` on the state's store).
    #[arg(long)]
    pub list: bool,
}

/// What `try` prints: the plugin's stdout (the CNI result or error JSON, or for a
/// command that answers nothing, a line saying it succeeded), then with `--list`
/// the allocations; and whether the call failed.
impl TryCommand {
    /// Fails (exit 1) when the call did.
    pub fn run(self) -> Result<crate::operator::args::Output, CniError> {
        let (text, failed) = try_call(&self)?;
        Ok(crate::operator::args::Output {
            text,
            notes: Vec::new(),
            failed,
        })
    }
}

pub fn try_call(args: &TryCommand) -> Result<(String, bool), CniError> {
    let private;
    let state = match &args.state {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
            std::path::absolute(dir).map_err(|e| io(dir, e))?
        }
        None => {
            private = tempfile::Builder::new()
                .prefix("wasm-ipam-try-")
                .tempdir()
                .map_err(|e| io(&std::env::temp_dir(), e))?;
            private.path().to_path_buf()
        }
    };
    let netconf = netconf(args, &state)?;
    let cni_args = cni_args(args)?;
    let netconf_path = state.join("net.json");
    std::fs::write(&netconf_path, format!("{netconf:#}\n")).map_err(|e| io(&netconf_path, e))?;

    let (mut text, failed) = invoke(args.command, &args.id, &args.ifname, &cni_args, &netconf)?;
    if text.is_empty() && !failed {
        text = format!("{} ok (the plugin prints nothing)\n", args.command.name());
    }
    if args.list {
        text.push_str(&list_state(&state, false)?);
    }
    Ok((text, failed))
}

/// `wasm-ipam list` (`--json`) of the store `try` keeps in `state`.
pub fn list_state(state: &Path, json: bool) -> Result<String, CniError> {
    let this = this_binary()?;
    let mut list = Command::new(&this);
    list.arg("list")
        .arg("--data-dir")
        .arg(state.join("data"))
        .arg("--lock-file")
        .arg(state.join("ipam.lock"));
    if json {
        list.arg("--json");
    }
    let listed = list
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| io(&this, e))?;
    Ok(String::from_utf8_lossy(&listed.stdout).into_owned())
}

/// This binary, which is the plugin a runtime runs.
pub fn this_binary() -> Result<PathBuf, CniError> {
    std::env::current_exe().map_err(|e| {
        CniError::new(code::IO_FAILURE, "cannot find this binary's path").with_details(e)
    })
}

/// Runs this binary as a runtime runs a CNI plugin: `command` for `id`/`ifname` with
/// `cni_args`, `netconf` on stdin, nothing else of this process's `CNI_*`
/// environment. What it printed on stdout, and whether it failed.
pub fn invoke(
    command: CniCommand,
    id: &str,
    ifname: &str,
    cni_args: &str,
    netconf: &Value,
) -> Result<(String, bool), CniError> {
    let this = this_binary()?;
    let bin_dir = this.parent().unwrap_or(Path::new("/"));
    let mut plugin = Command::new(&this);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("CNI_") {
            plugin.env_remove(name);
        }
    }
    plugin
        .env("CNI_COMMAND", command.name())
        .env("CNI_PATH", bin_dir)
        .env("CNI_ARGS", cni_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if matches!(
        command,
        CniCommand::Add | CniCommand::Del | CniCommand::Check
    ) {
        plugin.env("CNI_CONTAINERID", id).env("CNI_IFNAME", ifname);
    }
    if matches!(command, CniCommand::Add | CniCommand::Check) {
        // Never entered: an IPAM plugin only passes the path on to its module.
        plugin.env("CNI_NETNS", "/var/run/netns/wasm-ipam-try");
    }
    let mut child = plugin.spawn().map_err(|e| io(&this, e))?;
    let stdin = serde_json::to_vec(netconf).expect("JSON serialises");
    if let Some(mut pipe) = child.stdin.take() {
        // A plugin that exits before reading its stdin answers all the same.
        let _ = pipe.write_all(&stdin);
    }
    let out = child.wait_with_output().map_err(|e| io(&this, e))?;
    Ok((
        String::from_utf8_lossy(&out.stdout).into_owned(),
        !out.status.success(),
    ))
}

/// The network configuration a runtime would pass: `--config`'s (or a bare one),
/// `--set`'s keys over its `ipam`, the module, and every path the host keeps under
/// `state`.
fn netconf(args: &TryCommand, state: &Path) -> Result<Value, CniError> {
    let mut conf: Value = match &args.config {
        Some(path) => {
            let text = std::fs::read(path).map_err(|e| io(path, e))?;
            crate::config::decode(&text)?
        }
        None => json!({}),
    };
    let object = conf
        .as_object_mut()
        .ok_or_else(|| CniError::config("--config must hold a JSON object"))?;
    object
        .entry("cniVersion")
        .or_insert_with(|| CURRENT_VERSION.into());
    object.entry("name").or_insert_with(|| "try".into());
    object.entry("type").or_insert_with(|| "wasm-ipam".into());
    if let CniCommand::Gc = args.command {
        let valid: Vec<Value> = args
            .valid
            .iter()
            .map(|a| match a.split_once('/') {
                Some((id, ifname)) => json!({"containerID": id, "ifname": ifname}),
                None => json!({"containerID": a, "ifname": ""}),
            })
            .collect();
        object.insert("cni.dev/valid-attachments".into(), valid.into());
    }
    runtime_config(args, object)?;
    let ipam = object
        .entry("ipam")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or_else(|| CniError::config("the configuration's ipam must be an object"))?;
    for pair in &args.set {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| CniError::config(format!("--set {pair:?}: expected KEY=JSON")))?;
        let value = serde_json::from_str(value).unwrap_or_else(|_| Value::from(value));
        ipam.insert(key.to_string(), value);
    }
    let module = std::path::absolute(&args.module).map_err(|e| io(&args.module, e))?;
    ipam.insert("type".into(), "wasm-ipam".into());
    ipam.insert("module".into(), module.to_string_lossy().into());
    for (key, path) in [
        ("lockFile", state.join("ipam.lock")),
        ("dataDir", state.join("data")),
        ("cacheDir", state.join("cache")),
        ("logFile", state.join("ipam.log")),
    ] {
        ipam.insert(key.into(), path.to_string_lossy().into());
    }
    Ok(conf)
}

/// CNI_ARGS as a runtime sets it: `--pod`'s keys (with `IgnoreUnknown=1`, as
/// containerd and CRI-O send them), then each `--arg`.
fn cni_args(args: &TryCommand) -> Result<String, CniError> {
    let mut pairs: Vec<String> = Vec::new();
    if let Some(pod) = &args.pod {
        let (namespace, name) = pod
            .split_once('/')
            .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
            .ok_or_else(|| CniError::config(format!("--pod {pod:?}: expected NAMESPACE/NAME")))?;
        pairs.extend([
            "IgnoreUnknown=1".to_string(),
            format!("K8S_POD_NAMESPACE={namespace}"),
            format!("K8S_POD_NAME={name}"),
            format!("K8S_POD_INFRA_CONTAINER_ID={}", args.id),
        ]);
    }
    for pair in &args.cni_args {
        let valid = pair
            .split_once('=')
            .is_some_and(|(key, _)| !key.is_empty() && !pair.contains(';'));
        if !valid {
            return Err(CniError::config(format!(
                "--arg {pair:?}: expected KEY=VALUE, without `;`"
            )));
        }
        pairs.push(pair.clone());
    }
    Ok(pairs.join(";"))
}

/// `--runtime-config`'s keys and `--annotation`'s pairs, over the configuration's
/// `runtimeConfig`.
fn runtime_config(args: &TryCommand, object: &mut Map<String, Value>) -> Result<(), CniError> {
    if args.runtime_config.is_none() && args.annotations.is_empty() {
        return Ok(());
    }
    let config = object
        .entry("runtimeConfig")
        .or_insert_with(|| Value::Object(Map::new()))
        .as_object_mut()
        .ok_or_else(|| CniError::config("the configuration's runtimeConfig must be an object"))?;
    if let Some(text) = &args.runtime_config {
        let Ok(Value::Object(keys)) = serde_json::from_str::<Value>(text) else {
            return Err(CniError::config(format!(
                "--runtime-config {text:?}: expected a JSON object"
            )));
        };
        config.extend(keys);
    }
    for pair in &args.annotations {
        let (key, value) = pair
            .split_once('=')
            .filter(|(key, _)| !key.is_empty())
            .ok_or_else(|| {
                CniError::config(format!("--annotation {pair:?}: expected KEY=VALUE"))
            })?;
        let annotations = config
            .entry(ANNOTATIONS)
            .or_insert_with(|| Value::Object(Map::new()))
            .as_object_mut()
            .ok_or_else(|| {
                CniError::config(format!("runtimeConfig[{ANNOTATIONS:?}] must be an object"))
            })?;
        annotations.insert(key.to_string(), value.into());
    }
    Ok(())
}

/// Where containerd passes a pod's annotations to a plugin that asks for them (the
/// capability of that name).
const ANNOTATIONS: &str = "io.kubernetes.cri.pod-annotations";

fn io(path: &Path, e: std::io::Error) -> CniError {
    CniError::new(code::IO_FAILURE, format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(command: CniCommand, set: &[&str]) -> TryCommand {
        TryCommand {
            module: PathBuf::from("/m.wasm"),
            command,
            id: "pod1".into(),
            ifname: "eth0".into(),
            config: None,
            set: set.iter().map(|s| s.to_string()).collect(),
            valid: vec!["kept".into(), "other/net1".into()],
            pod: None,
            cni_args: Vec::new(),
            annotations: Vec::new(),
            runtime_config: None,
            state: None,
            list: false,
        }
    }

    #[test]
    fn the_netconf_keeps_every_path_under_the_state_and_takes_set_keys() {
        let conf = netconf(
            &args(
                CniCommand::Add,
                &["start=10.99.0.10", "prefixLen=24", "x=[1]"],
            ),
            Path::new("/s"),
        )
        .unwrap();
        assert_eq!(conf["cniVersion"], CURRENT_VERSION);
        assert_eq!(conf["ipam"]["module"], "/m.wasm");
        assert_eq!(conf["ipam"]["start"], "10.99.0.10", "not JSON: a string");
        assert_eq!(conf["ipam"]["prefixLen"], 24);
        assert_eq!(conf["ipam"]["x"], json!([1]));
        assert_eq!(conf["ipam"]["dataDir"], "/s/data");
        assert_eq!(conf["ipam"]["lockFile"], "/s/ipam.lock");
        assert!(conf.get("cni.dev/valid-attachments").is_none());
        // The host parses it as a runtime's netconf.
        crate::config::NetConf::parse(conf.to_string().as_bytes()).unwrap();
    }

    #[test]
    fn gc_names_the_valid_attachments() {
        let conf = netconf(&args(CniCommand::Gc, &[]), Path::new("/s")).unwrap();
        assert_eq!(
            conf["cni.dev/valid-attachments"],
            json!([{"containerID": "kept", "ifname": ""}, {"containerID": "other", "ifname": "net1"}])
        );
    }

    #[test]
    fn the_pod_and_args_become_cni_args_as_a_runtime_sends_them() {
        let mut tried = args(CniCommand::Add, &[]);
        assert_eq!(cni_args(&tried).unwrap(), "");
        tried.pod = Some("team-a/web-0".into());
        tried.cni_args = vec!["IP=10.99.0.20".into()];
        assert_eq!(
            cni_args(&tried).unwrap(),
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=pod1;IP=10.99.0.20"
        );
        for bad in ["team-a", "/web", "a/b/c"] {
            tried.pod = Some(bad.into());
            assert_eq!(
                cni_args(&tried).unwrap_err().code,
                code::INVALID_NETWORK_CONFIG,
                "{bad}"
            );
        }
        tried.pod = None;
        tried.cni_args = vec!["A=1;B=2".into()];
        assert!(
            cni_args(&tried).is_err(),
            "a `;` would smuggle a second pair"
        );
    }

    #[test]
    fn annotations_and_runtime_config_land_where_containerd_puts_them() {
        let mut tried = args(CniCommand::Add, &[]);
        tried.runtime_config = Some(r#"{"ips": ["10.99.0.20/24"]}"#.into());
        tried.annotations = vec!["wasm-ipam.io/pool=blue".into()];
        let conf = netconf(&tried, Path::new("/s")).unwrap();
        assert_eq!(
            conf["runtimeConfig"],
            json!({"ips": ["10.99.0.20/24"], ANNOTATIONS: {"wasm-ipam.io/pool": "blue"}})
        );
        crate::config::NetConf::parse(conf.to_string().as_bytes()).unwrap();
        tried.runtime_config = Some("[1]".into());
        assert!(netconf(&tried, Path::new("/s")).is_err());
    }

    #[test]
    fn a_set_without_a_value_is_refused() {
        let err = netconf(&args(CniCommand::Add, &["start"]), Path::new("/s")).unwrap_err();
        assert_eq!(err.code, code::INVALID_NETWORK_CONFIG);
    }
}
