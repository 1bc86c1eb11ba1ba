//! `wasm-ipam forget NETWORK`: removes a network whose configuration is gone, so it
//! no longer shows in `list` and `stats` nor holds store space. A network whose
//! module still reports allocations is refused, and so is one whose module cannot be
//! asked (it may hold addresses still in use): `--force` removes it anyway.

use crate::error::{CniError, code};
use crate::module::engine::{Answer, Work};
use crate::operator::ask::{Asked, Place};

/// Removes `network`; says what went.
pub fn forget(place: &Place, network: &str, force: bool) -> Result<String, CniError> {
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
    if !force {
        let held = match served {
            None => Err(format!(
                "no module is recorded for network {network}, so nothing can say whether it holds addresses"
            )),
            Some(Err(e)) => Err(e),
            Some(Ok(served_by)) => allocations(place, network, served_by),
        };
        match held {
            Ok(0) => {}
            Ok(n) => {
                return Err(CniError::new(
                    code::INVALID_NETWORK_CONFIG,
                    format!(
                        "network {network} still holds {n} allocation(s) (wasm-ipam list --network {network}); release them, or pass --force to forget it anyway"
                    ),
                ));
            }
            Err(why) => {
                return Err(CniError::new(
                    code::INVALID_NETWORK_CONFIG,
                    format!(
                        "cannot tell whether network {network} holds allocations: {why}; pass --force to forget it anyway"
                    ),
                ));
            }
        }
    }
    let removed = place.with_store(|s| s.forget(network))?;
    Ok(format!(
        "forgot network {network}: {removed} store entr{} and its record\n",
        if removed == 1 { "y" } else { "ies" }
    ))
}

/// How many allocations the network's module reports, or why it cannot say.
fn allocations(
    place: &Place,
    network: &str,
    served_by: crate::store::ServedBy,
) -> Result<usize, String> {
    let mut notes = Vec::new();
    let asked = Asked::load(network, served_by, &mut notes).map_err(|e| e.to_string())?;
    asked.require_inspect().map_err(|e| e.to_string())?;
    match asked.ask(place, Work::Allocations(asked.context()), false) {
        Ok(Answer::Allocations(list)) => Ok(list.len()),
        Ok(_) => Err("the module answered something else".into()),
        Err(e) => Err(e.to_string()),
    }
}
