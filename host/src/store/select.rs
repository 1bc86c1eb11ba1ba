//! The backend a netconf's `store` selects: opening it, and putting a backup in its
//! place. The one place that knows every backend; the rest of the host sees a
//! [`Store`].

use super::{IfMissing, Store, etcd, kubernetes, sqlite};
use crate::config::StoreConfig;
use crate::error::CniError;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Opens the embedded store in `data_dir`, creating it (or migrating a v0.1 redb
/// store) when there is none. `wait` bounds the wait for a call using the same store
/// under another lock file (see [`sqlite::STORE_LOCK`]).
pub fn open_embedded(data_dir: &Path, wait: Duration) -> Result<Box<dyn Store>, CniError> {
    Ok(Box::new(sqlite::SqliteStore::open(data_dir, wait)?))
}

/// Opens the store `config` selects: the embedded one in `data_dir`, or a cluster
/// store, with `wait` as the budget of opening (and, for a cluster store, of every
/// request after). `node` is the node's name (a cluster store keeps each node's
/// usage apart); for a cluster store, `data_dir` is where the node keeps its rate
/// limiter's state and its copies. A cluster store always exists; `if_missing` says
/// what to do when the embedded one does not.
pub fn open(
    config: &StoreConfig,
    data_dir: &Path,
    node: &str,
    wait: Duration,
    if_missing: IfMissing,
) -> Result<Box<dyn Store>, CniError> {
    match config {
        StoreConfig::Embedded => Ok(Box::new(sqlite::SqliteStore::open_as(
            data_dir, wait, if_missing,
        )?)),
        StoreConfig::Etcd(config) => Ok(Box::new(etcd::EtcdStore::open(
            config, node, data_dir, wait,
        )?)),
        StoreConfig::Kubernetes(config) => Ok(Box::new(kubernetes::KubernetesStore::open(
            config, node, data_dir, wait,
        )?)),
    }
}

/// Puts the backup `from` (made by [`Store::backup`]) in place of the store `config`
/// selects. The embedded store in `data_dir` is replaced whole (it need not exist),
/// what was there kept beside it under a `.replaced-<unix time>` suffix, whose path
/// is returned; a store whose own tools restore it refuses, saying which. Call it
/// under the host-wide lock. `wait` bounds the wait for `store.lock`, as
/// [`open_embedded`]'s does.
pub fn restore(
    config: &StoreConfig,
    data_dir: &Path,
    from: &Path,
    wait: Duration,
) -> Result<PathBuf, CniError> {
    match config {
        StoreConfig::Embedded => sqlite::restore(data_dir, from, wait),
        StoreConfig::Etcd(config) => Err(etcd::restored_by_etcd(config)),
        StoreConfig::Kubernetes(config) => Err(kubernetes::restored_by_kubernetes(config)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::code;

    #[test]
    fn opening_to_read_where_there_is_no_store_creates_nothing_and_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let refused = |data: &Path| {
            open(
                &StoreConfig::Embedded,
                data,
                "n",
                Duration::ZERO,
                IfMissing::Refuse,
            )
            .err()
            .expect("no store to open")
        };
        let err = refused(&data);
        assert_eq!(err.code, code::INVALID_NETWORK_CONFIG, "{err}");
        assert!(
            err.msg.contains(&format!(
                "no store at {}",
                data.join(sqlite::DATABASE_FILE).display()
            )) && err.msg.contains("pass --data-dir DIR"),
            "{err}"
        );
        assert!(!data.exists(), "the directory is not created");
        std::fs::create_dir(&data).unwrap();
        refused(&data);
        assert_eq!(
            std::fs::read_dir(&data).unwrap().count(),
            0,
            "nothing in it either"
        );

        open_embedded(&data, Duration::ZERO).unwrap();
        let store = open(
            &StoreConfig::Embedded,
            &data,
            "n",
            Duration::ZERO,
            IfMissing::Refuse,
        )
        .unwrap();
        assert_eq!(store.describe(), format!("store {}", data.display()));
    }
}
