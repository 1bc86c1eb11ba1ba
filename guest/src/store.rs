//! The network's key/value store, behind a [`Store`] trait so allocation logic can be
//! written once and unit-tested over [`MemoryStore`] outside a host.
//!
//! In a host, [`HostStore`] reaches the host's store: reads see this call's own
//! writes, and writes are committed only if the handler returns `Ok`.

use crate::Error;
use crate::bindings::cni::ipam::store as wit;
use crate::error::code;
use std::collections::BTreeMap;

/// A key/value store of byte values under string keys.
pub trait Store {
    fn get(&self, key: &str) -> Option<Vec<u8>>;
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), Error>;
    /// Removes `key`; returns whether it was present.
    fn delete(&mut self, key: &str) -> Result<bool, Error>;
    /// Every entry whose key starts with `prefix`, in key order.
    fn list(&self, prefix: &str) -> Vec<(String, Vec<u8>)>;

    fn get_string(&self, key: &str) -> Option<String> {
        self.get(key).and_then(|v| String::from_utf8(v).ok())
    }
}

/// The host's store for this network.
#[derive(Debug, Default, Clone, Copy)]
pub struct HostStore;

fn refused(e: wit::StoreError) -> Error {
    match e {
        wit::StoreError::TooLarge(why) => {
            Error::new(code::STORE_WRITE_REFUSED, "store write refused").with_details(why)
        }
    }
}

impl Store for HostStore {
    fn get(&self, key: &str) -> Option<Vec<u8>> {
        wit::get(key)
    }
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), Error> {
        wit::put(key, value).map_err(refused)
    }
    fn delete(&mut self, key: &str) -> Result<bool, Error> {
        wit::delete(key).map_err(refused)
    }
    fn list(&self, prefix: &str) -> Vec<(String, Vec<u8>)> {
        wit::list_prefix(prefix)
    }
}

/// An in-memory store for unit tests of module logic.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MemoryStore {
    pub entries: BTreeMap<String, Vec<u8>>,
}

impl Store for MemoryStore {
    fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.entries.get(key).cloned()
    }
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), Error> {
        self.entries.insert(key.to_string(), value.to_vec());
        Ok(())
    }
    fn delete(&mut self, key: &str) -> Result<bool, Error> {
        Ok(self.entries.remove(key).is_some())
    }
    fn list(&self, prefix: &str) -> Vec<(String, Vec<u8>)> {
        self.entries
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}
