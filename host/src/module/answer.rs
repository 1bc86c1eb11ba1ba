//! What a module answered, checked before anything is committed or printed: a result
//! must be valid CNI of bounded size, and an error must carry a code a module may use
//! and text of bounded length. A module is a stranger's code; its answer reaches the
//! runtime only through here.

use crate::cni::{self, IpamResult};
use crate::error::{CniError, code};
use crate::limits::{
    MAX_DNS_NAMESERVERS, MAX_DNS_OPTIONS, MAX_DNS_SEARCH, MAX_ERROR_DETAILS_BYTES,
    MAX_ERROR_MSG_BYTES, MAX_RESULT_IPS, MAX_RESULT_ROUTES, truncated,
};
use crate::module::bindings::types;
use ipnet::IpNet;
use std::net::IpAddr;

/// The module's error as the runtime will see it: text cut to its bounds, and a code
/// the module may not use (0, one the CNI spec does not define, or the host's own)
/// replaced by [`code::RESERVED_CODE_FROM_MODULE`] with the original in `details`, so
/// no module can pose as the host.
pub fn module_error(e: types::Error) -> CniError {
    let msg = truncated(&e.msg, MAX_ERROR_MSG_BYTES);
    let details = truncated(&e.details, MAX_ERROR_DETAILS_BYTES);
    if code::module_may_return(e.code) {
        return CniError::new(e.code, msg).with_details(details);
    }
    let original = if details.is_empty() {
        format!("code {}: {msg}", e.code)
    } else {
        format!("code {}: {msg} ({details})", e.code)
    };
    CniError::new(
        code::RESERVED_CODE_FROM_MODULE,
        format!(
            "module failed with code {}, which modules may not use",
            e.code
        ),
    )
    .with_details(truncated(&original, MAX_ERROR_DETAILS_BYTES))
}

fn invalid(what: &str, value: &str) -> CniError {
    CniError::new(
        code::INVALID_MODULE_RESULT,
        format!(
            "module returned an invalid {what}: {:?}",
            truncated(value, 256)
        ),
    )
}

fn too_many(what: &str, count: usize, max: usize) -> CniError {
    CniError::new(
        code::INVALID_MODULE_RESULT,
        format!("module returned {count} {what}; the host accepts at most {max}"),
    )
}

fn at_most(what: &str, count: usize, max: usize) -> Result<(), CniError> {
    if count > max {
        return Err(too_many(what, count, max));
    }
    Ok(())
}

fn cidr(what: &str, s: &str) -> Result<IpNet, CniError> {
    s.parse().map_err(|_| invalid(what, s))
}

/// An optional gateway, which must be of the family of the address it serves.
fn gateway(what: &str, gw: Option<&str>, of: &IpNet) -> Result<Option<IpAddr>, CniError> {
    let Some(gw) = gw else { return Ok(None) };
    let ip: IpAddr = gw.parse().map_err(|_| invalid(what, gw))?;
    if ip.is_ipv4() != of.addr().is_ipv4() {
        return Err(invalid(&format!("{what} (family differs from {of})"), gw));
    }
    Ok(Some(ip))
}

/// Checks the module's result is valid CNI within the host's bounds.
pub fn checked_result(result: types::IpamResult) -> Result<IpamResult, CniError> {
    at_most("ips", result.ips.len(), MAX_RESULT_IPS)?;
    at_most("routes", result.routes.len(), MAX_RESULT_ROUTES)?;
    let dns = &result.dns;
    at_most(
        "DNS nameservers",
        dns.nameservers.len(),
        MAX_DNS_NAMESERVERS,
    )?;
    at_most("DNS search domains", dns.search.len(), MAX_DNS_SEARCH)?;
    at_most("DNS options", dns.options.len(), MAX_DNS_OPTIONS)?;
    let ips = result
        .ips
        .iter()
        .map(|i| {
            let address = cidr("address", &i.address)?;
            Ok((address, gateway("gateway", i.gateway.as_deref(), &address)?))
        })
        .collect::<Result<_, CniError>>()?;
    let routes = result
        .routes
        .iter()
        .map(|r| {
            let dst = cidr("route dst", &r.dst)?;
            Ok(cni::Route {
                dst,
                gw: gateway("route gw", r.gw.as_deref(), &dst)?,
                mtu: r.mtu,
                advmss: r.advmss,
                priority: r.priority,
                table: r.table,
                scope: r.scope,
            })
        })
        .collect::<Result<_, CniError>>()?;
    for ns in &dns.nameservers {
        if !is_nameserver(ns) {
            return Err(invalid("DNS nameserver (must be an IP address)", ns));
        }
    }
    for name in dns.domain.iter().chain(&dns.search) {
        if !is_domain_name(name) {
            return Err(invalid("DNS domain name", name));
        }
    }
    for option in &dns.options {
        if !is_resolver_option(option) {
            return Err(invalid("DNS option", option));
        }
    }
    Ok(IpamResult {
        ips,
        routes,
        dns: cni::Dns {
            nameservers: result.dns.nameservers,
            domain: result.dns.domain,
            search: result.dns.search,
            options: result.dns.options,
        },
    })
}

/// An IP address, with a zone (`fe80::1%eth0`) allowed for IPv6 link-local servers as
/// resolv.conf allows.
fn is_nameserver(text: &str) -> bool {
    match text.split_once('%') {
        None => text.parse::<IpAddr>().is_ok(),
        Some((ip, zone)) => {
            ip.parse::<std::net::Ipv6Addr>().is_ok()
                && cni::validate_ifname(zone).is_ok()
                && zone.bytes().all(|b| b.is_ascii_graphic())
        }
    }
}

/// A DNS name as resolv.conf's `domain` and `search` take it: labels of letters,
/// digits, `-` and `_` (not starting or ending with `-`), 1–63 bytes each, 253 in all,
/// an optional final dot.
fn is_domain_name(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            (1..=63).contains(&label.len())
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// A resolver option as resolv.conf and Kubernetes' dnsConfig write them: a name of
/// letters, digits, `-` and `_`, optionally `:value`; at most 64 bytes.
fn is_resolver_option(option: &str) -> bool {
    let word = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
    };
    option.len() <= 64
        && match option.split_once(':') {
            None => word(option),
            Some((name, value)) => word(name) && word(value),
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(code: u32, msg: &str) -> types::Error {
        types::Error {
            code,
            msg: msg.into(),
            details: "d".into(),
        }
    }

    #[test]
    fn reserved_and_undefined_codes_are_wrapped_with_the_original_in_details() {
        for code in [0, 42, 100, 103, 104, 107, 119] {
            let e = module_error(error(code, "fake"));
            assert_eq!(e.code, code::RESERVED_CODE_FROM_MODULE, "{code}");
            assert!(e.msg.contains(&format!("code {code}")), "{e}");
            assert_eq!(e.details, format!("code {code}: fake (d)"));
        }
        for code in [7, 11, 50, 120, 999] {
            let e = module_error(error(code, "real"));
            assert_eq!((e.code, e.msg.as_str()), (code, "real"));
        }
    }

    #[test]
    fn error_text_is_cut_to_its_bounds() {
        let e = module_error(types::Error {
            code: 999,
            msg: "m".repeat(10 << 20),
            details: "d".repeat(10 << 20),
        });
        assert!(e.msg.len() < MAX_ERROR_MSG_BYTES + 64, "{}", e.msg.len());
        assert!(e.details.len() < MAX_ERROR_DETAILS_BYTES + 64);
        assert!(e.msg.ends_with("bytes cut]"), "says it was cut");
    }

    fn result(nameservers: &[&str], search: &[&str], options: &[&str]) -> types::IpamResult {
        let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        types::IpamResult {
            ips: vec![types::IpConfig {
                address: "10.0.0.2/24".into(),
                gateway: Some("10.0.0.1".into()),
            }],
            routes: vec![],
            dns: types::Dns {
                nameservers: strings(nameservers),
                domain: Some("cluster.local".into()),
                search: strings(search),
                options: strings(options),
            },
        }
    }

    #[test]
    fn dns_fields_are_checked() {
        checked_result(result(
            &["10.96.0.10", "fd00::a", "fe80::1%eth0"],
            &[
                "default.svc.cluster.local",
                "svc.cluster.local.",
                "_srv.example",
            ],
            &["ndots:5", "edns0", "timeout:1", "single-request-reopen"],
        ))
        .unwrap();
        for bad in [
            result(&["not-an-ip"], &[], &[]),
            result(&["10.0.0.1 10.0.0.2"], &[], &[]),
            result(&[], &["bad domain"], &[]),
            result(&[], &["-lead.example"], &[]),
            result(&[], &[&"a".repeat(64)], &[]),
            result(&[], &[""], &[]),
            result(&[], &[], &["ndots:5\nnameserver 6.6.6.6"]),
            result(&[], &[], &[""]),
        ] {
            let err = checked_result(bad).unwrap_err();
            assert_eq!(err.code, code::INVALID_MODULE_RESULT, "{err}");
        }
    }

    #[test]
    fn counts_and_families_are_checked() {
        let mut many = result(&[], &[], &[]);
        many.ips = vec![many.ips[0].clone(); MAX_RESULT_IPS + 1];
        assert!(checked_result(many).unwrap_err().msg.contains("ips"));
        let mut mixed = result(&[], &[], &[]);
        mixed.ips[0].gateway = Some("fd00::1".into());
        assert_eq!(
            checked_result(mixed).unwrap_err().code,
            code::INVALID_MODULE_RESULT
        );
    }
}
