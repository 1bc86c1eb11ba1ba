//! The network's key/value store, behind a [`Store`] trait so allocation logic is
//! written once and unit-tested over [`MemoryStore`] outside a host.
//!
//! The SDK hands each handler the store: [`HostStore`] in a host, where reads see this
//! call's own writes and writes are committed only if the handler returns `Ok`; a test
//! passes a [`MemoryStore`] instead.

use crate::Error;
use crate::bindings::cni::ipam::store as wit;
use crate::error::code;
use std::collections::BTreeMap;

/// A key/value store of byte values under string keys.
pub trait Store {
    fn get(&self, key: &str) -> Option<Vec<u8>>;
    /// Stores `value` under `key`; a write the host refuses is code 120.
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), Error>;
    /// Removes `key`; returns whether it was present.
    fn delete(&mut self, key: &str) -> Result<bool, Error>;
    /// Every entry whose key starts with `prefix`, in key order.
    fn list(&self, prefix: &str) -> Vec<(String, Vec<u8>)>;

    /// [`Store::list`] for figures that only inform (a pool's use for a warning): in
    /// a store several nodes share, what it reads is not checked at the commit, so
    /// another node's write meanwhile does not make the call run again. Never decide
    /// an allocation from it. Outside a host it is `list`.
    fn peek(&self, prefix: &str) -> Vec<(String, Vec<u8>)> {
        self.list(prefix)
    }

    /// How many more distinct keys this call may read or write before its commit
    /// exceeds what the store takes in one transaction (etcd's `--max-txn-ops`);
    /// `None` when the store has no such limit. A key read and then written counts
    /// once; a [`Store::list`] counts once for the prefix and once per key it answers;
    /// [`Store::peek`] costs nothing. Upkeep that is not the call's own (sweeping,
    /// freeing) should take at most this, after the call's own work, and leave the
    /// rest to later calls. Outside a host there is no limit, unless a test sets one
    /// ([`TxnLimited`]).
    fn commit_room(&self) -> Option<usize> {
        None
    }

    /// The value under `key` as text; `None` when absent or not UTF-8.
    fn get_string(&self, key: &str) -> Option<String> {
        self.get(key).and_then(|v| String::from_utf8(v).ok())
    }
}

/// The host's store for this network: what the SDK passes to a module's handlers in
/// a host. Natively there is no host, and calling it panics.
#[derive(Debug, Default, Clone, Copy)]
pub struct HostStore;

/// A write the host refused, too large or in a read-only call, as the SDK's code 120
/// with the host's reason in `details`.
fn refused(e: wit::StoreError) -> Error {
    let (wit::StoreError::TooLarge(why) | wit::StoreError::ReadOnly(why)) = e;
    Error::new(code::STORE_WRITE_REFUSED, "store write refused").with_details(why)
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
    fn peek(&self, prefix: &str) -> Vec<(String, Vec<u8>)> {
        wit::peek_prefix(prefix)
    }
    fn commit_room(&self) -> Option<usize> {
        wit::commit_room().map(|room| room as usize)
    }
}

/// An in-memory store for unit tests of module logic.
///
/// ```
/// use wasm_ipam_guest::store::{MemoryStore, Store};
///
/// let mut store: MemoryStore = [("ip/10.0.0.2", "ctr-1\r\neth0")].into_iter().collect();
/// store.put("ip/10.0.0.3", b"ctr-2\r\neth0").unwrap();
/// assert_eq!(store.list("ip/").len(), 2);
/// assert_eq!(store.get_string("ip/10.0.0.2").as_deref(), Some("ctr-1\r\neth0"));
/// ```
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct MemoryStore {
    pub entries: BTreeMap<String, Vec<u8>>,
}

impl<K: Into<String>, V: Into<Vec<u8>>> FromIterator<(K, V)> for MemoryStore {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(entries: I) -> Self {
        MemoryStore {
            entries: entries
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }
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

/// A store whose writes stay in memory, over another it only reads: reads see the
/// writes made through it, and nothing reaches the store beneath. A dry run (as
/// [`IpamModule::release_node`](crate::IpamModule::release_node)'s, where the host
/// refuses every write) runs the very code a real run does, so what it answers is
/// what the real run would do.
///
/// ```
/// use wasm_ipam_guest::store::{MemoryStore, Staged, Store};
///
/// let base: MemoryStore = [("a", "1"), ("b", "2")].into_iter().collect();
/// let mut staged = Staged::over(&base);
/// staged.delete("a").unwrap();
/// staged.put("c", b"3").unwrap();
/// let keys: Vec<String> = staged.list("").into_iter().map(|(k, _)| k).collect();
/// assert_eq!(keys, ["b", "c"]);
/// assert_eq!(base.list("").len(), 2, "the store beneath is untouched");
/// ```
pub struct Staged<'a, S: Store> {
    base: &'a S,
    /// `Some` puts, `None` deletes.
    writes: BTreeMap<String, Option<Vec<u8>>>,
}

impl<'a, S: Store> Staged<'a, S> {
    pub fn over(base: &'a S) -> Self {
        Staged {
            base,
            writes: BTreeMap::new(),
        }
    }
}

impl<S: Store> Store for Staged<'_, S> {
    fn get(&self, key: &str) -> Option<Vec<u8>> {
        match self.writes.get(key) {
            Some(write) => write.clone(),
            None => self.base.get(key),
        }
    }
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), Error> {
        self.writes.insert(key.to_string(), Some(value.to_vec()));
        Ok(())
    }
    fn delete(&mut self, key: &str) -> Result<bool, Error> {
        let present = self.get(key).is_some();
        self.writes.insert(key.to_string(), None);
        Ok(present)
    }
    fn list(&self, prefix: &str) -> Vec<(String, Vec<u8>)> {
        let mut merged: BTreeMap<String, Vec<u8>> = self.base.list(prefix).into_iter().collect();
        for (key, write) in self
            .writes
            .range(prefix.to_string()..)
            .take_while(|(k, _)| k.starts_with(prefix))
        {
            match write {
                Some(value) => merged.insert(key.clone(), value.clone()),
                None => merged.remove(key),
            };
        }
        merged.into_iter().collect()
    }
    /// The room beneath, less what the staged writes would add to it (a dry run's
    /// host refuses writes, and has no limit then).
    fn commit_room(&self) -> Option<usize> {
        self.base
            .commit_room()
            .map(|room| room.saturating_sub(self.writes.len()))
    }
}

/// A store that counts what its writes' commit would hold, as the etcd store counts
/// it, against a limit: for unit tests of work that must fit one transaction.
/// [`TxnLimited::exceeded`] says whether the commit would have been refused.
///
/// ```
/// use wasm_ipam_guest::store::{MemoryStore, Store, TxnLimited};
///
/// let mut base: MemoryStore = [("a", "1"), ("b", "2")].into_iter().collect();
/// let mut store = TxnLimited::new(&mut base, 8);
/// assert_eq!(store.commit_room(), Some(6), "the usage row and the module record");
/// store.get("a");
/// store.put("a", b"3").unwrap();
/// assert_eq!(store.commit_room(), Some(5), "a key read and written counts once");
/// store.list("");
/// assert_eq!(store.commit_room(), Some(3), "a listed prefix and each key it answers");
/// assert!(!store.exceeded());
/// ```
pub struct TxnLimited<'a, S: Store> {
    base: &'a mut S,
    limit: usize,
    touched: std::cell::RefCell<std::collections::BTreeSet<String>>,
    listed: std::cell::RefCell<std::collections::BTreeSet<String>>,
}

impl<'a, S: Store> TxnLimited<'a, S> {
    pub fn new(base: &'a mut S, limit: usize) -> Self {
        TxnLimited {
            base,
            limit,
            touched: Default::default(),
            listed: Default::default(),
        }
    }

    /// What the commit would hold, as the host counts it: each distinct key once,
    /// each listed prefix once, and two for the host's own (the node's usage row and
    /// the record of the module serving the network).
    fn needs(&self) -> usize {
        self.touched.borrow().len() + self.listed.borrow().len() + 2
    }

    /// Whether the commit would be over the limit.
    pub fn exceeded(&self) -> bool {
        self.needs() > self.limit
    }
}

impl<S: Store> Store for TxnLimited<'_, S> {
    fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.touched.borrow_mut().insert(key.to_string());
        self.base.get(key)
    }
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), Error> {
        self.touched.borrow_mut().insert(key.to_string());
        self.base.put(key, value)
    }
    fn delete(&mut self, key: &str) -> Result<bool, Error> {
        self.touched.borrow_mut().insert(key.to_string());
        self.base.delete(key)
    }
    fn list(&self, prefix: &str) -> Vec<(String, Vec<u8>)> {
        let answer = self.base.list(prefix);
        self.listed.borrow_mut().insert(prefix.to_string());
        let mut touched = self.touched.borrow_mut();
        touched.extend(answer.iter().map(|(k, _)| k.clone()));
        answer
    }
    fn peek(&self, prefix: &str) -> Vec<(String, Vec<u8>)> {
        self.base.peek(prefix)
    }
    fn commit_room(&self) -> Option<usize> {
        Some(self.limit.saturating_sub(self.needs()))
    }
}
