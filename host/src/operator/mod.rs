//! The operators' commands (`wasm-ipam install | list | stats | inspect | forget |
//! gc | release-node | reserve | unreserve | precompile | pull | push | store | import-host-local | try |
//! new`): what a person on the node runs, beside the CNI calls the
//! runtime makes. `ask` is how they reach a network's module.

pub mod ask;
pub mod cli;
pub mod cni_versions;
pub mod describe;
mod doc_commands;
pub mod forget;
pub mod gc;
pub mod import;
pub mod install;
pub mod inventory;
pub mod log_tail;
pub mod metrics;
pub mod new;
pub mod oci;
pub mod release_node;
pub mod reserve;
pub mod runtime;
pub mod table;
pub mod try_call;
