//! What a module tells operators (`wasm-ipam list` and `stats`): the [`Context`] the
//! host calls inspect with, and builders for the [`Allocation`]s and [`Pool`]s a
//! module answers with. The host calls inspect read-only: the handlers get a `&impl
//! Store`, and the host refuses any write that reaches it.
//!
//! ```
//! use wasm_ipam_guest::{Allocation, Pool};
//!
//! let held = Allocation::new("10.0.0.2", "ctr-1", "eth0")
//!     .since(1_700_000_000)
//!     .attribute("node", "node-a");
//! assert_eq!(held.since, Some(1_700_000_000));
//!
//! let pool = Pool::new("10.0.0.0/29")
//!     .capacity(5)
//!     .excluded(1)
//!     .in_use(2)
//!     .cooling_down(1)
//!     .free_from_capacity();
//! assert_eq!(pool.free, Some(1));
//! ```

use crate::bindings::exports::cni::ipam::inspect::Context as RawContext;
use crate::bindings::exports::cni::ipam::nodes::Context as RawNodesContext;
use crate::request::{ipam_section, parse_config};
use crate::{Allocation, Error, Pool, Request, WallInstant};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::fmt::Display;

/// What the host knows of the network when an operator asks, its configuration
/// parsed once.
#[derive(Debug, Clone)]
pub struct Context {
    network_name: String,
    node_name: String,
    now: WallInstant,
    config: Option<Value>,
}

impl Context {
    /// Wraps the host's context, parsing the configuration JSON (invalid JSON is
    /// code 6).
    pub fn new(raw: RawContext) -> Result<Self, Error> {
        Ok(Context {
            config: raw.config.as_deref().map(parse_config).transpose()?,
            network_name: raw.network_name,
            node_name: raw.node_name,
            now: raw.now,
        })
    }

    /// Wraps the context `release-node` is called with: the same facts as inspect's.
    pub fn of_nodes(raw: RawNodesContext) -> Result<Self, Error> {
        Self::new(RawContext {
            network_name: raw.network_name,
            config: raw.config,
            node_name: raw.node_name,
            now: raw.now,
        })
    }

    /// A context for tests outside a host: node `test-node`, now the epoch.
    ///
    /// ```
    /// use serde_json::json;
    /// use wasm_ipam_guest::Context;
    ///
    /// let context = Context::for_test("net", Some(json!({"ipam": {"subnet": "10.0.0.0/29"}})))
    ///     .with_now(1_700_000_000);
    /// assert_eq!(context.now().seconds, 1_700_000_000);
    /// assert!(context.config().is_some());
    /// ```
    pub fn for_test(network_name: &str, config: Option<Value>) -> Self {
        Context {
            network_name: network_name.into(),
            node_name: "test-node".into(),
            now: WallInstant::default(),
            config,
        }
    }

    /// Sets now, in Unix seconds, for tests outside a host.
    pub fn with_now(mut self, seconds: u64) -> Self {
        self.now = WallInstant {
            seconds,
            nanoseconds: 0,
        };
        self
    }

    /// Sets the node name, for tests outside a host.
    pub fn with_node_name(mut self, node_name: &str) -> Self {
        self.node_name = node_name.into();
        self
    }

    pub fn network_name(&self) -> &str {
        &self.network_name
    }
    pub fn node_name(&self) -> &str {
        &self.node_name
    }
    /// Now, for comparing with the module's own timestamps.
    pub fn now(&self) -> WallInstant {
        self.now
    }

    /// The configuration of the last call that committed to this network, if the
    /// host has one (an imported network may have none).
    pub fn config(&self) -> Option<&Value> {
        self.config.as_ref()
    }

    /// The configuration's `ipam` section deserialised into `T`, if there is a
    /// configuration; a mismatch is code 7.
    pub fn ipam<T: DeserializeOwned>(&self) -> Result<Option<T>, Error> {
        self.config.as_ref().map(ipam_section).transpose()
    }
}

/// A handler's view as inspect's: the SDK's default CHECK, GC and STATUS ask the
/// module's own `allocations` and `pools`, "now" being the lock grant.
impl From<&Request> for Context {
    fn from(request: &Request) -> Self {
        Context {
            network_name: request.network_name().into(),
            node_name: request.node_name().into(),
            now: request.lock_granted_at(),
            config: Some(request.config().clone()),
        }
    }
}

impl Allocation {
    /// `address` handed out to the attachment (`container_id`, `ifname`); `ifname` may
    /// be empty when the module does not know it. The address may be given as a CIDR,
    /// as an [`IpConfig`](crate::IpConfig) holds it: its prefix length is dropped.
    ///
    /// ```
    /// use wasm_ipam_guest::Allocation;
    ///
    /// assert_eq!(Allocation::new("10.0.0.2/24", "ctr-1", "eth0").address, "10.0.0.2");
    /// ```
    pub fn new(address: impl Display, container_id: impl Display, ifname: impl Display) -> Self {
        let address = address.to_string();
        let address = match address.split_once('/') {
            Some((alone, _prefix_len)) => alone.to_string(),
            None => address,
        };
        Allocation {
            address,
            container_id: container_id.to_string(),
            ifname: ifname.to_string(),
            ..Allocation::default()
        }
    }

    /// Sets when it was handed out, in Unix seconds.
    pub fn since(mut self, seconds: u64) -> Self {
        self.since = Some(seconds);
        self
    }

    /// Adds something else worth showing (`node`, `pool`, ...).
    pub fn attribute(mut self, name: impl Display, value: impl Display) -> Self {
        self.attributes.push((name.to_string(), value.to_string()));
        self
    }
}

/// Counts start at zero, capacity and free unknown.
impl Pool {
    /// A pool as the module names it (`10.1.0.0/24`, a block, a range set).
    pub fn new(name: impl Display) -> Self {
        Pool {
            name: name.to_string(),
            ..Pool::default()
        }
    }

    /// Sets how many addresses the pool can hand out in all.
    pub fn capacity(mut self, capacity: u64) -> Self {
        self.capacity = Some(capacity);
        self
    }

    /// Sets how many are handed out.
    pub fn in_use(mut self, in_use: u64) -> Self {
        self.in_use = in_use;
        self
    }

    /// Sets how many of capacity are never handed out.
    pub fn excluded(mut self, excluded: u64) -> Self {
        self.excluded = excluded;
        self
    }

    /// Sets how many are released but not yet handed out again.
    pub fn cooling_down(mut self, cooling_down: u64) -> Self {
        self.cooling_down = cooling_down;
        self
    }

    /// Sets how many can be handed out now.
    pub fn free(mut self, free: u64) -> Self {
        self.free = Some(free);
        self
    }

    /// Sets free to capacity less excluded, in use and cooling down (never below 0);
    /// free stays unknown while capacity is. Call it after the counts. This record
    /// has no reserved count: a module that keeps reservations says them, and the
    /// free count less them, in [`crate::PoolUsage`] (`usage`).
    pub fn free_from_capacity(mut self) -> Self {
        let taken = [self.excluded, self.in_use, self.cooling_down].map(u128::from);
        self.free = self.capacity.map(|capacity| {
            let free = crate::usage::capacity_less(capacity.into(), &taken);
            u64::try_from(free).expect("at most the capacity, a u64")
        });
        self
    }
}
