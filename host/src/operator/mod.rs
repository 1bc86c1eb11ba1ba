//! The operators' commands (`wasm-ipam list | stats | precompile | import-host-local`):
//! what a person on the node runs, beside the CNI calls the runtime makes.

pub mod cli;
pub mod import;
pub mod inventory;
pub mod metrics;
