pub mod forget;
pub mod gc;
pub mod leaks;
pub mod migrate;
pub mod release_node;
pub mod reserve;
/// What the container runtime says is alive (CRI, or a file of ids for podman).
pub mod runtime;
pub mod store;

/// How many seconds ago a node committed its last call (`last`, unix seconds), if
/// that is within `window` of `now`, or later than `now` by a clock ahead of this
/// one's: a node that may still be calling. `release-node` and `store migrate`
/// refuse such a node.
pub fn committed_within(last: u64, now: u64, window: std::time::Duration) -> Option<u64> {
    let ago = now.saturating_sub(last);
    (last > now || ago < window.as_secs()).then_some(ago)
}
