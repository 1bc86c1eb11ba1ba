//! `wasm-ipam store check | backup | restore | migrate`: the store's own repair
//! (SECURITY.md, "When the store is damaged") and its move from one cluster store to
//! the other ([`super::migrate`]), each under the host-wide lock, on the store a
//! netconf's calls use (`--netconf`) or the embedded one in `--data-dir`. `check` and
//! `backup` create nothing: a store that does not exist is an error naming it. What
//! differs per store is the store's own ([`crate::store::Store`]): the etcd store is
//! checked like the embedded one, and refuses to be backed up or restored other
//! than by etcd's snapshot, saying so.

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
        /// The store this network configuration (or conflist) uses: its
        /// `ipam.store`, `ipam.dataDir` and `ipam.lockFile`.
        #[arg(long)]
        netconf: Option<PathBuf>,
    },
    /// Write a consistent copy of the store to a new file, under the lock (the
    /// embedded store; an etcd store is refused: use `etcdctl snapshot save`; a
    /// Kubernetes store too: `kubectl get ipamshards -o yaml`).
    Backup {
        #[command(flatten)]
        store: StoreArgs,
        /// As for `check`.
        #[arg(long)]
        netconf: Option<PathBuf>,
        /// The new file.
        #[arg(long)]
        to: PathBuf,
    },
    /// Put a backup in place of the store, under the lock; what was there is kept
    /// beside it (the embedded store; an etcd store is refused: use
    /// `etcdutl snapshot restore`; a Kubernetes store too: `kubectl apply -f`).
    Restore {
        #[command(flatten)]
        store: StoreArgs,
        /// As for `check`.
        #[arg(long)]
        netconf: Option<PathBuf>,
        /// A file written by `wasm-ipam store backup`.
        #[arg(long)]
        from: PathBuf,
    },
    /// Move a cluster's IPAM from one cluster store to the other (etcd to
    /// Kubernetes, or back), offline: every network the old store holds, every entry
    /// as it is, checked key by key after. Refused while any node has committed a
    /// call within --idle.
    Migrate {
        #[command(flatten)]
        store: StoreArgs,
        /// A network configuration (or conflist) on the old store: its `ipam.store`
        /// (and `ipam.lockFile`, taken while the copy runs).
        #[arg(long)]
        netconf: PathBuf,
        /// A network configuration (or conflist) on the new store: its `ipam.store`
        /// and `ipam.nodeName` (the node the copy's commits are recorded as).
        #[arg(long)]
        to: PathBuf,
        /// Move only this network (repeatable); without it, every network the old
        /// store holds.
        #[arg(long = "network")]
        networks: Vec<String>,
        /// How long every node must have been quiet (no committed call).
        #[arg(long, default_value = super::migrate::DEFAULT_IDLE, value_parser = humantime::parse_duration)]
        idle: std::time::Duration,
        /// How long the whole move may take, its requests to both stores included.
        #[arg(long, default_value = super::migrate::DEFAULT_TIMEOUT, value_parser = humantime::parse_duration)]
        timeout: std::time::Duration,
    },
}

impl StoreCommand {
    pub fn run(self) -> Result<Output, CniError> {
        match self {
            StoreCommand::Check { store, netconf } => {
                let access = store.access_for(netconf.as_deref())?;
                let (name, problems, entries) = access
                    .with_store(|s| Ok((s.describe(), s.check()?, s.entries(None)?.len())))?;
                match problems.is_empty() {
                    true => Ok(format!("{name}: ok, {entries} entries\n").into()),
                    false => Err(CniError::new(
                        code::STORE_FAILURE,
                        format!("{name} is damaged: {}", problems.join("; ")),
                    )
                    .with_details("see SECURITY.md, \"When the store is damaged\"")),
                }
            }
            StoreCommand::Backup { store, netconf, to } => {
                let access = store.access_for(netconf.as_deref())?;
                let name = access.with_store(|s| s.backup(&to).map(|()| s.describe()))?;
                Ok(format!("backed up {name} to {}\n", to.display()).into())
            }
            StoreCommand::Restore {
                store,
                netconf,
                from,
            } => {
                let access = store.access_for(netconf.as_deref())?;
                let kept = store.under_lock(&access, |wait| {
                    store::select::restore(&access.store, &access.data_dir, &from, wait)
                })?;
                Ok(format!(
                    "restored {} from {}; the store it replaced, if any, is kept as {}\n",
                    access.data_dir.display(),
                    from.display(),
                    kept.display()
                )
                .into())
            }
            StoreCommand::Migrate {
                store,
                netconf,
                to,
                networks,
                idle,
                timeout,
            } => {
                let from = store.access_for(Some(&netconf))?;
                let to = store.access_for(Some(&to))?;
                Ok(super::migrate::migrate(&from, &to, &networks, idle, timeout)?.into())
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
        let Operation::Store(StoreCommand::Check { store, netconf }) = cli.command else {
            panic!("not store check")
        };
        assert_eq!(store.data_dir, Some(PathBuf::from("/d")));
        assert_eq!(store.lock_timeout, 2.0);
        assert_eq!(netconf, None);
    }

    #[test]
    fn a_damaged_store_is_code_104_naming_each_problem() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        std::fs::write(
            data.join(store::sqlite::DATABASE_FILE),
            b"not a store at all, not sqlite",
        )
        .unwrap();
        let check = StoreCommand::Check {
            store: StoreArgs {
                data_dir: Some(data),
                lock_file: Some(dir.path().join("lock")),
                lock_timeout: 5.0,
            },
            netconf: None,
        };
        let err = check.run().unwrap_err();
        assert_eq!(err.code, code::STORE_FAILURE, "{}", err.msg);
    }
}
