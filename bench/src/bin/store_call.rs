//! One CNI call's worth of store work, then exit: `store_call <redb|sqlite> <dir>
//! <add|del> <id>`. The `engines` scenario runs it once per call, as the plugin runs
//! once per call, to compare the two engines wasm-ipam has used.
//!
//! - add: read the network's usage and its `last` key, then commit three puts
//!   (`ip/<addr>` = id, `meta/<addr>` = a small JSON, `last` = addr) and the usage.
//! - del: read the usage and `ip/<addr>`, then commit two deletes and the usage.
//!
//! `sqlite` is the host's store (host/src/store/sqlite.rs) with its per-call tuning;
//! `redb` is v0.1's (redb 4, a 4 MiB cache, one durable write transaction).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;

const NETWORK: &str = "benchnet";

type Error = Box<dyn std::error::Error>;
/// Staged changes, as the host stages them: `Some` puts, `None` deletes.
type Changes = BTreeMap<String, Option<Vec<u8>>>;

#[derive(Clone, Copy, Default)]
struct Usage {
    entries: u64,
    bytes: u64,
}

impl Usage {
    fn apply(&mut self, key: &str, old: Option<u64>, new: Option<&[u8]>) {
        if let Some(old) = old {
            self.entries -= 1;
            self.bytes -= key.len() as u64 + old;
        }
        if let Some(new) = new {
            self.entries += 1;
            self.bytes += (key.len() + new.len()) as u64;
        }
    }
}

/// The address a container id holds: derived from the id (FNV-1a), so its DEL finds
/// what its ADD wrote.
fn address(id: &str) -> String {
    let hash = id.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    format!("10.22.{}.{}", (hash >> 8) & 0xff, (hash & 0xff).max(2))
}

fn changes(command: &str, id: &str) -> Changes {
    let addr = address(id);
    let mut changes = Changes::new();
    if command == "add" {
        let meta = format!(r#"{{"containerID":"{id}","ifName":"eth0","address":"{addr}/16"}}"#);
        changes.insert(format!("ip/{addr}"), Some(id.as_bytes().to_vec()));
        changes.insert(format!("meta/{addr}"), Some(meta.into_bytes()));
        changes.insert("last".into(), Some(addr.into_bytes()));
    } else {
        changes.insert(format!("ip/{addr}"), None);
        changes.insert(format!("meta/{addr}"), None);
    }
    changes
}

/// The key a call reads before it commits: `last` for an ADD, its own entry for a DEL.
fn read_key(command: &str, id: &str) -> String {
    if command == "add" {
        "last".into()
    } else {
        format!("ip/{}", address(id))
    }
}

mod sqlite {
    //! The host's SQLite store, reduced to what one call does (no migration, no quota).
    use super::{Changes, Error, Usage};
    use rusqlite::config::DbConfig;
    use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};
    use std::fs::{self, File, OpenOptions};
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    use std::path::{Path, PathBuf};

    const DATABASE_FILE: &str = "store.sqlite";
    const APPLICATION_ID: i32 = 0x5749_504d;
    const SCHEMA_VERSION: i32 = 1;
    const SCHEMA: &str = "
        CREATE TABLE entries (
            network TEXT NOT NULL,
            key TEXT NOT NULL,
            value BLOB NOT NULL,
            PRIMARY KEY (network, key)
        ) WITHOUT ROWID;
        CREATE TABLE usage (
            network TEXT NOT NULL PRIMARY KEY,
            entries INTEGER NOT NULL,
            bytes INTEGER NOT NULL
        ) WITHOUT ROWID;
    ";
    const CHECKPOINT_BYTES: u64 = 256 << 10;
    const CACHE_KIB: i64 = 2048;

    fn flags() -> OpenFlags {
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_NOFOLLOW
    }

    fn sidecar(path: &Path, suffix: &str) -> PathBuf {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    }

    fn sync_dir(dir: &Path) -> std::io::Result<()> {
        File::open(dir)?.sync_all()
    }

    fn private_file(path: &Path, create_new: bool) -> std::io::Result<File> {
        OpenOptions::new()
            .write(true)
            .create(!create_new)
            .create_new(create_new)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
    }

    /// As the host's `create`: built under a temporary name, synced, renamed, the
    /// directory synced.
    fn create(dir: &Path, path: &Path) -> Result<(), Error> {
        let temp = sidecar(path, ".new");
        for leftover in [
            temp.clone(),
            sidecar(&temp, "-wal"),
            sidecar(&temp, "-journal"),
        ] {
            match fs::remove_file(&leftover) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
        private_file(&temp, true)?;
        let mut conn = Connection::open_with_flags(&temp, flags())?;
        conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0))?;
        let tx = conn.transaction()?;
        tx.execute_batch(&format!(
            "PRAGMA application_id = {APPLICATION_ID};
             PRAGMA user_version = {SCHEMA_VERSION};
             {SCHEMA}"
        ))?;
        tx.commit()?;
        conn.close().map_err(|(_, e)| e)?;
        File::open(&temp)?.sync_all()?;
        fs::rename(&temp, path)?;
        sync_dir(dir)?;
        Ok(())
    }

    /// As the host's `connect` and `check_identity`.
    fn connect(path: &Path) -> Result<Connection, Error> {
        let conn = Connection::open_with_flags(path, flags())?;
        let log = sidecar(path, "-wal");
        match fs::symlink_metadata(&log) {
            Ok(_) => {}
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e.into()),
            Err(_) => {
                private_file(&log, false)?;
                sync_dir(path.parent().unwrap_or(Path::new(".")))?;
            }
        }
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)?;
        conn.execute_batch(&format!(
            "PRAGMA locking_mode = EXCLUSIVE;
             PRAGMA synchronous = FULL;
             PRAGMA wal_autocheckpoint = 0;
             PRAGMA cache_size = -{CACHE_KIB};"
        ))?;
        let pragma = |name: &str| conn.pragma_query_value(None, name, |r| r.get::<_, i64>(0));
        if pragma("application_id")? != i64::from(APPLICATION_ID)
            || pragma("user_version")? != i64::from(SCHEMA_VERSION)
        {
            return Err(format!("{} is not a wasm-ipam store", path.display()).into());
        }
        Ok(conn)
    }

    fn usage(conn: &Connection, network: &str) -> rusqlite::Result<Usage> {
        let row = conn
            .prepare_cached("SELECT entries, bytes FROM usage WHERE network = ?1")?
            .query_row([network], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
            })
            .optional()?;
        Ok(row.map_or(Usage::default(), |(entries, bytes)| Usage {
            entries: entries as u64,
            bytes: bytes as u64,
        }))
    }

    pub fn call(dir: &Path, network: &str, read: &str, changes: &Changes) -> Result<(), Error> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let path = dir.join(DATABASE_FILE);
        match fs::symlink_metadata(&path) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => create(dir, &path)?,
            Err(e) => return Err(e.into()),
        }
        let mut conn = connect(&path)?;
        // What the module reads before it stages its changes.
        usage(&conn, network)?;
        conn.prepare_cached("SELECT value FROM entries WHERE network = ?1 AND key = ?2")?
            .query_row([network, read], |r| r.get::<_, Vec<u8>>(0))
            .optional()?;
        // The host's commit.
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut after = usage(&tx, network)?;
        {
            let mut old_len = tx.prepare_cached(
                "SELECT length(value) FROM entries WHERE network = ?1 AND key = ?2",
            )?;
            let mut upsert = tx.prepare_cached(
                "INSERT INTO entries (network, key, value) VALUES (?1, ?2, ?3)
                 ON CONFLICT (network, key) DO UPDATE SET value = excluded.value",
            )?;
            let mut delete =
                tx.prepare_cached("DELETE FROM entries WHERE network = ?1 AND key = ?2")?;
            for (key, change) in changes {
                let old: Option<i64> =
                    old_len.query_row([network, key], |r| r.get(0)).optional()?;
                after.apply(key, old.map(|n| n as u64), change.as_deref());
                match change {
                    Some(value) => {
                        upsert.execute(params![network, key, value])?;
                    }
                    None if old.is_some() => {
                        delete.execute([network, key])?;
                    }
                    None => {}
                }
            }
        }
        tx.execute(
            "INSERT INTO usage (network, entries, bytes) VALUES (?1, ?2, ?3)
             ON CONFLICT (network) DO UPDATE SET entries = excluded.entries, bytes = excluded.bytes",
            params![network, after.entries as i64, after.bytes as i64],
        )?;
        tx.commit()?;
        // The host's fold: once the log is past 256 KiB, checkpoint and truncate it.
        let size = fs::metadata(sidecar(&path, "-wal")).map_or(0, |m| m.len());
        if size > CHECKPOINT_BYTES {
            conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        }
        Ok(())
    }
}

mod redb_v01 {
    //! v0.1's redb store, reduced to what one call does (no quota).
    use super::{Changes, Error, Usage};
    use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition, TableError};
    use std::path::Path;

    const ENTRIES: TableDefinition<(&str, &str), &[u8]> = TableDefinition::new("entries");
    const USAGE: TableDefinition<&str, (u64, u64)> = TableDefinition::new("usage");
    const DATABASE_FILE: &str = "store.redb";
    const CACHE_BYTES: usize = 4 << 20;

    pub fn call(dir: &Path, network: &str, read: &str, changes: &Changes) -> Result<(), Error> {
        std::fs::create_dir_all(dir)?;
        let db = Database::builder()
            .set_cache_size(CACHE_BYTES)
            .create(dir.join(DATABASE_FILE))?;
        // What the module reads before it stages its changes, each a read
        // transaction as v0.1's `get` was; before the first commit there are no tables.
        {
            let txn = db.begin_read()?;
            match txn.open_table(USAGE) {
                Ok(table) => drop(table.get(network)?),
                Err(TableError::TableDoesNotExist(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        {
            let txn = db.begin_read()?;
            match txn.open_table(ENTRIES) {
                Ok(table) => drop(table.get((network, read))?),
                Err(TableError::TableDoesNotExist(_)) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // v0.1's commit: one write transaction, default (immediate) durability.
        let txn = db.begin_write()?;
        {
            let mut table = txn.open_table(ENTRIES)?;
            let mut usage_table = txn.open_table(USAGE)?;
            let mut after = match usage_table.get(network)? {
                Some(v) => {
                    let (entries, bytes) = v.value();
                    Usage { entries, bytes }
                }
                None => Usage::default(),
            };
            for (key, change) in changes {
                let old = match change {
                    Some(value) => table.insert((network, key.as_str()), value.as_slice())?,
                    None => table.remove((network, key.as_str()))?,
                }
                .map(|v| v.value().len() as u64);
                after.apply(key, old, change.as_deref());
            }
            usage_table.insert(network, (after.entries, after.bytes))?;
        }
        txn.commit()?;
        Ok(())
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [engine, dir, command, id] = args.as_slice() else {
        eprintln!("usage: store_call <redb|sqlite> <dir> <add|del> <id>");
        return ExitCode::from(2);
    };
    if !["add", "del"].contains(&command.as_str()) {
        eprintln!("store_call: unknown command {command:?}");
        return ExitCode::from(2);
    }
    let (dir, changes, read) = (Path::new(dir), changes(command, id), read_key(command, id));
    let done = match engine.as_str() {
        "sqlite" => sqlite::call(dir, NETWORK, &read, &changes),
        "redb" => redb_v01::call(dir, NETWORK, &read, &changes),
        other => Err(format!("unknown engine {other:?}").into()),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("store_call: {engine} {command} {id}: {e}");
            ExitCode::FAILURE
        }
    }
}
