//! The durable store: one redb database under `dataDir`, holding every network's
//! key/value entries. redb commits are atomic and fsynced, so a crash at any instant
//! leaves either the old or the new state.
//!
//! The store is opened only under the host-wide lock, so a single writer is assured.
//!
//! Each network's size (entries, key and value bytes) is kept beside its entries and
//! updated in the same transaction, so a quota is checked without a scan.

use crate::error::{CniError, code};
use redb::{Database, ReadOnlyTable, ReadableDatabase, ReadableTable, TableDefinition, TableError};
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::Path;

/// Entries keyed by (network name, key).
const ENTRIES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("entries");
/// Each network's (entries, bytes), bytes counting keys and values.
const USAGE: TableDefinition<&str, (u64, u64)> = TableDefinition::new("usage");
pub const DATABASE_FILE: &str = "store.redb";
/// redb's page cache. Its default (1 GiB) lets one call's reads grow the process by
/// as much as the store's size; a call touches few pages, so a small cache costs
/// nothing and bounds what a large store makes a call spend.
const CACHE_BYTES: usize = 4 << 20;
/// How many entries a commit writes between looks at the clock.
const WRITES_PER_CLOCK_CHECK: usize = 256;

/// The most a network may hold; a commit that would grow it past either is refused.
#[derive(Debug, Clone, Copy)]
pub struct Quota {
    pub entries: u64,
    pub bytes: u64,
}

impl Quota {
    pub const UNLIMITED: Quota = Quota {
        entries: u64::MAX,
        bytes: u64::MAX,
    };
}

/// A network's size in the store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub entries: u64,
    pub bytes: u64,
}

fn entry_bytes(key: &str, value: &[u8]) -> u64 {
    (key.len() + value.len()) as u64
}

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
        let db = Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(&path)
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
        let mut out = Vec::new();
        self.visit_prefix(network, prefix, |key, value| {
            out.push((key.to_string(), value.to_vec()));
            ControlFlow::Continue(())
        })?;
        Ok(out)
    }

    /// Shows `visit` each entry of `network` whose key starts with `prefix`, in key
    /// order, until it breaks: a caller can bound what it keeps without a copy of all.
    pub fn visit_prefix(
        &self,
        network: &str,
        prefix: &str,
        mut visit: impl FnMut(&str, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), CniError> {
        self.read(|table| {
            for entry in table
                .range((network, prefix)..)
                .map_err(|e| store_error("read", e))?
            {
                let (key, value) = entry.map_err(|e| store_error("read", e))?;
                let (net, key) = key.value();
                if net != network || !key.starts_with(prefix) {
                    break;
                }
                if visit(key, value.value()).is_break() {
                    break;
                }
            }
            Ok(())
        })
    }

    /// Every entry of every network (or of `network` only), as (network, key, value).
    pub fn entries(
        &self,
        network: Option<&str>,
    ) -> Result<Vec<(String, String, Vec<u8>)>, CniError> {
        self.read(|table| {
            let mut out = Vec::new();
            let from = (network.unwrap_or(""), "");
            for entry in table.range(from..).map_err(|e| store_error("read", e))? {
                let (key, value) = entry.map_err(|e| store_error("read", e))?;
                let (net, key) = key.value();
                if network.is_some_and(|n| n != net) {
                    break;
                }
                out.push((net.to_string(), key.to_string(), value.value().to_vec()));
            }
            Ok(out)
        })
    }

    /// Applies `changes` to `network` in one durable transaction, unless that would
    /// grow the network past `quota` (code 108) or `expired()` turns true before every
    /// change is written (code 103): then nothing is committed. Only the final durable
    /// sync runs after the last look at the clock.
    pub fn commit(
        &self,
        network: &str,
        changes: &Changes,
        quota: Quota,
        expired: impl Fn() -> bool,
    ) -> Result<(), CniError> {
        if changes.is_empty() {
            return Ok(());
        }
        let fail = |e: &dyn std::fmt::Display| store_error("commit", e);
        let late = || {
            CniError::new(
                code::DEADLINE_EXCEEDED,
                "the module's writes could not be committed before its deadline; nothing was committed",
            )
            .with_details(format!("{} staged changes", changes.len()))
        };
        if expired() {
            return Err(late());
        }
        let txn = self.db.begin_write().map_err(|e| fail(&e))?;
        {
            let mut table = txn.open_table(ENTRIES).map_err(|e| fail(&e))?;
            let mut usage_table = txn.open_table(USAGE).map_err(|e| fail(&e))?;
            let before = match usage_table.get(network).map_err(|e| fail(&e))? {
                Some(v) => {
                    let (entries, bytes) = v.value();
                    Usage { entries, bytes }
                }
                None => counted_usage(&table, network)?,
            };
            let mut after = before;
            for (i, (key, change)) in changes.iter().enumerate() {
                if i.is_multiple_of(WRITES_PER_CLOCK_CHECK) && expired() {
                    return Err(late());
                }
                let old = match change {
                    Some(value) => table.insert((network, key.as_str()), value.as_slice()),
                    None => table.remove((network, key.as_str())),
                }
                .map_err(|e| fail(&e))?
                .map(|v| entry_bytes(key, v.value()));
                if let Some(old) = old {
                    after.entries -= 1;
                    after.bytes -= old;
                }
                if let Some(value) = change {
                    after.entries += 1;
                    after.bytes += entry_bytes(key, value);
                }
            }
            check_quota(network, before, after, quota)?;
            usage_table
                .insert(network, (after.entries, after.bytes))
                .map_err(|e| fail(&e))?;
        }
        if expired() {
            return Err(late());
        }
        txn.commit().map_err(|e| fail(&e))
    }
}

/// Refuses growth past the quota; shrinking is always allowed, so a network already
/// over a lowered quota can still release addresses.
fn check_quota(network: &str, before: Usage, after: Usage, quota: Quota) -> Result<(), CniError> {
    let over = |what: &str, before: u64, after: u64, limit: u64, key: &str| {
        (after > limit && after > before).then(|| {
            CniError::new(
                code::STORE_QUOTA_EXCEEDED,
                format!(
                    "network {network:?} would hold {after} {what} in the store, over its quota of {limit} (ipam.{key}); nothing was committed"
                ),
            )
        })
    };
    match over(
        "entries",
        before.entries,
        after.entries,
        quota.entries,
        "storeQuotaEntries",
    )
    .or_else(|| {
        over(
            "bytes",
            before.bytes,
            after.bytes,
            quota.bytes,
            "storeQuotaMiB",
        )
    }) {
        Some(err) => Err(err),
        None => Ok(()),
    }
}

/// A network's size counted entry by entry: for stores written before the size was
/// kept, once per network.
fn counted_usage<T>(table: &T, network: &str) -> Result<Usage, CniError>
where
    T: ReadableTable<(&'static str, &'static str), &'static [u8]>,
{
    let mut usage = Usage::default();
    for entry in table
        .range((network, "")..)
        .map_err(|e| store_error("read", e))?
    {
        let (key, value) = entry.map_err(|e| store_error("read", e))?;
        let (net, key) = key.value();
        if net != network {
            break;
        }
        usage.entries += 1;
        usage.bytes += entry_bytes(key, value.value());
    }
    Ok(usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Store {
        /// `network`'s size as of the last commit, as the quota check will read it.
        fn usage(&self, network: &str) -> Result<Usage, CniError> {
            let txn = self.db.begin_read().map_err(|e| store_error("read", e))?;
            let recorded = match txn.open_table(USAGE) {
                Ok(table) => table
                    .get(network)
                    .map_err(|e| store_error("read", e))?
                    .map(|v| v.value()),
                Err(TableError::TableDoesNotExist(_)) => None,
                Err(e) => return Err(store_error("read", e)),
            };
            match recorded {
                Some((entries, bytes)) => Ok(Usage { entries, bytes }),
                None => self.read(|table| counted_usage(table, network)),
            }
        }
    }

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
        store
            .commit("a", &changes, Quota::UNLIMITED, || false)
            .unwrap();
        store
            .commit(
                "b",
                &Changes::from([("ip/x".into(), Some(b"other".to_vec()))]),
                Quota::UNLIMITED,
                || false,
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
            .commit(
                "a",
                &Changes::from([("ip/10.0.0.2".into(), None)]),
                Quota::UNLIMITED,
                || false,
            )
            .unwrap();
        assert_eq!(store.list("a", "ip/").unwrap().len(), 1);
        assert_eq!(store.list("b", "").unwrap().len(), 1);
        drop(store);
        let reopened = Store::open(dir.path()).unwrap();
        assert_eq!(reopened.list("a", "").unwrap().len(), 2);
    }

    fn put(key: &str, value: &str) -> Changes {
        Changes::from([(key.to_string(), Some(value.as_bytes().to_vec()))])
    }

    #[test]
    fn usage_follows_commits_and_quota_refuses_growth_only() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let quota = Quota {
            entries: 2,
            bytes: 1000,
        };
        store
            .commit("n", &put("a", "12345"), quota, || false)
            .unwrap();
        store.commit("n", &put("b", "1"), quota, || false).unwrap();
        assert_eq!(
            store.usage("n").unwrap(),
            Usage {
                entries: 2,
                bytes: 8
            }
        );
        let err = store
            .commit("n", &put("c", "1"), quota, || false)
            .unwrap_err();
        assert_eq!(err.code, code::STORE_QUOTA_EXCEEDED, "{err}");
        assert!(err.msg.contains("storeQuotaEntries"), "{err}");
        assert_eq!(store.get("n", "c").unwrap(), None, "nothing committed");
        // Replacing a value in place is no growth in entries.
        store.commit("n", &put("a", "x"), quota, || false).unwrap();
        let small = Quota {
            entries: 10,
            bytes: 3,
        };
        let err = store
            .commit("n", &put("d", "big"), small, || false)
            .unwrap_err();
        assert!(err.msg.contains("storeQuotaMiB"), "{err}");
        // Over a lowered quota, releasing still works.
        let tiny = Quota {
            entries: 0,
            bytes: 0,
        };
        store
            .commit("n", &Changes::from([("a".into(), None)]), tiny, || false)
            .unwrap();
        assert_eq!(store.usage("n").unwrap().entries, 1);
    }

    #[test]
    fn a_commit_past_its_deadline_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path()).unwrap();
        let changes: Changes = (0..2000)
            .map(|i| (format!("k{i:05}"), Some(vec![0u8; 8])))
            .collect();
        let looks = std::cell::Cell::new(0);
        // The clock runs out after a few looks, i.e. midway through the writes.
        let expired = || {
            looks.set(looks.get() + 1);
            looks.get() > 3
        };
        let err = store
            .commit("n", &changes, Quota::UNLIMITED, expired)
            .unwrap_err();
        assert_eq!(err.code, code::DEADLINE_EXCEEDED, "{err}");
        assert!(store.list("n", "").unwrap().is_empty());
        assert_eq!(store.usage("n").unwrap(), Usage::default());
        let err = store
            .commit("n", &changes, Quota::UNLIMITED, || true)
            .unwrap_err();
        assert_eq!(err.code, code::DEADLINE_EXCEEDED);
    }
}
