//! Asking a network's module on an operator's behalf (`list`, `stats`, `forget`,
//! imports, `gc`, `release-node`): through the same locked pipeline as a CNI call
//! ([`crate::pipeline`]), with the same log line.
//!
//! Which module serves a network, and with which configuration, is what the store
//! recorded of the last call that committed to it ([`ServedBy`]); an operator can
//! name one instead (`--netconf`). The store and the lock are the operator's
//! (`--data-dir`, `--lock-file`, a netconf's `ipam.store`), and so is the log (a
//! netconf's `ipam.logFile`), whatever the recorded configuration says.

use crate::config::{HostIpamConfig, NetConf, StoreConfig};
use crate::error::{CniError, code};
use crate::lock;
use crate::module::bindings::{inspect, nodes, types};
use crate::module::question::Question;
use crate::pipeline::{self, Label, Network, Session};
use crate::store::{self, IfMissing, Records, ServedBy};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How an operator command reaches a store: which store, through which host-wide
/// lock (and how long it waits for it), as which node.
#[derive(Debug, Clone)]
pub struct StoreAccess {
    pub data_dir: PathBuf,
    pub lock_file: PathBuf,
    pub lock_timeout: Duration,
    /// Which store: a netconf's `ipam.store`, else the embedded one in `data_dir`.
    pub store: StoreConfig,
    /// The node the command runs as (a netconf's `ipam.nodeName`, else the hostname).
    pub node: String,
    /// Where the command's runs log, when a netconf says (its `ipam.logFile`, none
    /// included): this node's log, not the one another node's recorded configuration
    /// names. Without a netconf, a network's recorded one (this node's own store).
    pub log: Option<OperatorLog>,
}

/// A netconf's log settings, for an operator command's runs.
#[derive(Debug, Clone)]
pub struct OperatorLog {
    pub file: Option<PathBuf>,
    pub level: tracing::level_filters::LevelFilter,
    pub rotation: crate::limits::LogRotation,
}

impl OperatorLog {
    /// `ipam`'s `logFile`, `logLevel` and rotation.
    pub fn of(ipam: &HostIpamConfig) -> Self {
        OperatorLog {
            file: ipam.log_file.clone(),
            level: ipam.log_level,
            rotation: ipam.limits.log_rotation,
        }
    }
}

impl StoreAccess {
    /// The embedded store in `data_dir` with this lock, as this node.
    pub fn embedded(data_dir: PathBuf, lock_file: PathBuf, lock_timeout: Duration) -> Self {
        StoreAccess {
            data_dir,
            lock_file,
            lock_timeout,
            store: StoreConfig::Embedded,
            node: crate::config::hostname(),
            log: None,
        }
    }

    /// As a netconf's `ipam` says: its store, its node and its log.
    pub fn adopt(&mut self, ipam: &HostIpamConfig) {
        self.node = ipam.node_name();
        self.log = Some(OperatorLog::of(ipam));
        self.store = ipam.store.clone();
    }

    /// Runs `f` on the store under the host-wide lock (and, for the embedded store,
    /// `store.lock`), for what needs no module: the store's records, its check and
    /// backup, forgetting a network. A store that does not exist is an error naming
    /// it: none of these creates one.
    pub fn with_store<T>(
        &self,
        f: impl FnOnce(&mut dyn store::Store) -> Result<T, CniError>,
    ) -> Result<T, CniError> {
        let _lock = lock::acquire(&self.lock_file, Some(self.lock_timeout))?;
        let mut store = store::select::open(
            &self.store,
            &self.data_dir,
            &self.node,
            self.lock_timeout,
            IfMissing::Refuse,
        )?;
        f(store.as_mut())
    }

    /// Every network the store has a record for, briefly under the lock.
    pub fn served(&self) -> Result<Records, CniError> {
        self.with_store(|s| s.served_by())
    }

    /// [`StoreAccess::served`], with the store's name for a message.
    pub fn records(&self) -> Result<(String, Records), CniError> {
        self.with_store(|s| Ok((s.describe(), s.served_by()?)))
    }
}

/// A network's module and settings, ready to ask: its configuration's (defaults where
/// it has none), with the operator's store and lock.
pub struct NetworkToAsk {
    pub network: String,
    pub served_by: ServedBy,
    settings: Network,
    /// The recorded configuration, parsed, if there is one.
    conf: Option<NetConf>,
}

impl NetworkToAsk {
    pub fn new(network: &str, served_by: ServedBy, access: &StoreAccess) -> Result<Self, CniError> {
        let conf = served_by
            .config
            .as_deref()
            .map(|text| NetConf::parse(text.as_bytes()))
            .transpose()
            .map_err(|e| {
                CniError::new(
                    e.code,
                    format!(
                        "network {network}: its recorded configuration is invalid: {}",
                        e.msg
                    ),
                )
            })?;
        let mut ipam = match &conf {
            Some(conf) => conf.ipam.clone(),
            None => HostIpamConfig::defaults(served_by.module.clone())?,
        };
        // The module is the one recorded (an operator's --module may name another).
        ipam.module = served_by.module.clone();
        ipam.module_sha256 = None;
        // The store is the one the record was read from, whatever the configuration a
        // node recorded says (its paths are that node's), and so are the lock and the
        // log: a run never touches a path another node's record names.
        ipam.store = access.store.clone();
        ipam.data_dir = access.data_dir.clone();
        ipam.lock_file = access.lock_file.clone();
        ipam.lock_timeout = Some(access.lock_timeout);
        if let Some(log) = &access.log {
            ipam.log_file = log.file.clone();
            ipam.log_level = log.level;
            ipam.limits.log_rotation = log.rotation;
        }
        Ok(NetworkToAsk {
            network: network.to_string(),
            settings: Network {
                name: network.to_string(),
                ipam,
                config: served_by.config.clone(),
                store_if_missing: IfMissing::Refuse,
            },
            served_by,
            conf,
        })
    }

    /// Every network recorded in this network's store (on etcd, every network of its
    /// prefix, whichever node's calls recorded it), read without the lock: records
    /// only say which module serves which network.
    pub fn networks_of_store(&self) -> Result<Records, CniError> {
        self.open_unlocked()?.served_by()
    }

    /// The nodes that have committed to the network, in a store nodes share (none
    /// in the embedded store, which keeps no such record), read without the lock.
    pub fn nodes_of_store(&self) -> Result<Vec<String>, CniError> {
        if !self.shared() {
            return Ok(Vec::new());
        }
        let last = store::last_commits(self.open_unlocked()?.as_ref(), &self.network)?;
        Ok(last.into_iter().map(|(node, _)| node).collect())
    }

    /// The network's store, opened for reading what a node's calls record alongside
    /// the module's entries, which need no consistent view with them.
    fn open_unlocked(&self) -> Result<Box<dyn store::Store>, CniError> {
        let ipam = &self.settings.ipam;
        store::select::open(
            &ipam.store,
            &ipam.data_dir,
            &ipam.node_name(),
            ipam.deadline,
            IfMissing::Refuse,
        )
    }

    /// For a command that writes (an import, a reservation): its run creates the
    /// network's store if no call has yet, as a call would.
    pub fn creating_store(mut self) -> Self {
        self.settings.store_if_missing = IfMissing::Create;
        self
    }

    /// NetworkToAsk as node `node`: a network recorded by another node's call carries that
    /// node's `nodeName`, and an operator command runs as the node it runs on.
    pub fn as_node(mut self, node: String) -> Self {
        self.settings.ipam.node_name = Some(node);
        self
    }

    /// Whether the network's store is shared by nodes (etcd).
    pub fn shared(&self) -> bool {
        !matches!(self.settings.ipam.store, StoreConfig::Embedded)
    }

    /// A CNI GC request for the module, as a runtime's GC would make it on this node;
    /// the pipeline stamps it with the grant. Needs the network's configuration: the
    /// module reads its own settings there.
    pub fn gc_request(&self) -> Result<types::Request, CniError> {
        let conf = self.conf.as_ref().ok_or_else(|| {
            CniError::config(format!(
                "network {}: no configuration is recorded for it, so its module cannot be told its settings; pass --netconf",
                self.network
            ))
        })?;
        Ok(types::Request {
            command: types::Command::Gc,
            container_id: String::new(),
            netns: String::new(),
            ifname: String::new(),
            args: Vec::new(),
            network_name: self.network.clone(),
            cni_version: conf.cni_version.clone(),
            config: conf.module_config()?,
            prev_result: None,
            lock_granted_at: pipeline::UNTIL_GRANTED,
            node_name: self.node_name(),
        })
    }

    /// The node the network's calls run as (`ipam.nodeName`, else the hostname).
    pub fn node_name(&self) -> String {
        self.settings.ipam.node_name()
    }

    /// What `inspect` is told of the network (the pipeline stamps `now` with the grant).
    pub fn context(&self) -> inspect::Context {
        inspect::Context {
            network_name: self.network.clone(),
            config: self.served_by.config.clone(),
            node_name: self.node_name(),
            now: pipeline::UNTIL_GRANTED,
        }
    }

    /// What `release-node` tells the module: inspect's facts (the pipeline stamps
    /// `now` with the grant).
    pub fn nodes_context(&self) -> nodes::Context {
        let inspect::Context {
            network_name,
            config,
            node_name,
            now,
        } = self.context();
        nodes::Context {
            network_name,
            config,
            node_name,
            now,
        }
    }

    /// Runs `steps` through the pipeline for operator command `command`. A module
    /// whose digest changed since it served the network is used as it is now (the
    /// next CNI call would run it too), with a warning in `notes`.
    pub fn run<T>(
        &self,
        command: &str,
        notes: &mut Vec<Note>,
        steps: impl Fn(&mut Session) -> Result<T, CniError>,
    ) -> Result<T, CniError> {
        self.run_batch(command, notes, steps)
            .map(|batch| batch.answer)
    }

    /// [`NetworkToAsk::run`], saying whether the run's commit filled the store's
    /// transaction ([`pipeline::RunOutcome::commit_was_full`]): the module may have left work for
    /// another run.
    pub fn run_batch<T>(
        &self,
        command: &str,
        notes: &mut Vec<Note>,
        steps: impl Fn(&mut Session) -> Result<T, CniError>,
    ) -> Result<Batch<T>, CniError> {
        let ran = pipeline::run(&self.settings, &Label::operator(command), &|| false, steps);
        if let Some(now) = &ran.sha256
            && !self.served_by.sha256.is_empty()
            && *now != self.served_by.sha256
        {
            notes.push(Note::Warning(format!(
                "network {}: module {} changed since it last served the network (sha256 {} then, {now} now); asked as it is now",
                self.network,
                self.served_by.module.display(),
                self.served_by.sha256,
            )));
        }
        let commit_was_full = ran.commit_was_full;
        ran.result
            .map(|answer| Batch {
                answer,
                commit_was_full,
            })
            .map_err(|e| in_network(&self.network, e))
    }

    /// Asks the module `work` alone, read-only or committing its writes.
    pub fn ask<Q: Question>(
        &self,
        command: &str,
        work: Q,
        writes: pipeline::Writes,
        notes: &mut Vec<Note>,
    ) -> Result<Q::Answer, CniError> {
        self.run(command, notes, |session| session.ask(work.clone(), writes))
    }
}

/// A line an operator command writes on stderr beside its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Note {
    /// Part of what was asked could not be answered (a network whose module failed,
    /// or could not be asked): the command exits 1.
    Missing(String),
    /// The answer is whole, and this is worth knowing (a module changed since it
    /// served the network).
    Warning(String),
}

impl Note {
    /// Whether part of the answer is missing.
    pub fn fails(&self) -> bool {
        matches!(self, Note::Missing(_))
    }

    /// The same note, its text after `prefix`.
    pub fn prefixed(self, prefix: &str) -> Note {
        match self {
            Note::Missing(text) => Note::Missing(format!("{prefix}{text}")),
            Note::Warning(text) => Note::Warning(format!("{prefix}{text}")),
        }
    }
}

impl std::fmt::Display for Note {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Note::Missing(text) | Note::Warning(text) => f.write_str(text),
        }
    }
}

/// One run's answer, and whether its commit filled the store's transaction.
pub struct Batch<T> {
    pub answer: T,
    pub commit_was_full: bool,
}

/// Each network's [`NetworkToAsk`]; one whose record cannot be read or used is a note
/// naming it instead.
pub fn asked_all(access: &StoreAccess, networks: Records) -> (Vec<NetworkToAsk>, Vec<Note>) {
    let mut asked = Vec::new();
    let mut notes = Vec::new();
    for (network, served_by) in networks {
        match served_by
            .map_err(|e| CniError::new(code::STORE_FAILURE, format!("network {network}: {e}")))
            .and_then(|s| NetworkToAsk::new(&network, s, access))
        {
            Ok(a) => asked.push(a),
            Err(e) => notes.push(Note::Missing(e.to_string())),
        }
    }
    (asked, notes)
}

/// What a netconf file (a network configuration, or a conflist whose plugin runs
/// wasm-ipam) says serves its network.
pub fn from_netconf(path: &Path) -> Result<(String, ServedBy), CniError> {
    let conf = read_netconf(path)?;
    Ok((
        conf.name.clone(),
        ServedBy {
            module: conf.ipam.module.clone(),
            sha256: String::new(),
            contract: String::new(),
            config: Some(conf.network_config()),
        },
    ))
}

/// A netconf or conflist file (its plugin with an `ipam.module`, given the list's
/// name and version), parsed as a call would parse it.
pub fn read_netconf(path: &Path) -> Result<NetConf, CniError> {
    let text = std::fs::read(path).map_err(|e| {
        CniError::new(code::IO_FAILURE, format!("cannot read {}", path.display())).with_details(e)
    })?;
    let json: serde_json::Value = crate::config::decode(&text)?;
    // A conflist: the plugin with an `ipam.module`, given the list's name and version.
    let json = match json.get("plugins").and_then(|p| p.as_array()) {
        Some(plugins) => {
            let mut plugin = plugins
                .iter()
                .find(|p| p["ipam"].get("module").is_some())
                .cloned()
                .ok_or_else(|| {
                    CniError::config(format!(
                        "{}: no plugin in the conflist has an ipam.module",
                        path.display()
                    ))
                })?;
            plugin["name"] = json["name"].clone();
            plugin["cniVersion"] = json["cniVersion"].clone();
            plugin
        }
        None => json,
    };
    NetConf::parse(json.to_string().as_bytes())
}

fn in_network(network: &str, e: CniError) -> CniError {
    if e.msg.starts_with(&format!("network {network}:")) {
        return e;
    }
    CniError {
        msg: format!("network {network}: {}", e.msg),
        ..e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record another node's call left: its module, and its configuration naming
    /// that node's log and an etcd store.
    fn recorded_elsewhere() -> ServedBy {
        ServedBy {
            module: "/opt/cni/wasm/m.wasm".into(),
            sha256: String::new(),
            contract: String::new(),
            config: Some(
                serde_json::json!({
                    "cniVersion": "1.1.0",
                    "name": "pods",
                    "type": "ptp",
                    "ipam": {
                        "type": "wasm-ipam",
                        "module": "/opt/cni/wasm/m.wasm",
                        "logFile": "/elsewhere/log/wasm-ipam.log",
                        "store": {"type": "etcd", "endpoints": ["http://192.0.2.1:2379"]}
                    }
                })
                .to_string(),
            ),
        }
    }

    /// A network asked on an operator's behalf runs on the store its record was read
    /// from, with the operator's lock and its netconf's log: never on a path the
    /// record names (another node's), which the run would otherwise create.
    #[test]
    fn a_recorded_network_runs_on_the_operators_store_lock_and_log() {
        let mut access = StoreAccess::embedded(
            "/var/lib/here".into(),
            "/run/here/ipam.lock".into(),
            Duration::from_secs(3),
        );
        let recorded = recorded_elsewhere();
        let asked = NetworkToAsk::new("pods", recorded.clone(), &access).unwrap();
        let ipam = &asked.settings.ipam;
        assert_eq!(
            ipam.store,
            StoreConfig::Embedded,
            "the store read, not the record's"
        );
        assert_eq!(ipam.data_dir, Path::new("/var/lib/here"));
        assert_eq!(ipam.lock_file, Path::new("/run/here/ipam.lock"));
        // No netconf: the store is this node's own, and so is the recorded log.
        assert_eq!(
            ipam.log_file.as_deref(),
            Some(Path::new("/elsewhere/log/wasm-ipam.log"))
        );

        let mut netconf_ipam = HostIpamConfig::defaults("/opt/cni/wasm/m.wasm".into()).unwrap();
        netconf_ipam.log_file = Some("/var/log/here.log".into());
        access.adopt(&netconf_ipam);
        let asked = NetworkToAsk::new("pods", recorded.clone(), &access).unwrap();
        assert_eq!(
            asked.settings.ipam.log_file.as_deref(),
            Some(Path::new("/var/log/here.log"))
        );
        netconf_ipam.log_file = None;
        access.adopt(&netconf_ipam);
        let asked = NetworkToAsk::new("pods", recorded, &access).unwrap();
        assert_eq!(
            asked.settings.ipam.log_file, None,
            "the netconf logs nowhere"
        );
    }
}
