//! CNI_ARGS as host-local v1.1.1 reads them: libcni's `types.LoadArgs` into its
//! `IPAMEnvArgs`, whose only keys are `IgnoreUnknown` and `IP` (one address, with or
//! without a prefix). Any other key is refused unless `IgnoreUnknown` is true.

use crate::range::{Subnet, parse_ip};
use std::fmt::Write;
use std::net::IpAddr;

/// The address CNI_ARGS `IP=` requests, if any.
pub fn requested_ip(args: &[(String, String)]) -> Result<Option<IpAddr>, String> {
    if args.is_empty() {
        return Ok(None);
    }
    // LoadArgs works on the raw `K=V;K2=V2` text: rebuild it so a value holding `=`
    // is refused as host-local refuses it.
    let raw = args
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(";");
    let mut ip = None;
    let mut ignore_unknown = false;
    let mut unknown = Vec::new();
    for pair in raw.split(';') {
        let [key, value] = pair.split('=').collect::<Vec<_>>()[..] else {
            return Err(format!("ARGS: invalid pair {}", go_quote(pair)));
        };
        let parsed = match key {
            "IgnoreUnknown" => parse_bool(value).map(|b| ignore_unknown = b),
            "IP" => parse_cni_ip(value).map(|v| ip = v),
            "CommonArgs" => {
                return Err("ARGS: cannot unmarshal into field 'CommonArgs' - type \
                            '*types.CommonArgs' does not implement encoding.TextUnmarshaler"
                    .into());
            }
            _ => {
                unknown.push(pair);
                Ok(())
            }
        };
        parsed.map_err(|e| format!("ARGS: error parsing value of pair {}: {e}", go_quote(pair)))?;
    }
    if !unknown.is_empty() && !ignore_unknown {
        let quoted: Vec<String> = unknown.iter().map(|p| go_quote(p)).collect();
        return Err(format!("ARGS: unknown args [{}]", quoted.join(" ")));
    }
    Ok(ip)
}

/// libcni's `UnmarshallableBool`.
fn parse_bool(value: &str) -> Result<bool, String> {
    match value.to_lowercase().as_str() {
        "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        other => Err(format!("boolean unmarshal error: invalid input {other}")),
    }
}

/// The plugins' `ip.IP` text form, `<ip>[/<prefix>]`, reduced to the address as
/// `ToIP` does; empty text is no address.
pub fn parse_cni_ip(text: &str) -> Result<Option<IpAddr>, String> {
    if text.is_empty() {
        return Ok(None);
    }
    let ip = if text.contains('/') {
        Subnet::parse(text).ok().map(|s| s.addr)
    } else {
        parse_ip(text)
    };
    ip.map(Some)
        .ok_or_else(|| format!("invalid IP address {text}"))
}

/// Go's `%q` of a string.
pub fn go_quote(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            '\x07' => out.push_str("\\a"),
            '\x08' => out.push_str("\\b"),
            '\x0c' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\x0b' => out.push_str("\\v"),
            c if c == ' ' || !(c.is_control() || c.is_whitespace()) => out.push(c),
            c if (c as u32) < 0x80 => write!(out, "\\x{:02x}", c as u32).unwrap(),
            c if (c as u32) < 0x10000 => write!(out, "\\u{:04x}", c as u32).unwrap(),
            c => write!(out, "\\U{:08x}", c as u32).unwrap(),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range::tests::ip;

    fn load(pairs: &[(&str, &str)]) -> Result<Option<IpAddr>, String> {
        let owned: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        requested_ip(&owned)
    }

    #[test]
    fn reads_ip_with_or_without_prefix() {
        assert_eq!(load(&[("IP", "10.1.2.10")]), Ok(Some(ip("10.1.2.10"))));
        assert_eq!(load(&[("IP", "10.1.2.11/24")]), Ok(Some(ip("10.1.2.11"))));
        assert_eq!(
            load(&[("IP", "2001:db8::5/64")]),
            Ok(Some(ip("2001:db8::5")))
        );
        assert_eq!(load(&[("IP", "")]), Ok(None));
        assert_eq!(load(&[]), Ok(None));
    }

    #[test]
    fn refuses_a_list_of_addresses_as_v1_1_1_does() {
        assert_eq!(
            load(&[("IP", "10.0.0.3,10.0.0.4")]),
            Err(r#"ARGS: error parsing value of pair "IP=10.0.0.3,10.0.0.4": invalid IP address 10.0.0.3,10.0.0.4"#.into())
        );
    }

    #[test]
    fn refuses_unknown_keys_unless_ignore_unknown() {
        assert_eq!(
            load(&[("IP", "10.0.0.3"), ("K8S_POD_NAME", "x"), ("Foo", "\"b\\")]),
            Err(r#"ARGS: unknown args ["K8S_POD_NAME=x" "Foo=\"b\\"]"#.into())
        );
        assert_eq!(
            load(&[
                ("K8S_POD_NAME", "x"),
                ("IP", "10.0.0.3"),
                ("IgnoreUnknown", "1")
            ]),
            Ok(Some(ip("10.0.0.3")))
        );
        assert_eq!(
            load(&[("IgnoreUnknown", "TRUE"), ("ip", "10.0.0.3")]),
            Ok(None)
        );
        assert!(load(&[("IgnoreUnknown", "false"), ("X", "1")]).is_err());
    }

    #[test]
    fn reports_bad_values_and_pairs_like_libcni() {
        assert_eq!(
            load(&[("IgnoreUnknown", "Yes")]),
            Err(r#"ARGS: error parsing value of pair "IgnoreUnknown=Yes": boolean unmarshal error: invalid input yes"#.into())
        );
        assert_eq!(
            load(&[("K", "a=b")]),
            Err(r#"ARGS: invalid pair "K=a=b""#.into())
        );
        assert!(
            load(&[("CommonArgs", "1")])
                .unwrap_err()
                .contains("does not implement encoding.TextUnmarshaler")
        );
    }

    #[test]
    fn quotes_like_go() {
        assert_eq!(go_quote("a\"b\\c\td\u{1}é"), r#""a\"b\\c\td\x01é""#);
    }
}
