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
