//! `wasm-ipam forget NETWORK`: removes a network whose configuration is gone, so it
//! no longer shows in `list` and `stats` nor holds store space. A network whose
//! module still reports allocations is refused, and so is one whose module cannot be
//! asked (it may hold addresses still in use): `--force` removes it anyway.

use crate::error::{CniError, code};
use crate::module::instance::{Answer, Question};
use crate::operator::args::{Output, StoreArgs};
use crate::operator::ask::{NetworkToAsk, StoreAndLock};
use crate::pipeline::Writes;

/// Remove a network whose configuration is gone: its store entries and its record.
/// Refused while its module reports allocations, or cannot be asked, unless --force.
#[derive(clap::Args, Debug, PartialEq)]
pub struct Forget {
    /// The network's name.
    pub network: String,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Forget it even if it may hold addresses still in use.
    #[arg(long)]
    pub force: bool,
}

impl Forget {
    pub fn run(self) -> Result<Output, CniError> {
        Ok(forget(&self.store.place()?, &self.network, self.force)?.into())
    }
}

/// Removes `network`; says what went.
pub fn forget(place: &StoreAndLock, network: &str, force: bool) -> Result<String, CniError> {
    let (served, usage) = place.with_store(|s| {
        let served = s
            .served_by()?
            .into_iter()
            .find(|(name, _)| name == network)
            .map(|(_, record)| record);
        Ok((served, s.usage(network)?))
    })?;
    if served.is_none() && usage.entries == 0 {
        return Err(CniError::config(format!(
            "the store holds nothing for network {network}"
        )));
    }
    let removed = if force {
        let (removed, written) = place.with_store(|s| s.forget(network))?;
        written.sync()?;
        removed
    } else {
        let served_by = match served {
            None => Err(format!(
                "no module is recorded for network {network}, so nothing can say whether it holds addresses"
            )),
            Some(record) => record,
        };
        forget_if_empty(place, network, served_by)?
    };
    Ok(format!(
        "forgot network {network}: {removed} store entr{} and its record\n",
        if removed == 1 { "y" } else { "ies" }
    ))
}

/// Under one hold of the lock, asks the network's module for its allocations and
/// forgets the network only if it reports none: no ADD can slip in between.
fn forget_if_empty(
    place: &StoreAndLock,
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
    let asked = NetworkToAsk::new(network, served_by.map_err(cannot_tell)?, place)
        .map_err(|e| cannot_tell(e.to_string()))?;
    let work = Question::Allocations(asked.context());
    // Set when the module answered that the network holds allocations: the run's
    // error is then that refusal, and any other error means nobody could tell.
    let held = std::cell::Cell::new(0);
    asked
        .run("forget", &mut Vec::new(), |session| {
            match session.ask(work.clone(), Writes::ReadOnly)? {
                Answer::Allocations(list) if list.is_empty() => session.forget_network(),
                Answer::Allocations(list) => {
                    held.set(list.len());
                    Err(CniError::new(
                        code::INVALID_NETWORK_CONFIG,
                        format!(
                            "still holds {} allocation(s) (wasm-ipam list --network {network}); release them, or pass --force to forget it anyway",
                            list.len()
                        ),
                    ))
                }
                _ => Err(CniError::new(
                    code::INTERNAL_ERROR,
                    "the module answered something else",
                )),
            }
        })
        .map_err(|e| match held.get() {
            0 => cannot_tell(e.to_string()),
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
    fn place_with(network: &str, entries: usize) -> (tempfile::TempDir, StoreAndLock) {
        let dir = tempfile::tempdir().unwrap();
        let place = StoreAndLock {
            data_dir: dir.path().join("data"),
            lock_file: dir.path().join("lock"),
            lock_timeout: Duration::from_secs(30),
        };
        let changes: Changes = (0..entries)
            .map(|i| (format!("ip/10.0.0.{i}"), Some(b"c1/eth0".to_vec())))
            .collect();
        store::open(&place.data_dir, Duration::from_secs(30))
            .unwrap()
            .commit(network, &changes, Quota::UNLIMITED, &|| false)
            .unwrap();
        (dir, place)
    }

    #[test]
    fn a_network_no_module_can_vouch_for_is_kept_unless_forced() {
        let (_dir, place) = place_with("old", 2);
        let refused = forget(&place, "old", false).unwrap_err();
        assert_eq!(refused.code, code::INVALID_NETWORK_CONFIG);
        assert!(
            refused
                .msg
                .contains("no module is recorded for network old")
                && refused.msg.contains("pass --force"),
            "{}",
            refused.msg
        );
        let store = || store::open(&place.data_dir, Duration::from_secs(30)).unwrap();
        assert_eq!(store().usage("old").unwrap().entries, 2, "kept");

        let said = forget(&place, "old", true).unwrap();
        assert_eq!(said, "forgot network old: 2 store entries and its record\n");
        assert_eq!(store().usage("old").unwrap().entries, 0);
    }

    #[test]
    fn a_network_the_store_does_not_hold_is_named() {
        let (_dir, place) = place_with("kept", 1);
        let err = forget(&place, "other", true).unwrap_err();
        assert_eq!(err.msg, "the store holds nothing for network other");
        let said = forget(&place, "kept", true).unwrap();
        assert_eq!(said, "forgot network kept: 1 store entry and its record\n");
    }
}
