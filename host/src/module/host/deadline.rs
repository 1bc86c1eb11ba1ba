//! `cni:ipam/deadline`: the budget as the guest sees it, counted from the lock grant.

use crate::lock::deadline::Deadline;
use crate::module::bindings::deadline::Host;

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Host for Deadline {
    fn budget(&mut self) -> wasmtime::Result<u64> {
        Ok(nanos(Deadline::budget(self)))
    }
    fn remaining(&mut self) -> wasmtime::Result<u64> {
        Ok(nanos(Deadline::remaining(self)))
    }
    fn expired(&mut self) -> wasmtime::Result<bool> {
        Ok(Deadline::expired(self))
    }
}
