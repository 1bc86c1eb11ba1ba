//! `cni:ipam/store`: the guest's view of its network's entries. Writes are staged
//! here and reads see them; only the host commits them, and only on success.
//!
//! What the host holds for the guest counts against the call's host memory limit
//! (`hostMemoryLimitMiB`): the staged set as the host stores it (key, value and a
//! per-entry overhead), and, on top of it, each `list-prefix` answer while it is built.

use super::{DeadlineExceeded, LimitExceeded};
use crate::limits::{LISTED_ENTRY_OVERHEAD, MAX_KEY_BYTES, MAX_VALUE_BYTES, STAGED_ENTRY_OVERHEAD};
use crate::lock::deadline::Deadline;
use crate::module::bindings::store::{Host, StoreError};
use crate::store::{Changes, Store};
use std::collections::BTreeMap;
use std::ops::ControlFlow;

/// How many listed entries pass between looks at the deadline.
const LISTED_PER_CLOCK_CHECK: usize = 1024;

pub struct GuestStore {
    store: Box<dyn Store>,
    network: String,
    staged: Changes,
    /// What `staged` costs the host, overheads included.
    staged_bytes: usize,
    /// `hostMemoryLimitMiB`, in bytes.
    host_memory: usize,
    deadline: Deadline,
    /// Set for `inspect`: every write is refused.
    read_only: bool,
    /// Set for a read-only ask whose answer the writing ask checks again: every read
    /// is a peek, so the commit neither compares nor counts it.
    untracked: bool,
}

fn staged_cost(key: &str, value: Option<&Vec<u8>>) -> usize {
    key.len() + value.map_or(0, Vec::len) + STAGED_ENTRY_OVERHEAD
}

impl GuestStore {
    pub fn new(
        store: Box<dyn Store>,
        network: String,
        deadline: Deadline,
        host_memory: usize,
    ) -> Self {
        GuestStore {
            store,
            network,
            staged: Changes::new(),
            staged_bytes: 0,
            host_memory,
            deadline,
            read_only: false,
            untracked: false,
        }
    }

    /// A store that refuses every write (`read-only`), for calls that may only read.
    pub fn read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// A read-only store whose reads the commit does not track: neither compared at
    /// the commit nor counted against its transaction ([`Store::peek`]).
    pub fn untracked(mut self) -> Self {
        self.read_only = true;
        self.untracked = true;
        self
    }

    /// The store and the staged writes, for the host to commit.
    pub fn into_parts(self) -> (Box<dyn Store>, Changes) {
        (self.store, self.staged)
    }

    /// Every host call is refused once the deadline has passed.
    fn check_deadline(&self) -> wasmtime::Result<()> {
        if self.deadline.expired() {
            return Err(wasmtime::Error::new(DeadlineExceeded));
        }
        Ok(())
    }

    fn stage(&mut self, key: String, value: Option<Vec<u8>>) -> Result<(), StoreError> {
        if self.read_only {
            return Err(StoreError::ReadOnly(format!(
                "{} {key:?}: this call may only read (inspect never writes)",
                if value.is_some() { "put" } else { "delete" }
            )));
        }
        if key.len() > MAX_KEY_BYTES {
            return Err(StoreError::TooLarge(format!(
                "key of {} bytes exceeds {MAX_KEY_BYTES}",
                key.len()
            )));
        }
        if let Some(value) = value.as_ref().filter(|v| v.len() > MAX_VALUE_BYTES) {
            return Err(StoreError::TooLarge(format!(
                "value of {} bytes exceeds {MAX_VALUE_BYTES}",
                value.len()
            )));
        }
        let replaced = self
            .staged
            .get(&key)
            .map_or(0, |old| staged_cost(&key, old.as_ref()));
        let total = self.staged_bytes - replaced + staged_cost(&key, value.as_ref());
        if total > self.host_memory {
            return Err(StoreError::TooLarge(format!(
                "staged writes would take {total} bytes of host memory, over ipam.hostMemoryLimitMiB ({} MiB)",
                self.host_memory >> 20
            )));
        }
        self.staged_bytes = total;
        self.staged.insert(key, value);
        Ok(())
    }
}

impl Host for GuestStore {
    fn get(&mut self, key: String) -> wasmtime::Result<Option<Vec<u8>>> {
        self.check_deadline()?;
        if let Some(staged) = self.staged.get(&key) {
            return Ok(staged.clone());
        }
        Ok(match self.untracked {
            false => self.store.get(&self.network, &key)?,
            true => self.store.peek(&self.network, &key)?,
        })
    }

    fn put(&mut self, key: String, value: Vec<u8>) -> wasmtime::Result<Result<(), StoreError>> {
        self.check_deadline()?;
        Ok(self.stage(key, Some(value)))
    }

    fn delete(&mut self, key: String) -> wasmtime::Result<Result<bool, StoreError>> {
        self.check_deadline()?;
        let present = self.get(key.clone())?.is_some();
        Ok(self.stage(key, None).map(|()| present))
    }

    fn list_prefix(&mut self, prefix: String) -> wasmtime::Result<Vec<(String, Vec<u8>)>> {
        self.listed(prefix, false)
    }

    /// `list-prefix` whose reads the commit does not check (see the WIT).
    fn peek_prefix(&mut self, prefix: String) -> wasmtime::Result<Vec<(String, Vec<u8>)>> {
        self.listed(prefix, true)
    }

    /// What the store's transaction still takes beside this call's reads and staged
    /// writes; a read-only call commits nothing, so it has no limit to keep to.
    fn commit_room(&mut self) -> wasmtime::Result<Option<u32>> {
        self.check_deadline()?;
        if self.read_only {
            return Ok(None);
        }
        Ok(self
            .store
            .commit_room(&self.network, &self.staged)
            .map(|room| u32::try_from(room).unwrap_or(u32::MAX)))
    }
}

impl GuestStore {
    /// The committed entries under `prefix` merged with the staged ones, built within
    /// what the host memory limit leaves beside the staged set, and within the
    /// deadline; `peek` leaves the committed ones out of what the commit checks.
    fn listed(&mut self, prefix: String, peek: bool) -> wasmtime::Result<Vec<(String, Vec<u8>)>> {
        self.check_deadline()?;
        let allowed = self.host_memory.saturating_sub(self.staged_bytes);
        let mut answer = BTreeMap::new();
        let mut bytes = 0usize;
        let mut stop: Option<wasmtime::Error> = None;
        let mut keep = |key: &str, value: &[u8], answer: &mut BTreeMap<String, Vec<u8>>| {
            bytes += key.len() + value.len() + LISTED_ENTRY_OVERHEAD;
            if bytes > allowed {
                return Err(wasmtime::Error::new(LimitExceeded(format!(
                    "list-prefix({prefix:?}) answer exceeds ipam.hostMemoryLimitMiB ({} MiB) beside {} bytes of staged writes",
                    self.host_memory >> 20,
                    self.staged_bytes
                ))));
            }
            answer.insert(key.to_string(), value.to_vec());
            Ok(())
        };
        let mut seen = 0usize;
        let mut visit = |key: &str, value: &[u8]| {
            seen += 1;
            if seen.is_multiple_of(LISTED_PER_CLOCK_CHECK) && self.deadline.expired() {
                stop = Some(wasmtime::Error::new(DeadlineExceeded));
                return ControlFlow::Break(());
            }
            // A staged change to this key wins; it is merged below.
            if self.staged.contains_key(key) {
                return ControlFlow::Continue(());
            }
            match keep(key, value, &mut answer) {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => {
                    stop = Some(e);
                    ControlFlow::Break(())
                }
            }
        };
        match peek || self.untracked {
            false => self
                .store
                .visit_prefix(&self.network, &prefix, &mut visit)?,
            true => self.store.peek_prefix(&self.network, &prefix, &mut visit)?,
        }
        if let Some(e) = stop {
            return Err(e);
        }
        for (key, change) in self.staged.range(prefix.clone()..) {
            if !key.starts_with(&prefix) {
                break;
            }
            if let Some(value) = change {
                keep(key, value, &mut answer)?;
            }
        }
        Ok(answer.into_iter().collect())
    }
}
