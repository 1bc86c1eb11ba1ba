//! What a module tells `wasm-ipam stats` in detail (`cni:ipam/usage`, 0.2.3): a row per
//! pool, which the host sums into the network's totals, and optionally a row per block
//! of a pool, shown beside it and never summed. And the reservations it keeps
//! (`cni:ipam/reservations`).
//!
//! ```
//! use wasm_ipam_guest::PoolUsage;
//!
//! let pool = PoolUsage::pool("pool default 10.80.0.0/16")
//!     .capacity(62_464)
//!     .in_use(3)
//!     .borrowed(1)
//!     .reserved(2)
//!     .free_from_capacity();
//! assert_eq!(pool.free, Some(62_459));
//! let block = PoolUsage::block("10.80.0.0/26", &pool.name).node("node-a");
//! assert_eq!(block.parent.as_deref(), Some("pool default 10.80.0.0/16"));
//! ```

use crate::{Pool, PoolUsage, Reservation, UsageKind};
use std::fmt::Display;

impl PoolUsage {
    fn new(kind: UsageKind, name: impl Display) -> Self {
        PoolUsage {
            kind,
            name: name.to_string(),
            parent: None,
            node: None,
            capacity: None,
            in_use: 0,
            excluded: 0,
            cooling_down: 0,
            reserved: 0,
            borrowed: 0,
            free: None,
            warn_percent: None,
        }
    }

    /// A pool: the host sums pool rows into the network's totals.
    pub fn pool(name: impl Display) -> Self {
        Self::new(UsageKind::Pool, name)
    }

    /// A block of the pool row named `parent`: shown beside it, never summed.
    pub fn block(name: impl Display, parent: impl Display) -> Self {
        let mut row = Self::new(UsageKind::Block, name);
        row.parent = Some(parent.to_string());
        row
    }

    /// `inspect`'s pool record as a pool row, for modules that report no more.
    pub fn from_pool(pool: Pool) -> Self {
        let mut row = Self::pool(pool.name);
        row.capacity = pool.capacity;
        row.in_use = pool.in_use;
        row.excluded = pool.excluded;
        row.cooling_down = pool.cooling_down;
        row.free = pool.free;
        row
    }

    pub fn node(mut self, node: impl Display) -> Self {
        self.node = Some(node.to_string());
        self
    }
    pub fn capacity(mut self, capacity: u64) -> Self {
        self.capacity = Some(capacity);
        self
    }
    pub fn in_use(mut self, in_use: u64) -> Self {
        self.in_use = in_use;
        self
    }
    pub fn excluded(mut self, excluded: u64) -> Self {
        self.excluded = excluded;
        self
    }
    pub fn cooling_down(mut self, cooling_down: u64) -> Self {
        self.cooling_down = cooling_down;
        self
    }
    pub fn reserved(mut self, reserved: u64) -> Self {
        self.reserved = reserved;
        self
    }
    pub fn borrowed(mut self, borrowed: u64) -> Self {
        self.borrowed = borrowed;
        self
    }
    pub fn warn_percent(mut self, percent: u8) -> Self {
        self.warn_percent = Some(percent);
        self
    }

    /// Free: capacity less what is excluded, in use, cooling down and reserved.
    pub fn free_from_capacity(mut self) -> Self {
        self.free = self.capacity.map(|capacity| {
            capacity
                .saturating_sub(self.excluded)
                .saturating_sub(self.in_use)
                .saturating_sub(self.cooling_down)
                .saturating_sub(self.reserved)
        });
        self
    }
}

impl Reservation {
    pub fn new(cidr: impl Display, note: impl Display, since: u64) -> Self {
        Reservation {
            cidr: cidr.to_string(),
            note: note.to_string(),
            since,
            held: Vec::new(),
        }
    }

    /// Its addresses a pod holds now.
    pub fn held(mut self, held: impl IntoIterator<Item = impl Display>) -> Self {
        self.held = held.into_iter().map(|a| a.to_string()).collect();
        self
    }
}
