//! The module's `ipam` keys, parsed and checked whole before any work: the named pools
//! (`pools`, or today's single `cidr` as one default pool), their blocks, and the
//! limits on a node's blocks.

use crate::blocks::Range;
use ipnet::IpNet;
use serde::Deserialize;
use std::collections::BTreeSet;
use std::net::IpAddr;
use wasm_ipam_guest::Error;

const DEFAULT_BLOCK_V4: u8 = 26;
const DEFAULT_BLOCK_V6: u8 = 122;
const DEFAULT_GRACE_SECONDS: u64 = 600;
/// The name of the pool a single `cidr` makes.
pub const DEFAULT_POOL: &str = "default";

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(IpNet),
    Many(Vec<IpNet>),
}

impl OneOrMany {
    fn into_vec(self) -> Vec<IpNet> {
        match self {
            OneOrMany::One(cidr) => vec![cidr],
            OneOrMany::Many(cidrs) => cidrs,
        }
    }
}

/// One entry of `ipam.pools`.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawPool {
    name: String,
    cidr: OneOrMany,
    #[serde(default)]
    namespaces: Vec<String>,
    #[serde(default)]
    default: bool,
    warn_percent: Option<u8>,
    sticky_seconds: Option<u64>,
    sticky_pods: Option<StickyPods>,
    allow_requested: Option<bool>,
}

/// Which pods of a pool keep their addresses after a DEL (`stickyPods`), when the pool
/// keeps any (`stickySeconds` > 0). A pod annotated `wasm-ipam.io/sticky` is kept or
/// not as the annotation says, whatever this says.
#[derive(Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum StickyPods {
    /// A StatefulSet's pods: a name ending in `-N`, its ordinal (`db-0`, `web-12`).
    /// A ReplicaSet's pod names end in five random letters and digits instead.
    #[default]
    Ordinal,
    /// Only pods annotated `wasm-ipam.io/sticky`.
    Annotated,
    /// Every pod whose CNI_ARGS name it (K8S_POD_NAME): the runtime passes it for
    /// every pod, so every deleted pod's addresses cool for `stickySeconds`.
    All,
}

/// A pool's stickiness: how long a deleted pod's addresses are kept for it, and for
/// which pods.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sticky {
    pub seconds: u64,
    pub pods: StickyPods,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ipam {
    cidr: Option<OneOrMany>,
    pools: Option<Vec<RawPool>>,
    block_size: Option<u8>,
    block_size_v6: Option<u8>,
    block_grace_seconds: Option<u64>,
    /// Every pool's `stickySeconds` and `stickyPods` unless it sets its own.
    #[serde(default)]
    sticky_seconds: u64,
    sticky_pods: Option<StickyPods>,
    /// Every pool's `allowRequested` unless it sets its own.
    allow_requested: Option<bool>,
    max_blocks_per_node: Option<usize>,
    #[serde(default)]
    strict_affinity: bool,
    /// Every pool's `warnPercent` unless it sets its own.
    warn_percent: Option<u8>,
}

/// A pool as the operator named it: one range per family, and which pods it serves.
pub struct NamedPool {
    pub name: String,
    pub ranges: Vec<Range>,
    pub namespaces: Vec<String>,
    pub default: bool,
    /// Past this percent of a range's capacity in use, a call logs a warning.
    pub warn_percent: Option<u8>,
    pub sticky: Sticky,
    /// Whether a pod may ask for its addresses (annotation, CNI_ARGS `IP`,
    /// `runtimeConfig.ips`); tenants must not pick addresses where the operator says so.
    pub allow_requested: bool,
}

pub struct Conf {
    pub pools: Vec<NamedPool>,
    pub grace: u64,
    /// Blocks a node may claim in each range of each pool (`None`: no limit).
    pub max_blocks: Option<usize>,
    /// Whether a node that cannot claim a block fails instead of borrowing an address
    /// from another node's block.
    pub strict_affinity: bool,
    /// Whether the main plugin routes each pod through a host veth of its own
    /// (`ptp`), where no address is on-link: set from the netconf's `type`.
    pub routed_per_pod: bool,
}

impl Conf {
    pub fn from_ipam(ipam: Ipam) -> Result<Self, Error> {
        let raw = match (ipam.cidr, ipam.pools) {
            (Some(cidr), None) => vec![RawPool {
                name: DEFAULT_POOL.into(),
                cidr,
                namespaces: Vec::new(),
                default: true,
                warn_percent: None,
                sticky_seconds: None,
                sticky_pods: None,
                allow_requested: None,
            }],
            (None, Some(pools)) if !pools.is_empty() => pools,
            _ => {
                return Err(Error::invalid_config(
                    "ipam needs either cidr (one pool) or a non-empty pools list, not both",
                ));
            }
        };
        let block_len = |cidr: &IpNet| match cidr {
            IpNet::V4(_) => ipam.block_size.unwrap_or(DEFAULT_BLOCK_V4),
            IpNet::V6(_) => ipam.block_size_v6.unwrap_or(DEFAULT_BLOCK_V6),
        };
        let mut pools = Vec::new();
        for pool in raw {
            let cidrs = pool.cidr.into_vec();
            let (v4, v6) = cidrs.iter().fold((0, 0), |(v4, v6), c| match c {
                IpNet::V4(_) => (v4 + 1, v6),
                IpNet::V6(_) => (v4, v6 + 1),
            });
            if cidrs.is_empty() || v4 > 1 || v6 > 1 {
                return Err(Error::invalid_config(format!(
                    "pool {:?}: cidr must be one CIDR, or one per family",
                    pool.name
                )));
            }
            let ranges = cidrs
                .into_iter()
                .map(|cidr| {
                    Range::new(cidr, block_len(&cidr)).map_err(|e| {
                        Error::invalid_config(format!("pool {:?} cidr {cidr}: {e}", pool.name))
                    })
                })
                .collect::<Result<_, _>>()?;
            let warn_percent = pool.warn_percent.or(ipam.warn_percent);
            if warn_percent.is_some_and(|p| p == 0 || p > 100) {
                return Err(Error::invalid_config(format!(
                    "pool {:?}: warnPercent must lie between 1 and 100",
                    pool.name
                )));
            }
            pools.push(NamedPool {
                name: pool.name,
                ranges,
                namespaces: pool.namespaces,
                default: pool.default,
                warn_percent,
                sticky: Sticky {
                    seconds: pool.sticky_seconds.unwrap_or(ipam.sticky_seconds),
                    pods: pool.sticky_pods.or(ipam.sticky_pods).unwrap_or_default(),
                },
                allow_requested: pool
                    .allow_requested
                    .or(ipam.allow_requested)
                    .unwrap_or(true),
            });
        }
        check(&pools)?;
        Ok(Conf {
            pools,
            grace: ipam.block_grace_seconds.unwrap_or(DEFAULT_GRACE_SECONDS),
            max_blocks: ipam.max_blocks_per_node,
            strict_affinity: ipam.strict_affinity,
            routed_per_pod: false,
        })
    }

    /// Every range of every pool.
    pub fn ranges(&self) -> impl Iterator<Item = &Range> {
        self.pools.iter().flat_map(|p| &p.ranges)
    }

    /// The range holding `ip`, if a pool does.
    pub fn range_of(&self, ip: IpAddr) -> Option<&Range> {
        self.ranges().find(|r| r.cidr.contains(&ip))
    }

    /// How long the pool holding `ip` keeps a deleted pod's addresses for it.
    pub fn sticky_seconds_of(&self, ip: IpAddr) -> u64 {
        self.pool_of(ip).map_or(0, |p| p.sticky.seconds)
    }

    /// The pool holding `ip`, if one does.
    pub fn pool_of(&self, ip: IpAddr) -> Option<&NamedPool> {
        self.pools
            .iter()
            .find(|p| p.ranges.iter().any(|r| r.cidr.contains(&ip)))
    }
}

/// What makes the choice of a pool, or of the pool of an address, ambiguous.
fn check(pools: &[NamedPool]) -> Result<(), Error> {
    let mut names = BTreeSet::new();
    let mut namespaces = BTreeSet::new();
    for pool in pools {
        if pool.name.is_empty() || pool.name.chars().any(|c| c.is_control() || c == '/') {
            return Err(Error::invalid_config(format!(
                "pool name {:?} must be non-empty, without '/' or control characters",
                pool.name
            )));
        }
        if !names.insert(pool.name.as_str()) {
            return Err(Error::invalid_config(format!(
                "two pools are named {:?}",
                pool.name
            )));
        }
        for namespace in &pool.namespaces {
            if !namespaces.insert(namespace.as_str()) {
                return Err(Error::invalid_config(format!(
                    "namespace {namespace:?} is listed by two pools"
                )));
            }
        }
    }
    if pools.iter().filter(|p| p.default).count() > 1 {
        return Err(Error::invalid_config("more than one pool is the default"));
    }
    let ranges: Vec<(&str, &Range)> = pools
        .iter()
        .flat_map(|p| p.ranges.iter().map(move |r| (p.name.as_str(), r)))
        .collect();
    for (i, (a, ra)) in ranges.iter().enumerate() {
        for (b, rb) in &ranges[i + 1..] {
            if ra.cidr.contains(&rb.cidr) || rb.cidr.contains(&ra.cidr) {
                return Err(Error::invalid_config(format!(
                    "pools {a:?} ({}) and {b:?} ({}) overlap",
                    ra.cidr, rb.cidr
                )));
            }
        }
    }
    Ok(())
}
