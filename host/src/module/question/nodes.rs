//! `nodes` (0.2.1): what a node gone from the cluster held, for `release-node`.

use super::{Asked, Question, Store};
use crate::module::answer::module_error;
use crate::module::bindings::{nodes, types};
use crate::module::exports::{Export, Exports, present};
use wasmtime::component::Instance;

/// `nodes.release-node`: releases (or, in a dry run, lists) what `node` holds.
#[derive(Clone)]
pub struct ReleaseNode {
    pub context: nodes::Context,
    /// The node to release.
    pub node: String,
    pub dry_run: bool,
}

impl Question for ReleaseNode {
    type Answer = nodes::ReleaseReport;

    fn needs(&self) -> Option<Export> {
        Some(Export::Nodes)
    }

    fn stamp(&mut self, granted: types::WallInstant) {
        self.context.now = granted;
    }

    async fn ask(
        self,
        exports: &Exports,
        store: &mut Store,
        instance: &Instance,
    ) -> Asked<Self::Answer> {
        Ok(present(&exports.nodes)
            .load(&mut *store, instance)?
            .call_release_node(&mut *store, &self.context, &self.node, self.dry_run)
            .await?
            .map_err(module_error))
    }
}
