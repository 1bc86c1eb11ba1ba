//! Meeting another commit's lock: a decided commit is finished from its decision, an
//! abandoned one undone (its decision spoiled first, so it can never land), one in
//! force waited out (or, for a read nothing checks, read through).

use super::api::WriteFailure;
use super::objects::{Decision, PLURAL, Place, Role, Shard, Spec, group_of};
use super::state::{KubernetesStore, PENDING_FILE, Pending, conflict};
use crate::error::{CniError, code};
use std::time::Duration;

/// How long after a lock's deadline (by the locking node's clock) another node may
/// take it as abandoned: room for clocks that disagree and a write still in flight.
const LOCK_GRACE: u64 = 30;
/// How many spoiled commits a node's object remembers.
const ABORTED_KEPT: usize = 16;
/// The pause before a call runs again after meeting a lock still in force.
pub(super) const LOCKED_PAUSE: Duration = Duration::from_millis(50);
/// How many times an unlock is written, each on the version the last one met.
const UNLOCK_TRIES: usize = 3;

impl KubernetesStore {
    /// Finishes (or undoes) the commit this node's last call left, before anything
    /// else: its decision must be applied before a new one replaces it.
    pub(super) fn finish_pending(&self) -> Result<(), CniError> {
        let path = self.data_dir.join(PENDING_FILE);
        let Ok(text) = std::fs::read(&path) else {
            return Ok(());
        };
        if let Ok(pending) = serde_json::from_slice::<Pending>(&text) {
            // Undoing it may change the home (its decision spoiled): read it afresh.
            self.forget_home(&pending.network);
            for name in &pending.names {
                if let Some(shard) = self.api.get(name)?
                    && shard
                        .spec
                        .lock
                        .as_ref()
                        .is_some_and(|l| l.commit == pending.commit)
                {
                    self.resolve(shard, Met::OwnPending)?;
                }
            }
        }
        crate::files::put_record(&path, None).map_err(|e| {
            CniError::new(
                code::IO_FAILURE,
                format!("kubernetes: cannot remove {}", path.display()),
            )
            .with_details(e)
        })
    }

    /// A locked object met by a read: a decided commit is finished, an abandoned one
    /// undone; one still in force is, for a guarded read, a conflict the call waits out
    /// by running again, and for a peek the object as it was before that commit (its
    /// entries change only when it is unlocked). Returns the object as it is after
    /// (none: deleted by the commit it finished).
    pub(super) fn resolve(&self, shard: Shard, met: Met) -> Result<Option<Shard>, CniError> {
        let Some(lock) = shard.spec.lock.clone() else {
            return Ok(Some(shard));
        };
        let network = shard.spec.network.clone();
        let deciding = Place::node(&network, &lock.node);
        let decider = self.api.get(&deciding.name())?;
        let decided = decider
            .as_ref()
            .and_then(|d| d.spec.decided.as_ref())
            .filter(|d| d.commit == lock.commit);
        if let Some(decision) = decided {
            return self.finish(shard, decision);
        }
        let spoiled = decider
            .as_ref()
            .is_some_and(|d| d.spec.aborted.contains(&lock.commit));
        let abandoned = met == Met::OwnPending
            || lock.node == self.node
            || crate::health::unix_now() > lock.until + LOCK_GRACE;
        if !spoiled && !abandoned && met == Met::Peek {
            return Ok(Some(shard));
        }
        if !spoiled && !abandoned {
            std::thread::sleep(LOCKED_PAUSE);
            self.state.borrow_mut().conflicted = true;
            self.api.figures.borrow_mut().conflicts += 1;
            return Err(conflict(&format!(
                "{PLURAL}/{} is locked by commit {} of node {} in progress",
                shard.metadata.name, lock.commit, lock.node
            )));
        }
        if !spoiled {
            self.spoil(&deciding, decider, &lock.commit)?;
        }
        // Undone: the object as it was before the lock.
        self.rewrite(shard, |locked| {
            let mut unlocked = locked.clone();
            unlocked.spec.lock = None;
            self.api.replace(&unlocked).map(Some)
        })
    }

    /// Writes what a decided commit changes in the object it locked, unlocking it.
    pub(super) fn finish(
        &self,
        shard: Shard,
        decision: &Decision,
    ) -> Result<Option<Shard>, CniError> {
        self.rewrite(shard, |locked| {
            let done = finished(locked, decision);
            match done.spec.role == Role::Entries
                && done.spec.entries.is_empty()
                && done.spec.home.is_none()
            {
                true => self
                    .api
                    .delete(&done.metadata.name, &locked.rv())
                    .map(|()| None),
                false => self.api.replace(&done).map(Some),
            }
        })
    }

    /// Writes `shard` unlocked by `write`, conditional on its version. A write that
    /// conflicted or whose answer was lost is looked at: done when the lock is gone
    /// (someone else finished or undid it: no longer this call's to write); written
    /// again on the version read when the same lock is still there, for a locked
    /// object's version also changes under its lock: a node's home is the deciding
    /// object of that node's commits, and spoiling one of them writes it (a full run
    /// answered 11 here once, when the first conflict was final).
    fn rewrite(
        &self,
        mut shard: Shard,
        write: impl Fn(&Shard) -> Result<Option<Shard>, WriteFailure>,
    ) -> Result<Option<Shard>, CniError> {
        for _ in 0..UNLOCK_TRIES {
            match write(&shard) {
                Ok(written) => return Ok(written),
                Err(WriteFailure::Failed(e)) => return Err(e),
                Err(WriteFailure::Conflict | WriteFailure::Unknown(_)) => {}
            }
            match self.api.get(&shard.metadata.name)? {
                Some(now) if now.spec.lock.is_some() && now.spec.lock == shard.spec.lock => {
                    shard = now;
                }
                other => return Ok(other),
            }
        }
        Err(CniError::new(
            code::TRY_AGAIN_LATER,
            format!(
                "kubernetes: {PLURAL}/{} could not be unlocked in {UNLOCK_TRIES} writes; the next call tries again",
                shard.metadata.name
            ),
        ))
    }

    /// Makes sure `commit` of the node whose object is `deciding` can never be
    /// decided: its decision is a write conditional on that object's version, which
    /// this write changes.
    pub(super) fn spoil(
        &self,
        deciding: &Place,
        decider: Option<Shard>,
        commit: &str,
    ) -> Result<(), CniError> {
        let written = match decider {
            Some(mut shard) => {
                shard.spec.aborted.push(commit.to_string());
                let excess = shard.spec.aborted.len().saturating_sub(ABORTED_KEPT);
                shard.spec.aborted.drain(..excess);
                self.api.replace(&shard).map(drop)
            }
            None => {
                let mut spec = Spec::empty(deciding);
                spec.aborted.push(commit.to_string());
                self.api.create(&Shard::new(deciding, spec)).map(drop)
            }
        };
        match written {
            Ok(()) => Ok(()),
            Err(WriteFailure::Failed(e)) => Err(e),
            // Changed meanwhile (maybe decided after all): the caller's next attempt
            // reads it again.
            Err(WriteFailure::Conflict | WriteFailure::Unknown(_)) => {
                self.state.borrow_mut().conflicted = true;
                Err(conflict(
                    "a commit's deciding object changed while it was undone",
                ))
            }
        }
    }
}

/// `shard`, locked by `decision`'s commit, as that commit leaves it: its entries
/// changed, its group's home set, the groups moved out of it gone, unlocked.
pub(super) fn finished(shard: &Shard, decision: &Decision) -> Shard {
    let name = &shard.metadata.name;
    let mut done = shard.clone();
    done.spec
        .apply(decision.changes.get(name).map_or(&[][..], Vec::as_slice));
    if let Some(node) = decision.homes.get(name) {
        done.spec.home = Some(node.clone());
    }
    if let Some(moved) = decision.dropped.get(name) {
        done.spec.groups.retain(|g| !moved.contains(g));
        done.spec
            .entries
            .retain(|e| !moved.iter().any(|g| g == group_of(&e.key)));
        done.spec.size = done.spec.entries.len() as u64;
    }
    done.spec.lock = None;
    if done.spec.role == Role::Entries {
        done.spec.commit = Some(decision.commit.clone());
    }
    done
}

/// Who meets a lock, for [`KubernetesStore::resolve`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Met {
    /// This node's own unfinished commit, which no call of this node is running now
    /// (it holds the host-wide lock): finished or undone whatever its deadline.
    OwnPending,
    /// A read the commit checks: a lock in force is a conflict.
    Guarded,
    /// A read nothing checks (a module's peek, an operator's listing, `check`): a lock
    /// in force is read through.
    Peek,
}

impl Met {
    pub(super) fn by(guarded: bool) -> Self {
        match guarded {
            true => Met::Guarded,
            false => Met::Peek,
        }
    }
}
