//! The CNI protocol as libcni and the spec define it: the command and its environment,
//! the versions we speak, and converting a module's result to the config's cniVersion.

use crate::error::{CniError, code};
use ipnet::IpNet;
use serde_json::{Value, json};
use std::net::IpAddr;

/// Versions this plugin answers to, oldest first. 0.3.0 is the first with the
/// current result shape (`ips`, `routes`, `dns`).
pub const SUPPORTED_VERSIONS: &[&str] = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];
pub const CURRENT_VERSION: &str = "1.1.0";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Add,
    Del,
    Check,
    Gc,
    Status,
    Version,
}

impl Command {
    pub fn parse(value: &str) -> Result<Self, CniError> {
        Ok(match value {
            "ADD" => Command::Add,
            "DEL" => Command::Del,
            "CHECK" => Command::Check,
            "GC" => Command::Gc,
            "STATUS" => Command::Status,
            "VERSION" => Command::Version,
            "" => {
                return Err(CniError::env(
                    "required env variables [CNI_COMMAND] missing",
                ));
            }
            other => {
                return Err(CniError::env(format!("unknown CNI_COMMAND: {other}")));
            }
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
            Command::Gc => "GC",
            Command::Status => "STATUS",
            Command::Version => "VERSION",
        }
    }

    /// The environment variables skel requires for this command.
    fn required_env(self) -> &'static [&'static str] {
        match self {
            Command::Add | Command::Check => {
                &["CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"]
            }
            Command::Del => &["CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"],
            Command::Gc | Command::Status => &["CNI_PATH"],
            Command::Version => &[],
        }
    }

    /// The oldest config cniVersion that allows this command.
    fn min_version(self) -> &'static str {
        match self {
            Command::Check => "0.4.0",
            Command::Gc | Command::Status => "1.1.0",
            _ => "0.3.0",
        }
    }
}

/// What the runtime put in the environment for one call.
#[derive(Debug, Clone)]
pub struct Invocation {
    pub command: Command,
    pub container_id: String,
    pub netns: String,
    pub ifname: String,
    pub args: Vec<(String, String)>,
}

impl Invocation {
    /// Reads the call from `env` (a lookup, so tests need not touch the process
    /// environment), rejecting what skel and libcni reject, with code 4.
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Result<Self, CniError> {
        let command = Command::parse(&env("CNI_COMMAND").unwrap_or_default())?;
        let missing: Vec<&str> = command
            .required_env()
            .iter()
            .copied()
            .filter(|name| env(name).is_none_or(|v| v.is_empty()))
            .collect();
        if !missing.is_empty() {
            return Err(CniError::env(format!(
                "required env variables [{}] missing",
                missing.join(",")
            )));
        }
        let get = |name| env(name).unwrap_or_default();
        let invocation = Invocation {
            command,
            container_id: get("CNI_CONTAINERID"),
            netns: get("CNI_NETNS"),
            ifname: get("CNI_IFNAME"),
            args: parse_args(&get("CNI_ARGS"))?,
        };
        if matches!(command, Command::Add | Command::Del | Command::Check) {
            validate_container_id(&invocation.container_id)?;
            validate_ifname(&invocation.ifname)?;
        }
        Ok(invocation)
    }
}

/// CNI_ARGS is `K=V;K2=V2`; every pair must have a key and an `=`.
pub fn parse_args(raw: &str) -> Result<Vec<(String, String)>, CniError> {
    raw.split(';')
        .filter(|pair| !pair.is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) if !k.is_empty() => Ok((k.to_string(), v.to_string())),
            _ => Err(CniError::env(format!("CNI_ARGS: invalid pair {pair:?}"))),
        })
        .collect()
}

/// libcni's ValidateContainerID: `^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`.
pub fn validate_container_id(id: &str) -> Result<(), CniError> {
    let mut chars = id.chars();
    match chars.next() {
        None => Err(CniError::env("missing containerID")),
        Some(first)
            if first.is_ascii_alphanumeric()
                && chars.all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) =>
        {
            Ok(())
        }
        Some(_) => Err(CniError::env("invalid characters in containerID").with_details(id)),
    }
}

/// libcni's ValidateInterfaceName: what the kernel accepts as a link name.
pub fn validate_ifname(name: &str) -> Result<(), CniError> {
    const MAX_LEN: usize = 15; // IFNAMSIZ - 1
    if name.is_empty() {
        return Err(CniError::env("interface name is empty"));
    }
    if name.len() > MAX_LEN {
        return Err(
            CniError::env("interface name is too long").with_details(format!(
                "interface name should be less than {} characters",
                MAX_LEN + 1
            )),
        );
    }
    if name == "." || name == ".." {
        return Err(CniError::env("interface name is . or .."));
    }
    if name
        .chars()
        .any(|c| c == '/' || c == ':' || c.is_whitespace())
    {
        return Err(CniError::env(
            "interface name contains / or : or whitespace characters",
        ));
    }
    Ok(())
}

/// A version as numbers, for ordering (`None`: not `X.Y.Z`).
pub fn version_tuple(v: &str) -> Option<(u32, u32, u32)> {
    let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
    let t = (parts.next()??, parts.next()??, parts.next()??);
    parts.next().is_none().then_some(t)
}

/// Refuses a config version we do not speak, or one too old for `command`, with code 1
/// and skel's wording.
pub fn check_version(command: Command, cni_version: &str) -> Result<(), CniError> {
    if !SUPPORTED_VERSIONS.contains(&cni_version) {
        return Err(
            CniError::new(code::INCOMPATIBLE_CNI_VERSION, "incompatible CNI versions")
                .with_details(format!(
                    "config is {cni_version:?}, plugin supports {:?}",
                    SUPPORTED_VERSIONS
                )),
        );
    }
    if version_tuple(cni_version) < version_tuple(command.min_version()) {
        return Err(CniError::new(
            code::INCOMPATIBLE_CNI_VERSION,
            format!("config version does not allow {}", command.as_str()),
        ));
    }
    Ok(())
}

/// The VERSION answer.
pub fn version_info() -> Value {
    json!({ "cniVersion": CURRENT_VERSION, "supportedVersions": SUPPORTED_VERSIONS })
}

/// An IPAM result independent of version, as a module returns it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IpamResult {
    pub ips: Vec<(IpNet, Option<IpAddr>)>,
    pub routes: Vec<Route>,
    pub dns: Dns,
}

/// A route, with the attributes CNI 1.1 added (printed only for 1.1.0 and up).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Route {
    pub dst: IpNet,
    pub gw: Option<IpAddr>,
    pub mtu: Option<u32>,
    pub advmss: Option<u32>,
    pub priority: Option<u32>,
    pub table: Option<u32>,
    pub scope: Option<u8>,
}

impl Route {
    pub fn new(dst: IpNet, gw: Option<IpAddr>) -> Self {
        Route {
            dst,
            gw,
            ..Route::default()
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dns {
    pub nameservers: Vec<String>,
    pub domain: Option<String>,
    pub search: Vec<String>,
    pub options: Vec<String>,
}

impl IpamResult {
    /// The result JSON for `cni_version`: 0.3.x and 0.4.0 carry `ips[].version`.
    pub fn to_json(&self, cni_version: &str) -> Value {
        let with_ip_version = version_tuple(cni_version) < Some((1, 0, 0));
        let with_route_attributes = version_tuple(cni_version) >= Some((1, 1, 0));
        let ips: Vec<Value> = self
            .ips
            .iter()
            .map(|(address, gateway)| {
                let mut ip = json!({ "address": address.to_string() });
                if with_ip_version {
                    ip["version"] = if address.addr().is_ipv4() { "4" } else { "6" }.into();
                }
                if let Some(gw) = gateway {
                    ip["gateway"] = gw.to_string().into();
                }
                ip
            })
            .collect();
        let routes: Vec<Value> = self
            .routes
            .iter()
            .map(|r| {
                let mut route = json!({ "dst": r.dst.to_string() });
                if let Some(gw) = r.gw {
                    route["gw"] = gw.to_string().into();
                }
                if with_route_attributes {
                    let attributes = [
                        ("mtu", r.mtu),
                        ("advmss", r.advmss),
                        ("priority", r.priority),
                        ("table", r.table),
                        ("scope", r.scope.map(u32::from)),
                    ];
                    for (name, value) in attributes {
                        if let Some(value) = value {
                            route[name] = value.into();
                        }
                    }
                }
                route
            })
            .collect();
        let mut dns = serde_json::Map::new();
        let d = &self.dns;
        if !d.nameservers.is_empty() {
            dns.insert("nameservers".into(), json!(d.nameservers));
        }
        if let Some(domain) = &d.domain {
            dns.insert("domain".into(), json!(domain));
        }
        if !d.search.is_empty() {
            dns.insert("search".into(), json!(d.search));
        }
        if !d.options.is_empty() {
            dns.insert("options".into(), json!(d.options));
        }
        let mut out = json!({ "cniVersion": cni_version, "ips": ips, "dns": dns });
        if !routes.is_empty() {
            out["routes"] = routes.into();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn add_requires_skel_env() {
        let err =
            Invocation::from_env(env(&[("CNI_COMMAND", "ADD"), ("CNI_PATH", "/x")])).unwrap_err();
        assert_eq!(err.code, 4);
        assert_eq!(
            err.msg,
            "required env variables [CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME] missing"
        );
    }

    #[test]
    fn del_does_not_require_netns() {
        let inv = Invocation::from_env(env(&[
            ("CNI_COMMAND", "DEL"),
            ("CNI_CONTAINERID", "c1"),
            ("CNI_IFNAME", "eth0"),
            ("CNI_PATH", "/x"),
        ]))
        .unwrap();
        assert_eq!(inv.command, Command::Del);
        assert_eq!(inv.netns, "");
    }

    #[test]
    fn container_ids_as_libcni() {
        for ok in ["a", "0abc", "abc_d.e-f"] {
            assert!(validate_container_id(ok).is_ok(), "{ok}");
        }
        for bad in ["", "_a", "-a", "a/b", "a b", "a;b"] {
            assert_eq!(validate_container_id(bad).unwrap_err().code, 4, "{bad}");
        }
    }

    #[test]
    fn ifnames_as_libcni() {
        assert!(validate_ifname("eth0").is_ok());
        assert!(validate_ifname("abcdefghijklmno").is_ok());
        for bad in ["", ".", "..", "abcdefghijklmnop", "a/b", "a:b", "a b"] {
            assert_eq!(validate_ifname(bad).unwrap_err().code, 4, "{bad}");
        }
    }

    #[test]
    fn cni_args_pairs() {
        assert_eq!(
            parse_args("IgnoreUnknown=1;IP=10.0.0.5;K8S_POD_NAME=").unwrap(),
            vec![
                ("IgnoreUnknown".into(), "1".into()),
                ("IP".into(), "10.0.0.5".into()),
                ("K8S_POD_NAME".into(), "".into())
            ]
        );
        assert_eq!(parse_args("novalue").unwrap_err().code, 4);
        assert!(parse_args("").unwrap().is_empty());
    }

    #[test]
    fn versions_gate_commands() {
        assert!(check_version(Command::Add, "0.3.1").is_ok());
        assert_eq!(check_version(Command::Add, "0.2.0").unwrap_err().code, 1);
        assert_eq!(
            check_version(Command::Check, "0.3.1").unwrap_err().msg,
            "config version does not allow CHECK"
        );
        assert!(check_version(Command::Check, "0.4.0").is_ok());
        assert_eq!(check_version(Command::Gc, "1.0.0").unwrap_err().code, 1);
        assert!(check_version(Command::Status, "1.1.0").is_ok());
    }

    #[test]
    fn old_results_carry_ip_version() {
        let result = IpamResult {
            ips: vec![
                (
                    "10.1.2.3/24".parse().unwrap(),
                    Some("10.1.2.1".parse().unwrap()),
                ),
                ("fd00::3/64".parse().unwrap(), None),
            ],
            routes: vec![Route {
                mtu: Some(1400),
                scope: Some(0),
                ..Route::new("0.0.0.0/0".parse().unwrap(), None)
            }],
            dns: Dns::default(),
        };
        let old = result.to_json("0.4.0");
        assert_eq!(old["ips"][0]["version"], "4");
        assert_eq!(old["ips"][1]["version"], "6");
        assert_eq!(old["ips"][0]["gateway"], "10.1.2.1");
        let new = result.to_json("1.0.0");
        assert!(new["ips"][0].get("version").is_none());
        assert_eq!(new["routes"][0], json!({"dst": "0.0.0.0/0"}));
        assert_eq!(new["dns"], json!({}));
        // CNI 1.1 route attributes, only from 1.1.0 on.
        let newest = result.to_json("1.1.0");
        assert_eq!(
            newest["routes"][0],
            json!({"dst": "0.0.0.0/0", "mtu": 1400, "scope": 0})
        );
    }
}
