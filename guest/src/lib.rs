//! SDK for writing wasm-ipam IPAM modules: WebAssembly components the `wasm-ipam` CNI
//! plugin runs under its host-wide lock and post-grant deadline.
//!
//! A module implements [`IpamModule`] over a [`Store`] it is handed, and exports it
//! with [`export_module!`]. Because the store is an argument, the same code runs in
//! the host (on [`store::HostStore`]) and in a plain `cargo test` (on
//! [`store::MemoryStore`]). A module that hands out the addresses of a /30 to one
//! attachment each, and lists them for `wasm-ipam list`:
//!
//! ```
//! use wasm_ipam_guest::store::{MemoryStore, Store};
//! use wasm_ipam_guest::{Allocation, Command, Context, Error, IpConfig, IpamModule};
//! use wasm_ipam_guest::{IpamResult, Request, error::code, export_module, ipam_module};
//!
//! struct Tiny;
//!
//! #[ipam_module] // records what Tiny implements, for `wasm-ipam inspect`
//! impl IpamModule for Tiny {
//!     fn add(request: &Request, store: &mut impl Store) -> Result<IpamResult, Error> {
//!         let owner = format!("{}\r\n{}", request.container_id(), request.ifname());
//!         let ip = ["10.0.0.2"]
//!             .into_iter()
//!             .find(|ip| store.get(&format!("ip/{ip}")).is_none())
//!             .ok_or_else(|| Error::new(code::MODULE_SPECIFIC, "no address left"))?;
//!         store.put(&format!("ip/{ip}"), owner.as_bytes())?;
//!         Ok(IpamResult::default().ip(IpConfig::new(format!("{ip}/30")).gateway("10.0.0.1")))
//!     }
//!
//!     fn del(request: &Request, store: &mut impl Store) -> Result<(), Error> {
//!         let owner = format!("{}\r\n{}", request.container_id(), request.ifname());
//!         for (key, value) in store.list("ip/") {
//!             if value == owner.as_bytes() {
//!                 store.delete(&key)?;
//!             }
//!         }
//!         Ok(())
//!     }
//!
//!     fn allocations(_: &Context, store: &impl Store) -> Result<Vec<Allocation>, Error> {
//!         let mut held = Vec::new();
//!         for (key, value) in store.list("ip/") {
//!             let owner = String::from_utf8_lossy(&value);
//!             let (id, ifname) = owner.split_once("\r\n").unwrap_or((&owner, ""));
//!             held.push(Allocation::new(&key["ip/".len()..], id, ifname));
//!         }
//!         Ok(held)
//!     }
//! }
//!
//! // In a wasm32 build this exports the module; natively it only checks the type.
//! export_module!(Tiny);
//!
//! // The module's logic, tested natively over an in-memory store.
//! let config = serde_json::json!({"cniVersion": "1.1.0", "name": "net"});
//! let add = Request::for_test(Command::Add, "ctr-1", "eth0", config.clone());
//! let mut store = MemoryStore::default();
//! let result = Tiny::add(&add, &mut store)?;
//! assert_eq!(result.ips[0].address, "10.0.0.2/30");
//! assert_eq!(Tiny::add(&add, &mut store).unwrap_err().msg, "no address left");
//!
//! // CHECK, GC, STATUS and `stats` come from the defaults, built on `allocations`.
//! Tiny::check(&Request::for_test(Command::Check, "ctr-1", "eth0", config.clone()), &store)?;
//! Tiny::gc(&Request::for_test(Command::Gc, "", "", config), &[], &mut store)?;
//! assert!(store.entries.is_empty());
//! # Ok::<(), Error>(())
//! ```
//!
//! The module is instantiated only after the host holds the host-wide IPAM lock, and
//! [`deadline`] measures the budget from that grant. Store writes are staged and
//! committed by the host only when the handler returns `Ok`; inspect's handlers
//! ([`IpamModule::allocations`], [`IpamModule::pools`], [`IpamModule::usage`],
//! [`IpamModule::reservations`]) only read, and so does [`IpamModule::release_node`]
//! when asked for a dry run.
//!
//! Build with `cargo build --release --target wasm32-wasip2`; a module crate is a
//! `cdylib` (the component) and an `rlib` (for its native tests).

pub mod bindings;
mod capabilities;
pub mod deadline;
pub mod error;
mod export;
mod inspect;
#[doc(hidden)]
pub mod keys;
pub mod log;
mod migrate;
mod module;
pub mod readiness;
mod request;
mod result;
pub mod store;
mod usage;

pub use bindings::cni::ipam::types::{
    Attachment, Command, Dns, Error, IpConfig, IpamResult, Route, WallInstant,
};
pub use bindings::exports::cni::ipam::inspect::{Allocation, Pool};
pub use bindings::exports::cni::ipam::migrate::{ImportReport, StateFile};
pub use bindings::exports::cni::ipam::nodes::{ReleaseReport, ReleasedAddress};
pub use bindings::exports::cni::ipam::reservations::Reservation;
pub use bindings::exports::cni::ipam::usage::Kind as UsageKind;
pub use capabilities::{Function, Origin, capabilities};
pub use inspect::Context;
pub use migrate::ImportRequest;
pub use module::{Exported, ImplementedByModule, IpamModule};
// `#[ipam_module]` names the trait by its absolute path, in this crate's tests too.
extern crate self as wasm_ipam_guest;
pub use request::{IP_ADDRS_ANNOTATION, POD_ANNOTATIONS, Request, annotated_ips_in};
pub use store::Store;
pub use usage::PoolUsage;
pub use wasm_ipam_guest_macros::ipam_module;

/// Glue used by [`export_module!`]; not part of the public API.
#[doc(hidden)]
pub mod __export {
    pub use crate::export::*;
}
