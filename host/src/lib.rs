//! wasm-ipam: a CNI IPAM plugin that runs IPAM logic as sandboxed WebAssembly
//! components under a host-owned lock and a deadline that starts only at the grant.
//!
//! [`plugin::handle`] is one CNI call; each other module answers one question.

mod answer;
mod bindings;
pub mod cache;
pub mod cli;
pub mod cni;
pub mod compile;
pub mod config;
pub mod deadline;
pub mod engine;
pub mod error;
mod host;
pub mod import;
pub mod inventory;
pub mod limits;
pub mod lock;
pub mod logging;
pub mod metrics;
pub mod plugin;
pub mod queue;
pub mod store;
