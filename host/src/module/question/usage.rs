//! `usage` (0.2.3) and `wide-usage` (0.2.5): each pool's and block's counts, for
//! `stats`. Both answer `wide-usage`'s rows: a module with only `usage` has its rows
//! widened ([`widened`]).

use super::{Asked, Question, Store};
use crate::module::answer::module_error;
use crate::module::bindings::{inspect, types, usage, wide_usage};
use crate::module::exports::{Export, Exports, present};
use wasmtime::component::Instance;

/// `wide-usage.pools` if the module exports it, else `usage.pools`, widened.
#[derive(Clone)]
pub struct Usage(pub inspect::Context);

impl Question for Usage {
    type Answer = Vec<wide_usage::PoolUsage>;

    fn needs(&self) -> Option<Export> {
        Some(Export::Usage)
    }

    fn stamp(&mut self, granted: types::WallInstant) {
        self.0.now = granted;
    }

    async fn ask(
        self,
        exports: &Exports,
        store: &mut Store,
        instance: &Instance,
    ) -> Asked<Self::Answer> {
        let rows = match &exports.wide_usage {
            Some(indices) => {
                indices
                    .load(&mut *store, instance)?
                    .call_pools(&mut *store, &self.0)
                    .await?
            }
            None => present(&exports.usage)
                .load(&mut *store, instance)?
                .call_pools(&mut *store, &self.0)
                .await?
                .map(|rows| rows.into_iter().map(widened).collect()),
        };
        Ok(rows.map_err(module_error))
    }
}

/// A `usage.pool-usage` row as `wide-usage` has it (its counts saturated at 2^64-1
/// stay so: a module of 0.2.3 or 0.2.4 cannot say more). `stats` widens `inspect`'s
/// pools the same way.
pub fn widened(row: usage::PoolUsage) -> wide_usage::PoolUsage {
    let count = |n: u64| wide_usage::Count { high: 0, low: n };
    wide_usage::PoolUsage {
        kind: row.kind,
        name: row.name,
        parent: row.parent,
        node: row.node,
        capacity: row.capacity.map(count),
        in_use: count(row.in_use),
        excluded: count(row.excluded),
        cooling_down: count(row.cooling_down),
        reserved: count(row.reserved),
        borrowed: count(row.borrowed),
        free: row.free.map(count),
        warn_percent: row.warn_percent,
    }
}
