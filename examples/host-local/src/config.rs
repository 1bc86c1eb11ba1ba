//! The network configuration as host-local v1.1.1's `LoadIPAMConfig` reads it: range
//! sets (legacy single range, `ranges`, `runtimeConfig.ipRanges`), requested addresses
//! (CNI_ARGS `IP`, `args.cni.ips`, `runtimeConfig.ips`), routes and resolv.conf, with
//! the same checks in the same order and the same messages. JSON keys match Go's
//! decoder: case-insensitively, `null` as absent. Also the options host-local lacks,
//! all off by default: `exclude`, `reuseCooldownSeconds` and `resolvConfContents`.

use crate::args::{parse_cni_ip, requested_ip};
use crate::range::{RangeSpec, Subnet, parse_ip};
use crate::range_set::RangeSet;
use ipnet::IpNet;
use serde_json::{Map, Value};
use std::net::IpAddr;
use wasm_ipam_guest::error::code;
use wasm_ipam_guest::{Error, Route};

/// The validated configuration of one call.
#[derive(Debug, Clone)]
pub struct IpamConfig {
    /// Range sets in host-local's order: `runtimeConfig.ipRanges`, the legacy single
    /// range, then `ranges`. One address is allocated from each.
    pub ranges: Vec<RangeSet>,
    /// Requested addresses in host-local's order: CNI_ARGS, `args.cni.ips`, then
    /// `runtimeConfig.ips`.
    pub requested_ips: Vec<IpAddr>,
    pub routes: Vec<Route>,
    /// `resolvConf`: a path on the host; empty when unset.
    pub resolv_conf: String,
    /// `resolvConfContents`: the text of `resolvConf`. A module cannot read files, so
    /// the host injects this key before calling the module.
    pub resolv_conf_contents: Option<String>,
    /// `exclude`: addresses and networks never handed out.
    pub exclude: Vec<IpNet>,
    /// `reuseCooldownSeconds`: how long a released address rests before reuse.
    pub reuse_cooldown_seconds: Option<u64>,
}

type Object = Map<String, Value>;

/// Go's `encoding/json` field lookup: an exact key, else one equal ignoring case.
fn raw<'a>(obj: &'a Object, key: &str) -> Option<&'a Value> {
    obj.get(key).or_else(|| {
        obj.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(key))
            .map(|(_, v)| v)
    })
}

/// A field, with `null` read as absent.
fn field<'a>(obj: &'a Object, key: &str) -> Option<&'a Value> {
    raw(obj, key).filter(|v| !v.is_null())
}

fn type_error(value: &Value, go_type: &str) -> String {
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    format!("json: cannot unmarshal {kind} into Go value of type {go_type}")
}

fn object<'a>(value: Option<&'a Value>, go_type: &str) -> Result<Option<&'a Object>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(obj)) => Ok(Some(obj)),
        Some(other) => Err(type_error(other, go_type)),
    }
}

fn array<'a>(value: Option<&'a Value>, go_type: &str) -> Result<&'a [Value], String> {
    match value {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(type_error(other, go_type)),
    }
}

fn string(value: Option<&Value>) -> Result<Option<&str>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(other) => Err(type_error(other, "string")),
    }
}

/// A `net.IP` field: empty text is no address.
fn net_ip(value: Option<&Value>) -> Result<Option<IpAddr>, String> {
    match string(value)? {
        None | Some("") => Ok(None),
        Some(text) => parse_ip(text)
            .map(Some)
            .ok_or_else(|| format!("invalid IP address: {text}")),
    }
}

/// A `types.IPNet` field; `null` reaches its decoder as empty text, as in Go.
fn cidr(value: &Value) -> Result<Subnet, String> {
    match value {
        Value::Null => Subnet::parse(""),
        Value::String(text) => Subnet::parse(text),
        other => Err(type_error(other, "string")),
    }
}

/// A list of the plugins' `ip.IP`; an empty entry is kept as `None`, to be refused
/// later as host-local does.
fn cni_ips(value: Option<&Value>) -> Result<Vec<Option<IpAddr>>, String> {
    array(value, "[]*ip.IP")?
        .iter()
        .map(|v| string(Some(v)).and_then(|s| parse_cni_ip(s.unwrap_or_default())))
        .collect()
}

fn range_spec(obj: &Object) -> Result<RangeSpec, String> {
    Ok(RangeSpec {
        subnet: raw(obj, "subnet").map(cidr).transpose()?,
        range_start: net_ip(field(obj, "rangeStart"))?,
        range_end: net_ip(field(obj, "rangeEnd"))?,
        gateway: net_ip(field(obj, "gateway"))?,
    })
}

fn range_sets(value: Option<&Value>) -> Result<Vec<Vec<RangeSpec>>, String> {
    array(value, "[]allocator.RangeSet")?
        .iter()
        .map(|set| {
            array(Some(set), "allocator.RangeSet")?
                .iter()
                .map(|r| {
                    object(Some(r), "allocator.Range")?
                        .map_or_else(|| Ok(RangeSpec::default()), range_spec)
                })
                .collect()
        })
        .collect()
}

fn routes(value: Option<&Value>) -> Result<Vec<Route>, String> {
    array(value, "[]*types.Route")?
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let obj = object(Some(v), "types.Route")?;
            let dst = obj.and_then(|o| raw(o, "dst"));
            let dst = dst.ok_or_else(|| format!("route {i} has no dst"))?;
            // host-local v1.1.1 predates CNI 1.1's route attributes: it reads dst and gw.
            let route = Route::new(cidr(dst)?);
            Ok(match net_ip(obj.and_then(|o| field(o, "gw")))? {
                Some(gw) => route.gw(gw),
                None => route,
            })
        })
        .collect()
}

fn exclusions(value: Option<&Value>) -> Result<Vec<IpNet>, String> {
    array(value, "[]string")?
        .iter()
        .map(|v| {
            let text = string(Some(v))?.unwrap_or_default();
            let net = if text.contains('/') {
                Subnet::parse(text)
                    .ok()
                    .and_then(|s| IpNet::new(s.addr, s.prefix).ok())
            } else {
                parse_ip(text).map(IpNet::from)
            };
            net.map(|n| n.trunc())
                .ok_or_else(|| format!("exclude: {text:?} is neither an address nor a CIDR"))
        })
        .collect()
}

fn cooldown(value: Option<&Value>) -> Result<Option<u64>, String> {
    match value {
        None => Ok(None),
        Some(v) => v
            .as_u64()
            .map(|s| Some(s).filter(|s| *s > 0))
            .ok_or_else(|| "reuseCooldownSeconds must be a whole number of seconds".into()),
    }
}

/// libcni's `version.GreaterThanOrEqualTo(version, "0.3.0")`; an unparsable version
/// is not.
fn at_least_0_3_0(version: &str) -> bool {
    if version.is_empty() {
        return false;
    }
    let parts: Vec<&str> = version.split('.').collect();
    if parts.len() > 3 {
        return false;
    }
    let mut numbers = [0i64; 3];
    for (slot, part) in numbers.iter_mut().zip(&parts) {
        match part.parse() {
            Ok(n) => *slot = n,
            Err(_) => return false,
        }
    }
    numbers >= [0, 3, 0]
}

/// What JSON decoding yields, before host-local's checks.
struct Decoded<'a> {
    cni_version: &'a str,
    has_ipam: bool,
    legacy: RangeSpec,
    ranges: Vec<Vec<RangeSpec>>,
    runtime_ranges: Vec<Vec<RangeSpec>>,
    args_ips: Vec<Option<IpAddr>>,
    runtime_ips: Vec<Option<IpAddr>>,
    routes: Vec<Route>,
    resolv_conf: String,
    resolv_conf_contents: Option<String>,
    exclude: Vec<IpNet>,
    reuse_cooldown_seconds: Option<u64>,
}

fn decode(netconf: &Value) -> Result<Decoded<'_>, String> {
    let top = object(Some(netconf), "allocator.Net")?.ok_or("IPAM config missing 'ipam' key")?;
    let ipam = object(raw(top, "ipam"), "allocator.IPAMConfig")?;
    let runtime = object(raw(top, "runtimeConfig"), "struct")?;
    let args = object(raw(top, "args"), "struct")?;
    let cni_args = args
        .map(|a| object(raw(a, "cni"), "allocator.IPAMArgs"))
        .transpose()?;
    let ipam_field = |key| ipam.and_then(|i| field(i, key));
    Ok(Decoded {
        cni_version: string(raw(top, "cniVersion"))?.unwrap_or_default(),
        has_ipam: ipam.is_some(),
        legacy: ipam.map(range_spec).transpose()?.unwrap_or_default(),
        ranges: range_sets(ipam.and_then(|i| raw(i, "ranges")))?,
        runtime_ranges: range_sets(runtime.and_then(|r| raw(r, "ipRanges")))?,
        args_ips: cni_ips(cni_args.flatten().and_then(|a| raw(a, "ips")))?,
        runtime_ips: cni_ips(runtime.and_then(|r| raw(r, "ips")))?,
        routes: routes(ipam_field("routes"))?,
        resolv_conf: string(ipam_field("resolvConf"))?.unwrap_or_default().into(),
        resolv_conf_contents: string(ipam_field("resolvConfContents"))?.map(str::to_string),
        exclude: exclusions(ipam_field("exclude"))?,
        reuse_cooldown_seconds: cooldown(ipam_field("reuseCooldownSeconds"))?,
    })
}

/// Loads and validates the configuration the way host-local does on every command.
/// Configuration errors are code 7; CNI_ARGS errors code 4.
pub fn load(netconf: &Value, args: &[(String, String)]) -> Result<IpamConfig, Error> {
    let d = decode(netconf).map_err(Error::invalid_config)?;
    if !d.has_ipam {
        return Err(Error::invalid_config("IPAM config missing 'ipam' key"));
    }

    let env_ip =
        requested_ip(args).map_err(|e| Error::new(code::INVALID_ENVIRONMENT_VARIABLES, e))?;
    let mut requested_ips = env_ip
        .into_iter()
        .map(Some)
        .chain(d.args_ips)
        .chain(d.runtime_ips)
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| Error::invalid_config("cannot understand ip: IP <nil> not v4 nor v6"))?;
    // A pod's fixed addresses (pod annotation wasm-ipam.io/ip-addrs, passed by the
    // runtime's pod-annotations capability), asked for as CNI_ARGS IP= asks.
    for ip in wasm_ipam_guest::annotated_ips_in(netconf)? {
        if !requested_ips.contains(&ip) {
            requested_ips.push(ip);
        }
    }

    let mut specs = d.runtime_ranges;
    if d.legacy.subnet.is_some() {
        specs.push(vec![d.legacy]);
    }
    specs.extend(d.ranges);
    if specs.is_empty() {
        return Err(Error::invalid_config("no IP ranges specified"));
    }
    let ranges = specs
        .iter()
        .enumerate()
        .map(|(i, set)| {
            RangeSet::canonicalize(set)
                .map_err(|e| Error::invalid_config(format!("invalid range set {i}: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;

    let v4 = ranges.iter().filter(|s| s.is_ipv4()).count();
    if (v4 > 1 || ranges.len() - v4 > 1) && !at_least_0_3_0(d.cni_version) {
        return Err(Error::invalid_config(format!(
            "CNI version {} does not support more than 1 address per family",
            d.cni_version
        )));
    }
    for (i, p1) in ranges.iter().enumerate() {
        if let Some(j) = ranges[i + 1..].iter().position(|p2| p1.overlaps(p2)) {
            return Err(Error::invalid_config(format!(
                "range set {i} overlaps with {}",
                i + j + 1
            )));
        }
    }

    Ok(IpamConfig {
        ranges,
        requested_ips,
        routes: d.routes,
        resolv_conf: d.resolv_conf,
        resolv_conf_contents: d.resolv_conf_contents,
        exclude: d.exclude,
        reuse_cooldown_seconds: d.reuse_cooldown_seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range::Range;
    use crate::range::tests::ip;
    use serde_json::json;

    fn range(subnet: &str, start: &str, end: &str, gw: &str) -> Range {
        Range {
            subnet: subnet.parse().unwrap(),
            range_start: ip(start),
            range_end: ip(end),
            gateway: ip(gw),
        }
    }

    fn load_ok(netconf: Value, args: &[(&str, &str)]) -> IpamConfig {
        let args: Vec<(String, String)> = args
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        load(&netconf, &args).unwrap()
    }

    fn load_err(netconf: Value) -> Error {
        load(&netconf, &[]).unwrap_err()
    }

    #[test]
    fn parses_an_old_style_config() {
        let conf = load_ok(
            json!({"cniVersion": "0.3.1", "name": "mynet", "type": "ipvlan", "master": "foo0",
                "ipam": {"type": "host-local", "subnet": "10.1.2.0/24", "rangeStart": "10.1.2.9",
                         "rangeEnd": "10.1.2.20", "gateway": "10.1.2.30"}}),
            &[],
        );
        assert_eq!(
            conf.ranges,
            vec![RangeSet(vec![range(
                "10.1.2.0/24",
                "10.1.2.9",
                "10.1.2.20",
                "10.1.2.30"
            )])]
        );
        assert!(conf.requested_ips.is_empty() && conf.routes.is_empty());
        assert_eq!((conf.exclude.len(), conf.reuse_cooldown_seconds), (0, None));
    }

    #[test]
    fn parses_a_new_style_config() {
        let conf = load_ok(
            json!({"cniVersion": "0.3.1", "name": "mynet", "ipam": {"type": "host-local", "ranges": [
                [{"subnet": "10.1.2.0/24", "rangeStart": "10.1.2.9", "rangeEnd": "10.1.2.20",
                  "gateway": "10.1.2.30"}, {"subnet": "10.1.4.0/24"}],
                [{"subnet": "11.1.2.0/24", "rangeStart": "11.1.2.9", "rangeEnd": "11.1.2.20",
                  "gateway": "11.1.2.30"}]]}}),
            &[],
        );
        assert_eq!(
            conf.ranges,
            vec![
                RangeSet(vec![
                    range("10.1.2.0/24", "10.1.2.9", "10.1.2.20", "10.1.2.30"),
                    range("10.1.4.0/24", "10.1.4.1", "10.1.4.254", "10.1.4.1"),
                ]),
                RangeSet(vec![range(
                    "11.1.2.0/24",
                    "11.1.2.9",
                    "11.1.2.20",
                    "11.1.2.30"
                )]),
            ]
        );
    }

    #[test]
    fn puts_runtime_ranges_first_then_the_legacy_range() {
        let conf = load_ok(
            json!({"cniVersion": "0.3.1", "name": "mynet",
                "runtimeConfig": {"irrelevant": "a", "ipRanges": [[{"subnet": "12.1.3.0/24"}]]},
                "ipam": {"type": "host-local", "subnet": "10.1.2.0/24", "rangeStart": "10.1.2.9",
                         "rangeEnd": "10.1.2.20", "gateway": "10.1.2.30",
                         "ranges": [[{"subnet": "11.1.2.0/24", "rangeStart": "11.1.2.9",
                                      "rangeEnd": "11.1.2.20", "gateway": "11.1.2.30"}]]}}),
            &[],
        );
        assert_eq!(
            conf.ranges,
            vec![
                RangeSet(vec![range(
                    "12.1.3.0/24",
                    "12.1.3.1",
                    "12.1.3.254",
                    "12.1.3.1"
                )]),
                RangeSet(vec![range(
                    "10.1.2.0/24",
                    "10.1.2.9",
                    "10.1.2.20",
                    "10.1.2.30"
                )]),
                RangeSet(vec![range(
                    "11.1.2.0/24",
                    "11.1.2.9",
                    "11.1.2.20",
                    "11.1.2.30"
                )]),
            ]
        );
    }

    fn three_sets(extra: Value) -> Value {
        let mut conf = json!({"cniVersion": "0.3.1", "name": "mynet", "ipam": {"type": "host-local",
            "ranges": [
                [{"subnet": "10.1.2.0/24", "rangeStart": "10.1.2.9", "rangeEnd": "10.1.2.20",
                  "gateway": "10.1.2.30"}],
                [{"subnet": "11.1.2.0/24", "rangeStart": "11.1.2.9", "rangeEnd": "11.1.2.20",
                  "gateway": "11.1.2.30"}],
                [{"subnet": "2001:db8:1::/64"}]]}});
        conf.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        conf
    }

    #[test]
    fn reads_cni_args_ip_with_and_without_prefix() {
        for arg in ["10.1.2.10", "10.1.2.10/24"] {
            let conf = load_ok(three_sets(json!({})), &[("IP", arg)]);
            assert_eq!(conf.requested_ips, vec![ip("10.1.2.10")]);
        }
    }

    #[test]
    fn orders_requested_ips_env_then_args_then_runtime() {
        for (ips, env) in [
            (
                json!(["10.1.2.11", "11.11.11.11", "2001:db8:1::11"]),
                "10.1.2.10",
            ),
            (
                json!(["10.1.2.11/24", "11.11.11.11/24", "2001:db8:1::11/64"]),
                "10.1.2.10/24",
            ),
        ] {
            let conf = load_ok(
                three_sets(json!({"args": {"cni": {"ips": ips}},
                                  "runtimeConfig": {"ips": ["192.168.0.5/24"]}})),
                &[("IP", env)],
            );
            let expected = [
                "10.1.2.10",
                "10.1.2.11",
                "11.11.11.11",
                "2001:db8:1::11",
                "192.168.0.5",
            ];
            assert_eq!(conf.requested_ips, expected.map(ip).to_vec());
        }
    }

    #[test]
    fn a_pod_annotation_asks_for_addresses_after_the_others_and_bad_ones_name_it() {
        let annotated = |value: &str| {
            json!({"cniVersion": "1.0.0", "name": "mynet",
                "runtimeConfig": {"ips": ["10.1.2.5"],
                    "io.kubernetes.cri.pod-annotations": {"wasm-ipam.io/ip-addrs": value}},
                "ipam": {"type": "host-local", "subnet": "10.1.2.0/24"}})
        };
        let conf = load_ok(annotated(r#"["10.1.2.7", "2001:db8::7"]"#), &[]);
        assert_eq!(
            conf.requested_ips,
            ["10.1.2.5", "10.1.2.7", "2001:db8::7"].map(ip).to_vec()
        );
        let err = load(&annotated("10.1.2.7"), &[]).unwrap_err();
        assert_eq!(err.code, code::INVALID_NETWORK_CONFIG);
        assert!(
            err.msg
                .contains("pod annotation wasm-ipam.io/ip-addrs is \"10.1.2.7\""),
            "{}",
            err.msg
        );
    }

    #[test]
    fn parses_custom_ips_from_runtime_configuration() {
        let conf = load_ok(
            json!({"cniVersion": "0.3.1", "name": "mynet",
                "runtimeConfig": {"ips": ["192.168.0.1", "192.168.0.5/24", "2001:db8::1/64"]},
                "ipam": {"type": "host-local", "subnet": "10.1.2.0/24"}}),
            &[],
        );
        assert_eq!(
            conf.requested_ips,
            ["192.168.0.1", "192.168.0.5", "2001:db8::1"]
                .map(ip)
                .to_vec()
        );
    }

    #[test]
    fn refuses_an_empty_requested_ip_and_bad_args() {
        let err = load_err(three_sets(json!({"runtimeConfig": {"ips": [""]}})));
        assert_eq!(err.msg, "cannot understand ip: IP <nil> not v4 nor v6");
        let err = load_err(three_sets(json!({"args": {"cni": {"ips": ["nope"]}}})));
        assert_eq!(err.msg, "invalid IP address nope");
        let args = [("K8S_POD_NAME".to_string(), "x".to_string())];
        let err = load(&three_sets(json!({})), &args).unwrap_err();
        assert_eq!(
            (err.code, err.msg.as_str()),
            (4, r#"ARGS: unknown args ["K8S_POD_NAME=x"]"#)
        );
    }

    #[test]
    fn detects_overlap_between_range_sets() {
        let err = load_err(
            json!({"cniVersion": "0.3.1", "name": "mynet", "ipam": {"ranges": [
            [{"subnet": "10.1.2.0/24"}, {"subnet": "10.2.2.0/24"}],
            [{"subnet": "10.1.4.0/24"}, {"subnet": "10.1.6.0/24"}, {"subnet": "10.1.8.0/24"},
             {"subnet": "10.1.2.0/24"}]]}}),
        );
        assert_eq!(
            (err.code, err.msg.as_str()),
            (7, "range set 0 overlaps with 1")
        );
    }

    #[test]
    fn detects_overlap_within_a_range_set() {
        let err = load_err(
            json!({"cniVersion": "0.3.1", "name": "mynet", "ipam": {"ranges": [
            [{"subnet": "10.1.0.0/22"}, {"subnet": "10.1.2.0/24"}]]}}),
        );
        assert_eq!(
            err.msg,
            "invalid range set 0: subnets 10.1.0.1-10.1.3.254 and 10.1.2.1-10.1.2.254 overlap"
        );
    }

    #[test]
    fn refuses_mixed_families_in_a_set() {
        let err = load_err(
            json!({"cniVersion": "0.3.1", "name": "mynet", "ipam": {"ranges": [
            [{"subnet": "10.1.0.0/22"}, {"subnet": "2001:db8:5::/64"}]]}}),
        );
        assert_eq!(err.msg, "invalid range set 0: mixed address families");
    }

    #[test]
    fn limits_cni_0_2_0_to_one_address_per_family() {
        let err = load_err(
            json!({"cniVersion": "0.2.0", "name": "mynet", "ipam": {"ranges": [
            [{"subnet": "10.1.2.0/24"}], [{"subnet": "11.1.2.0/24"}]]}}),
        );
        assert_eq!(
            err.msg,
            "CNI version 0.2.0 does not support more than 1 address per family"
        );
        let conf = load_ok(
            json!({"cniVersion": "0.2.0", "name": "mynet", "ipam": {"ranges": [
                [{"subnet": "10.1.2.0/24"}], [{"subnet": "2001:db8:1::/48"}]]}}),
            &[],
        );
        assert_eq!(conf.ranges.len(), 2);
    }

    #[test]
    fn reports_missing_ipam_and_missing_ranges() {
        let err = load_err(json!({"cniVersion": "1.0.0", "name": "n"}));
        assert_eq!(err.msg, "IPAM config missing 'ipam' key");
        let err = load_err(
            json!({"cniVersion": "1.0.0", "name": "n", "ipam": {"rangeStart": "10.0.0.2"}}),
        );
        assert_eq!(err.msg, "no IP ranges specified");
        let err = load_err(json!({"cniVersion": "1.0.0", "name": "n", "ipam": {"ranges": [[]]}}));
        assert_eq!(err.msg, "invalid range set 0: empty range set");
        let err = load_err(json!({"cniVersion": "1.0.0", "name": "n", "ipam": {"ranges": [[{}]]}}));
        assert_eq!(err.msg, "invalid range set 0: IP <nil> not v4 nor v6");
    }

    #[test]
    fn decodes_like_go_json() {
        let conf = load_ok(
            json!({"cniVersion": "1.0.0", "name": "n", "ipam": {
                "Subnet": "10.0.0.0/24", "RANGESTART": "10.0.0.10", "gateway": null, "rangeEnd": ""}}),
            &[],
        );
        assert_eq!(
            conf.ranges,
            vec![RangeSet(vec![range(
                "10.0.0.0/24",
                "10.0.0.10",
                "10.0.0.254",
                "10.0.0.1"
            )])]
        );
        let err = load_err(json!({"cniVersion": "1.0.0", "name": "n", "ipam": {"subnet": null}}));
        assert_eq!(err.msg, "invalid CIDR address: ");
        let err = load_err(json!({"cniVersion": "1.0.0", "name": "n", "ipam": {
            "subnet": "10.0.0.0/24", "gateway": "10.0.0.300"}}));
        assert_eq!(err.msg, "invalid IP address: 10.0.0.300");
    }

    #[test]
    fn reads_routes_resolv_conf_and_extras() {
        let conf = load_ok(
            json!({"cniVersion": "1.0.0", "name": "n", "ipam": {"subnet": "10.0.0.0/24",
                "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.5.3/24", "gw": "10.0.0.254"},
                           {"dst": "2001:DB8::/32"}],
                "resolvConf": "/etc/resolv.conf", "resolvConfContents": "nameserver 1.1.1.1",
                "exclude": ["10.0.0.5", "10.0.0.64/26"], "reuseCooldownSeconds": 30}}),
            &[],
        );
        let routes: Vec<(&str, Option<&str>)> = conf
            .routes
            .iter()
            .map(|r| (r.dst.as_str(), r.gw.as_deref()))
            .collect();
        assert_eq!(
            routes,
            [
                ("0.0.0.0/0", None),
                ("192.168.5.3/24", Some("10.0.0.254")),
                ("2001:db8::/32", None)
            ]
        );
        assert_eq!(conf.resolv_conf, "/etc/resolv.conf");
        assert_eq!(
            conf.resolv_conf_contents.as_deref(),
            Some("nameserver 1.1.1.1")
        );
        assert_eq!(
            conf.exclude,
            vec![
                "10.0.0.5/32".parse::<IpNet>().unwrap(),
                "10.0.0.64/26".parse().unwrap()
            ]
        );
        assert_eq!(conf.reuse_cooldown_seconds, Some(30));

        let err = load_err(json!({"cniVersion": "1.0.0", "name": "n",
            "ipam": {"subnet": "10.0.0.0/24", "exclude": ["10.0.0.x"]}}));
        assert_eq!(
            err.msg,
            "exclude: \"10.0.0.x\" is neither an address nor a CIDR"
        );
        let err = load_err(json!({"cniVersion": "1.0.0", "name": "n",
            "ipam": {"subnet": "10.0.0.0/24", "reuseCooldownSeconds": -1}}));
        assert_eq!(
            err.msg,
            "reuseCooldownSeconds must be a whole number of seconds"
        );
    }

    #[test]
    fn compares_cni_versions_like_libcni() {
        for (v, ok) in [
            ("0.3.0", true),
            ("0.3.1", true),
            ("1.0.0", true),
            ("0.2.0", false),
            ("", false),
            ("0.4", true),
            ("1.0.0.0", false),
            ("x", false),
        ] {
            assert_eq!(at_least_0_3_0(v), ok, "{v}");
        }
    }
}
