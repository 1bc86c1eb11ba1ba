//! The durable store: one redb database under `dataDir`, holding every network's
//! key/value entries. redb commits are atomic and fsynced, so a crash at any instant
//! leaves either the old or the new state.
//!
//! The store is opened only under the host-wide lock, so a single writer is assured.

use crate::error::{CniError, code};
use redb::{Database, ReadOnlyTable, ReadableDatabase, TableDefinition, TableError};
use std::collections::BTreeMap;
use std::path::Path;

/// Entries keyed by (network name, key).
const ENTRIES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("entries");
pub const DATABASE_FILE: &str = "store.redb";

/// Staged changes for one network: `Some` puts, `None` deletes.
pub type Changes = BTreeMap<String, Option<Vec<u8>>>;

pub struct Store {
    db: Database,
}

fn store_error(what: &str, e: impl std::fmt::Display) -> CniError {
    CniError::new(code::STORE_FAILURE, format!("store: {what}")).with_details(e)
}

impl Store {
    /// Opens (creating if needed) the database in `data_dir`.
    pub fn open(data_dir: &Path) -> Result<Self, CniError> {
        std::fs::create_dir_all(data_dir)
            .map_err(|e| store_error(&format!("cannot create {}", data_dir.display()), e))?;
        let path = data_dir.join(DATABASE_FILE);
        let db = Database::create(&path)
            .map_err(|e| store_error(&format!("cannot open {}", path.display()), e))?;
        Ok(Store { db })
    }

    /// Runs `f` on a read snapshot of the entries; before the first commit there is
    /// no table yet, which reads as empty (`T::default()`).
    fn read<T: Default>(
        &self,
        f: impl FnOnce(
            &ReadOnlyTable<(&'static str, &'static str), &'static [u8]>,
        ) -> Result<T, CniError>,
    ) -> Result<T, CniError> {
        let txn = self.db.begin_read().map_err(|e| store_error("read", e))?;
        match txn.open_table(ENTRIES) {
            Ok(table) => f(&table),
            Err(TableError::TableDoesNotExist(_)) => Ok(T::default()),
            Err(e) => Err(store_error("read", e)),
        }
    }

    pub fn get(&self, network: &str, key: &str) -> Result<Option<Vec<u8>>, CniError> {
        self.read(|table| {
            let value = table
                .get((network, key))
                .map_err(|e| store_error("read", e))?;
            Ok(value.map(|v| v.value().to_vec()))
        })
    }

    /// Every entry of `network` whose key starts with `prefix`, in key order.
    pub fn list(&self, network: &str, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, CniError> {
        let entries = self.scan((network, prefix), |net, key| {
            net == network && key.starts_with(prefix)
        })?;
        Ok(entries.into_iter().map(|(_, k, v)| (k, v)).collect())
    }

    /// Every entry of every network (or of `network` only), as (network, key, value).
    pub fn entries(
        &self,
        network: Option<&str>,
    ) -> Result<Vec<(String, String, Vec<u8>)>, CniError> {
        self.scan((network.unwrap_or(""), ""), |net, _| {
            network.is_none_or(|n| n == net)
        })
    }

    /// Entries in key order from `from`, while `more(network, key)` holds.
    fn scan(
        &self,
        from: (&str, &str),
        mut more: impl FnMut(&str, &str) -> bool,
    ) -> Result<Vec<(String, String, Vec<u8>)>, CniError> {
        self.read(|table| {
            let mut out = Vec::new();
            for entry in table.range(from..).map_err(|e| store_error("read", e))? {
                let (key, value) = entry.map_err(|e| store_error("read", e))?;
                let (net, key) = key.value();
                if !more(net, key) {
                    break;
                }
                out.push((net.to_string(), key.to_string(), value.value().to_vec()));
            }
            Ok(out)
        })
    }

    /// Applies `changes` to `network` in one durable transaction.
    pub fn commit(&self, network: &str, changes: &Changes) -> Result<(), CniError> {
        if changes.is_empty() {
            return Ok(());
        }
        let fail = |e: &dyn std::fmt::Display| store_error("commit", e);
        let txn = self.db.begin_write().map_err(|e| fail(&e))?;
        {
            let mut table = txn.open_table(ENTRIES).map_err(|e| fail(&e))?;
            for (key, change) in changes {
                match change {
                    Some(value) => table.insert((network, key.as_str()), value.as_slice()),
                    None => table.remove((network, key.as_str())),
                }
                .map_err(|e| fail(&e))?;
            }
        }
        txn.commit().map_err(|e| fail(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_then_read_per_network() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        assert_eq!(store.get("a", "k").unwrap(), None);
        assert!(store.list("a", "").unwrap().is_empty());
        let mut changes = Changes::new();
        changes.insert("ip/10.0.0.2".into(), Some(b"c1".to_vec()));
        changes.insert("ip/10.0.0.3".into(), Some(b"c2".to_vec()));
        changes.insert("last".into(), Some(b"10.0.0.3".to_vec()));
        store.commit("a", &changes).unwrap();
        store
            .commit(
                "b",
                &Changes::from([("ip/x".into(), Some(b"other".to_vec()))]),
            )
            .unwrap();
        assert_eq!(
            store.get("a", "last").unwrap().as_deref(),
            Some(&b"10.0.0.3"[..])
        );
        let listed: Vec<String> = store
            .list("a", "ip/")
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(listed, ["ip/10.0.0.2", "ip/10.0.0.3"]);
        store
            .commit("a", &Changes::from([("ip/10.0.0.2".into(), None)]))
            .unwrap();
        assert_eq!(store.list("a", "ip/").unwrap().len(), 1);
        assert_eq!(store.list("b", "").unwrap().len(), 1);
        drop(store);
        let reopened = Store::open(dir.path()).unwrap();
        assert_eq!(reopened.list("a", "").unwrap().len(), 2);
    }
}
