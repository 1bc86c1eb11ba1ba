//! wasm-ipam: a CNI IPAM plugin that runs IPAM logic as sandboxed WebAssembly
//! components under a host-owned lock and a deadline that starts only at the grant.
//!
//! [`call::handle`] is one CNI call. The folders group by question: `call` (one call,
//! in order, and what may come back; STATUS, answered without the lock), `pipeline`
//! (the one locked run every module call goes through), `module` (loading, compiling
//! and running a module, and what it can reach), `lock` (the fair host-wide lock),
//! `store` (the embedded and the etcd store), `operator` (the operators' commands, by
//! what the operator is doing: `view`, `setup`, `repair`, `modules`);
//! each file beside them answers one question of its own (`health`: what the node's
//! calls recorded for STATUS).

pub mod call;
pub mod caller;
pub mod cni;
pub mod config;
mod doc_figures;
mod doc_readme;
pub mod error;
pub mod files;
pub mod fuzz;
pub mod health;
pub mod limits;
pub mod lock;
pub mod log_rotation;
pub mod logging;
pub mod module;
pub mod operator;
pub mod pipeline;
pub mod store;
pub mod test_hook;
#[cfg(test)]
pub mod test_support;
