//! `capabilities` (0.2.2): which functions a module implements, asked before a node
//! relies on it.

use super::{Asked, Question, Store};
use crate::module::bindings::{capabilities, types};
use crate::module::exports::{Export, Exports, present};
use wasmtime::component::Instance;

/// `capabilities.functions`: its answer cannot be an error, only a trap.
#[derive(Clone)]
pub struct Capabilities;

impl Question for Capabilities {
    type Answer = Vec<capabilities::Function>;

    fn needs(&self) -> Option<Export> {
        Some(Export::Capabilities)
    }

    /// The module's own facts need no time.
    fn stamp(&mut self, _granted: types::WallInstant) {}

    async fn ask(
        self,
        exports: &Exports,
        store: &mut Store,
        instance: &Instance,
    ) -> Asked<Self::Answer> {
        Ok(Ok(present(&exports.capabilities)
            .load(&mut *store, instance)?
            .call_functions(&mut *store)
            .await?))
    }
}
