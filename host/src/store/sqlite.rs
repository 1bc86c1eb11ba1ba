//! The embedded store: one SQLite database under `dataDir`, in WAL mode, so a commit
//! is one append to the log and one fsync of it, and a crash at any instant leaves
//! either the old or the new state. SQLite itself does not sync a commit
//! (`synchronous=NORMAL`, which in WAL mode still syncs around every checkpoint): the
//! caller does, after releasing its locks ([`super::Written`]), so calls queued on the
//! lock do not wait for each other's disk.
//!
//! Every call is its own process, so the connection is tuned for one short writer:
//! - `locking_mode=EXCLUSIVE` (the host-wide lock already serialises every opener):
//!   no `-shm` file; the log's index is rebuilt in memory on open, reading and
//!   checksumming every frame of the log. A `-shm` file would not keep it either:
//!   SQLite's unix VFS truncates it when the first connection attaches (a process
//!   killed midway may have left it torn), and every call is the first connection;
//!   it would only add a file, a mapping and its locks to each open;
//! - no checkpoint on close: closing costs nothing. Once the log has grown past
//!   [`CHECKPOINT_BYTES`], the commit that passed it folds the log back into the
//!   database and truncates it ([`SqliteStore::fold_log`]), which also bounds what
//!   the next open reads to rebuild the index. (SQLite's own automatic checkpoint
//!   does not fit one commit per process: the log's checkpointed state lives in the
//!   index, which each process rebuilds, so the log would never restart);
//! - a call that changes nothing opens no write transaction and syncs nothing.
//!
//! The file is created whole or not at all (built under a temporary name, synced,
//! renamed, the directory synced), and an existing file is used only if it says it
//! is a wasm-ipam store: an emptied or foreign file is refused, never re-created,
//! since a store that lost its entries would hand out addresses still in use.

use super::commit::{NodeUsage, Prepared, too_late};
use super::{
    AttachmentChange, AttachmentRecord, Changes, IfMissing, Local, Quota, ServedBy, Store, Usage,
    Written, legacy, store_error,
};
use crate::error::{CniError, code};
use crate::files;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags, OptionalExtension, TransactionBehavior, params};
use std::fs::{self, File, OpenOptions};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const DATABASE_FILE: &str = "store.sqlite";
/// `PRAGMA application_id` of a wasm-ipam store ("WIPM"): tells our file from an
/// emptied or foreign one.
const APPLICATION_ID: i32 = 0x5749_504d;
/// `PRAGMA user_version`: version 1's tables and every upgrade since. Version 1 (v0.1)
/// lacked `served_by` and version 2 `attachments`; what an older store lacks is added
/// when it is opened, and a new store is made the same way.
const SCHEMA_VERSION: i32 = 3;
const VERSION_1: &str = "
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
/// What turns a version-1 store into a version-2 one.
const FROM_VERSION_1: &str = "
    CREATE TABLE served_by (
        network TEXT NOT NULL PRIMARY KEY,
        record TEXT NOT NULL
    ) WITHOUT ROWID;
";
/// What turns a version-2 store into a version-3 one.
const FROM_VERSION_2: &str = "
    CREATE TABLE attachments (
        network TEXT NOT NULL,
        container_id TEXT NOT NULL,
        ifname TEXT NOT NULL,
        node TEXT NOT NULL,
        netns TEXT NOT NULL,
        added INTEGER NOT NULL,
        PRIMARY KEY (network, container_id, ifname)
    ) WITHOUT ROWID;
";
/// Log size after which a commit folds the log back into the database: a warm ADD
/// appends about three 4 KiB pages, so this is one fold every twenty to thirty
/// commits, costing three more syncs (two in the fold, one for the restarted log's
/// header in the next commit), and at most this much for an open to read. The size
/// balances the two, both of which the bench's `store-open` scenario measures: each
/// frame of the log costs every open one read and one checksum, while a fold costs
/// syncs under the lock, so folding sooner saves opens less than it adds in folds.
pub const CHECKPOINT_BYTES: u64 = 256 << 10;
/// SQLite's page cache for one call, in KiB (a negative `cache_size` is KiB): a call
/// touches few pages, and this bounds what a large store can make a call spend.
const CACHE_KIB: i64 = 2048;
/// How many entries a commit writes between looks at the clock.
const WRITES_PER_CLOCK_CHECK: usize = 256;

pub struct SqliteStore {
    conn: Connection,
    /// The directory it is in, to name it.
    data_dir: PathBuf,
    log: PathBuf,
    /// What [`Store::record_served_by`] asked to write with the next commit.
    served_by: Option<(String, String)>,
    /// What [`Store::record_attachment`] asked to write with the next commit.
    attachment: Option<(String, AttachmentChange)>,
    /// `store.lock`'s flock, held from open to drop (declared after `conn`, so the
    /// connection closes first).
    _lock: File,
}

/// Beside the database, flocked while a call uses the store: calls that share a
/// `dataDir` but not a `lockFile` (networks configured with different lock files)
/// then still use the store, its creation included, one at a time. The host-wide
/// lock already serialises calls that share both, so for them this never waits.
pub const STORE_LOCK: &str = "store.lock";
/// The longest pause between two tries for a busy `store.lock`.
const STORE_LOCK_POLL: Duration = Duration::from_millis(20);

fn sqlite_error(what: &str) -> impl Fn(rusqlite::Error) -> CniError + '_ {
    move |e| store_error(what, e)
}

impl SqliteStore {
    /// Opens the store in `data_dir`, creating it (or migrating a v0.1 redb store into
    /// it) when there is none; waits at most `wait` for a call using it under another
    /// lock file.
    pub fn open(data_dir: &Path, wait: Duration) -> Result<Self, CniError> {
        Self::open_as(data_dir, wait, IfMissing::Create)
    }

    /// [`SqliteStore::open`]; with [`IfMissing::Refuse`], a directory that holds no
    /// store (of this version or v0.1's, which is migrated as any call would) is an
    /// error naming it, and nothing is created: not the directory, not `store.lock`.
    pub fn open_as(
        data_dir: &Path,
        wait: Duration,
        if_missing: IfMissing,
    ) -> Result<Self, CniError> {
        if if_missing == IfMissing::Refuse
            && [DATABASE_FILE, legacy::LEGACY_FILE].iter().all(|file| {
                matches!(fs::symlink_metadata(data_dir.join(file)),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound)
            })
        {
            return Err(super::missing(&data_dir.join(DATABASE_FILE)));
        }
        files::private_dir(data_dir)
            .map_err(|e| store_error(&format!("cannot use {}", data_dir.display()), e))?;
        let lock = lock_store(data_dir, wait)?;
        let path = data_dir.join(DATABASE_FILE);
        match files::check_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => create(data_dir, &path)?,
            Err(e) => return Err(store_error(&format!("cannot use {}", path.display()), e)),
        }
        let conn = connect(&path)?;
        check_identity(&conn, &path, damaged)?;
        Ok(SqliteStore {
            conn,
            data_dir: data_dir.to_path_buf(),
            log: sidecar(&path, "-wal"),
            served_by: None,
            attachment: None,
            _lock: lock,
        })
    }

    /// After a commit (written, not yet synced): once the log is past
    /// [`CHECKPOINT_BYTES`], syncs it, copies it into the database, syncs that, and
    /// truncates the log; says whether it did. A crash midway leaves a log that the
    /// next open replays onto the same pages.
    /// `size` is the log's, as the commit left it.
    fn fold_log(&self, size: u64) -> Result<bool, CniError> {
        if size <= CHECKPOINT_BYTES {
            return Ok(false);
        }
        // synchronous = NORMAL: the fold syncs the log before copying it and the
        // database before truncating the log.
        self.conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .map_err(sqlite_error("checkpoint"))?;
        Ok(true)
    }

    fn usage_in(conn: &Connection, network: &str) -> Result<Usage, CniError> {
        let row = conn
            .prepare_cached("SELECT entries, bytes FROM usage WHERE network = ?1")
            .and_then(|mut s| {
                s.query_row([network], |r| {
                    Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
                })
                .optional()
            })
            .map_err(sqlite_error("read"))?;
        Ok(row.map_or(Usage::default(), |(entries, bytes)| Usage {
            entries: entries as u64,
            bytes: bytes as u64,
        }))
    }
}

/// Takes `store.lock` in `data_dir`, trying for at most `wait`.
fn lock_store(data_dir: &Path, wait: Duration) -> Result<File, CniError> {
    let path = data_dir.join(STORE_LOCK);
    let file = files::open(
        &path,
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false),
    )
    .map_err(|e| store_error(&format!("cannot open {}", path.display()), e))?;
    match files::lock_until(&file, Instant::now() + wait, STORE_LOCK_POLL) {
        Ok(true) => Ok(file),
        Ok(false) => Err(CniError::new(
            code::TRY_AGAIN_LATER,
            format!(
                "store {} stayed in use by another call for {wait:?}; nothing was changed",
                data_dir.display()
            ),
        )
        .with_details("calls that share an ipam.dataDir but not an ipam.lockFile use the store one at a time; give every network on one dataDir the same lockFile to queue them fairly")),
        Err(e) => Err(store_error(&format!("cannot lock {}", path.display()), e)),
    }
}

/// How every connection opens its file: read-write, never creating it (the store
/// makes its files itself, private), never through a symlink.
const OPEN_FLAGS: OpenFlags = OpenFlags::SQLITE_OPEN_READ_WRITE
    .union(OpenFlags::SQLITE_OPEN_NO_MUTEX)
    .union(OpenFlags::SQLITE_OPEN_NOFOLLOW);

/// Creates (or, unless `create_new`, opens) one of the store's files, mode 0600
/// whatever the umask and never through a symlink.
fn private_file(path: &Path, create_new: bool) -> std::io::Result<File> {
    files::open(
        path,
        OpenOptions::new()
            .write(true)
            .create(!create_new)
            .create_new(create_new)
            .truncate(false),
    )
}

/// Opens an existing database file (never creating one) with the per-call tuning.
fn connect(path: &Path) -> Result<Connection, CniError> {
    let opening = |e: rusqlite::Error| match e.sqlite_error_code() {
        Some(rusqlite::ErrorCode::NotADatabase | rusqlite::ErrorCode::DatabaseCorrupt) => {
            damaged(path, e)
        }
        _ => store_error(&format!("cannot open {}", path.display()), e),
    };
    let conn = Connection::open_with_flags(path, OPEN_FLAGS).map_err(opening)?;
    ensure_log(path)
        .map_err(|e| store_error(&format!("cannot create the log of {}", path.display()), e))?;
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
        .map_err(opening)?;
    // locking_mode must be set before the first read takes a lock.
    conn.execute_batch(&format!(
        "PRAGMA locking_mode = EXCLUSIVE;
         PRAGMA synchronous = NORMAL;
         PRAGMA wal_autocheckpoint = 0;
         PRAGMA cache_size = -{CACHE_KIB};"
    ))
    .map_err(opening)?;
    Ok(conn)
}

/// Creates the write-ahead log file if it is missing, and makes its name durable.
/// SQLite is built not to sync the directory itself (see `.cargo/config.toml`), so
/// a log it had to create would not survive a crash: it never has to. The log is
/// kept for good (no checkpoint on close deletes it), so this runs once per store.
fn ensure_log(path: &Path) -> std::io::Result<()> {
    let log = sidecar(path, "-wal");
    match fs::symlink_metadata(&log) {
        Ok(_) => return Ok(()),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        Err(_) => {}
    }
    private_file(&log, false)?;
    files::sync_dir(path.parent().unwrap_or(Path::new(".")))
}

/// Refuses a file that is not a wasm-ipam store of a schema this build knows, with
/// `foreign`'s error for one that is no wasm-ipam store at all.
fn check_identity(
    conn: &Connection,
    path: &Path,
    foreign: fn(&Path, String) -> CniError,
) -> Result<(), CniError> {
    let pragma = |name: &str| {
        conn.pragma_query_value(None, name, |r| r.get::<_, i64>(0))
            .map_err(|e| foreign(path, e.to_string()))
    };
    let application_id = pragma("application_id")?;
    if application_id != i64::from(APPLICATION_ID) {
        return Err(foreign(
            path,
            format!(
                "application_id is {application_id:#x}, not wasm-ipam's {APPLICATION_ID:#x}: the file is empty, truncated or not a wasm-ipam store"
            ),
        ));
    }
    let mut version = pragma("user_version")?;
    let upgrade = match version {
        1 => Some(format!("{FROM_VERSION_1} {FROM_VERSION_2}")),
        2 => Some(FROM_VERSION_2.to_string()),
        _ => None,
    };
    if let Some(upgrade) = upgrade {
        conn.execute_batch(&format!(
            "BEGIN IMMEDIATE; {upgrade} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
        ))
        .map_err(|e| {
            store_error(
                &format!(
                    "cannot upgrade {} to schema {SCHEMA_VERSION}",
                    path.display()
                ),
                e,
            )
        })?;
        version = pragma("user_version")?;
    }
    if version != i64::from(SCHEMA_VERSION) {
        return Err(CniError::new(
            code::STORE_FAILURE,
            format!(
                "store {} has schema version {version}, which this wasm-ipam (schema {SCHEMA_VERSION}) does not know; nothing was changed",
                path.display()
            ),
        ));
    }
    Ok(())
}

/// Whether the store in `data_dir` (if there is one yet) still starts as a wasm-ipam
/// store of a schema this build knows, read from its header alone: no lock, no
/// connection, so CNI STATUS can ask while a call holds the store. A call finds
/// damage deeper in (and says so); this finds the file replaced, truncated or
/// overwritten.
pub fn check_header(data_dir: &Path) -> Result<(), CniError> {
    use std::io::Read;
    let path = data_dir.join(DATABASE_FILE);
    let mut header = [0u8; 100];
    let read = match File::open(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(store_error(&format!("cannot read {}", path.display()), e)),
        Ok(mut file) => file.read(&mut header),
    };
    let read = read.map_err(|e| store_error(&format!("cannot read {}", path.display()), e))?;
    let field = |at: usize| i32::from_be_bytes(header[at..at + 4].try_into().expect("4 bytes"));
    if read < header.len() || !header.starts_with(b"SQLite format 3\0") {
        return Err(damaged(&path, "it does not start with an SQLite header"));
    }
    // The header's application ID (offset 68) and user version (offset 60).
    if field(68) != APPLICATION_ID {
        return Err(damaged(
            &path,
            format!(
                "application_id is {:#x}, not wasm-ipam's {APPLICATION_ID:#x}",
                field(68)
            ),
        ));
    }
    if field(60) > SCHEMA_VERSION {
        return Err(damaged(
            &path,
            format!(
                "schema version {} is newer than this wasm-ipam's ({SCHEMA_VERSION})",
                field(60)
            ),
        ));
    }
    Ok(())
}

/// What `store restore --from` answers for a file that is no wasm-ipam store: it is
/// the restore's input that is wrong, not the node's store, which is left as it was.
fn not_a_backup(from: &Path, e: String) -> CniError {
    CniError::new(
        code::STORE_FAILURE,
        format!(
            "{} (given to --from) is not a wasm-ipam store backup (one `wasm-ipam store backup` wrote): nothing was restored, the store is as it was",
            from.display()
        ),
    )
    .with_details(e)
}

fn damaged(path: &Path, e: impl std::fmt::Display) -> CniError {
    CniError::new(
        code::STORE_FAILURE,
        format!(
            "store {} cannot be used and was left untouched: restore it from a backup (see SECURITY.md, \"When the store is damaged\"); wasm-ipam never re-creates a store over one it cannot read, since addresses it held may still be in use",
            path.display()
        ),
    )
    .with_details(e)
}

/// Builds a new store under a temporary name and renames it into place, so a crash
/// or a full disk leaves either no store or a whole one. A v0.1 redb store in the
/// same directory is copied in, then renamed aside.
fn create(data_dir: &Path, path: &Path) -> Result<(), CniError> {
    let creating =
        |e: &dyn std::fmt::Display| store_error(&format!("cannot create {}", path.display()), e);
    let (temp, _) = fresh_temp(path).map_err(|e| creating(&e))?;
    let migrated = {
        let mut conn = Connection::open_with_flags(&temp, OPEN_FLAGS).map_err(|e| creating(&e))?;
        conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0))
            .map_err(|e| creating(&e))?;
        let tx = conn.transaction().map_err(|e| creating(&e))?;
        tx.execute_batch(&format!(
            "PRAGMA application_id = {APPLICATION_ID};
             PRAGMA user_version = {SCHEMA_VERSION};
             {VERSION_1} {FROM_VERSION_1} {FROM_VERSION_2}"
        ))
        .map_err(|e| creating(&e))?;
        let migrated = legacy::copy_into(data_dir, &tx)?;
        tx.commit().map_err(|e| creating(&e))?;
        // Closing checkpoints the log into the database file and syncs it.
        conn.close().map_err(|(_, e)| creating(&e))?;
        migrated
    };
    File::open(&temp)
        .and_then(|f| f.sync_all())
        .map_err(|e| creating(&e))?;
    fs::rename(&temp, path).map_err(|e| creating(&e))?;
    files::sync_dir(data_dir).map_err(|e| creating(&e))?;
    if migrated {
        legacy::retire(data_dir, DATABASE_FILE)?;
    }
    Ok(())
}

/// A new, empty, private file to build the database at `path` under (see
/// [`create`], [`restore`]), after clearing what a build killed midway left there.
/// SQLite creates its files with mode 0644; made empty here, the database (and the
/// log, which SQLite gives the database's mode) is 0600 whatever the umask.
fn fresh_temp(path: &Path) -> std::io::Result<(PathBuf, File)> {
    let temp = temp_path(path);
    for leftover in [
        temp.clone(),
        sidecar(&temp, "-wal"),
        sidecar(&temp, "-journal"),
    ] {
        match fs::remove_file(&leftover) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    let file = private_file(&temp, true)?;
    Ok((temp, file))
}

/// What SQLite's integrity check finds wrong with every page and index: nothing if
/// the database is whole.
fn integrity_problems(conn: &Connection) -> rusqlite::Result<Vec<String>> {
    let lines = conn
        .prepare("PRAGMA integrity_check")?
        .query_map([], |r| r.get::<_, String>(0))?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(lines.into_iter().filter(|line| line != "ok").collect())
}

fn temp_path(path: &Path) -> PathBuf {
    sidecar(path, ".new")
}

fn sidecar(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Applies `change` to `network`'s attachment records, inside the commit's transaction.
fn write_attachment(
    tx: &rusqlite::Transaction,
    network: &str,
    change: &AttachmentChange,
) -> rusqlite::Result<()> {
    match change {
        AttachmentChange::Added(a) => {
            tx.prepare_cached(
                "INSERT INTO attachments (network, container_id, ifname, node, netns, added)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (network, container_id, ifname) DO UPDATE SET
                 node = excluded.node, netns = excluded.netns, added = excluded.added",
            )?
            .execute(params![
                network,
                a.container_id,
                a.ifname,
                a.node,
                a.netns,
                a.added.min(i64::MAX as u64) as i64
            ])?;
        }
        AttachmentChange::Removed {
            container_id,
            ifname,
        } => {
            tx.prepare_cached(
                "DELETE FROM attachments WHERE network = ?1 AND container_id = ?2 AND ifname = ?3",
            )?
            .execute([network, container_id, ifname])?;
        }
        AttachmentChange::Collected { node, valid } => {
            let valid: std::collections::BTreeSet<&(String, String)> = valid.iter().collect();
            let mut listed = tx.prepare_cached(
                "SELECT container_id, ifname FROM attachments WHERE network = ?1 AND node = ?2",
            )?;
            let gone: Vec<(String, String)> = listed
                .query_map([network, node], |r| Ok((r.get(0)?, r.get(1)?)))?
                .filter(|row| row.as_ref().map_or(true, |a| !valid.contains(a)))
                .collect::<rusqlite::Result<_>>()?;
            let mut delete = tx.prepare_cached(
                "DELETE FROM attachments WHERE network = ?1 AND container_id = ?2 AND ifname = ?3",
            )?;
            for (container_id, ifname) in gone {
                delete.execute([network, &container_id, &ifname])?;
            }
        }
    }
    Ok(())
}

impl Store for SqliteStore {
    fn get(&self, network: &str, key: &str) -> Result<Option<Vec<u8>>, CniError> {
        self.conn
            .prepare_cached("SELECT value FROM entries WHERE network = ?1 AND key = ?2")
            .and_then(|mut s| s.query_row([network, key], |r| r.get(0)).optional())
            .map_err(sqlite_error("read"))
    }

    fn visit_prefix(
        &self,
        network: &str,
        prefix: &str,
        visit: &mut dyn FnMut(&str, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), CniError> {
        let read = sqlite_error("read");
        let mut statement = self
            .conn
            .prepare_cached(
                "SELECT key, value FROM entries WHERE network = ?1 AND key >= ?2 ORDER BY key",
            )
            .map_err(&read)?;
        let mut rows = statement.query([network, prefix]).map_err(&read)?;
        while let Some(row) = rows.next().map_err(&read)? {
            let key = row
                .get_ref(0)
                .and_then(|v| Ok(v.as_str()?))
                .map_err(&read)?;
            if !key.starts_with(prefix) {
                break;
            }
            let value = row
                .get_ref(1)
                .and_then(|v| Ok(v.as_blob()?))
                .map_err(&read)?;
            if visit(key, value).is_break() {
                break;
            }
        }
        Ok(())
    }

    fn entries(&self, network: Option<&str>) -> Result<Vec<(String, String, Vec<u8>)>, CniError> {
        let read = sqlite_error("read");
        let mut statement = self
            .conn
            .prepare_cached(
                "SELECT network, key, value FROM entries
                 WHERE ?1 IS NULL OR network = ?1 ORDER BY network, key",
            )
            .map_err(&read)?;
        let rows = statement
            .query_map([network], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .map_err(&read)?;
        rows.collect::<Result<_, _>>().map_err(read)
    }

    fn prepare<'a>(
        &'a mut self,
        network: &'a str,
        changes: &'a Changes,
    ) -> Result<Box<dyn Prepared + 'a>, CniError> {
        crate::test_hook::test_panic("store-commit");
        let fail = sqlite_error("commit");
        let store: &'a SqliteStore = self;
        // One transaction from the first read of the commit to its write (dropped
        // without `commit()`, on any early return, it rolls back).
        let tx = rusqlite::Transaction::new_unchecked(&store.conn, TransactionBehavior::Immediate)
            .map_err(&fail)?;
        let before = SqliteStore::usage_in(&tx, network)?;
        let mut delta = NodeUsage::default();
        {
            let mut old_len = tx
                .prepare_cached("SELECT length(value) FROM entries WHERE network = ?1 AND key = ?2")
                .map_err(&fail)?;
            for (key, change) in changes {
                let old: Option<i64> = old_len
                    .query_row([network, key], |r| r.get(0))
                    .optional()
                    .map_err(&fail)?;
                let new = change.as_ref().map(|v| v.len() as u64);
                delta = delta.plus(NodeUsage::of_change(key, old.map(|l| l as u64), new));
            }
        }
        Ok(Box::new(SqliteCommit {
            store,
            tx,
            network,
            changes,
            before,
            delta,
        }))
    }

    fn usage(&self, network: &str) -> Result<Usage, CniError> {
        SqliteStore::usage_in(&self.conn, network)
    }

    fn forget(&mut self, network: &str) -> Result<(u64, Written), CniError> {
        let fail = sqlite_error("forget");
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&fail)?;
        let removed = tx
            .execute("DELETE FROM entries WHERE network = ?1", [network])
            .map_err(&fail)?;
        tx.execute("DELETE FROM usage WHERE network = ?1", [network])
            .map_err(&fail)?;
        tx.execute("DELETE FROM served_by WHERE network = ?1", [network])
            .map_err(&fail)?;
        tx.execute("DELETE FROM attachments WHERE network = ?1", [network])
            .map_err(&fail)?;
        // Opened before the commit, so a failure to open it leaves nothing removed.
        let log = File::open(&self.log).map_err(|e| store_error("cannot open the log", e))?;
        tx.commit().map_err(&fail)?;
        Ok((removed as u64, Written(Some(log))))
    }

    fn record_served_by(&mut self, network: &str, served_by: &ServedBy) {
        self.served_by = Some((network.to_string(), served_by.to_json()));
    }

    fn served_by(&self) -> Result<super::Records, CniError> {
        let read = sqlite_error("read");
        let mut statement = self
            .conn
            .prepare_cached("SELECT network, record FROM served_by ORDER BY network")
            .map_err(&read)?;
        let rows = statement
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(&read)?;
        rows.map(|row| {
            let (network, record) = row.map_err(&read)?;
            Ok((network, ServedBy::from_json(&record)))
        })
        .collect()
    }

    fn check(&self) -> Result<Vec<String>, CniError> {
        let mut problems = integrity_problems(&self.conn).map_err(sqlite_error("check"))?;
        if problems.is_empty() {
            problems = super::usage_problems(self)?;
        }
        Ok(problems)
    }

    fn describe(&self) -> String {
        format!("store {}", self.data_dir.display())
    }

    fn backup(&self, to: &Path) -> Result<(), CniError> {
        let failed = |e: &dyn std::fmt::Display| {
            store_error(&format!("cannot back up to {}", to.display()), e)
        };
        // Made here, empty and private, which VACUUM INTO accepts as its target.
        private_file(to, true).map_err(|e| failed(&e))?;
        let target = to
            .to_str()
            .ok_or_else(|| failed(&"the path is not UTF-8"))?;
        self.conn
            .execute("VACUUM INTO ?1", [target])
            .map_err(|e| failed(&e))?;
        File::open(to)
            .and_then(|f| f.sync_all())
            .map_err(|e| failed(&e))
    }

    fn local(&self) -> Option<&dyn Local> {
        Some(self)
    }

    fn local_mut(&mut self) -> Option<&mut dyn Local> {
        Some(self)
    }
}

impl Local for SqliteStore {
    fn record_attachment(&mut self, network: &str, change: AttachmentChange) {
        self.attachment = Some((network.to_string(), change));
    }

    fn attachments(&self, network: &str) -> Result<Vec<AttachmentRecord>, CniError> {
        let read = sqlite_error("read");
        let mut statement = self
            .conn
            .prepare_cached(
                "SELECT container_id, ifname, node, netns, added FROM attachments
                 WHERE network = ?1 ORDER BY container_id, ifname",
            )
            .map_err(&read)?;
        let rows = statement
            .query_map([network], |r| {
                Ok(AttachmentRecord {
                    container_id: r.get(0)?,
                    ifname: r.get(1)?,
                    node: r.get(2)?,
                    netns: r.get(3)?,
                    added: r.get::<_, i64>(4)?.max(0) as u64,
                })
            })
            .map_err(&read)?;
        rows.map(|row| row.map_err(&read)).collect()
    }
}

/// A commit of the embedded store in its transaction, its size change read and
/// nothing written yet.
struct SqliteCommit<'a> {
    store: &'a SqliteStore,
    tx: rusqlite::Transaction<'a>,
    network: &'a str,
    changes: &'a Changes,
    before: Usage,
    delta: NodeUsage,
}

impl Prepared for SqliteCommit<'_> {
    fn delta(&self) -> NodeUsage {
        self.delta
    }

    /// The embedded store is the node's alone: its usage row is the network's.
    fn usage_before(&mut self, _quota: Quota) -> Result<Usage, CniError> {
        Ok(self.before)
    }

    fn write(self: Box<Self>, expired: &dyn Fn() -> bool) -> Result<Written, CniError> {
        let SqliteCommit {
            store,
            tx,
            network,
            changes,
            before,
            delta,
        } = *self;
        let after: Usage = NodeUsage::from(before).plus(delta).into();
        let fail = sqlite_error("commit");
        write_entries(&tx, network, changes, expired)?;
        if let Some((of, record)) = store.served_by.as_ref().filter(|(of, _)| of == network) {
            write_served_by(&tx, of, record).map_err(&fail)?;
        }
        if let Some((_, change)) = store.attachment.as_ref().filter(|(of, _)| of == network) {
            write_attachment(&tx, network, change).map_err(&fail)?;
        }
        tx.execute(
            "INSERT INTO usage (network, entries, bytes) VALUES (?1, ?2, ?3)
             ON CONFLICT (network) DO UPDATE SET entries = excluded.entries, bytes = excluded.bytes",
            params![network, after.entries as i64, after.bytes as i64],
        )
        .map_err(&fail)?;
        if expired() {
            return Err(too_late(changes.len()));
        }
        // The log, to sync this commit once the caller has let go of its locks; opened
        // before the commit, so a failure to open it leaves nothing written.
        let log = File::open(&store.log).map_err(|e| store_error("cannot open the log", e))?;
        let log_len = |log: &File| log.metadata().map(|m| m.len()).ok();
        let log_before = log_len(&log);
        tx.commit().map_err(fail)?;
        // Changes that change nothing (deleting what is not there) append no frame:
        // nothing to sync. (The log only grows between folds, which truncate it.)
        let log_after = log_len(&log);
        if log_before.is_some() && log_after == log_before {
            return Ok(Written::durable());
        }
        // A fold syncs the log before copying it, making this commit durable; one that
        // fails (a full disk, say) only leaves the log longer for the next commit to
        // fold, so it must not fail the call, which then syncs as usual.
        match store.fold_log(log_after.unwrap_or(0)) {
            Ok(true) => Ok(Written::durable()),
            Ok(false) => Ok(Written(Some(log))),
            Err(e) => {
                tracing::warn!(target: "store", "{e}; the log is folded by a later commit");
                Ok(Written(Some(log)))
            }
        }
    }
}

/// Writes `changes` to `network`'s entries in `tx`, checking `expired` every
/// `WRITES_PER_CLOCK_CHECK` writes.
fn write_entries(
    tx: &rusqlite::Transaction,
    network: &str,
    changes: &Changes,
    expired: &dyn Fn() -> bool,
) -> Result<(), CniError> {
    let fail = sqlite_error("commit");
    let mut upsert = tx
        .prepare_cached(
            "INSERT INTO entries (network, key, value) VALUES (?1, ?2, ?3)
             ON CONFLICT (network, key) DO UPDATE SET value = excluded.value",
        )
        .map_err(&fail)?;
    let mut delete = tx
        .prepare_cached("DELETE FROM entries WHERE network = ?1 AND key = ?2")
        .map_err(&fail)?;
    for (i, (key, change)) in changes.iter().enumerate() {
        if i.is_multiple_of(WRITES_PER_CLOCK_CHECK) && expired() {
            return Err(too_late(changes.len()));
        }
        match change {
            Some(value) => upsert.execute(params![network, key, value]),
            None => delete.execute([network, key]),
        }
        .map_err(&fail)?;
    }
    Ok(())
}

/// Records in `tx` that `record` serves `network`, only when it changed: the same
/// bytes would still cost a page.
fn write_served_by(
    tx: &rusqlite::Transaction,
    network: &str,
    record: &str,
) -> rusqlite::Result<()> {
    let stored: Option<String> = tx
        .prepare_cached("SELECT record FROM served_by WHERE network = ?1")
        .and_then(|mut s| s.query_row([network], |r| r.get(0)).optional())?;
    if stored.as_deref() != Some(record) {
        tx.prepare_cached(
            "INSERT INTO served_by (network, record) VALUES (?1, ?2)
             ON CONFLICT (network) DO UPDATE SET record = excluded.record",
        )
        .and_then(|mut s| s.execute([network, record]))?;
    }
    Ok(())
}

/// See [`super::restore`]: checks the backup is a whole wasm-ipam store, copies it
/// in under a temporary name in WAL mode, syncs it, and swaps it in.
pub fn restore(data_dir: &Path, from: &Path, wait: Duration) -> Result<PathBuf, CniError> {
    let failed =
        |e: &dyn std::fmt::Display| store_error(&format!("cannot restore {}", from.display()), e);
    files::private_dir(data_dir).map_err(|e| failed(&e))?;
    let _lock = lock_store(data_dir, wait)?;
    let path = data_dir.join(DATABASE_FILE);
    let (temp, mut copy) = fresh_temp(&path).map_err(|e| failed(&e))?;
    std::io::copy(&mut File::open(from).map_err(|e| failed(&e))?, &mut copy)
        .map_err(|e| failed(&e))?;
    drop(copy);
    {
        let conn = Connection::open_with_flags(&temp, OPEN_FLAGS).map_err(|e| failed(&e))?;
        if let Err(e) = check_identity(&conn, from, not_a_backup) {
            let _ = fs::remove_file(&temp);
            return Err(e);
        }
        let problems = integrity_problems(&conn).map_err(|e| failed(&e))?;
        if !problems.is_empty() {
            let _ = fs::remove_file(&temp);
            return Err(failed(&problems.join("; ")));
        }
        conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0))
            .map_err(|e| failed(&e))?;
        conn.close().map_err(|(_, e)| failed(&e))?;
    }
    File::open(&temp)
        .and_then(|f| f.sync_all())
        .map_err(|e| failed(&e))?;
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let kept = sidecar(&path, &format!(".replaced-{stamp}"));
    for (current, aside) in [
        (path.clone(), kept.clone()),
        (sidecar(&path, "-wal"), sidecar(&kept, "-wal")),
    ] {
        match fs::rename(&current, &aside) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(failed(&e)),
        }
    }
    fs::rename(&temp, &path).map_err(|e| failed(&e))?;
    files::sync_dir(data_dir).map_err(|e| failed(&e))?;
    Ok(kept)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_restore_from_a_file_that_is_no_backup_says_so_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        drop(SqliteStore::open(&data, Duration::ZERO).unwrap());
        let store = fs::read(data.join(DATABASE_FILE)).unwrap();
        let listed = || {
            let mut names: Vec<_> = fs::read_dir(&data)
                .unwrap()
                .flatten()
                .map(|e| e.file_name())
                .collect();
            names.sort();
            names
        };
        let before = listed();
        let other = dir.path().join("other.sqlite");
        Connection::open(&other)
            .unwrap()
            .execute_batch("CREATE TABLE t (x)")
            .unwrap();
        for content in [
            None,
            Some(&b"not a database at all, but long enough to look like one"[..]),
        ] {
            let from = dir.path().join("notes.txt");
            let from = match content {
                Some(text) => {
                    fs::write(&from, text).unwrap();
                    from
                }
                None => other.clone(),
            };
            let err = restore(&data, &from, Duration::ZERO).expect_err("refused");
            assert!(
                err.msg.starts_with(&format!(
                    "{} (given to --from) is not a wasm-ipam store backup",
                    from.display()
                )) && !err.msg.contains("restore it from a backup"),
                "{err}"
            );
            assert_eq!(fs::read(data.join(DATABASE_FILE)).unwrap(), store);
            assert_eq!(listed(), before, "no file left behind");
        }
    }

    #[test]
    fn an_emptied_or_foreign_file_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(DATABASE_FILE);
        for content in [
            &b""[..],
            b"not a database at all, but long enough to look like one",
        ] {
            fs::write(&path, content).unwrap();
            let err = SqliteStore::open(dir.path(), Duration::ZERO)
                .err()
                .expect("refused");
            assert_eq!(err.code, code::STORE_FAILURE, "{err}");
            assert!(err.msg.contains("restore it from a backup"), "{err}");
            assert_eq!(fs::read(&path).unwrap(), content, "left untouched");
        }
        // Another program's SQLite database is not ours either.
        fs::remove_file(&path).unwrap();
        Connection::open(&path)
            .unwrap()
            .execute_batch("CREATE TABLE t (x)")
            .unwrap();
        let err = SqliteStore::open(dir.path(), Duration::ZERO)
            .err()
            .expect("refused");
        assert!(format!("{err:?}").contains("application_id"), "{err:?}");
    }

    fn served(module: &str) -> ServedBy {
        ServedBy {
            module: module.into(),
            sha256: "ab".into(),
            contract: "cni:ipam@0.2.0".into(),
            config: Some("{}".into()),
        }
    }

    #[test]
    fn the_module_serving_a_network_is_recorded_with_its_next_changing_commit() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = SqliteStore::open(dir.path(), Duration::ZERO).unwrap();
        let put = Changes::from([("k".to_string(), Some(b"v".to_vec()))]);
        // A commit that changes nothing records nothing.
        store.record_served_by("n", &served("/m1.wasm"));
        store
            .commit("n", &Changes::new(), Quota::UNLIMITED, &|| false)
            .unwrap();
        assert!(store.served_by().unwrap().is_empty());
        // Another network's commit does not carry it.
        store
            .commit("other", &put, Quota::UNLIMITED, &|| false)
            .unwrap();
        assert!(store.served_by().unwrap().is_empty());
        store
            .commit("n", &put, Quota::UNLIMITED, &|| false)
            .unwrap();
        store.record_served_by("n", &served("/m2.wasm"));
        store
            .commit("n", &put, Quota::UNLIMITED, &|| false)
            .unwrap();
        drop(store);
        let store = SqliteStore::open(dir.path(), Duration::ZERO).unwrap();
        assert_eq!(
            store.served_by().unwrap(),
            [("n".to_string(), Ok(served("/m2.wasm")))]
        );
    }

    #[test]
    fn a_forgotten_network_is_gone_whole_and_the_others_stay() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = SqliteStore::open(dir.path(), Duration::ZERO).unwrap();
        let two = Changes::from([
            ("a".to_string(), Some(b"1".to_vec())),
            ("b".to_string(), Some(b"2".to_vec())),
        ]);
        store.record_served_by("gone", &served("/m.wasm"));
        store
            .commit("gone", &two, Quota::UNLIMITED, &|| false)
            .unwrap();
        store
            .commit("kept", &two, Quota::UNLIMITED, &|| false)
            .unwrap();
        assert_eq!(store.forget("gone").unwrap().0, 2);
        assert!(store.list("gone", "").unwrap().is_empty());
        assert_eq!(store.usage("gone").unwrap(), Usage::default());
        assert!(store.served_by().unwrap().is_empty());
        assert_eq!(store.list("kept", "").unwrap().len(), 2);
        assert!(store.check().unwrap().is_empty());
        assert_eq!(store.forget("gone").unwrap().0, 0);
    }

    fn put(key: &str, value: &str) -> Changes {
        Changes::from([(key.to_string(), Some(value.as_bytes().to_vec()))])
    }

    fn attachment(id: &str, node: &str, added: u64) -> AttachmentRecord {
        AttachmentRecord {
            container_id: id.into(),
            ifname: "eth0".into(),
            node: node.into(),
            netns: format!("/var/run/netns/{id}"),
            added,
        }
    }

    #[test]
    fn attachment_records_follow_add_del_and_gc_commits() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = SqliteStore::open(dir.path(), Duration::ZERO).unwrap();
        let commit = |store: &mut SqliteStore, key: &str, change: AttachmentChange| {
            store.record_attachment("n", change);
            store
                .commit("n", &put(key, "v"), Quota::UNLIMITED, &|| false)
                .unwrap();
        };
        for (id, node) in [("a", "here"), ("b", "here"), ("c", "here"), ("d", "there")] {
            commit(
                &mut store,
                id,
                AttachmentChange::Added(attachment(id, node, 7)),
            );
        }
        // A commit that changes no entry writes no record.
        store.record_attachment("n", AttachmentChange::Added(attachment("x", "here", 7)));
        store
            .commit("n", &Changes::new(), Quota::UNLIMITED, &|| false)
            .unwrap();
        let ids = |store: &SqliteStore| -> Vec<String> {
            store
                .attachments("n")
                .unwrap()
                .into_iter()
                .map(|a| a.container_id)
                .collect()
        };
        assert_eq!(ids(&store), ["a", "b", "c", "d"]);
        assert_eq!(
            store.attachments("n").unwrap()[0],
            attachment("a", "here", 7)
        );
        commit(
            &mut store,
            "a",
            AttachmentChange::Removed {
                container_id: "a".into(),
                ifname: "eth0".into(),
            },
        );
        assert_eq!(ids(&store), ["b", "c", "d"]);
        // A GC on node `here` keeping `c`: `b` goes, the other node's `d` stays.
        commit(
            &mut store,
            "b",
            AttachmentChange::Collected {
                node: "here".into(),
                valid: vec![("c".into(), "eth0".into())],
            },
        );
        assert_eq!(ids(&store), ["c", "d"]);
        assert!(store.attachments("other").unwrap().is_empty());
        store.forget("n").unwrap().1.sync().unwrap();
        assert!(store.attachments("n").unwrap().is_empty());
    }

    #[test]
    fn a_schema_2_store_gains_attachment_records_keeping_its_entries() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = SqliteStore::open(dir.path(), Duration::ZERO).unwrap();
        store
            .commit("n", &put("k", "v"), Quota::UNLIMITED, &|| false)
            .unwrap();
        store
            .conn
            .execute_batch("DROP TABLE attachments; PRAGMA user_version = 2;")
            .unwrap();
        drop(store);
        let mut store = SqliteStore::open(dir.path(), Duration::ZERO).unwrap();
        assert_eq!(store.get("n", "k").unwrap().unwrap(), b"v");
        store.record_attachment("n", AttachmentChange::Added(attachment("a", "here", 1)));
        store
            .commit("n", &put("k2", "v"), Quota::UNLIMITED, &|| false)
            .unwrap();
        assert_eq!(store.attachments("n").unwrap().len(), 1);
    }

    #[test]
    fn a_schema_1_store_is_upgraded_in_place_keeping_its_entries() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = SqliteStore::open(dir.path(), Duration::ZERO).unwrap();
        let put = Changes::from([("ip/10.0.0.2".to_string(), Some(b"c1".to_vec()))]);
        store
            .commit("n", &put, Quota::UNLIMITED, &|| false)
            .unwrap();
        // What v0.1 left: schema 1, no served_by or attachments table.
        store
            .conn
            .execute_batch("DROP TABLE served_by; DROP TABLE attachments; PRAGMA user_version = 1;")
            .unwrap();
        drop(store);
        let mut store = SqliteStore::open(dir.path(), Duration::ZERO).unwrap();
        assert_eq!(store.get("n", "ip/10.0.0.2").unwrap().unwrap(), b"c1");
        assert!(store.served_by().unwrap().is_empty());
        store.record_served_by("n", &served("/m.wasm"));
        let put2 = Changes::from([("ip/10.0.0.3".to_string(), Some(b"c2".to_vec()))]);
        store
            .commit("n", &put2, Quota::UNLIMITED, &|| false)
            .unwrap();
        assert_eq!(store.served_by().unwrap().len(), 1);
        let version: i64 = store
            .conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(version, i64::from(SCHEMA_VERSION));
        assert!(store.check().unwrap().is_empty());
    }

    #[test]
    fn the_commit_that_passes_the_fold_size_folds_the_log_and_is_already_durable() {
        let dir = tempfile::tempdir().unwrap();
        let log = sidecar(&dir.path().join(DATABASE_FILE), "-wal");
        let mut store = SqliteStore::open(dir.path(), Duration::ZERO).unwrap();
        let value = vec![7u8; 16 << 10];
        let mut commits = 0;
        let folded = loop {
            assert!(commits < 64, "no fold after {commits} commits");
            let change = Changes::from([(format!("k{commits}"), Some(value.clone()))]);
            let written = store
                .commit_written("n", &change, Quota::UNLIMITED, &|| false)
                .unwrap();
            commits += 1;
            let log_len = fs::metadata(&log).unwrap().len();
            if written.0.is_none() {
                break log_len;
            }
            assert!(log_len > 0, "an unfolded commit is in the log");
            written.sync().unwrap();
        };
        assert_eq!(folded, 0, "the fold truncates the log");
        assert!(commits > 1, "the first commit alone passed the fold size");
        drop(store);
        let store = SqliteStore::open(dir.path(), Duration::ZERO).unwrap();
        assert_eq!(store.entries(None).unwrap().len(), commits);
    }

    #[test]
    fn a_new_store_is_private_and_built_under_a_temporary_name() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        // A leftover of a creation that was killed midway is cleared, not used.
        fs::create_dir(&data).unwrap();
        fs::write(temp_path(&data.join(DATABASE_FILE)), b"half").unwrap();
        // (Whatever the umask: the integration suite runs the binary under umask 000;
        // changing it here would race the other tests of this process.)
        let mut store = SqliteStore::open(&data, Duration::ZERO).unwrap();
        store
            .commit(
                "n",
                &Changes::from([("k".into(), Some(b"v".to_vec()))]),
                Quota::UNLIMITED,
                &|| false,
            )
            .unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&data.join(DATABASE_FILE)), 0o600);
        assert_eq!(mode(&sidecar(&data.join(DATABASE_FILE), "-wal")), 0o600);
        assert_eq!(mode(&data.join(STORE_LOCK)), 0o600);
        assert!(!temp_path(&data.join(DATABASE_FILE)).exists());
        let names: Vec<_> = fs::read_dir(&data)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert!(
            names
                .iter()
                .all(|n| n.starts_with(DATABASE_FILE) || n == STORE_LOCK)
                && !names.iter().any(|n| n.ends_with("-shm")),
            "{names:?}"
        );
    }

    // The commit as every backend runs it (`super::commit::run`), on this one.

    #[test]
    fn commit_then_read_per_network() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = SqliteStore::open(dir.path(), Duration::ZERO).unwrap();
        assert_eq!(store.get("a", "k").unwrap(), None);
        assert!(store.list("a", "").unwrap().is_empty());
        let mut changes = Changes::new();
        changes.insert("ip/10.0.0.2".into(), Some(b"c1".to_vec()));
        changes.insert("ip/10.0.0.3".into(), Some(b"c2".to_vec()));
        changes.insert("last".into(), Some(b"10.0.0.3".to_vec()));
        store
            .commit("a", &changes, Quota::UNLIMITED, &|| false)
            .unwrap();
        store
            .commit("b", &put("ip/x", "other"), Quota::UNLIMITED, &|| false)
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
                &|| false,
            )
            .unwrap();
        assert_eq!(store.list("a", "ip/").unwrap().len(), 1);
        assert_eq!(store.list("b", "").unwrap().len(), 1);
        assert_eq!(store.entries(None).unwrap().len(), 3);
        assert_eq!(store.entries(Some("b")).unwrap().len(), 1);
        drop(store);
        let reopened = SqliteStore::open(dir.path(), Duration::ZERO).unwrap();
        assert_eq!(reopened.list("a", "").unwrap().len(), 2);
    }

    #[test]
    fn prefixes_are_literal_and_networks_do_not_leak_into_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = SqliteStore::open(dir.path(), Duration::ZERO).unwrap();
        for (net, key) in [
            ("n", "a%b"),
            ("n", "a_c"),
            ("n", "axb"),
            ("n2", "a%b"),
            ("n", "a%"),
        ] {
            store
                .commit(net, &put(key, "v"), Quota::UNLIMITED, &|| false)
                .unwrap();
        }
        let keys = |prefix| -> Vec<String> {
            store
                .list("n", prefix)
                .unwrap()
                .into_iter()
                .map(|(k, _)| k)
                .collect()
        };
        assert_eq!(keys("a%"), ["a%", "a%b"]);
        assert_eq!(keys("a_"), ["a_c"]);
        assert_eq!(keys(""), ["a%", "a%b", "a_c", "axb"]);
    }

    #[test]
    fn usage_follows_commits_and_quota_refuses_growth_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = SqliteStore::open(dir.path(), Duration::ZERO).unwrap();
        let quota = Quota {
            entries: 2,
            bytes: 1000,
        };
        store
            .commit("n", &put("a", "12345"), quota, &|| false)
            .unwrap();
        store.commit("n", &put("b", "1"), quota, &|| false).unwrap();
        assert_eq!(
            store.usage("n").unwrap(),
            Usage {
                entries: 2,
                bytes: 8
            }
        );
        let err = store
            .commit("n", &put("c", "1"), quota, &|| false)
            .unwrap_err();
        assert_eq!(err.code, code::STORE_QUOTA_EXCEEDED, "{err}");
        assert!(err.msg.contains("storeQuotaEntries"), "{err}");
        assert_eq!(store.get("n", "c").unwrap(), None, "nothing committed");
        // Replacing a value in place is no growth in entries.
        store.commit("n", &put("a", "x"), quota, &|| false).unwrap();
        let small = Quota {
            entries: 10,
            bytes: 3,
        };
        let err = store
            .commit("n", &put("d", "big"), small, &|| false)
            .unwrap_err();
        assert!(err.msg.contains("storeQuotaMiB"), "{err}");
        // Over a lowered quota, releasing still works.
        let tiny = Quota {
            entries: 0,
            bytes: 0,
        };
        store
            .commit("n", &Changes::from([("a".into(), None)]), tiny, &|| false)
            .unwrap();
        assert_eq!(store.usage("n").unwrap().entries, 1);
    }

    #[test]
    fn a_commit_past_its_deadline_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = SqliteStore::open(dir.path(), Duration::ZERO).unwrap();
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
            .commit("n", &changes, Quota::UNLIMITED, &expired)
            .unwrap_err();
        assert_eq!(err.code, code::DEADLINE_EXCEEDED, "{err}");
        assert!(store.list("n", "").unwrap().is_empty());
        assert_eq!(store.usage("n").unwrap(), Usage::default());
        let err = store
            .commit("n", &changes, Quota::UNLIMITED, &|| true)
            .unwrap_err();
        assert_eq!(err.code, code::DEADLINE_EXCEEDED);
    }
}
