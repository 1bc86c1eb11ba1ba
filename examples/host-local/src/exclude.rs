//! `exclude` as sorted, merged runs of addresses per family, so the allocator skips,
//! and the summary counts, a whole excluded network in one step: the cost is per
//! excluded range, never per excluded address (an IPv6 /100 holds 2^28 of them).

use ipnet::IpNet;
use std::net::IpAddr;

/// An address as an integer, for run arithmetic.
pub fn int(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u32::from(v4).into(),
        IpAddr::V6(v6) => v6.into(),
    }
}

/// The address `value` in the family of `like`.
fn addr(value: u128, like: IpAddr) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::V4((value as u32).into()),
        IpAddr::V6(_) => IpAddr::V6(value.into()),
    }
}

/// Excluded addresses as sorted, disjoint, non-adjacent [first, last] runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exclusions {
    v4: Vec<(u128, u128)>,
    v6: Vec<(u128, u128)>,
}

impl Exclusions {
    #[cfg(test)]
    pub const NONE: Exclusions = Exclusions {
        v4: Vec::new(),
        v6: Vec::new(),
    };

    pub fn new(nets: &[IpNet]) -> Self {
        let runs = |ipv4: bool| {
            let mut runs: Vec<(u128, u128)> = nets
                .iter()
                .filter(|net| net.addr().is_ipv4() == ipv4)
                .map(|net| (int(net.network()), int(net.broadcast())))
                .collect();
            runs.sort_unstable();
            let mut merged: Vec<(u128, u128)> = Vec::new();
            for (lo, hi) in runs {
                match merged.last_mut() {
                    Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
                    _ => merged.push((lo, hi)),
                }
            }
            merged
        };
        Exclusions {
            v4: runs(true),
            v6: runs(false),
        }
    }

    fn runs(&self, ipv4: bool) -> &[(u128, u128)] {
        if ipv4 { &self.v4 } else { &self.v6 }
    }

    /// The last address of the excluded run holding `ip`, if `ip` is excluded.
    pub fn run_end(&self, ip: IpAddr) -> Option<IpAddr> {
        let runs = self.runs(ip.is_ipv4());
        let value = int(ip);
        let i = runs.partition_point(|&(lo, _)| lo <= value);
        let (_, hi) = *runs.get(i.checked_sub(1)?)?;
        (value <= hi).then(|| addr(hi, ip))
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        self.run_end(ip).is_some()
    }

    /// How many addresses of [first, last] (one family) are excluded, `skip` aside.
    pub fn count_in(&self, first: IpAddr, last: IpAddr, skip: IpAddr) -> u128 {
        let (start, end, skip) = (int(first), int(last), int(skip));
        self.runs(first.is_ipv4())
            .iter()
            .map(|&(lo, hi)| {
                let (lo, hi) = (lo.max(start), hi.min(end));
                if lo > hi {
                    return 0;
                }
                (hi - lo).saturating_add(1) - u128::from((lo..=hi).contains(&skip))
            })
            .fold(0, u128::saturating_add)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exclusions(nets: &[&str]) -> Exclusions {
        Exclusions::new(&nets.iter().map(|n| n.parse().unwrap()).collect::<Vec<_>>())
    }

    #[test]
    fn runs_merge_and_answer_membership() {
        let ex = exclusions(&["10.0.0.8/29", "10.0.0.0/29", "10.0.0.32/32", "fd00::/100"]);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(ex.run_end(ip("10.0.0.3")), Some(ip("10.0.0.15")));
        assert_eq!(ex.run_end(ip("10.0.0.16")), None);
        assert_eq!(ex.run_end(ip("10.0.0.32")), Some(ip("10.0.0.32")));
        assert_eq!(ex.run_end(ip("fd00::1")), Some(ip("fd00::fff:ffff")));
        assert!(!ex.contains(ip("fd00::1000:0")));
        assert!(!ex.contains(ip("0.0.0.0")));
        assert_eq!(
            ex.count_in(ip("10.0.0.1"), ip("10.0.0.40"), ip("10.0.0.1")),
            15 + 1 - 1
        );
    }
}
