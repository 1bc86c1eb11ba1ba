//! `wasm-ipam store check | backup | restore`: the embedded store's own repair
//! (SECURITY.md, "When the store is damaged"), each under the host-wide lock.

use crate::error::{CniError, code};
use crate::operator::args::{Output, StoreArgs};
use crate::store;
use std::path::PathBuf;

/// Check, back up or restore the store (see SECURITY.md, "When the store is
/// damaged").
#[derive(clap::Subcommand, Debug, PartialEq)]
pub enum StoreCommand {
    /// Check the store's pages and indexes, and each network's recorded usage against
    /// its entries; exits non-zero naming every problem found.
    Check {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Write a consistent copy of the store to a new file, under the lock.
    Backup {
        #[command(flatten)]
        store: StoreArgs,
        /// The new file.
        #[arg(long)]
        to: PathBuf,
    },
    /// Put a backup in place of the store, under the lock; what was there is kept
    /// beside it.
    Restore {
        #[command(flatten)]
        store: StoreArgs,
        /// A file written by `wasm-ipam store backup`.
        #[arg(long)]
        from: PathBuf,
    },
}

impl StoreCommand {
    pub fn run(self) -> Result<Output, CniError> {
        match self {
            StoreCommand::Check { store } => {
                let place = store.place()?;
                let (problems, entries) =
                    store.with_store(&place, |s| Ok((s.check()?, s.entries(None)?.len())))?;
                match problems.is_empty() {
                    true => Ok(format!(
                        "store {}: ok, {entries} entries\n",
                        place.data_dir.display()
                    )
                    .into()),
                    false => Err(CniError::new(
                        code::STORE_FAILURE,
                        format!(
                            "store {} is damaged: {}",
                            place.data_dir.display(),
                            problems.join("; ")
                        ),
                    )
                    .with_details("see SECURITY.md, \"When the store is damaged\"")),
                }
            }
            StoreCommand::Backup { store, to } => {
                let place = store.place()?;
                store.with_store(&place, |s| s.backup(&to))?;
                Ok(format!(
                    "backed up {} to {}\n",
                    place.data_dir.display(),
                    to.display()
                )
                .into())
            }
            StoreCommand::Restore { store, from } => {
                let place = store.place()?;
                let kept = store
                    .under_lock(&place, |wait| store::restore(&place.data_dir, &from, wait))?;
                Ok(format!(
                    "restored {} from {}; the store it replaced, if any, is kept as {}\n",
                    place.data_dir.display(),
                    from.display(),
                    kept.display()
                )
                .into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::cli::{Cli, Operation};
    use clap::Parser;

    #[test]
    fn backup_needs_a_file_and_check_takes_the_store_flags() {
        assert!(Cli::try_parse_from(["wasm-ipam", "store", "backup"]).is_err());
        let cli = Cli::try_parse_from([
            "wasm-ipam",
            "store",
            "check",
            "--data-dir",
            "/d",
            "--lock-timeout",
            "2",
        ])
        .unwrap();
        let Operation::Store(StoreCommand::Check { store }) = cli.command else {
            panic!("not store check")
        };
        assert_eq!(store.data_dir, Some(PathBuf::from("/d")));
        assert_eq!(store.lock_timeout, 2.0);
    }

    #[test]
    fn a_damaged_store_is_code_104_naming_each_problem() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(
            data.join(store::DATABASE_FILE),
            b"not a store at all, not sqlite",
        )
        .unwrap();
        let check = StoreCommand::Check {
            store: StoreArgs {
                data_dir: Some(data),
                lock_file: Some(dir.path().join("lock")),
                lock_timeout: 5.0,
            },
        };
        let err = check.run().unwrap_err();
        assert_eq!(err.code, code::STORE_FAILURE, "{}", err.msg);
    }
}
