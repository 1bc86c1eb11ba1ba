//! `migrate` (0.2.0): another IPAM plugin's state handed to the module, for
//! `import-host-local`.

use super::{Asked, Question, Store};
use crate::module::answer::module_error;
use crate::module::bindings::{migrate, types};
use crate::module::exports::{Export, Exports, present};
use wasmtime::component::Instance;

/// `migrate.import-state`: the module takes `files` of `format` over as its own.
#[derive(Clone)]
pub struct Import {
    pub format: String,
    pub network: String,
    pub config: Option<String>,
    pub files: Vec<migrate::StateFile>,
}

impl Question for Import {
    type Answer = migrate::ImportReport;

    fn needs(&self) -> Option<Export> {
        Some(Export::Migrate)
    }

    /// An import is told no time: the files carry theirs.
    fn stamp(&mut self, _granted: types::WallInstant) {}

    async fn ask(
        self,
        exports: &Exports,
        store: &mut Store,
        instance: &Instance,
    ) -> Asked<Self::Answer> {
        Ok(present(&exports.migrate)
            .load(&mut *store, instance)?
            .call_import_state(
                &mut *store,
                &self.format,
                &self.network,
                self.config.as_deref(),
                &self.files,
            )
            .await?
            .map_err(module_error))
    }
}
