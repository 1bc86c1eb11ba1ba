//! The call's time budget, counted from the host's lock grant.

use crate::bindings::cni::ipam::deadline as wit;
use std::time::Duration;

/// The whole budget of this call.
pub fn budget() -> Duration {
    Duration::from_nanos(wit::budget())
}

/// The budget left; zero once the deadline has passed.
pub fn remaining() -> Duration {
    Duration::from_nanos(wit::remaining())
}

/// Whether the deadline has passed (the host stops the module soon after).
pub fn expired() -> bool {
    wit::expired()
}
