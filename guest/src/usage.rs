//! What a module tells `wasm-ipam stats` in detail (`cni:ipam/usage`, 0.2.3, and with
//! exact counts `cni:ipam/wide-usage`, 0.2.5): a row per pool, which the host sums into
//! the network's totals, and optionally a row per block of a pool, shown beside it and
//! never summed. And the reservations it keeps (`cni:ipam/reservations`).
//!
//! Counts are `u128`, so an IPv6 pool of any size counts exactly: the SDK exports them
//! exact through `wide-usage`, and saturated at 2^64-1 through `usage` for hosts that
//! read no more.
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

use crate::bindings::exports::cni::ipam::{usage, wide_usage};
use crate::{Pool, Reservation, UsageKind};
use std::fmt::Display;

/// One pool or block and its use (`usage.pool-usage`, exact): see the WIT for each
/// field. Start one with [`PoolUsage::pool`] or [`PoolUsage::block`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolUsage {
    pub kind: UsageKind,
    pub name: String,
    pub parent: Option<String>,
    pub node: Option<String>,
    pub capacity: Option<u128>,
    pub in_use: u128,
    pub excluded: u128,
    pub cooling_down: u128,
    pub reserved: u128,
    pub borrowed: u128,
    pub free: Option<u128>,
    pub warn_percent: Option<u8>,
}

fn narrow(n: u128) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

fn wide(n: u128) -> wide_usage::Count {
    wide_usage::Count {
        high: (n >> 64) as u64,
        low: n as u64,
    }
}

impl PoolUsage {
    /// As `usage.pools` answers it: counts past 2^64-1 saturate.
    pub fn to_usage(&self) -> usage::PoolUsage {
        usage::PoolUsage {
            kind: self.kind,
            name: self.name.clone(),
            parent: self.parent.clone(),
            node: self.node.clone(),
            capacity: self.capacity.map(narrow),
            in_use: narrow(self.in_use),
            excluded: narrow(self.excluded),
            cooling_down: narrow(self.cooling_down),
            reserved: narrow(self.reserved),
            borrowed: narrow(self.borrowed),
            free: self.free.map(narrow),
            warn_percent: self.warn_percent,
        }
    }

    /// As `wide-usage.pools` answers it: every count exact.
    pub fn to_wide_usage(&self) -> wide_usage::PoolUsage {
        wide_usage::PoolUsage {
            kind: self.kind,
            name: self.name.clone(),
            parent: self.parent.clone(),
            node: self.node.clone(),
            capacity: self.capacity.map(wide),
            in_use: wide(self.in_use),
            excluded: wide(self.excluded),
            cooling_down: wide(self.cooling_down),
            reserved: wide(self.reserved),
            borrowed: wide(self.borrowed),
            free: self.free.map(wide),
            warn_percent: self.warn_percent,
        }
    }

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
        row.capacity = pool.capacity.map(u128::from);
        row.in_use = pool.in_use.into();
        row.excluded = pool.excluded.into();
        row.cooling_down = pool.cooling_down.into();
        row.free = pool.free.map(u128::from);
        row
    }

    pub fn node(mut self, node: impl Display) -> Self {
        self.node = Some(node.to_string());
        self
    }
    pub fn capacity(mut self, capacity: u128) -> Self {
        self.capacity = Some(capacity);
        self
    }
    pub fn in_use(mut self, in_use: u128) -> Self {
        self.in_use = in_use;
        self
    }
    pub fn excluded(mut self, excluded: u128) -> Self {
        self.excluded = excluded;
        self
    }
    pub fn cooling_down(mut self, cooling_down: u128) -> Self {
        self.cooling_down = cooling_down;
        self
    }
    pub fn reserved(mut self, reserved: u128) -> Self {
        self.reserved = reserved;
        self
    }
    pub fn borrowed(mut self, borrowed: u128) -> Self {
        self.borrowed = borrowed;
        self
    }
    pub fn warn_percent(mut self, percent: u8) -> Self {
        self.warn_percent = Some(percent);
        self
    }

    /// Free: capacity less what is excluded, in use, cooling down and reserved.
    pub fn free_from_capacity(mut self) -> Self {
        let taken = [self.excluded, self.in_use, self.cooling_down, self.reserved];
        self.free = self
            .capacity
            .map(|capacity| capacity_less(capacity, &taken));
        self
    }
}

/// `capacity` less each of `taken`, never below 0: a pool's free count, for
/// `usage`'s row and `inspect`'s record alike (whose record has no reserved count).
pub(crate) fn capacity_less(capacity: u128, taken: &[u128]) -> u128 {
    taken
        .iter()
        .fold(capacity, |left, taken| left.saturating_sub(*taken))
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
