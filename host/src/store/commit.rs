//! One commit, the same for every backend: what is checked, in which order, and what
//! is refused. A backend only prepares its write ([`Prepared`]) and does it; the steps
//! around it are here, once:
//!
//! 1. no changes: nothing is written, but a store that answered reads from a
//!    node-local copy confirms them ([`super::Shared::confirm_reads`]);
//! 2. the deadline: past it, nothing is prepared (code 103);
//! 3. the backend prepares the write and says how it changes the network's size;
//! 4. a commit that grows the network is held against the quota, with the network's
//!    size across every node before it (code 108); shrinking is always allowed, so a
//!    network over a lowered quota can still release addresses;
//! 5. the deadline again, then the backend's write, which may still refuse (a
//!    conflict, a limit of its own, the deadline between its writes).

use super::{Changes, Quota, Store, Usage, Written};
use crate::error::{CniError, code};
use serde::{Deserialize, Serialize};

/// How long the other nodes' usage of a network, as a node last read it, stands in for
/// the quota check of its commits (while [`others_may_stand_in`]); seconds.
pub const OTHERS_FRESH: u64 = 30;

/// A network's size as one node changed it, or as one commit changes it: signed, since
/// a node may release entries another node added. A cluster store keeps one per node
/// and network (its *usage row*), with when that node last committed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeUsage {
    pub entries: i64,
    pub bytes: i64,
    /// Unix seconds of the node's last commit, by its clock (a row only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<u64>,
}

impl NodeUsage {
    /// `self` and `other` summed, with no time.
    pub fn plus(self, other: NodeUsage) -> NodeUsage {
        NodeUsage {
            entries: self.entries + other.entries,
            bytes: self.bytes + other.bytes,
            last: None,
        }
    }

    /// A change that makes the network hold more entries or bytes.
    pub fn grows(self) -> bool {
        self.entries > 0 || self.bytes > 0
    }

    /// The size a commit adds (negative: removes) by changing `key` from a value of
    /// `old` bytes to one of `new` bytes (`None`: absent).
    pub fn of_change(key: &str, old: Option<u64>, new: Option<u64>) -> NodeUsage {
        let size = |len: Option<u64>| match len {
            Some(len) => (1, (key.len() as u64 + len) as i64),
            None => (0, 0),
        };
        let ((old_entries, old_bytes), (new_entries, new_bytes)) = (size(old), size(new));
        NodeUsage {
            entries: new_entries - old_entries,
            bytes: new_bytes - old_bytes,
            last: None,
        }
    }
}

impl From<NodeUsage> for Usage {
    /// A sum of rows as the quota reads it: a row is signed, the network's size is not.
    fn from(u: NodeUsage) -> Usage {
        Usage {
            entries: u.entries.max(0) as u64,
            bytes: u.bytes.max(0) as u64,
        }
    }
}

impl From<Usage> for NodeUsage {
    fn from(u: Usage) -> NodeUsage {
        NodeUsage {
            entries: u.entries as i64,
            bytes: u.bytes as i64,
            last: None,
        }
    }
}

/// Whether the other nodes' usage, as read `age` seconds ago, may stand in for a fresh
/// read in the quota check of a commit that leaves the network at `after`: while it is
/// recent and the network stays under half its quota, no node's commits in between
/// can have brought it to the quota. (A clock that went back is no age.)
pub fn others_may_stand_in(age: Option<u64>, after: NodeUsage, quota: Quota) -> bool {
    let after = Usage::from(after);
    age.is_some_and(|age| age < OTHERS_FRESH)
        && after.entries <= quota.entries / 2
        && after.bytes <= quota.bytes / 2
}

/// A commit a backend has prepared and not yet written; dropped unwritten, it leaves
/// nothing behind.
pub trait Prepared {
    /// How the commit changes the network's size.
    fn delta(&self) -> NodeUsage;

    /// The network's size before the commit, across every node: asked only of a
    /// commit that grows it, for the quota.
    fn usage_before(&mut self, quota: Quota) -> Result<Usage, CniError>;

    /// Writes the commit, all of it or nothing; `expired` is looked at between the
    /// backend's own steps (past it, nothing is written: code 103).
    fn write(self: Box<Self>, expired: &dyn Fn() -> bool) -> Result<Written, CniError>;
}

/// [`Store::commit_written`]: the steps of this module's description.
pub fn run<S: Store + ?Sized>(
    store: &mut S,
    network: &str,
    changes: &Changes,
    quota: Quota,
    expired: &dyn Fn() -> bool,
) -> Result<Written, CniError> {
    if changes.is_empty() {
        if let Some(shared) = store.shared_mut() {
            shared.confirm_reads()?;
        }
        return Ok(Written::durable());
    }
    if expired() {
        return Err(too_late(changes.len()));
    }
    let mut prepared = store.prepare(network, changes)?;
    let delta = prepared.delta();
    if delta.grows() {
        let before = prepared.usage_before(quota)?;
        let after = NodeUsage::from(before).plus(delta);
        check_quota(network, before, after.into(), quota)?;
    }
    if expired() {
        return Err(too_late(changes.len()));
    }
    prepared.write(expired)
}

/// The refusal of a commit that its deadline overtook.
pub fn too_late(staged: usize) -> CniError {
    CniError::new(
        code::DEADLINE_EXCEEDED,
        "the module's writes could not be committed before its deadline; nothing was committed",
    )
    .with_details(format!("{staged} staged changes"))
}

/// Refuses growth past the quota; shrinking is always allowed.
fn check_quota(network: &str, before: Usage, after: Usage, quota: Quota) -> Result<(), CniError> {
    let over = |what: &str, before: u64, after: u64, limit: u64, key: &str| {
        (after > limit && after > before).then(|| {
            CniError::new(
                code::STORE_QUOTA_EXCEEDED,
                format!(
                    "network {network:?} would hold {after} {what} in the store, over its quota of {limit} (ipam.{key}); nothing was committed"
                ),
            )
        })
    };
    let refused = over(
        "entries",
        before.entries,
        after.entries,
        quota.entries,
        "storeQuotaEntries",
    )
    .or_else(|| {
        over(
            "bytes",
            before.bytes,
            after.bytes,
            quota.bytes,
            "storeQuotaMiB",
        )
    });
    match refused {
        Some(err) => Err(err),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn others_stand_in_only_while_recent_and_under_half_the_quota() {
        let quota = Quota {
            entries: 100,
            bytes: 10_000,
        };
        let at = |entries: i64, bytes: i64| NodeUsage {
            entries,
            bytes,
            last: None,
        };
        assert!(others_may_stand_in(Some(0), at(50, 5000), quota));
        assert!(others_may_stand_in(Some(29), at(1, 1), quota));
        assert!(!others_may_stand_in(Some(30), at(1, 1), quota), "stale");
        assert!(!others_may_stand_in(None, at(1, 1), quota), "no age");
        assert!(!others_may_stand_in(Some(0), at(51, 1), quota), "entries");
        assert!(!others_may_stand_in(Some(0), at(1, 5001), quota), "bytes");
    }

    #[test]
    fn a_change_counts_what_it_adds_and_what_it_replaces() {
        let put = NodeUsage::of_change("ab", None, Some(3));
        assert_eq!((put.entries, put.bytes), (1, 5));
        let replace = NodeUsage::of_change("ab", Some(3), Some(1));
        assert_eq!((replace.entries, replace.bytes), (0, -2));
        assert!(!replace.grows());
        let delete = NodeUsage::of_change("ab", Some(1), None);
        assert_eq!((delete.entries, delete.bytes), (-1, -3));
        assert_eq!(NodeUsage::of_change("ab", None, None), NodeUsage::default());
    }
}
