//! The call's budget. It can only be built from a [`LockGuard`], so it cannot start
//! before the host-wide lock is granted: the lock wait never eats the budget.

use crate::lock::LockGuard;
use std::time::{Duration, Instant, SystemTime};

#[derive(Debug, Clone, Copy)]
pub struct Deadline {
    granted: Instant,
    granted_wall: SystemTime,
    budget: Duration,
}

impl Deadline {
    /// A budget of `budget` counted from the moment `lock` was granted.
    pub fn from_grant(lock: &LockGuard, budget: Duration) -> Self {
        Deadline {
            granted: lock.granted(),
            granted_wall: lock.granted_wall(),
            budget,
        }
    }

    pub fn budget(&self) -> Duration {
        self.budget
    }

    /// Time since the grant.
    pub fn elapsed(&self) -> Duration {
        self.granted.elapsed()
    }

    pub fn remaining(&self) -> Duration {
        self.budget.saturating_sub(self.elapsed())
    }

    pub fn expired(&self) -> bool {
        self.remaining().is_zero()
    }

    /// The grant's wall-clock instant, for timestamps.
    pub fn granted_wall(&self) -> SystemTime {
        self.granted_wall
    }

    /// The wall clock the guest sees: the grant instant plus monotonic time since.
    pub fn wall_now(&self) -> SystemTime {
        self.granted_wall + self.elapsed()
    }
}
