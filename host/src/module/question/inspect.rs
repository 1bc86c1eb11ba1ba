//! `inspect` (0.2.0): what a network holds, for `list`, `stats`, `gc` and `forget`.

use super::{Asked, Question, Store};
use crate::module::answer::module_error;
use crate::module::bindings::{inspect, types};
use crate::module::exports::{Export, Exports, present};
use wasmtime::component::Instance;

/// `inspect.allocations`: every address the network holds.
#[derive(Clone)]
pub struct Allocations(pub inspect::Context);

impl Question for Allocations {
    type Answer = Vec<inspect::Allocation>;

    fn needs(&self) -> Option<Export> {
        Some(Export::Inspect)
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
        Ok(present(&exports.inspect)
            .load(&mut *store, instance)?
            .call_allocations(&mut *store, &self.0)
            .await?
            .map_err(module_error))
    }
}

/// `inspect.pools`: each pool's counts, for `stats` of a module without `usage`.
#[derive(Clone)]
pub struct Pools(pub inspect::Context);

impl Question for Pools {
    type Answer = Vec<inspect::Pool>;

    fn needs(&self) -> Option<Export> {
        Some(Export::Inspect)
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
        Ok(present(&exports.inspect)
            .load(&mut *store, instance)?
            .call_pools(&mut *store, &self.0)
            .await?
            .map_err(module_error))
    }
}
