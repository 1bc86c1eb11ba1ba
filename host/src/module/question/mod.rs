//! What the host can ask a module, one type per question, each with its own answer
//! type: a caller sees from a signature what comes back, and never matches on answers
//! it cannot get. Each question says which export it needs, takes the grant's time,
//! and maps the export's result to its answer in one place (its `ask`), as wasmtime's
//! bindgen gives each export its own typed function. One file per exported
//! interface, as `module/host/` has one per imported one.

mod capabilities;
mod handle;
mod inspect;
mod migrate;
mod nodes;
mod reservations;
mod usage;

pub use capabilities::Capabilities;
pub use handle::{Call, Handle};
pub use inspect::{Allocations, Pools};
pub use migrate::Import;
pub use nodes::ReleaseNode;
pub use reservations::{Reservations, Reserve, Unreserve};
pub use usage::{Usage, widened};

use crate::error::CniError;
use crate::module::bindings::types;
use crate::module::exports::{Export, Exports};
use crate::module::host::GuestState;
use crate::store::AttachmentChange;
use std::future::Future;
use wasmtime::component::Instance;

/// The store a question is asked in.
pub type Store = wasmtime::Store<GuestState>;

/// What an export's call gives back: the module's answer or its CNI error (checked by
/// [`crate::module::answer`]), or a trap.
pub type Asked<A> = wasmtime::Result<Result<A, CniError>>;

/// A question to a module. `Clone`: a run may ask it again on a fresh instance after
/// a shared store's commit conflicted.
pub trait Question: Clone {
    /// What the module answers.
    type Answer;

    /// The optional export it is asked through; `None`: the handler, which every
    /// module has.
    fn needs(&self) -> Option<Export>;

    /// Tells it when the lock was granted (a request's `lock-granted-at`, a context's
    /// `now`): the only time a module sees.
    fn stamp(&mut self, granted: types::WallInstant);

    /// What its answer, once committed, changes of the host's attachment records.
    fn attachment_change(&self) -> Option<AttachmentChange> {
        None
    }

    /// Calls its export in `instance` and maps the result to its answer.
    fn ask(
        self,
        exports: &Exports,
        store: &mut Store,
        instance: &Instance,
    ) -> impl Future<Output = Asked<Self::Answer>>;
}
