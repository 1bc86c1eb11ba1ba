pub mod forget;
pub mod gc;
pub mod leaks;
pub mod migrate;
pub mod release_node;
pub mod reserve;
/// What the container runtime says is alive (CRI, or a file of ids for podman).
pub mod runtime;
pub mod store;
