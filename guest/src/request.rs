//! Typed access to one CNI invocation: the environment the runtime set and the
//! network configuration it passed, parsed once.

use crate::bindings::cni::ipam::types::Request as RawRequest;
use crate::error::code;
use crate::{Command, Error, WallInstant};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// One CNI invocation.
pub struct Request {
    raw: RawRequest,
    config: Value,
}

impl Request {
    /// Wraps the host's request, parsing the network configuration JSON.
    pub fn new(raw: RawRequest) -> Result<Self, Error> {
        let config = serde_json::from_str(&raw.config).map_err(|e| {
            Error::new(
                code::DECODING_FAILURE,
                "network configuration is not valid JSON",
            )
            .with_details(e.to_string())
        })?;
        Ok(Request { raw, config })
    }

    /// Builds a request from parts, for tests of module logic outside a host.
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
                lock_granted_at: WallInstant {
                    seconds: 0,
                    nanoseconds: 0,
                },
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

    /// The network configuration's `ipam` section deserialised into `T`; a mismatch is
    /// a CNI "invalid network config" error (code 7).
    pub fn ipam<T: DeserializeOwned>(&self) -> Result<T, Error> {
        let ipam = self.config.get("ipam").cloned().unwrap_or(Value::Null);
        serde_json::from_value(ipam)
            .map_err(|e| Error::invalid_config(format!("invalid ipam configuration: {e}")))
    }
}
