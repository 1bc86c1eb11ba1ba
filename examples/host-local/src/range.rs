//! One allocation range (host-local's `Range`): a subnet with the first and last
//! address to hand out and a gateway, defaulted and validated exactly as host-local
//! v1.1.1 does, plus the Go `net` address semantics its messages depend on.

use ipnet::IpNet;
use std::cmp::Ordering;
use std::fmt;
use std::net::IpAddr;

/// Go's canonical form of an address: an IPv4-mapped IPv6 address is IPv4 (`To4`).
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Go's `net.ParseIP` followed by canonicalisation.
pub fn parse_ip(text: &str) -> Option<IpAddr> {
    text.parse().ok().map(canonical)
}

fn to_int(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u32::from(v4).into(),
        IpAddr::V6(v6) => v6.into(),
    }
}

/// The address after `ip` (host-local's `ip.NextIP`).
pub fn next_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(u32::from(v4).wrapping_add(1).into()),
        IpAddr::V6(v6) => IpAddr::V6(u128::from(v6).wrapping_add(1).into()),
    }
}

/// host-local's `ip.Cmp`: compares the numeric values, whatever the families.
pub fn cmp_ip(a: IpAddr, b: IpAddr) -> Ordering {
    to_int(a).cmp(&to_int(b))
}

fn family_bits(ip: IpAddr) -> u8 {
    if ip.is_ipv4() { 32 } else { 128 }
}

/// A CIDR as Go's `types.ParseCIDR` keeps it: the address as written (host bits and
/// all, canonicalised) and the mask length in the family the text was written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subnet {
    pub addr: IpAddr,
    pub prefix: u8,
    /// 32 or 128: the family of the written address, which sets the mask's size.
    pub mask_bits: u8,
}

impl Subnet {
    /// Parses `addr/prefix` like Go's `net.ParseCIDR`.
    pub fn parse(text: &str) -> Result<Subnet, String> {
        let invalid = || format!("invalid CIDR address: {text}");
        let (addr, prefix) = text.split_once('/').ok_or_else(invalid)?;
        let written: IpAddr = addr.parse().map_err(|_| invalid())?;
        let mask_bits = family_bits(written);
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid());
        }
        let prefix = prefix
            .parse::<u32>()
            .ok()
            .filter(|p| *p <= u32::from(mask_bits))
            .ok_or_else(invalid)? as u8;
        Ok(Subnet {
            addr: canonical(written),
            prefix,
            mask_bits,
        })
    }
}

/// Go's `IPNet.String()`: the address unmasked, and an IPv6-sized mask on an IPv4
/// address shortened to its last 32 bits.
impl fmt::Display for Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix = if self.addr.is_ipv4() && self.mask_bits == 128 {
            self.prefix.saturating_sub(96)
        } else {
            self.prefix
        };
        write!(f, "{}/{}", self.addr, prefix)
    }
}

/// A range as configured, before defaults are applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSpec {
    pub subnet: Option<Subnet>,
    pub range_start: Option<IpAddr>,
    pub range_end: Option<IpAddr>,
    pub gateway: Option<IpAddr>,
}

/// A validated range with every default filled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// The network, host bits clear.
    pub subnet: IpNet,
    pub range_start: IpAddr,
    pub range_end: IpAddr,
    pub gateway: IpAddr,
}

/// host-local's `Range.Contains` while some bounds may still be unset.
fn within(net: &IpNet, start: Option<IpAddr>, end: Option<IpAddr>, addr: IpAddr) -> bool {
    family_bits(addr) == family_bits(net.addr())
        && net.contains(&addr)
        && start.is_none_or(|s| cmp_ip(addr, s) != Ordering::Less)
        && end.is_none_or(|e| cmp_ip(addr, e) != Ordering::Greater)
}

impl Range {
    /// host-local's `Range.Canonicalize`: validates the subnet and defaults the
    /// gateway and `rangeStart` to network+1 and `rangeEnd` to the last address
    /// (the one before broadcast for IPv4).
    pub fn canonicalize(spec: &RangeSpec) -> Result<Range, String> {
        let subnet = spec.subnet.ok_or("IP <nil> not v4 nor v6")?;
        if subnet.prefix > subnet.mask_bits - 2 {
            return Err(format!("Network {subnet} too small to allocate from"));
        }
        if family_bits(subnet.addr) != subnet.mask_bits {
            return Err("IPNet IP and Mask version mismatch".into());
        }
        let net = IpNet::new(subnet.addr, subnet.prefix)
            .expect("prefix checked against the family")
            .trunc();
        if net.addr() != subnet.addr {
            return Err(format!(
                "Network has host bits set. For a subnet mask of length {} the network address is {}",
                subnet.prefix,
                net.addr()
            ));
        }
        let first = next_ip(net.addr());
        let gateway = spec.gateway.unwrap_or(first);
        let range_start = match spec.range_start {
            Some(start) if !within(&net, Some(start), spec.range_end, start) => {
                return Err(format!("RangeStart {start} not in network {net}"));
            }
            Some(start) => start,
            None => first,
        };
        let range_end = match spec.range_end {
            Some(end) if !within(&net, Some(range_start), Some(end), end) => {
                return Err(format!("RangeEnd {end} not in network {net}"));
            }
            Some(end) => end,
            None => match net.broadcast() {
                IpAddr::V4(b) => IpAddr::V4((u32::from(b) - 1).into()),
                last => last,
            },
        };
        Ok(Range {
            subnet: net,
            range_start,
            range_end,
            gateway,
        })
    }

    /// Whether `addr` is in the subnet and between `rangeStart` and `rangeEnd`.
    pub fn contains(&self, addr: IpAddr) -> bool {
        within(
            &self.subnet,
            Some(self.range_start),
            Some(self.range_end),
            canonical(addr),
        )
    }

    /// Whether the two ranges share an address (never across families).
    pub fn overlaps(&self, other: &Range) -> bool {
        self.range_start.is_ipv4() == other.range_start.is_ipv4()
            && (self.contains(other.range_start)
                || self.contains(other.range_end)
                || other.contains(self.range_start)
                || other.contains(self.range_end))
    }
}

/// `rangeStart-rangeEnd`, as host-local names a range in its messages.
impl fmt::Display for Range {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.range_start, self.range_end)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn ip(text: &str) -> IpAddr {
        parse_ip(text).unwrap()
    }

    pub fn spec(subnet: &str) -> RangeSpec {
        RangeSpec {
            subnet: Some(Subnet::parse(subnet).unwrap()),
            ..RangeSpec::default()
        }
    }

    pub fn range(subnet: &str) -> Range {
        Range::canonicalize(&spec(subnet)).unwrap()
    }

    fn expect(r: Range, subnet: &str, start: &str, end: &str, gw: &str) {
        assert_eq!(r.subnet, subnet.parse::<IpNet>().unwrap());
        assert_eq!(
            (r.range_start, r.range_end, r.gateway),
            (ip(start), ip(end), ip(gw))
        );
    }

    #[test]
    fn defaults_for_ipv4_with_a_clean_prefix() {
        expect(
            range("192.0.2.0/24"),
            "192.0.2.0/24",
            "192.0.2.1",
            "192.0.2.254",
            "192.0.2.1",
        );
    }

    #[test]
    fn defaults_for_a_smaller_ipv4_subnet() {
        expect(
            range("192.0.2.0/25"),
            "192.0.2.0/25",
            "192.0.2.1",
            "192.0.2.126",
            "192.0.2.1",
        );
    }

    #[test]
    fn defaults_for_ipv6_with_a_clean_prefix() {
        expect(
            range("2001:DB8:1::/64"),
            "2001:db8:1::/64",
            "2001:db8:1::1",
            "2001:db8:1::ffff:ffff:ffff:ffff",
            "2001:db8:1::1",
        );
    }

    fn error(subnet: &str) -> String {
        Range::canonicalize(&spec(subnet)).unwrap_err()
    }

    #[test]
    fn rejects_subnets_with_host_bits_set() {
        assert_eq!(
            error("192.0.2.12/24"),
            "Network has host bits set. For a subnet mask of length 24 the network address is 192.0.2.0"
        );
        assert_eq!(
            error("2001:DB8:1::24:19ff:fee1:c44a/64"),
            "Network has host bits set. For a subnet mask of length 64 the network address is 2001:db8:1::"
        );
        assert_eq!(
            error("2001:DB8:24:19ff::/63"),
            "Network has host bits set. For a subnet mask of length 63 the network address is 2001:db8:24:19fe::"
        );
        assert_eq!(
            error("192.168.127.0/23"),
            "Network has host bits set. For a subnet mask of length 23 the network address is 192.168.126.0"
        );
    }

    #[test]
    fn rejects_a_network_that_is_too_small() {
        assert_eq!(
            error("192.0.2.0/31"),
            "Network 192.0.2.0/31 too small to allocate from"
        );
        assert_eq!(
            error("2001:db8::/127"),
            "Network 2001:db8::/127 too small to allocate from"
        );
    }

    #[test]
    fn rejects_an_ipv4_mapped_subnet_as_a_family_mismatch() {
        assert_eq!(
            error("::ffff:10.0.0.0/120"),
            "IPNet IP and Mask version mismatch"
        );
    }

    #[test]
    fn rejects_a_missing_subnet() {
        let err = Range::canonicalize(&RangeSpec::default()).unwrap_err();
        assert_eq!(err, "IP <nil> not v4 nor v6");
    }

    #[test]
    fn rejects_invalid_range_start_and_end() {
        let with = |start: Option<&str>, end: Option<&str>| {
            Range::canonicalize(&RangeSpec {
                range_start: start.map(ip),
                range_end: end.map(ip),
                ..spec("192.0.2.0/24")
            })
            .unwrap_err()
        };
        assert_eq!(
            with(Some("192.0.3.0"), None),
            "RangeStart 192.0.3.0 not in network 192.0.2.0/24"
        );
        assert_eq!(
            with(None, Some("192.0.4.0")),
            "RangeEnd 192.0.4.0 not in network 192.0.2.0/24"
        );
        assert_eq!(
            with(Some("192.0.2.50"), Some("192.0.2.40")),
            "RangeStart 192.0.2.50 not in network 192.0.2.0/24"
        );
        assert_eq!(
            with(Some("2001:db8::1"), None),
            "RangeStart 2001:db8::1 not in network 192.0.2.0/24"
        );
    }

    #[test]
    fn parses_all_fields() {
        let r = Range::canonicalize(&RangeSpec {
            range_start: Some(ip("192.0.2.40")),
            range_end: Some(ip("192.0.2.50")),
            gateway: Some(ip("192.0.2.254")),
            ..spec("192.0.2.0/24")
        })
        .unwrap();
        expect(r, "192.0.2.0/24", "192.0.2.40", "192.0.2.50", "192.0.2.254");
    }

    #[test]
    fn contains_only_addresses_between_start_and_end() {
        let v4 = Range::canonicalize(&RangeSpec {
            range_start: Some(ip("192.0.2.40")),
            range_end: Some(ip("192.0.2.50")),
            gateway: Some(ip("192.0.2.254")),
            ..spec("192.0.2.0/24")
        })
        .unwrap();
        let v6 = Range::canonicalize(&RangeSpec {
            range_start: Some(ip("2001:db8:1::40")),
            range_end: Some(ip("2001:db8:1::50")),
            ..spec("2001:DB8:1::/64")
        })
        .unwrap();
        for (r, addr, inside) in [
            (v4, "192.0.3.0", false),
            (v4, "192.0.2.39", false),
            (v4, "192.0.2.40", true),
            (v4, "192.0.2.50", true),
            (v4, "192.0.2.51", false),
            (v4, "::ffff:192.0.2.45", true),
            (v6, "2001:db8:2::", false),
            (v6, "2001:db8:1::39", false),
            (v6, "2001:db8:1::40", true),
            (v6, "2001:db8:1::50", true),
            (v6, "2001:db8:1::51", false),
        ] {
            assert_eq!(r.contains(ip(addr)), inside, "{r} contains {addr}");
        }
    }

    #[test]
    fn detects_overlap_commutatively() {
        let bounded = |subnet: &str, start: Option<&str>, end: Option<&str>| {
            Range::canonicalize(&RangeSpec {
                range_start: start.map(ip),
                range_end: end.map(ip),
                ..spec(subnet)
            })
            .unwrap()
        };
        for (a, b, expected) in [
            (range("10.0.0.0/24"), range("10.0.1.0/24"), false),
            (range("10.0.0.0/24"), range("::/24"), false),
            (range("10.0.0.0/24"), range("10.0.0.0/24"), true),
            (range("10.0.0.0/20"), range("10.0.1.0/24"), true),
            (
                bounded("10.0.0.0/24", None, Some("10.0.0.127")),
                bounded("10.0.0.0/24", Some("10.0.0.128"), None),
                false,
            ),
            (
                bounded("10.0.0.0/24", None, Some("10.0.0.127")),
                bounded("10.0.0.0/24", Some("10.0.0.127"), None),
                true,
            ),
        ] {
            assert_eq!(a.overlaps(&b), expected, "{a} vs {b}");
            assert_eq!(b.overlaps(&a), expected, "{b} vs {a}");
        }
    }

    #[test]
    fn parses_cidrs_like_go() {
        assert_eq!(Subnet::parse("10.0.0.5/024").unwrap().prefix, 24);
        assert_eq!(
            Subnet::parse("10.0.0.5/24").unwrap().to_string(),
            "10.0.0.5/24"
        );
        assert_eq!(
            Subnet::parse("::ffff:1.2.3.4/127").unwrap().to_string(),
            "1.2.3.4/31"
        );
        for bad in [
            "",
            "10.0.0.0",
            "10.0.0.0/33",
            "10.0.0.0/",
            "10.0.0.0/+1",
            "foo/24",
        ] {
            assert_eq!(
                Subnet::parse(bad).unwrap_err(),
                format!("invalid CIDR address: {bad}")
            );
        }
    }
}
