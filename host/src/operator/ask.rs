//! Asking a network's module on an operator's behalf (`list`, `stats`, imports): the
//! same order as a CNI call. The module is loaded (and compiled, if need be) before
//! the lock; under the lock the deadline starts at the grant, the module is
//! instantiated and asked, and only an import commits, all or nothing.
//!
//! Which module serves a network, and with which configuration, is what the store
//! recorded of the last call that committed to it ([`ServedBy`]); an operator can
//! name one instead (`--netconf`).

use crate::call::deadline::Deadline;
use crate::config::{DEFAULT_CACHE_DIR, DEFAULT_DEADLINE, NetConf, StoreConfig};
use crate::error::{CniError, code};
use crate::limits::Limits;
use crate::lock;
use crate::module::bindings::{inspect, types};
use crate::module::cache::ModuleCache;
use crate::module::engine::{Answer, LoadedModule, ModuleHost, Work};
use crate::module::host::{GuestLog, GuestState, GuestStore};
use crate::store::{self, Quota, Records, ServedBy};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where the store and the host-wide lock are, and how long to wait for the lock.
#[derive(Debug, Clone)]
pub struct Place {
    pub data_dir: PathBuf,
    pub lock_file: PathBuf,
    pub lock_timeout: Duration,
}

impl Place {
    /// Runs `f` on the store under the host-wide lock (and `store.lock`).
    pub fn with_store<T>(
        &self,
        f: impl FnOnce(&mut dyn store::Store) -> Result<T, CniError>,
    ) -> Result<T, CniError> {
        let _lock = lock::acquire(&self.lock_file, Some(self.lock_timeout))?;
        f(store::open(&self.data_dir, self.lock_timeout)?.as_mut())
    }

    /// Every network the store has a record for, briefly under the lock.
    pub fn served(&self) -> Result<Records, CniError> {
        self.with_store(|s| s.served_by())
    }
}

/// A network's module, loaded and ready to ask, with the settings its configuration
/// gives (defaults where it has none).
pub struct Asked {
    pub network: String,
    pub served_by: ServedBy,
    host: ModuleHost,
    module: LoadedModule,
    limits: Limits,
    budget: Duration,
    node_name: String,
    /// Where the network's entries are, as its configuration says.
    store: StoreConfig,
}

impl Asked {
    /// Loads the module `served_by` names, before any lock. A module whose digest
    /// changed since it served the network is used as it is now (the next CNI call
    /// would run it too), with a warning in `notes`.
    pub fn load(
        network: &str,
        served_by: ServedBy,
        notes: &mut Vec<String>,
    ) -> Result<Self, CniError> {
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
        let ipam = conf.as_ref().map(|c| &c.ipam);
        let limits = ipam.map(|i| i.limits).unwrap_or_default();
        let cache_dir = ipam.map_or(PathBuf::from(DEFAULT_CACHE_DIR), |i| i.cache_dir.clone());
        let host = ModuleHost::new()?;
        let cache = ModuleCache::open(&cache_dir).ok();
        let module = host
            .load(&served_by.module, None, cache.as_ref(), &limits)
            .map_err(|e| in_network(network, e))?;
        if module.sha256 != served_by.sha256 && !served_by.sha256.is_empty() {
            notes.push(format!(
                "network {network}: module {} changed since it last served the network (sha256 {} then, {} now); asked as it is now",
                served_by.module.display(),
                served_by.sha256,
                module.sha256
            ));
        }
        Ok(Asked {
            network: network.to_string(),
            budget: ipam.map_or(DEFAULT_DEADLINE, |i| i.deadline),
            node_name: ipam.map_or_else(crate::config::hostname, |i| i.node_name()),
            store: ipam.map_or(StoreConfig::Embedded, |i| i.store.clone()),
            served_by,
            host,
            module,
            limits,
        })
    }

    /// Fails now, before any lock, if the module lacks the `inspect` export.
    pub fn require_inspect(&self) -> Result<(), CniError> {
        if self.module.exports_inspect() {
            return Ok(());
        }
        Err(CniError::new(
            code::MODULE_REJECTED,
            format!(
                "network {}: module {} does not export inspect (cni:ipam/inspect@0.2.0; it targets {}), so the host cannot list its allocations or pools",
                self.network,
                self.served_by.module.display(),
                self.module.contract.name()
            ),
        )
        .with_details("rebuild the module against cni:ipam@0.2.0 (docs/wit-versions.md)"))
    }

    /// What `inspect` is told of the network.
    pub fn context(&self) -> inspect::Context {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        inspect::Context {
            network_name: self.network.clone(),
            config: self.served_by.config.clone(),
            node_name: self.node_name.clone(),
            now: types::WallInstant {
                seconds: now.as_secs(),
                nanoseconds: now.subsec_nanos(),
            },
        }
    }

    /// Asks the module `work` under the lock, with the network's budget from the
    /// grant. Read-only unless `commit`: then the module's writes are committed (and
    /// the module recorded as serving the network) if it answered ok.
    pub fn ask(&self, place: &Place, work: Work, commit: bool) -> Result<Answer, CniError> {
        let lock = lock::acquire(&place.lock_file, Some(place.lock_timeout))?;
        let deadline = Deadline::from_grant(&lock, self.budget);
        let store = store::open_with(
            &self.store,
            &place.data_dir,
            &self.node_name,
            deadline.remaining(),
        )?;
        let mut guest_store = GuestStore::new(
            store,
            self.network.clone(),
            deadline,
            self.limits.host_memory,
        );
        if !commit {
            guest_store = guest_store.read_only();
        }
        let state = GuestState::new(
            guest_store,
            deadline,
            GuestLog::new(deadline, self.limits.log_bytes),
            &self.limits,
        );
        let outcome = self.host.call(&self.module, state, work);
        let answer = outcome.result.map_err(|e| in_network(&self.network, e))?;
        if commit {
            let (mut store, changes) = outcome.state.store.into_parts();
            store.record_served_by(&self.network, &self.served_by_now());
            let quota = Quota {
                entries: self.limits.store_entries,
                bytes: self.limits.store_bytes,
            };
            store.commit(&self.network, &changes, quota, &|| deadline.expired())?;
        }
        Ok(answer)
    }

    /// The record, with the digest of the module as it was asked.
    fn served_by_now(&self) -> ServedBy {
        ServedBy {
            sha256: self.module.sha256.clone(),
            contract: self.module.contract.name(),
            ..self.served_by.clone()
        }
    }
}

/// What a netconf file (a network configuration, or a conflist whose plugin runs
/// wasm-ipam) says serves its network.
pub fn from_netconf(path: &Path) -> Result<(String, ServedBy), CniError> {
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
    let text = json.to_string();
    let conf = NetConf::parse(text.as_bytes())?;
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

fn in_network(network: &str, e: CniError) -> CniError {
    if e.msg.contains(network) {
        return e;
    }
    CniError {
        msg: format!("network {network}: {}", e.msg),
        ..e
    }
}
