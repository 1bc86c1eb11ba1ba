//! A range set (host-local's `RangeSet`): the ranges one address is drawn from, so a
//! dual-stack network is two sets. Validation and naming follow host-local v1.1.1.

use crate::range::{Range, RangeSpec, canonical};
use std::fmt;
use std::net::IpAddr;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeSet(pub Vec<Range>);

impl RangeSet {
    /// host-local's `RangeSet.Canonicalize`: every range valid, one family, no overlap.
    pub fn canonicalize(specs: &[RangeSpec]) -> Result<RangeSet, String> {
        if specs.is_empty() {
            return Err("empty range set".into());
        }
        let mut ranges: Vec<Range> = Vec::with_capacity(specs.len());
        for spec in specs {
            let range = Range::canonicalize(spec)?;
            if ranges
                .first()
                .is_some_and(|first| first.range_start.is_ipv4() != range.range_start.is_ipv4())
            {
                return Err("mixed address families".into());
            }
            ranges.push(range);
        }
        for (i, r1) in ranges.iter().enumerate() {
            if let Some(r2) = ranges[i + 1..].iter().find(|r2| r1.overlaps(r2)) {
                return Err(format!("subnets {r1} and {r2} overlap"));
            }
        }
        Ok(RangeSet(ranges))
    }

    pub fn ranges(&self) -> &[Range] {
        &self.0
    }

    pub fn is_ipv4(&self) -> bool {
        self.0[0].range_start.is_ipv4()
    }

    pub fn contains(&self, addr: IpAddr) -> bool {
        self.0.iter().any(|r| r.contains(addr))
    }

    /// The range holding `addr`, or host-local's "not in range set" error.
    pub fn range_for(&self, addr: IpAddr) -> Result<&Range, String> {
        let addr = canonical(addr);
        self.0
            .iter()
            .find(|r| r.contains(addr))
            .ok_or_else(|| format!("{addr} not in range set {self}"))
    }

    /// Whether any range of `self` overlaps any range of `other`.
    pub fn overlaps(&self, other: &RangeSet) -> bool {
        self.0.iter().any(|r| other.0.iter().any(|o| r.overlaps(o)))
    }
}

/// The ranges as `start-end`, comma-separated, as host-local names a set.
impl fmt::Display for RangeSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range::tests::{ip, spec};

    fn set(subnets: &[&str]) -> Result<RangeSet, String> {
        RangeSet::canonicalize(&subnets.iter().map(|s| spec(s)).collect::<Vec<_>>())
    }

    #[test]
    fn detects_set_membership() {
        let p = set(&["192.168.0.0/24", "172.16.1.0/24"]).unwrap();
        assert!(p.contains(ip("192.168.0.55")));
        assert_eq!(p.range_for(ip("192.168.0.55")), Ok(&p.0[0]));
        assert_eq!(p.range_for(ip("172.16.1.9")), Ok(&p.0[1]));
        assert!(!p.contains(ip("192.168.99.99")));
        assert_eq!(
            p.range_for(ip("192.168.99.99")).unwrap_err(),
            "192.168.99.99 not in range set 192.168.0.1-192.168.0.254,172.16.1.1-172.16.1.254"
        );
    }

    #[test]
    fn discovers_overlaps_within_a_set() {
        assert_eq!(
            set(&["192.168.0.0/20", "192.168.2.0/24"]).unwrap_err(),
            "subnets 192.168.0.1-192.168.15.254 and 192.168.2.1-192.168.2.254 overlap"
        );
    }

    #[test]
    fn discovers_overlaps_between_sets() {
        let p1 = set(&["192.168.0.0/20"]).unwrap();
        let p2 = set(&["192.168.2.0/24"]).unwrap();
        let p3 = set(&["192.168.16.0/24"]).unwrap();
        assert!(p1.overlaps(&p2) && p2.overlaps(&p1));
        assert!(!p1.overlaps(&p3) && !p3.overlaps(&p1));
    }

    #[test]
    fn rejects_mixed_families_and_empty_sets() {
        assert_eq!(
            set(&["10.1.0.0/22", "2001:db8:5::/64"]).unwrap_err(),
            "mixed address families"
        );
        assert_eq!(set(&[]).unwrap_err(), "empty range set");
    }
}
