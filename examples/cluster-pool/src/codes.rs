//! The module's own CNI error codes (140 and up, as the contract allows), one table
//! that docs/cluster.md repeats.

/// A damaged record, or a pool with no free address left in any block.
pub use wasm_ipam_guest::error::code::MODULE_SPECIFIC as EXHAUSTED;
/// The pod names a pool (annotation `wasm-ipam.io/pool` or CNI_ARGS `IPAM_POOL`) that
/// `ipam.pools` does not have.
pub const UNKNOWN_POOL: u32 = 141;
/// No pool serves the pod's namespace and no pool is the default.
pub const NO_POOL: u32 = 142;
/// The node must borrow (at `maxBlocksPerNode`, or no free block) and
/// `strictAffinity` forbids it; or a requested address's block is past the limit; or
/// the node is at `maxBlocksPerNode`, nothing is left to borrow, and the pool's free
/// addresses lie in unclaimed blocks (not exhausted: the limit refuses them).
pub const BLOCK_LIMIT: u32 = 143;
/// A requested address is reserved (`wasm-ipam reserve`).
pub const RESERVED: u32 = 144;
/// `reserve` of addresses in use, without `--force`.
pub const IN_USE: u32 = 145;
/// `unreserve` of a CIDR that is not reserved.
pub const NOT_RESERVED: u32 = 146;
/// The pod asked for addresses (annotation `wasm-ipam.io/ip-addrs`, CNI_ARGS `IP`,
/// `runtimeConfig.ips`) and its pool refuses requested addresses (`allowRequested`).
pub const REQUESTS_REFUSED: u32 = 147;
/// A requested address is held by another container (or kept for a sticky pod).
pub const ADDRESS_HELD: u32 = 148;
