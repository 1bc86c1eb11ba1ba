//! `cni:ipam/store`: the guest's view of its network's entries. Writes are staged
//! here and reads see them; only the host commits them, and only on success.

use super::DeadlineExceeded;
use crate::bindings::store::{Host, StoreError};
use crate::deadline::Deadline;
use crate::store::{Changes, Store};
use std::sync::Arc;

pub const MAX_KEY_BYTES: usize = 1024;
pub const MAX_VALUE_BYTES: usize = 64 * 1024;
/// Bound on what one call may stage (keys plus values).
pub const MAX_STAGED_BYTES: usize = 16 << 20;

pub struct GuestStore {
    store: Arc<Store>,
    network: String,
    staged: Changes,
    staged_bytes: usize,
    deadline: Deadline,
}

impl GuestStore {
    pub fn new(store: Arc<Store>, network: String, deadline: Deadline) -> Self {
        GuestStore {
            store,
            network,
            staged: Changes::new(),
            staged_bytes: 0,
            deadline,
        }
    }

    /// The staged writes, for the host to commit.
    pub fn into_changes(self) -> Changes {
        self.staged
    }

    /// Every host call is refused once the deadline has passed.
    fn check_deadline(&self) -> wasmtime::Result<()> {
        if self.deadline.expired() {
            return Err(wasmtime::Error::new(DeadlineExceeded));
        }
        Ok(())
    }

    fn stage(&mut self, key: String, value: Option<Vec<u8>>) -> Result<(), StoreError> {
        if key.len() > MAX_KEY_BYTES {
            return Err(StoreError::TooLarge(format!(
                "key of {} bytes exceeds {MAX_KEY_BYTES}",
                key.len()
            )));
        }
        let size = key.len() + value.as_ref().map_or(0, Vec::len);
        if value.as_ref().is_some_and(|v| v.len() > MAX_VALUE_BYTES) {
            return Err(StoreError::TooLarge(format!(
                "value of {} bytes exceeds {MAX_VALUE_BYTES}",
                size - key.len()
            )));
        }
        if self.staged_bytes + size > MAX_STAGED_BYTES {
            return Err(StoreError::TooLarge(format!(
                "staged writes would exceed {MAX_STAGED_BYTES} bytes"
            )));
        }
        self.staged_bytes += size;
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
        Ok(self.store.get(&self.network, &key)?)
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
        self.check_deadline()?;
        let mut merged: std::collections::BTreeMap<String, Vec<u8>> = self
            .store
            .list(&self.network, &prefix)?
            .into_iter()
            .collect();
        for (key, change) in self.staged.range(prefix.clone()..) {
            if !key.starts_with(&prefix) {
                break;
            }
            match change {
                Some(value) => merged.insert(key.clone(), value.clone()),
                None => merged.remove(key),
            };
        }
        Ok(merged.into_iter().collect())
    }
}
