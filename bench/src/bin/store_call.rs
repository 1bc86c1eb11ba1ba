//! One CNI call's worth of store work, then exit: `store_call <redb|sqlite> <dir>
//! <add|del> <id>`. The `engines` scenario runs it once per call, as the plugin runs
//! once per call, to compare the two engines wasm-ipam has used.
//!
//! - add: read the network's usage and its `last` key, then commit three puts
//!   (`ip/<addr>` = id, `meta/<addr>` = a small JSON, `last` = addr) and the usage.
//! - del: read the usage and `ip/<addr>`, then commit two deletes and the usage.
//!
//! `sqlite` is the host's store itself (`wasm_ipam::store`, host/src/store/sqlite.rs);
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
    wasm_ipam_bench::cycle::changes(command == "add", id, &address(id))
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
    //! The host's own store, opened, read and committed as a call does it.
    use super::{Changes, Error};
    use std::path::Path;
    use wasm_ipam::store::{self, Quota};

    pub fn call(dir: &Path, network: &str, read: &str, changes: &Changes) -> Result<(), Error> {
        let mut store = store::select::open_embedded(dir, std::time::Duration::ZERO)?;
        // What the module reads before it stages its changes.
        store.usage(network)?;
        store.get(network, read)?;
        store.commit(network, changes, Quota::UNLIMITED, &|| false)?;
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
