//! `reservations` (0.2.3): addresses kept out of use in a network, for `reserve`,
//! `unreserve` and `list --reservations`.

use super::{Asked, Question, Store};
use crate::module::answer::module_error;
use crate::module::bindings::{nodes, reservations, types};
use crate::module::exports::{Export, Exports, present};
use wasmtime::component::Instance;

/// `reservations.reserve`: what it made.
#[derive(Clone)]
pub struct Reserve {
    pub context: nodes::Context,
    pub cidr: String,
    pub note: String,
    pub force: bool,
}

impl Question for Reserve {
    type Answer = reservations::Reservation;

    fn needs(&self) -> Option<Export> {
        Some(Export::Reservations)
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
        Ok(present(&exports.reservations)
            .load(&mut *store, instance)?
            .call_reserve(
                &mut *store,
                &self.context,
                &self.cidr,
                &self.note,
                self.force,
            )
            .await?
            .map_err(module_error))
    }
}

/// `reservations.unreserve` of exactly `cidr`: what it ended.
#[derive(Clone)]
pub struct Unreserve {
    pub context: nodes::Context,
    pub cidr: String,
}

impl Question for Unreserve {
    type Answer = reservations::Reservation;

    fn needs(&self) -> Option<Export> {
        Some(Export::Reservations)
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
        Ok(present(&exports.reservations)
            .load(&mut *store, instance)?
            .call_unreserve(&mut *store, &self.context, &self.cidr)
            .await?
            .map_err(module_error))
    }
}

/// `reservations.all`: every reservation of the network.
#[derive(Clone)]
pub struct Reservations(pub nodes::Context);

impl Question for Reservations {
    type Answer = Vec<reservations::Reservation>;

    fn needs(&self) -> Option<Export> {
        Some(Export::Reservations)
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
        Ok(present(&exports.reservations)
            .load(&mut *store, instance)?
            .call_all(&mut *store, &self.0)
            .await?
            .map_err(module_error))
    }
}
