//! The network configuration from stdin: parsed and validated completely before any
//! work starts. The host reads only the `ipam` keys listed in [`HostIpamConfig`]; every
//! other key belongs to the module, which receives the whole JSON.

use crate::error::{CniError, code};
use crate::limits::{Limits, LogRotation, MAX_LOG_FILES, MIB};
use serde::Deserialize;
use serde_json::Value;
use std::path::PathBuf;
use std::time::Duration;
use tracing::level_filters::LevelFilter;

pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(90);
pub const DEFAULT_LOCK_FILE: &str = "/var/run/wasm-ipam/ipam.lock";
pub const DEFAULT_DATA_DIR: &str = "/var/lib/wasm-ipam";
pub const DEFAULT_CACHE_DIR: &str = "/var/cache/wasm-ipam";
/// Every line wasm-ipam and the module write but the module's `trace` ones.
pub const DEFAULT_LOG_LEVEL: LevelFilter = LevelFilter::DEBUG;
/// `logLevel`'s values, from the fewest lines to the most.
const LOG_LEVELS: &[(&str, LevelFilter)] = &[
    ("off", LevelFilter::OFF),
    ("error", LevelFilter::ERROR),
    ("warn", LevelFilter::WARN),
    ("info", LevelFilter::INFO),
    ("debug", LevelFilter::DEBUG),
    ("trace", LevelFilter::TRACE),
];

/// The host's own `ipam` settings, defaults applied.
#[derive(Debug, Clone, PartialEq)]
pub struct HostIpamConfig {
    /// Path of the module's `.wasm` component.
    pub module: PathBuf,
    /// Lowercase hex sha256 the module must have, when pinned.
    pub module_sha256: Option<String>,
    /// A trust policy the module must satisfy besides the node's (see
    /// [`crate::module::trust`]).
    pub trust_policy: Option<PathBuf>,
    /// The budget, counted from the lock grant.
    pub deadline: Duration,
    /// One lock for the whole host, like Calico's.
    pub lock_file: PathBuf,
    /// How long to wait for the lock before answering "try again later".
    pub lock_timeout: Option<Duration>,
    pub data_dir: PathBuf,
    /// Where compiled modules are cached (see [`crate::module::cache`]).
    pub cache_dir: PathBuf,
    pub log_file: Option<PathBuf>,
    /// `logLevel`: the most detailed level of wasm-ipam's own lines and the module's
    /// written to the log (see [`crate::logging`]).
    pub log_level: LevelFilter,
    /// `nodeName`, for the request's `node-name`; the machine's hostname when unset.
    pub node_name: Option<String>,
    /// The call's resource limits (see [`crate::limits`]).
    pub limits: Limits,
    /// Where the network's entries live: the embedded store in `dataDir`, or etcd.
    pub store: StoreConfig,
    /// `strictStatus`: CNI STATUS fails (code 50) also for what fails only some ADDs
    /// (a pool exhausted, the cluster store unreachable), the CNI spec's strict
    /// reading; by default it fails only for this node's own faults.
    pub strict_status: bool,
}

/// `ipam.store`: which backend holds the network's entries.
#[derive(Debug, Clone, PartialEq)]
pub enum StoreConfig {
    /// The embedded SQLite store in `dataDir` (the default).
    Embedded,
    /// A cluster-wide store on etcd (see [`crate::store::etcd`]).
    Etcd(EtcdConfig),
    /// A cluster-wide store in the Kubernetes API (see [`crate::store::kubernetes`]).
    Kubernetes(KubernetesConfig),
}

/// `ipam.store` with `"type": "kubernetes"`.
#[derive(Debug, Clone, PartialEq)]
pub struct KubernetesConfig {
    /// The node's kubeconfig, read on every call (a rotated token or certificate is
    /// picked up by rewriting the file).
    pub kubeconfig: PathBuf,
    /// The kubeconfig's context to use; its current-context when unset.
    pub context: Option<String>,
    /// The node-wide request rate: a token bucket refilled at `qps`, holding `burst`.
    pub qps: f64,
    pub burst: u32,
    /// `timeoutSeconds`: the longest one request may go unanswered before the call
    /// answers code 11; at most the deadline.
    pub timeout: Duration,
}

/// Calico's per-process client-go limits (its CNI plugin's defaults), here the node's.
pub const DEFAULT_KUBERNETES_QPS: f64 = 5.0;
pub const DEFAULT_KUBERNETES_BURST: u32 = 100;
/// An apiserver answers a GET or PUT in milliseconds; 5 s rides through a leader
/// change of its etcd, as etcd's own default does.
pub const DEFAULT_KUBERNETES_TIMEOUT: Duration = Duration::from_secs(5);

/// `ipam.store` with `"type": "etcd"`.
#[derive(Debug, Clone, PartialEq)]
pub struct EtcdConfig {
    /// `http://host:port` or `https://host:port` client URLs.
    pub endpoints: Vec<String>,
    /// Every key wasm-ipam writes starts with it.
    pub prefix: String,
    /// The node-wide request rate: a token bucket refilled at `qps`, holding `burst`.
    pub qps: f64,
    pub burst: u32,
    /// The most compares (or operations) one transaction may carry: etcd's
    /// `--max-txn-ops`, 128 unless the cluster's operators raised it.
    pub max_txn_ops: usize,
    /// `timeoutSeconds`: the longest one request may go unanswered by every member
    /// before the call answers code 11; at most the deadline.
    pub timeout: Duration,
    pub tls: Option<EtcdTls>,
}

/// TLS to etcd: the CA that signed the servers' certificates, and optionally a client
/// certificate and key (etcd's `--client-cert-auth`). PEM files.
#[derive(Debug, Clone, PartialEq)]
pub struct EtcdTls {
    pub ca: PathBuf,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

pub const DEFAULT_ETCD_PREFIX: &str = "/wasm-ipam/";
pub const DEFAULT_ETCD_QPS: f64 = 50.0;
pub const DEFAULT_ETCD_BURST: u32 = 100;
pub const DEFAULT_ETCD_MAX_TXN_OPS: usize = 128;
/// etcdctl's `--command-timeout`: an etcd member answers in milliseconds and a leader
/// election takes one to three seconds at etcd's default election timeout, so 5 s
/// rides through an election and a member passed over, while a store that is down
/// costs each call queued on the node's lock seconds, not its deadline.
pub const DEFAULT_ETCD_TIMEOUT: Duration = Duration::from_secs(5);
/// The shortest `timeoutSeconds`: in a cluster, one try gets a third of it.
const MIN_ETCD_TIMEOUT: Duration = Duration::from_secs(1);

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
enum RawStore {
    Embedded {},
    Etcd(RawEtcd),
    Kubernetes(RawKubernetes),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawKubernetes {
    kubeconfig: PathBuf,
    context: Option<String>,
    qps: Option<f64>,
    burst: Option<u32>,
    timeout_seconds: Option<f64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawEtcd {
    endpoints: Vec<String>,
    prefix: Option<String>,
    qps: Option<f64>,
    burst: Option<u32>,
    max_txn_ops: Option<usize>,
    timeout_seconds: Option<f64>,
    tls: Option<RawEtcdTls>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEtcdTls {
    ca: PathBuf,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
}

impl StoreConfig {
    /// A cluster store as the node's records name it, and its `timeoutSeconds`; none
    /// for the embedded store, which is never out of reach.
    pub fn remote(&self) -> Option<(String, Duration)> {
        match self {
            StoreConfig::Embedded => None,
            StoreConfig::Etcd(etcd) => Some((
                format!("etcd {} {}", etcd.endpoints.join(","), etcd.prefix),
                etcd.timeout,
            )),
            StoreConfig::Kubernetes(kube) => Some((
                format!(
                    "kubernetes {} {}",
                    kube.kubeconfig.display(),
                    kube.context.as_deref().unwrap_or("")
                ),
                kube.timeout,
            )),
        }
    }

    /// `deadline` is the call's: no store timeout may pass it.
    fn from_raw(raw: Option<RawStore>, deadline: Duration) -> Result<Self, CniError> {
        let etcd = match raw {
            None | Some(RawStore::Embedded {}) => return Ok(StoreConfig::Embedded),
            Some(RawStore::Etcd(etcd)) => etcd,
            Some(RawStore::Kubernetes(kube)) => return kubernetes_from_raw(kube, deadline),
        };
        let bad = |what: &str| CniError::config(format!("ipam.store: {what}"));
        if etcd.endpoints.is_empty() {
            return Err(bad("endpoints must list at least one etcd client URL"));
        }
        let tls = etcd.tls.is_some();
        for endpoint in &etcd.endpoints {
            let scheme_ok = match tls {
                true => endpoint.starts_with("https://"),
                false => endpoint.starts_with("http://"),
            };
            if !scheme_ok
                || endpoint
                    .chars()
                    .any(|c| c.is_whitespace() || c.is_control())
            {
                return Err(bad(&format!(
                    "endpoint {endpoint:?} must be an {} URL{}",
                    if tls { "https://" } else { "http://" },
                    if tls {
                        " (tls is set)"
                    } else {
                        " (set tls for https)"
                    }
                )));
            }
        }
        let prefix = etcd.prefix.unwrap_or_else(|| DEFAULT_ETCD_PREFIX.into());
        if prefix.is_empty() || prefix.chars().any(char::is_control) {
            return Err(bad("prefix must be a non-empty key prefix"));
        }
        let qps = etcd.qps.unwrap_or(DEFAULT_ETCD_QPS);
        if !(qps.is_finite() && qps > 0.0) {
            return Err(bad("qps must be a positive number"));
        }
        let burst = etcd.burst.unwrap_or(DEFAULT_ETCD_BURST);
        if burst == 0 {
            return Err(bad("burst must be at least 1"));
        }
        let max_txn_ops = etcd.max_txn_ops.unwrap_or(DEFAULT_ETCD_MAX_TXN_OPS);
        if max_txn_ops < 8 {
            return Err(bad("maxTxnOps must be at least 8"));
        }
        let timeout = store_timeout(etcd.timeout_seconds, DEFAULT_ETCD_TIMEOUT, deadline)?;
        let tls = etcd
            .tls
            .map(|t| {
                for path in [Some(&t.ca), t.cert.as_ref(), t.key.as_ref()]
                    .into_iter()
                    .flatten()
                {
                    if !path.is_absolute() {
                        return Err(bad(&format!("tls paths must be absolute, not {path:?}")));
                    }
                }
                if t.cert.is_some() != t.key.is_some() {
                    return Err(bad("tls.cert and tls.key go together"));
                }
                Ok(EtcdTls {
                    ca: t.ca,
                    cert: t.cert,
                    key: t.key,
                })
            })
            .transpose()?;
        Ok(StoreConfig::Etcd(EtcdConfig {
            endpoints: etcd.endpoints,
            prefix,
            qps,
            burst,
            max_txn_ops,
            timeout,
            tls,
        }))
    }
}

/// `timeoutSeconds` of a cluster store: `default` unless set, never past the deadline.
fn store_timeout(
    seconds: Option<f64>,
    default: Duration,
    deadline: Duration,
) -> Result<Duration, CniError> {
    match seconds {
        None => Ok(default.min(deadline)),
        Some(s) => Duration::try_from_secs_f64(s)
            .ok()
            .filter(|t| (MIN_ETCD_TIMEOUT..=deadline).contains(t))
            .ok_or_else(|| {
                CniError::config(format!(
                    "ipam.store: timeoutSeconds must be at least {} and at most deadlineSeconds ({})",
                    MIN_ETCD_TIMEOUT.as_secs(),
                    deadline.as_secs_f64()
                ))
            }),
    }
}

fn kubernetes_from_raw(raw: RawKubernetes, deadline: Duration) -> Result<StoreConfig, CniError> {
    let bad = |what: &str| CniError::config(format!("ipam.store: {what}"));
    if !raw.kubeconfig.is_absolute() {
        return Err(bad(&format!(
            "kubeconfig must be an absolute path, not {:?}",
            raw.kubeconfig
        )));
    }
    let qps = raw.qps.unwrap_or(DEFAULT_KUBERNETES_QPS);
    if !(qps.is_finite() && qps > 0.0) {
        return Err(bad("qps must be a positive number"));
    }
    let burst = raw.burst.unwrap_or(DEFAULT_KUBERNETES_BURST);
    if burst == 0 {
        return Err(bad("burst must be at least 1"));
    }
    Ok(StoreConfig::Kubernetes(KubernetesConfig {
        kubeconfig: raw.kubeconfig,
        context: raw.context.filter(|c| !c.is_empty()),
        qps,
        burst,
        timeout: store_timeout(raw.timeout_seconds, DEFAULT_KUBERNETES_TIMEOUT, deadline)?,
    }))
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct RawHostIpam {
    module: Option<PathBuf>,
    module_sha256: Option<String>,
    trust_policy: Option<PathBuf>,
    deadline_seconds: Option<f64>,
    lock_file: Option<PathBuf>,
    lock_timeout_seconds: Option<f64>,
    data_dir: Option<PathBuf>,
    cache_dir: Option<PathBuf>,
    log_file: Option<PathBuf>,
    log_level: Option<String>,
    node_name: Option<String>,
    #[serde(rename = "memoryLimitMiB")]
    memory_limit_mib: Option<u64>,
    #[serde(rename = "hostMemoryLimitMiB")]
    host_memory_limit_mib: Option<u64>,
    #[serde(rename = "logLimitKiB")]
    log_limit_kib: Option<u64>,
    #[serde(rename = "logMaxMiB")]
    log_max_mib: Option<u64>,
    log_files: Option<u64>,
    store_quota_entries: Option<u64>,
    #[serde(rename = "storeQuotaMiB")]
    store_quota_mib: Option<u64>,
    #[serde(rename = "moduleMaxMiB")]
    module_max_mib: Option<u64>,
    compile_timeout_seconds: Option<f64>,
    #[serde(rename = "compileMemoryMiB")]
    compile_memory_mib: Option<u64>,
    store: Option<RawStore>,
    strict_status: Option<bool>,
}

/// Netconf keys that belong to one call, not to the network.
const PER_CALL_KEYS: &[&str] = &[
    "prevResult",
    "runtimeConfig",
    "args",
    "cni.dev/valid-attachments",
    "cni.dev/attachments",
];

/// The longest `nodeName` (a DNS name's length, as Kubernetes node names are).
const MAX_NODE_NAME_BYTES: usize = 253;

fn checked_node_name(name: String) -> Result<String, CniError> {
    if name.is_empty() || name.len() > MAX_NODE_NAME_BYTES || name.chars().any(char::is_control) {
        return Err(CniError::config(format!(
            "ipam.nodeName must be 1 to {MAX_NODE_NAME_BYTES} bytes with no control characters"
        )));
    }
    Ok(name)
}

/// The machine's hostname, the request's `node-name` when `ipam.nodeName` is unset.
pub fn hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most `buf.len()` bytes into `buf`.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return String::new();
    }
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    String::from_utf8_lossy(&buf[..end]).into_owned()
}

impl HostIpamConfig {
    /// The node this call runs on: `ipam.nodeName`, else the machine's hostname.
    pub fn node_name(&self) -> String {
        self.node_name.clone().unwrap_or_else(hostname)
    }
}

/// One network configuration as the runtime passed it.
#[derive(Debug, Clone)]
pub struct NetConf {
    pub cni_version: String,
    pub name: String,
    pub ipam: HostIpamConfig,
    /// The whole configuration, verbatim, for the module.
    pub raw: String,
    pub prev_result: Option<String>,
    json: Value,
}

/// One attachment a GC caller says is still in use.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Attachment {
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub ifname: String,
}

/// The netconf on stdin as JSON, decoded once per call.
pub fn decode(stdin: &[u8]) -> Result<Value, CniError> {
    serde_json::from_slice(stdin).map_err(decode_error)
}

/// The netconf's `cniVersion`, as skel reads it before anything else: absent means
/// "0.1.0", which nothing here supports.
pub fn cni_version_of(json: &Value) -> String {
    json.get("cniVersion")
        .and_then(Value::as_str)
        .unwrap_or("0.1.0")
        .to_string()
}

fn decode_error(e: serde_json::Error) -> CniError {
    CniError::new(
        code::DECODING_FAILURE,
        "failed to decode network configuration",
    )
    .with_details(e)
}

fn positive_seconds(key: &str, value: f64) -> Result<Duration, CniError> {
    Duration::try_from_secs_f64(value)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| CniError::config(format!("ipam.{key} must be a positive number of seconds")))
}

impl NetConf {
    /// Decodes and validates `stdin`.
    pub fn parse(stdin: &[u8]) -> Result<Self, CniError> {
        Self::from_json(decode(stdin)?, stdin)
    }

    /// Validates the netconf `json`, decoded from `stdin` (kept verbatim for the module).
    pub fn from_json(json: Value, stdin: &[u8]) -> Result<Self, CniError> {
        let text = |key: &str| -> Result<String, CniError> {
            match json.get(key) {
                Some(Value::String(s)) if !s.is_empty() => Ok(s.clone()),
                Some(_) => Err(CniError::config(format!(
                    "{key} must be a non-empty string"
                ))),
                None => Err(CniError::config(format!("missing {key}"))),
            }
        };
        let cni_version = text("cniVersion")?;
        let name = text("name")?;
        let ipam_json = match json.get("ipam") {
            Some(v @ Value::Object(_)) => v.clone(),
            Some(_) => return Err(CniError::config("ipam must be an object")),
            None => return Err(CniError::config("missing ipam")),
        };
        // The key's path in the message (`ipam.store.endpoints[0]: ...`): serde's own
        // names the value but not where it is.
        let raw: RawHostIpam = serde_path_to_error::deserialize(&ipam_json).map_err(|e| {
            let at = match e.path().to_string() {
                root if root == "." => "ipam".to_string(),
                path => format!("ipam.{path}"),
            };
            CniError::config(format!("invalid {at}: {}", e.into_inner()))
        })?;
        let ipam = HostIpamConfig::from_raw(raw)?;
        let prev_result = json.get("prevResult").map(Value::to_string);
        Ok(NetConf {
            cni_version,
            name,
            ipam,
            raw: String::from_utf8_lossy(stdin).into_owned(),
            prev_result,
            json,
        })
    }

    /// The configuration JSON the module receives: the netconf as given, plus — when
    /// `ipam.resolvConf` names a file — that file's text as `ipam.resolvConfContents`,
    /// because the module has no filesystem to read it from (host-local reads it itself).
    pub fn module_config(&self) -> Result<String, CniError> {
        let Some(path) = self.json["ipam"].get("resolvConf").and_then(Value::as_str) else {
            return Ok(self.raw.clone());
        };
        let text = std::fs::read_to_string(path).map_err(|e| {
            CniError::new(
                code::IO_FAILURE,
                format!("cannot read ipam.resolvConf {path}"),
            )
            .with_details(e)
        })?;
        let mut json = self.json.clone();
        json["ipam"]["resolvConfContents"] = text.into();
        Ok(json.to_string())
    }

    /// The network's configuration as the host records it for operators' views (see
    /// [`crate::store::ServedBy`]): the netconf without what varies from call to call
    /// (`prevResult`, `runtimeConfig`, `args`, GC's attachment lists), so the record
    /// changes only when the network's configuration does.
    pub fn network_config(&self) -> String {
        let mut json = self.json.clone();
        if let Some(object) = json.as_object_mut() {
            for key in PER_CALL_KEYS {
                object.remove(*key);
            }
        }
        json.to_string()
    }

    /// The attachments a GC must keep: `cni.dev/valid-attachments`, or the older
    /// `cni.dev/attachments`. Absent is an error rather than "none", so a malformed
    /// call cannot release every address.
    pub fn valid_attachments(&self) -> Result<Vec<Attachment>, CniError> {
        let list = self
            .json
            .get("cni.dev/valid-attachments")
            .or_else(|| self.json.get("cni.dev/attachments"))
            .ok_or_else(|| CniError::config("GC needs cni.dev/valid-attachments"))?;
        serde_json::from_value(list.clone())
            .map_err(|e| CniError::config(format!("invalid cni.dev/valid-attachments: {e}")))
    }
}

impl HostIpamConfig {
    /// Every setting at its default, serving `module`: for a network the host knows
    /// no configuration of (an imported one).
    pub fn defaults(module: PathBuf) -> Result<Self, CniError> {
        Self::from_raw(RawHostIpam {
            module: Some(module),
            ..RawHostIpam::default()
        })
    }

    fn from_raw(raw: RawHostIpam) -> Result<Self, CniError> {
        let limits = limits_from_raw(&raw)?;
        let deadline = raw
            .deadline_seconds
            .map(|s| positive_seconds("deadlineSeconds", s))
            .transpose()?
            .unwrap_or(DEFAULT_DEADLINE);
        let store = StoreConfig::from_raw(raw.store, deadline)?;
        let log_level = raw
            .log_level
            .map(|level| {
                LOG_LEVELS
                    .iter()
                    .find(|(name, _)| *name == level)
                    .map(|(_, filter)| *filter)
                    .ok_or_else(|| {
                        let names: Vec<&str> = LOG_LEVELS.iter().map(|(name, _)| *name).collect();
                        CniError::config(format!(
                            "ipam.logLevel must be one of {}",
                            names.join(", ")
                        ))
                    })
            })
            .transpose()?
            .unwrap_or(DEFAULT_LOG_LEVEL);
        let module = raw
            .module
            .filter(|p| !p.as_os_str().is_empty())
            .ok_or_else(|| CniError::config("missing ipam.module (path to the module's .wasm)"))?;
        let module_sha256 = raw
            .module_sha256
            .map(|digest| {
                let digest = digest.to_ascii_lowercase();
                if digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()) {
                    Ok(digest)
                } else {
                    Err(CniError::config("ipam.moduleSha256 must be 64 hex digits"))
                }
            })
            .transpose()?;
        for (key, path) in [
            ("module", &Some(module.clone())),
            ("lockFile", &raw.lock_file),
            ("dataDir", &raw.data_dir),
            ("cacheDir", &raw.cache_dir),
            ("logFile", &raw.log_file),
            ("trustPolicy", &raw.trust_policy),
        ] {
            if let Some(path) = path {
                absolute_path(key, path)?;
            }
        }
        Ok(HostIpamConfig {
            module,
            module_sha256,
            trust_policy: raw.trust_policy,
            deadline,
            lock_file: raw.lock_file.unwrap_or_else(|| DEFAULT_LOCK_FILE.into()),
            lock_timeout: raw
                .lock_timeout_seconds
                .map(|s| positive_seconds("lockTimeoutSeconds", s))
                .transpose()?,
            data_dir: raw.data_dir.unwrap_or_else(|| DEFAULT_DATA_DIR.into()),
            cache_dir: raw.cache_dir.unwrap_or_else(|| DEFAULT_CACHE_DIR.into()),
            log_file: raw.log_file,
            log_level,
            node_name: raw.node_name.map(checked_node_name).transpose()?,
            limits,
            store,
            strict_status: raw.strict_status.unwrap_or(false),
        })
    }
}

/// `ipam.{key}`'s `path` must be absolute: the runtime's working directory is nobody's
/// choice, so a relative (or empty) path would put the lock, the store or the cache
/// wherever that happens to be, and run whichever module lies there (containerd and
/// CRI-O run from /, podman from its user's directory). `install` asks it of the
/// paths it writes into a conflist.
pub fn absolute_path(key: &str, path: &std::path::Path) -> Result<(), CniError> {
    match path.is_absolute() {
        true => Ok(()),
        false => Err(CniError::config(format!(
            "ipam.{key} must be an absolute path, not {path:?}"
        ))),
    }
}

/// A whole number within `range`, else the default; `what` names the key.
fn bounded(
    key: &str,
    value: Option<u64>,
    range: std::ops::RangeInclusive<u64>,
    default: u64,
) -> Result<u64, CniError> {
    match value {
        None => Ok(default),
        Some(v) if range.contains(&v) => Ok(v),
        Some(_) => Err(CniError::config(format!(
            "ipam.{key} must be between {} and {}",
            range.start(),
            range.end()
        ))),
    }
}

fn limits_from_raw(raw: &RawHostIpam) -> Result<Limits, CniError> {
    let d = Limits::default();
    let mib = |key, value, max: u64, default: u64| -> Result<u64, CniError> {
        Ok(bounded(key, value, 1..=max, default / MIB)? * MIB)
    };
    let compile_time = raw
        .compile_timeout_seconds
        .map(|s| positive_seconds("compileTimeoutSeconds", s))
        .transpose()?
        .unwrap_or(d.compile_time);
    Ok(Limits {
        guest_memory: mib(
            "memoryLimitMiB",
            raw.memory_limit_mib,
            4096,
            d.guest_memory as u64,
        )? as usize,
        host_memory: mib(
            "hostMemoryLimitMiB",
            raw.host_memory_limit_mib,
            1024,
            d.host_memory as u64,
        )? as usize,
        log_bytes: (bounded(
            "logLimitKiB",
            raw.log_limit_kib,
            1..=1 << 20,
            d.log_bytes as u64 >> 10,
        )? << 10) as usize,
        log_rotation: LogRotation {
            max_bytes: mib(
                "logMaxMiB",
                raw.log_max_mib,
                1 << 20,
                d.log_rotation.max_bytes,
            )?,
            // At least one: a line written to the file being renamed stays in it.
            kept: bounded(
                "logFiles",
                raw.log_files,
                1..=MAX_LOG_FILES.into(),
                d.log_rotation.kept.into(),
            )? as u32,
        },
        store_entries: bounded(
            "storeQuotaEntries",
            raw.store_quota_entries,
            1..=1 << 40,
            d.store_entries,
        )?,
        store_bytes: mib("storeQuotaMiB", raw.store_quota_mib, 1 << 20, d.store_bytes)?,
        module_bytes: mib("moduleMaxMiB", raw.module_max_mib, 1024, d.module_bytes)?,
        compile_time,
        compile_memory: mib(
            "compileMemoryMiB",
            raw.compile_memory_mib,
            64 * 1024,
            d.compile_memory,
        )?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<NetConf, CniError> {
        NetConf::parse(json.as_bytes())
    }

    #[test]
    fn defaults_apply() {
        let conf = parse(r#"{"cniVersion":"1.0.0","name":"n","ipam":{"type":"wasm-ipam","module":"/m.wasm","subnet":"10.0.0.0/24"}}"#).unwrap();
        assert_eq!(conf.ipam.deadline, Duration::from_secs(90));
        assert_eq!(conf.ipam.lock_file, PathBuf::from(DEFAULT_LOCK_FILE));
        assert_eq!(conf.ipam.data_dir, PathBuf::from(DEFAULT_DATA_DIR));
        assert_eq!(conf.ipam.cache_dir, PathBuf::from(DEFAULT_CACHE_DIR));
        assert_eq!(conf.ipam.limits, Limits::default());
        assert_eq!(conf.ipam.lock_timeout, None);
        assert_eq!(conf.ipam.store, StoreConfig::Embedded);
    }

    #[test]
    fn a_key_of_the_wrong_type_is_named_with_its_path_and_value() {
        let err = parse(r#"{"cniVersion":"1.0.0","name":"n","ipam":{"module":"/m.wasm","deadlineSeconds":"fast"}}"#).unwrap_err();
        assert_eq!(err.code, code::INVALID_NETWORK_CONFIG);
        assert_eq!(
            err.msg,
            r#"invalid ipam.deadlineSeconds: invalid type: string "fast", expected f64"#
        );
        let err = parse(r#"{"cniVersion":"1.0.0","name":"n","ipam":{"module":"/m.wasm","store":{"type":"etcd","endpoints":["https://a:2379",7]}}}"#).unwrap_err();
        // Within the store's tagged union, serde buffers the value: the path stops at
        // the union, the message still names the value.
        assert!(
            err.msg
                .starts_with("invalid ipam.store: invalid type: integer `7`"),
            "{}",
            err.msg
        );
    }

    #[test]
    fn an_etcd_store_is_read_with_its_defaults() {
        let conf = parse(r#"{"cniVersion":"1.0.0","name":"n","ipam":{"module":"/m.wasm","store":{"type":"etcd","endpoints":["https://a:2379","https://b:2379"],"tls":{"ca":"/ca.pem","cert":"/c.pem","key":"/k.pem"}}}}"#).unwrap();
        let StoreConfig::Etcd(etcd) = conf.ipam.store else {
            panic!("not etcd")
        };
        assert_eq!(etcd.endpoints.len(), 2);
        assert_eq!(etcd.prefix, DEFAULT_ETCD_PREFIX);
        assert_eq!(
            (etcd.qps, etcd.burst),
            (DEFAULT_ETCD_QPS, DEFAULT_ETCD_BURST)
        );
        assert_eq!(etcd.max_txn_ops, DEFAULT_ETCD_MAX_TXN_OPS);
        assert_eq!(etcd.timeout, DEFAULT_ETCD_TIMEOUT);
        assert_eq!(etcd.tls.unwrap().key, Some(PathBuf::from("/k.pem")));
    }

    fn etcd_timeout(ipam: &str) -> Result<Duration, CniError> {
        let json =
            format!(r#"{{"cniVersion":"1.0.0","name":"n","ipam":{{"module":"/m.wasm",{ipam}}}}}"#);
        match parse(&json)?.ipam.store {
            StoreConfig::Etcd(etcd) => Ok(etcd.timeout),
            _ => panic!("not etcd"),
        }
    }

    /// `store.timeoutSeconds`: 5 s by default, never past the deadline, and an
    /// error names the key.
    #[test]
    fn the_etcd_timeout_defaults_to_five_seconds_within_the_deadline() {
        let store = r#""store":{"type":"etcd","endpoints":["http://e:2379"]"#;
        assert_eq!(
            etcd_timeout(&format!("{store}}}")).unwrap(),
            Duration::from_secs(5)
        );
        assert_eq!(
            etcd_timeout(&format!(r#"{store},"timeoutSeconds":2.5}}"#)).unwrap(),
            Duration::from_millis(2500)
        );
        assert_eq!(
            etcd_timeout(&format!(r#"{store},"timeoutSeconds":90}}"#)).unwrap(),
            Duration::from_secs(90)
        );
        // A deadline shorter than the default is the default's bound.
        assert_eq!(
            etcd_timeout(&format!(r#""deadlineSeconds":3,{store}}}"#)).unwrap(),
            Duration::from_secs(3)
        );
        for bad in [
            r#""timeoutSeconds":0"#,
            r#""timeoutSeconds":0.5"#,
            r#""timeoutSeconds":-1"#,
            r#""timeoutSeconds":91"#,
        ] {
            let err = etcd_timeout(&format!("{store},{bad}}}")).unwrap_err();
            assert_eq!(err.code, 7, "{bad}");
            assert!(err.msg.contains("timeoutSeconds"), "{bad}: {}", err.msg);
        }
        let err = etcd_timeout(&format!(r#"{store},"timeoutSeconds":"5"}}"#)).unwrap_err();
        assert_eq!(err.code, 7);
        let err = etcd_timeout(&format!(
            r#""deadlineSeconds":10,{store},"timeoutSeconds":20}}"#
        ))
        .unwrap_err();
        assert_eq!(
            err.msg,
            "ipam.store: timeoutSeconds must be at least 1 and at most deadlineSeconds (10)"
        );
    }

    #[test]
    fn the_log_level_defaults_to_debug_and_names_its_values() {
        let level = |ipam: &str| {
            let json = format!(
                r#"{{"cniVersion":"1.0.0","name":"n","ipam":{{"module":"/m.wasm"{ipam}}}}}"#
            );
            parse(&json).map(|conf| conf.ipam.log_level)
        };
        assert_eq!(level("").unwrap(), LevelFilter::DEBUG);
        assert_eq!(level(r#","logLevel":"info""#).unwrap(), LevelFilter::INFO);
        assert_eq!(level(r#","logLevel":"off""#).unwrap(), LevelFilter::OFF);
        assert_eq!(level(r#","logLevel":"trace""#).unwrap(), LevelFilter::TRACE);
        for bad in [r#","logLevel":"INFO""#, r#","logLevel":"verbose""#] {
            let err = level(bad).unwrap_err();
            assert_eq!(err.code, 7, "{bad}");
            assert!(err.msg.contains("logLevel"), "{bad}: {}", err.msg);
        }
        assert_eq!(level(r#","logLevel":3"#).unwrap_err().code, 7);
        assert_eq!(
            level(r#","logLevel":"loud""#).unwrap_err().msg,
            "ipam.logLevel must be one of off, error, warn, info, debug, trace"
        );
    }

    #[test]
    fn log_rotation_is_read_in_mib_and_files() {
        let conf = parse(r#"{"cniVersion":"1.0.0","name":"n","ipam":{"module":"/m.wasm","logMaxMiB":3,"logFiles":5}}"#).unwrap();
        assert_eq!(
            conf.ipam.limits.log_rotation,
            LogRotation {
                max_bytes: 3 * MIB,
                kept: 5
            }
        );
    }

    /// Every example netconf is one a call takes, and bounds a call as docs/install.md
    /// says a node's must: the lock wait plus the deadline inside kubelet's 2-minute
    /// runtime request timeout, so a call that cannot finish answers while kubelet
    /// still listens.
    #[test]
    fn every_example_netconf_parses_and_fits_kubelets_timeout() {
        const KUBELET_RUNTIME_REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/netconf");
        let mut read = 0;
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.extension().is_none_or(|e| e != "json") {
                continue;
            }
            let conf = NetConf::parse(&std::fs::read(&path).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            let lock_wait = conf.ipam.lock_timeout.unwrap_or_else(|| {
                panic!(
                    "{}: no lockTimeoutSeconds: a call may wait forever",
                    path.display()
                )
            });
            assert!(
                lock_wait + conf.ipam.deadline < KUBELET_RUNTIME_REQUEST_TIMEOUT,
                "{}: lockTimeoutSeconds + deadlineSeconds = {:?}",
                path.display(),
                lock_wait + conf.ipam.deadline
            );
            read += 1;
        }
        assert!(read > 0, "no example in {}", dir.display());
    }

    #[test]
    fn missing_module_is_config_error() {
        let err =
            parse(r#"{"cniVersion":"1.0.0","name":"n","ipam":{"type":"wasm-ipam"}}"#).unwrap_err();
        assert_eq!(err.code, 7);
        assert!(err.msg.contains("ipam.module"));
    }

    #[test]
    fn malformed_json_is_decode_error() {
        assert_eq!(parse("{not json").unwrap_err().code, 6);
    }

    /// The keys the host reads are the shared table's, which the SDKs pass over when
    /// they look for a module's misspelt keys: a key added here and not there would be
    /// taken for a module's typo.
    #[test]
    fn the_hosts_keys_are_the_shared_table() {
        let mut read: Vec<&str> = wasm_ipam_guest::keys::fields_of::<RawHostIpam>()
            .expect("a struct")
            .to_vec();
        read.push("type");
        read.sort();
        let mut table = wasm_ipam_codes::HOST_IPAM_KEYS.to_vec();
        table.sort();
        assert_eq!(read, table);
    }

    #[test]
    fn host_keys_are_type_checked() {
        for bad in [
            r#""deadlineSeconds":0"#,
            r#""deadlineSeconds":"90""#,
            r#""lockTimeoutSeconds":-1"#,
            r#""moduleSha256":"abc""#,
            r#""memoryLimitMiB":0"#,
            r#""hostMemoryLimitMiB":0"#,
            r#""logLimitKiB":-1"#,
            r#""logMaxMiB":0"#,
            r#""logFiles":0"#,
            r#""logFiles":1001"#,
            r#""storeQuotaEntries":0"#,
            r#""storeQuotaMiB":1.5"#,
            r#""moduleMaxMiB":100000"#,
            r#""compileTimeoutSeconds":0"#,
            r#""compileMemoryMiB":"1024""#,
            r#""store":{"type":"etcd","endpoints":[]}"#,
            r#""store":{"type":"etcd","endpoints":["127.0.0.1:2379"]}"#,
            r#""store":{"type":"etcd","endpoints":["http://e:2379"],"tls":{"ca":"/ca.pem"}}"#,
            r#""store":{"type":"etcd","endpoints":["https://e:2379"],"tls":{"ca":"ca.pem"}}"#,
            r#""store":{"type":"etcd","endpoints":["https://e:2379"],"tls":{"ca":"/ca.pem","cert":"/c.pem"}}"#,
            r#""store":{"type":"etcd","endpoints":["http://e:2379"],"qps":0}"#,
            r#""store":{"type":"etcd","endpoints":["http://e:2379"],"burst":0}"#,
            r#""store":{"type":"etcd","endpoints":["http://e:2379"],"endpoint":"x"}"#,
            r#""store":{"type":"consul"}"#,
        ] {
            let json = format!(
                r#"{{"cniVersion":"1.0.0","name":"n","ipam":{{"module":"/m.wasm",{bad}}}}}"#
            );
            assert_eq!(parse(&json).unwrap_err().code, 7, "{bad}");
        }
    }

    #[test]
    fn a_relative_module_is_refused_like_every_other_path() {
        let err =
            parse(r#"{"cniVersion":"1.0.0","name":"n","ipam":{"module":"m.wasm"}}"#).unwrap_err();
        assert_eq!(err.code, 7);
        assert_eq!(
            err.msg,
            r#"ipam.module must be an absolute path, not "m.wasm""#
        );
    }

    #[test]
    fn resolv_conf_is_read_for_the_module() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("resolv.conf");
        std::fs::write(&path, "nameserver 10.0.0.53\n").unwrap();
        let json = format!(
            r#"{{"cniVersion":"1.0.0","name":"n","ipam":{{"module":"/m.wasm","resolvConf":{path:?}}}}}"#
        );
        let module_config: Value =
            serde_json::from_str(&parse(&json).unwrap().module_config().unwrap()).unwrap();
        assert_eq!(
            module_config["ipam"]["resolvConfContents"],
            "nameserver 10.0.0.53\n"
        );
        let missing = json.replace("resolv.conf", "missing.conf");
        assert_eq!(
            parse(&missing).unwrap().module_config().unwrap_err().code,
            5
        );
        let plain = r#"{"cniVersion":"1.0.0","name":"n","ipam":{"module":"/m.wasm"}}"#;
        assert_eq!(parse(plain).unwrap().module_config().unwrap(), plain);
    }

    #[test]
    fn gc_attachments_require_the_key() {
        let conf = parse(r#"{"cniVersion":"1.1.0","name":"n","ipam":{"module":"/m.wasm"},"cni.dev/attachments":[{"containerID":"c","ifname":"eth0"}]}"#).unwrap();
        assert_eq!(
            conf.valid_attachments().unwrap(),
            vec![Attachment {
                container_id: "c".into(),
                ifname: "eth0".into()
            }]
        );
        let conf =
            parse(r#"{"cniVersion":"1.1.0","name":"n","ipam":{"module":"/m.wasm"}}"#).unwrap();
        assert_eq!(conf.valid_attachments().unwrap_err().code, 7);
    }
}
