//! v0.1 kept the store in redb (`store.redb`). The first call of a newer wasm-ipam
//! copies it into the new store, inside the transaction that creates the new store,
//! and then renames it aside (`store.redb.migrated`) as the operator's backup.
//! Nothing is lost and nothing is read twice: once the new store exists, the old
//! file is never looked at again.
//!
//! This file is the only reason the host links redb: no store of today is redb. It
//! stays while nodes may still be upgraded from v0.1 directly. Retiring it is one
//! step: delete this file and the dependency, and name in the release notes the
//! last version that reads a v0.1 store, through which such a node must pass (any
//! one call there migrates it).

use super::{Usage, entry_bytes, store_error};
use crate::error::CniError;
use crate::files::sync_dir;
use redb::{ReadableDatabase, ReadableTable, TableDefinition, TableError};
use std::collections::BTreeMap;
use std::path::Path;

pub const LEGACY_FILE: &str = "store.redb";
const RETIRED_FILE: &str = "store.redb.migrated";
/// v0.1's one table: (network, key) → value.
const ENTRIES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("entries");

/// Copies every entry of a v0.1 store in `data_dir` into `tx`, with each network's
/// usage; says whether there was one.
pub fn copy_into(data_dir: &Path, tx: &rusqlite::Transaction) -> Result<bool, CniError> {
    let path = data_dir.join(LEGACY_FILE);
    if !path.exists() {
        return Ok(false);
    }
    let failed = |e: &dyn std::fmt::Display| {
        store_error(
            &format!("cannot migrate the v0.1 store {}", path.display()),
            e,
        )
    };
    let db = redb::Database::builder()
        .set_cache_size(4 << 20)
        .open(&path)
        .map_err(|e| failed(&e))?;
    let read = db.begin_read().map_err(|e| failed(&e))?;
    let table = match read.open_table(ENTRIES) {
        Ok(table) => table,
        Err(TableError::TableDoesNotExist(_)) => return Ok(true),
        Err(e) => return Err(failed(&e)),
    };
    let mut insert = tx
        .prepare("INSERT INTO entries (network, key, value) VALUES (?1, ?2, ?3)")
        .map_err(|e| failed(&e))?;
    let mut usage: BTreeMap<String, Usage> = BTreeMap::new();
    for entry in table.iter().map_err(|e| failed(&e))? {
        let (key, value) = entry.map_err(|e| failed(&e))?;
        let (network, key) = key.value();
        insert
            .execute(rusqlite::params![network, key, value.value()])
            .map_err(|e| failed(&e))?;
        let used = usage.entry(network.to_string()).or_default();
        used.entries += 1;
        used.bytes += entry_bytes(key, value.value());
    }
    for (network, used) in usage {
        tx.execute(
            "INSERT INTO usage (network, entries, bytes) VALUES (?1, ?2, ?3)",
            rusqlite::params![network, used.entries as i64, used.bytes as i64],
        )
        .map_err(|e| failed(&e))?;
    }
    Ok(true)
}

/// Renames the migrated v0.1 store aside, once the new store (the file `into`) is in
/// place.
pub fn retire(data_dir: &Path, into: &str) -> Result<(), CniError> {
    std::fs::rename(data_dir.join(LEGACY_FILE), data_dir.join(RETIRED_FILE))
        .and_then(|()| sync_dir(data_dir))
        .map_err(|e| store_error("cannot rename the migrated v0.1 store aside", e))?;
    tracing::warn!(
        target: "store",
        "migrated the v0.1 store {LEGACY_FILE} into {into}; the old file is kept as {RETIRED_FILE}"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Quota;
    use crate::store::select::open_embedded as open;

    #[test]
    fn a_v01_store_is_migrated_once_with_its_usage() {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = redb::Database::create(dir.path().join(LEGACY_FILE)).unwrap();
            let txn = db.begin_write().unwrap();
            {
                let mut table = txn.open_table(ENTRIES).unwrap();
                table.insert(("a", "ip/10.0.0.2"), &b"c1"[..]).unwrap();
                table.insert(("a", "last"), &b"10.0.0.2"[..]).unwrap();
                table.insert(("b", "ip/x"), &b"c2"[..]).unwrap();
            }
            txn.commit().unwrap();
        }
        let mut store = open(dir.path(), std::time::Duration::ZERO).unwrap();
        assert_eq!(store.get("a", "ip/10.0.0.2").unwrap().unwrap(), b"c1");
        assert_eq!(store.list("b", "").unwrap().len(), 1);
        assert_eq!(
            store.usage("a").unwrap(),
            Usage {
                entries: 2,
                bytes: 11 + 2 + 4 + 8
            }
        );
        assert!(!dir.path().join(LEGACY_FILE).exists());
        assert!(dir.path().join(RETIRED_FILE).exists());
        // The new store is the store from now on: a later write is not undone by
        // the old file, which is never read again.
        store
            .commit(
                "a",
                &[("ip/10.0.0.2".to_string(), None)].into(),
                Quota::UNLIMITED,
                &|| false,
            )
            .unwrap();
        drop(store);
        let store = open(dir.path(), std::time::Duration::ZERO).unwrap();
        assert_eq!(store.get("a", "ip/10.0.0.2").unwrap(), None);
    }
}
