//! The pool's arithmetic: a cluster CIDR cut into equal blocks, and the addresses of
//! one block a pod may get. Both families go through `u128`.

use ipnet::IpNet;
use std::net::IpAddr;

/// One family's range of a pool: `cidr` cut into blocks of prefix length `block_len`.
#[derive(Debug, Clone, PartialEq)]
pub struct Range {
    pub cidr: IpNet,
    pub block_len: u8,
}

fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u32::from(v4).into(),
        IpAddr::V6(v6) => v6.into(),
    }
}

fn from_u128(v4: bool, n: u128) -> IpAddr {
    if v4 {
        IpAddr::V4((n as u32).into())
    } else {
        IpAddr::V6(n.into())
    }
}

impl Range {
    pub fn new(cidr: IpNet, block_len: u8) -> Result<Self, String> {
        let cidr = cidr.trunc();
        let max = match cidr {
            IpNet::V4(_) => 30,
            IpNet::V6(_) => 126,
        };
        if block_len < cidr.prefix_len() || block_len > max {
            return Err(format!(
                "block size /{block_len} must lie between the pool's /{} and /{max}",
                cidr.prefix_len()
            ));
        }
        Ok(Range { cidr, block_len })
    }

    fn v4(&self) -> bool {
        matches!(self.cidr, IpNet::V4(_))
    }

    fn bits(&self) -> u8 {
        if self.v4() { 32 } else { 128 }
    }

    /// Addresses per block.
    pub fn block_size(&self) -> u128 {
        1u128 << (self.bits() - self.block_len)
    }

    /// How many blocks the pool holds (saturating for the widest IPv6 pools).
    pub fn blocks(&self) -> u128 {
        1u128
            .checked_shl(u32::from(self.block_len - self.cidr.prefix_len()))
            .unwrap_or(u128::MAX)
    }

    /// Block number `index`.
    pub fn block(&self, index: u128) -> IpNet {
        let base = to_u128(self.cidr.network()) + index * self.block_size();
        IpNet::new(from_u128(self.v4(), base), self.block_len).expect("a valid prefix length")
    }

    /// The number of the block `ip` falls in (`ip` must lie in the pool).
    pub fn index_of(&self, ip: IpAddr) -> u128 {
        (to_u128(ip) - to_u128(self.cidr.network())) / self.block_size()
    }

    /// The block `ip` falls in, if the pool holds it.
    pub fn block_of(&self, ip: IpAddr) -> Option<IpNet> {
        if !self.cidr.contains(&ip) {
            return None;
        }
        Some(IpNet::new(ip, self.block_len).ok()?.trunc())
    }

    /// Where a node starts looking for a free block: spread by its name, so nodes
    /// claiming at once seldom want the same block.
    pub fn start_for(&self, node: &str) -> u128 {
        let hash = node.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        u128::from(hash) % self.blocks()
    }

    /// Addresses a pod may get in a block: all but its first (the block's network),
    /// its second (the gateway a bridge puts on the node) and its last.
    pub fn usable(&self) -> u128 {
        self.block_size().saturating_sub(3)
    }

    /// The block's gateway: its second address.
    pub fn gateway(&self, block: IpNet) -> IpAddr {
        from_u128(self.v4(), to_u128(block.network()) + 1)
    }

    /// The block's usable addresses, in order.
    pub fn addresses(&self, block: IpNet) -> impl Iterator<Item = IpAddr> + '_ {
        let base = to_u128(block.network());
        let v4 = self.v4();
        (2..self.block_size() - 1).map(move |offset| from_u128(v4, base + offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_of_a_v4_pool() {
        let pool = Range::new("10.244.0.0/16".parse().unwrap(), 26).unwrap();
        assert_eq!(pool.blocks(), 1024);
        assert_eq!(pool.block(0).to_string(), "10.244.0.0/26");
        assert_eq!(pool.block(5).to_string(), "10.244.1.64/26");
        assert_eq!(pool.usable(), 61);
        let first: Vec<String> = pool
            .addresses(pool.block(5))
            .take(2)
            .map(|a| a.to_string())
            .collect();
        assert_eq!(first, ["10.244.1.66", "10.244.1.67"]);
        assert_eq!(
            pool.addresses(pool.block(5)).last().unwrap().to_string(),
            "10.244.1.126"
        );
        assert_eq!(pool.gateway(pool.block(5)).to_string(), "10.244.1.65");
        assert_eq!(
            pool.block_of("10.244.1.100".parse().unwrap())
                .unwrap()
                .to_string(),
            "10.244.1.64/26"
        );
        assert_eq!(pool.block_of("10.245.0.1".parse().unwrap()), None);
        assert!(Range::new("10.0.0.0/16".parse().unwrap(), 8).is_err());
        assert!(Range::new("10.0.0.0/16".parse().unwrap(), 31).is_err());
    }

    #[test]
    fn blocks_of_a_v6_pool() {
        let pool = Range::new("fd00:10::/56".parse().unwrap(), 122).unwrap();
        assert_eq!(pool.blocks(), 1 << 66);
        assert_eq!(pool.block(1).to_string(), "fd00:10::40/122");
        assert!(pool.start_for("node-a") < pool.blocks());
    }
}
