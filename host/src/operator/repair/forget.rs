//! `wasm-ipam forget NETWORK`: removes a network whose configuration is gone, so it
//! no longer shows in `list` and `stats` nor holds store space. A network whose
//! module still reports allocations is refused, and so is one whose module cannot be
//! asked (it may hold addresses still in use): `--force` removes it anyway. The store
//! is the embedded one in `--data-dir`, or the one `--netconf`'s calls use (a network
//! on etcd is forgotten there, for every node, by the store's own removal of its key
//! range); a store that does not exist is an error naming it, and nothing is created.

use crate::error::{CniError, code};
use crate::module::question::Allocations;
use crate::operator::args::{Output, StoreArgs, unknown};
use crate::operator::ask::{NetworkToAsk, StoreAccess};
use crate::pipeline::Writes;
use std::collections::BTreeSet;

/// Remove a network whose configuration is gone: its store entries and its record.
/// Refused while its module reports allocations, or cannot be asked, unless --force.
#[derive(clap::Args, Debug, PartialEq)]
pub struct ForgetCommand {
    /// The network's name.
    pub network: String,
    #[command(flatten)]
    pub store: StoreArgs,
    /// The store this network configuration (or conflist) uses (its `ipam.store`,
    /// `ipam.dataDir` and `ipam.lockFile`): for a network on etcd, any network's
    /// configuration on the same etcd store and prefix.
    #[arg(long)]
    pub netconf: Option<std::path::PathBuf>,
    /// Forget it even if it may hold addresses still in use.
    #[arg(long)]
    pub force: bool,
}

impl ForgetCommand {
    pub fn run(self) -> Result<Output, CniError> {
        let access = self.store.access_for(self.netconf.as_deref())?;
        Ok(forget(&access, &self.network, self.force)?.into())
    }
}

/// Removes `network`; says what went.
pub fn forget(access: &StoreAccess, network: &str, force: bool) -> Result<String, CniError> {
    let (store, records, usage) =
        access.with_store(|s| Ok((s.describe(), s.served_by()?, s.usage(network)?)))?;
    let served = records
        .iter()
        .find(|(name, _)| name == network)
        .map(|(_, record)| record.clone());
    if served.is_none() && usage.entries == 0 {
        // What could have been meant: every network recorded, or holding entries
        // without a record (as an older host or a crash left one).
        let mut known: BTreeSet<String> = records.into_iter().map(|(name, _)| name).collect();
        known.extend(
            access
                .with_store(|s| s.entries(None))?
                .into_iter()
                .map(|e| e.0),
        );
        return Err(unknown(
            &format!("{store} holds nothing for network {network}"),
            "the networks it holds",
            known.iter().map(String::as_str),
            "nothing was forgotten: check the name, and for a network on etcd pass --netconf FILE naming a network on the same store",
        ));
    }
    let removed = if force {
        let (removed, written) = access.with_store(|s| s.forget(network))?;
        written.sync()?;
        removed
    } else {
        let served_by = match served {
            None => Err(format!(
                "no module is recorded for network {network}, so nothing can say whether it holds addresses"
            )),
            Some(record) => record,
        };
        forget_if_empty(access, network, served_by)?
    };
    Ok(format!(
        "forgot network {network}: {removed} store entr{} and its record\n",
        if removed == 1 { "y" } else { "ies" }
    ))
}

/// Under one hold of the lock, asks the network's module for its allocations and
/// forgets the network only if it reports none: no ADD can slip in between.
fn forget_if_empty(
    access: &StoreAccess,
    network: &str,
    served_by: Result<crate::store::ServedBy, String>,
) -> Result<u64, CniError> {
    let cannot_tell = |why: String| {
        CniError::new(
            code::INVALID_NETWORK_CONFIG,
            format!(
                "cannot tell whether network {network} holds allocations: {why}; pass --force to forget it anyway"
            ),
        )
    };
    let asked = NetworkToAsk::new(network, served_by.map_err(cannot_tell)?, access)
        .map_err(|e| cannot_tell(e.to_string()))?;
    let work = Allocations(asked.context());
    // Set when the module answered that the network holds allocations: the run's
    // error is then that refusal; and when it answered none: the error is then the
    // removal's own. Any other error means nobody could tell.
    let held = std::cell::Cell::new(0);
    let empty = std::cell::Cell::new(false);
    asked
        .run("forget", &mut Vec::new(), |session| {
            let list = session.ask(work.clone(), Writes::ReadOnly)?;
            if list.is_empty() {
                empty.set(true);
                return session.forget_network();
            }
            held.set(list.len());
            Err(CniError::new(
                code::INVALID_NETWORK_CONFIG,
                format!(
                    "still holds {} allocation(s) (wasm-ipam list --network {network}, with this command's --netconf or --data-dir); release them, or pass --force to forget it anyway",
                    list.len()
                ),
            ))
        })
        .map_err(|e| match (held.get(), empty.get()) {
            (0, false) => cannot_tell(e.to_string()),
            _ => e,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{self, Changes, Quota};
    use std::time::Duration;

    /// A node's store and lock in a temporary directory, `network` holding `entries`
    /// and no record of its module (as one an older host or a crash left).
    fn access_with(network: &str, entries: usize) -> (tempfile::TempDir, StoreAccess) {
        let dir = tempfile::tempdir().unwrap();
        let access = StoreAccess::embedded(
            dir.path().join("data"),
            dir.path().join("lock"),
            Duration::from_secs(30),
        );
        let changes: Changes = (0..entries)
            .map(|i| (format!("ip/10.0.0.{i}"), Some(b"c1/eth0".to_vec())))
            .collect();
        store::select::open_embedded(&access.data_dir, Duration::from_secs(30))
            .unwrap()
            .commit(network, &changes, Quota::UNLIMITED, &|| false)
            .unwrap();
        (dir, access)
    }

    #[test]
    fn a_network_no_module_can_vouch_for_is_kept_unless_forced() {
        let (_dir, access) = access_with("old", 2);
        let refused = forget(&access, "old", false).unwrap_err();
        assert_eq!(refused.code, code::INVALID_NETWORK_CONFIG);
        assert!(
            refused
                .msg
                .contains("no module is recorded for network old")
                && refused.msg.contains("pass --force"),
            "{}",
            refused.msg
        );
        let store =
            || store::select::open_embedded(&access.data_dir, Duration::from_secs(30)).unwrap();
        assert_eq!(store().usage("old").unwrap().entries, 2, "kept");

        let said = forget(&access, "old", true).unwrap();
        assert_eq!(said, "forgot network old: 2 store entries and its record\n");
        assert_eq!(store().usage("old").unwrap().entries, 0);
    }

    #[test]
    fn a_network_the_store_does_not_hold_is_named() {
        let (_dir, access) = access_with("kept", 1);
        let err = forget(&access, "other", true).unwrap_err();
        assert_eq!(err.code, code::INVALID_NETWORK_CONFIG);
        assert_eq!(
            err.msg,
            format!(
                "store {} holds nothing for network other (the networks it holds: kept); nothing was forgotten: check the name, and for a network on etcd pass --netconf FILE naming a network on the same store",
                access.data_dir.display()
            )
        );
        let said = forget(&access, "kept", true).unwrap();
        assert_eq!(said, "forgot network kept: 1 store entry and its record\n");
    }
}
