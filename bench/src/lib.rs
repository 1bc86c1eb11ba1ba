//! The wasm-ipam benchmark suite as a library: the driver (`main.rs`) runs its
//! scenarios, and the two DEL model binaries (`bin/`) share [`model`].

pub mod cycle;
pub mod etcd;
pub mod fifo;
pub mod invocations;
pub mod kube_api;
pub mod model;
pub mod process;
pub mod registry;
pub mod report;
pub mod scenario;
pub mod setup;
pub mod stats;
