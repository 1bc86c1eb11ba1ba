//! Typed access to one CNI invocation: the environment the runtime set and the
//! network configuration it passed, parsed once.

use crate::bindings::cni::ipam::types::Request as RawRequest;
use crate::error::code;
use crate::{Attachment, Command, Error, WallInstant};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The capability through which containerd and CRI-O pass a pod's annotations.
pub const POD_ANNOTATIONS: &str = "io.kubernetes.cri.pod-annotations";
/// The pod annotation asking for fixed addresses ([`Request::annotated_ips`]).
pub const IP_ADDRS_ANNOTATION: &str = "wasm-ipam.io/ip-addrs";

/// One CNI invocation.
///
/// Outside a host, tests build one with [`Request::for_test`] and the `with_*` helpers:
///
/// ```
/// use serde_json::json;
/// use wasm_ipam_guest::{Command, Request};
///
/// let config = json!({"cniVersion": "1.1.0", "name": "net", "ipam": {"subnet": "10.0.0.0/29"}});
/// let request = Request::for_test(Command::Add, "ctr-1", "eth0", config)
///     .with_args(&[("IP", "10.0.0.5")])
///     .with_node_name("node-a")
///     .with_lock_granted_at(1_700_000_000);
/// assert_eq!(request.network_name(), "net");
/// assert_eq!(request.arg("IP"), Some("10.0.0.5"));
/// assert_eq!(request.node_name(), "node-a");
/// assert_eq!(request.lock_granted_at().seconds, 1_700_000_000);
/// ```
#[derive(Debug, Clone)]
pub struct Request {
    raw: RawRequest,
    config: Value,
}

/// Parses a network configuration the host sent; invalid JSON is code 6.
pub(crate) fn parse_config(text: &str) -> Result<Value, Error> {
    serde_json::from_str(text).map_err(|e| {
        Error::new(
            code::DECODING_FAILURE,
            "network configuration is not valid JSON",
        )
        .with_details(e.to_string())
    })
}

/// The configuration's `ipam` section deserialised into `T` (a missing section is
/// `null`); a mismatch is code 7.
/// Decodes the `ipam` section into `T`. A value that does not fit is code 7 naming the
/// key's path and the value, which serde's own message may not (`invalid IPv4 address
/// syntax`): `invalid ipam.ranges[0].start ("10.1.0.x"): invalid IPv4 address syntax`.
pub(crate) fn ipam_section<T: DeserializeOwned>(config: &Value) -> Result<T, Error> {
    let ipam = config.get("ipam").unwrap_or(&Value::Null);
    crate::keys::check::<T>(ipam)?;
    serde_path_to_error::deserialize(ipam).map_err(|e| {
        let path = e.path().to_string();
        let at = match path.as_str() {
            "." => "ipam".to_string(),
            _ => format!("ipam.{path}"),
        };
        let inner = e.into_inner().to_string();
        let value = value_at(ipam, &path)
            .filter(|v| !v.is_object() && !v.is_array())
            .map(Value::to_string)
            .filter(|shown| !inner.contains(shown.trim_matches('"')));
        match value {
            Some(value) => Error::invalid_config(format!("invalid {at} ({value}): {inner}")),
            None => Error::invalid_config(format!("invalid {at}: {inner}")),
        }
    })
}

/// The value at a path as serde_path_to_error prints it (`a.b[2].c`).
fn value_at<'a>(mut value: &'a Value, path: &str) -> Option<&'a Value> {
    if path == "." {
        return Some(value);
    }
    for part in path.split('.') {
        let (key, indexes) = part.split_once('[').unwrap_or((part, ""));
        if !key.is_empty() {
            value = value.get(key)?;
        }
        for index in indexes.split('[').filter(|i| !i.is_empty()) {
            value = value.get(index.trim_end_matches(']').parse::<usize>().ok()?)?;
        }
    }
    Some(value)
}

impl Request {
    /// Wraps the host's request, parsing the network configuration JSON.
    pub fn new(raw: RawRequest) -> Result<Self, Error> {
        let config = parse_config(&raw.config)?;
        Ok(Request { raw, config })
    }

    /// Builds a request from parts, for tests of module logic outside a host: the
    /// network name and CNI version come from `config`, the node is `test-node`, the
    /// lock was granted at the epoch, and there are no CNI_ARGS, netns or prevResult.
    pub fn for_test(command: Command, container_id: &str, ifname: &str, config: Value) -> Self {
        Request {
            raw: RawRequest {
                command,
                container_id: container_id.into(),
                netns: String::new(),
                ifname: ifname.into(),
                args: Vec::new(),
                network_name: config["name"].as_str().unwrap_or_default().into(),
                cni_version: config["cniVersion"].as_str().unwrap_or_default().into(),
                config: config.to_string(),
                prev_result: None,
                lock_granted_at: WallInstant::default(),
                node_name: "test-node".into(),
            },
            config,
        }
    }

    /// Sets CNI_ARGS pairs, for tests of module logic outside a host.
    pub fn with_args(mut self, args: &[(&str, &str)]) -> Self {
        self.raw.args = args
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self
    }

    /// Sets the node name, for tests of module logic outside a host.
    pub fn with_node_name(mut self, node_name: &str) -> Self {
        self.raw.node_name = node_name.into();
        self
    }

    /// Sets when the lock was granted, in Unix seconds, for tests outside a host.
    pub fn with_lock_granted_at(mut self, seconds: u64) -> Self {
        self.raw.lock_granted_at = WallInstant {
            seconds,
            nanoseconds: 0,
        };
        self
    }

    /// Sets CNI_NETNS, for tests of module logic outside a host.
    pub fn with_netns(mut self, netns: &str) -> Self {
        self.raw.netns = netns.into();
        self
    }

    /// Sets `prevResult` (JSON), for tests of module logic outside a host.
    pub fn with_prev_result(mut self, prev_result: &str) -> Self {
        self.raw.prev_result = Some(prev_result.into());
        self
    }

    /// The same call made for another attachment (the SDK's default GC runs a DEL for
    /// each attachment it collects).
    pub(crate) fn for_attachment(&self, command: Command, attachment: &Attachment) -> Self {
        let mut request = self.clone();
        request.raw.command = command;
        request.raw.container_id = attachment.container_id.clone();
        request.raw.ifname = attachment.ifname.clone();
        request.raw.netns = String::new();
        request.raw.prev_result = None;
        request
    }

    pub fn command(&self) -> Command {
        self.raw.command
    }
    pub fn container_id(&self) -> &str {
        &self.raw.container_id
    }
    pub fn netns(&self) -> &str {
        &self.raw.netns
    }
    pub fn ifname(&self) -> &str {
        &self.raw.ifname
    }
    /// The attachment this call is for: container id and interface name.
    pub fn attachment(&self) -> Attachment {
        Attachment {
            container_id: self.raw.container_id.clone(),
            ifname: self.raw.ifname.clone(),
        }
    }
    pub fn network_name(&self) -> &str {
        &self.raw.network_name
    }
    pub fn cni_version(&self) -> &str {
        &self.raw.cni_version
    }
    pub fn prev_result(&self) -> Option<&str> {
        self.raw.prev_result.as_deref()
    }
    /// When the host was granted the lock (for timestamps; not a timer).
    pub fn lock_granted_at(&self) -> WallInstant {
        self.raw.lock_granted_at
    }
    /// The node this call runs on (`ipam.nodeName`, else the machine's hostname), for
    /// modules that keep per-node state in a store several nodes share.
    pub fn node_name(&self) -> &str {
        &self.raw.node_name
    }

    /// CNI_ARGS as key/value pairs, in the order the runtime gave them.
    pub fn args(&self) -> &[(String, String)] {
        &self.raw.args
    }

    /// The value of CNI_ARGS key `key`, if present.
    pub fn arg(&self, key: &str) -> Option<&str> {
        self.raw
            .args
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The whole network configuration.
    pub fn config(&self) -> &Value {
        &self.config
    }

    /// Pod annotation `name`, when the runtime passed the pod's annotations: containerd
    /// and CRI-O put them in `runtimeConfig` under [`POD_ANNOTATIONS`] for a plugin
    /// whose conflist entry declares that capability (`wasm-ipam install` writes it).
    ///
    /// ```
    /// use serde_json::json;
    /// use wasm_ipam_guest::{Command, Request};
    ///
    /// let config = json!({"cniVersion": "1.1.0", "name": "net", "ipam": {},
    ///     "runtimeConfig": {"io.kubernetes.cri.pod-annotations": {"wasm-ipam.io/ip-addrs": "[\"10.0.0.7\"]"}}});
    /// let request = Request::for_test(Command::Add, "ctr-1", "eth0", config);
    /// assert_eq!(request.pod_annotation("wasm-ipam.io/ip-addrs"), Some(r#"["10.0.0.7"]"#));
    /// assert_eq!(request.annotated_ips().unwrap(), ["10.0.0.7".parse::<std::net::IpAddr>().unwrap()]);
    /// ```
    pub fn pod_annotation(&self, name: &str) -> Option<&str> {
        self.config["runtimeConfig"][POD_ANNOTATIONS][name].as_str()
    }

    /// The addresses the pod asks for by the annotation [`IP_ADDRS_ANNOTATION`]: a
    /// JSON list of addresses (one per family; a prefix length is ignored). Anything
    /// else there is a CNI "invalid network config" error (code 7) naming it.
    pub fn annotated_ips(&self) -> Result<Vec<std::net::IpAddr>, Error> {
        annotated_ips_in(&self.config)
    }

    /// The network configuration's `ipam` section deserialised into `T`; a mismatch is
    /// a CNI "invalid network config" error (code 7).
    pub fn ipam<T: DeserializeOwned>(&self) -> Result<T, Error> {
        ipam_section(&self.config)
    }
}

/// [`Request::annotated_ips`] of a network configuration as the runtime passed it.
pub fn annotated_ips_in(config: &Value) -> Result<Vec<std::net::IpAddr>, Error> {
    let Some(text) = config["runtimeConfig"][POD_ANNOTATIONS][IP_ADDRS_ANNOTATION].as_str() else {
        return Ok(Vec::new());
    };
    let bad = || {
        Error::invalid_config(format!(
            "pod annotation {IP_ADDRS_ANNOTATION} is {text:?}: it must be a JSON list of addresses, one per family, as [\"10.0.0.7\", \"fd00::7\"]"
        ))
    };
    let list: Vec<String> = serde_json::from_str(text).map_err(|_| bad())?;
    let ips = list
        .iter()
        .map(|a| a.split('/').next().unwrap_or_default().trim().parse())
        .collect::<Result<Vec<std::net::IpAddr>, _>>()
        .map_err(|_| bad())?;
    let v4 = ips.iter().filter(|ip| ip.is_ipv4()).count();
    if v4 > 1 || ips.len() - v4 > 1 {
        return Err(bad());
    }
    Ok(ips)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::net::Ipv4Addr;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Range {
        start: Ipv4Addr,
        #[serde(default)]
        speed: f64,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Ranges {
        ranges: Vec<Range>,
    }

    #[test]
    fn a_value_that_does_not_fit_is_named_by_its_path_and_value() {
        let err = ipam_section::<Range>(&json!({"ipam": {"start": "10.99.0.x"}})).unwrap_err();
        assert_eq!(err.code, crate::error::code::INVALID_NETWORK_CONFIG);
        assert_eq!(
            err.msg,
            r#"invalid ipam.start ("10.99.0.x"): invalid IPv4 address syntax"#
        );
        // serde's message names the value already: not twice.
        let err = ipam_section::<Range>(&json!({"ipam": {"start": "10.0.0.1", "speed": "fast"}}))
            .unwrap_err();
        assert_eq!(
            err.msg,
            r#"invalid ipam.speed: invalid type: string "fast", expected f64"#
        );
        let err = ipam_section::<Ranges>(
            &json!({"ipam": {"ranges": [{"start": "10.0.0.1"}, {"start": "300.0.0.1"}]}}),
        )
        .unwrap_err();
        assert_eq!(
            err.msg,
            r#"invalid ipam.ranges[1].start ("300.0.0.1"): invalid IPv4 address syntax"#
        );
        let err = ipam_section::<Range>(&json!({"ipam": {}})).unwrap_err();
        assert_eq!(err.msg, "invalid ipam: missing field `start`");
    }
}
