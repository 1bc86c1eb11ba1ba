//! `wasm-ipam reserve ADDRESS|CIDR --netconf FILE [--note TEXT] [--force]` and
//! `wasm-ipam unreserve ADDRESS|CIDR --netconf FILE`: addresses kept out of use in a
//! network (a gateway, a VIP, a range being migrated), on every node sharing its
//! store, without editing any node's configuration.
//!
//! The host never edits a module's keys: the module records the reservation through
//! its `reservations` export (cni:ipam@0.2.3), and the host commits its writes like a
//! call's, through the same locked pipeline. The next ADD on any node reads it.

use crate::error::CniError;
use crate::module::bindings::reservations;
use crate::module::question::{Reserve, Unreserve};
use crate::operator::args::{Output, StoreArgs};
use crate::operator::ask::{NetworkToAsk, Note};
use crate::operator::view::inventory::printable;
use crate::pipeline::Writes;
use ipnet::IpNet;
use std::fmt::Write;
use std::net::IpAddr;
use std::path::PathBuf;

/// Longest note kept: a line for an operator, not a document.
const MAX_NOTE_BYTES: usize = 256;

/// `text` as a CIDR (an address alone is its /32 or /128), refused unless it is one
/// with no host bits set: the operator's argument, checked before any lock.
pub fn cidr(text: &str) -> Result<IpNet, CniError> {
    let net = match text.parse::<IpNet>() {
        Ok(net) => net,
        Err(_) => text.parse::<IpAddr>().map(IpNet::from).map_err(|_| {
            CniError::config(format!("{text:?} is neither an IP address nor a CIDR"))
        })?,
    };
    if net.trunc() != net {
        return Err(CniError::config(format!(
            "{text} has host bits set: did you mean {}?",
            net.trunc()
        )));
    }
    Ok(net)
}

/// Reserves `net` in `asked`'s network: what the module recorded.
pub fn reserve(
    asked: &NetworkToAsk,
    net: IpNet,
    note: &str,
    force: bool,
    notes: &mut Vec<Note>,
) -> Result<reservations::Reservation, CniError> {
    if note.len() > MAX_NOTE_BYTES || note.chars().any(char::is_control) {
        return Err(CniError::config(format!(
            "--note must be one line of at most {MAX_NOTE_BYTES} bytes"
        )));
    }
    let work = Reserve {
        context: asked.nodes_context(),
        cidr: net.to_string(),
        note: note.to_string(),
        force,
    };
    let reservation = asked.ask("reserve", work, Writes::Commit, notes)?;
    tracing::info!(target: "reserve", network = %asked.network, cidr = %net, force, "reserved");
    Ok(reservation)
}

/// Ends the reservation of exactly `net` in `asked`'s network: what it was.
pub fn unreserve(
    asked: &NetworkToAsk,
    net: IpNet,
    notes: &mut Vec<Note>,
) -> Result<reservations::Reservation, CniError> {
    let work = Unreserve {
        context: asked.nodes_context(),
        cidr: net.to_string(),
    };
    let reservation = asked.ask("unreserve", work, Writes::Commit, notes)?;
    tracing::info!(target: "reserve", network = %asked.network, cidr = %net, "unreserved");
    Ok(reservation)
}

/// Which of the two commands made a [`reservations::Reservation`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Reserved,
    Unreserved,
}

/// What `reserve` and `unreserve` print: each address of the range held now, and
/// what becomes of it once its holder is deleted.
pub fn text(network: &str, change: Change, r: &reservations::Reservation) -> String {
    let (verb, then) = match change {
        Change::Reserved => ("reserved", "it stays out of use once its holder is deleted"),
        Change::Unreserved => (
            "unreserved",
            "its holder keeps it; once deleted, it is handed out again",
        ),
    };
    let mut out = format!(
        "network {network}: {verb} {}{}\n",
        printable(&r.cidr),
        match r.note.is_empty() {
            true => String::new(),
            false => format!(" ({})", printable(&r.note)),
        }
    );
    for held in r.held.iter().take(1024) {
        let _ = writeln!(out, "held    {} is in use: {then}", printable(held));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_address_is_told_what_becomes_of_it_after_each_command() {
        let r = reservations::Reservation {
            cidr: "10.80.3.0/30".into(),
            note: String::new(),
            since: 0,
            held: vec!["10.80.3.1".into()],
        };
        let reserved = text("pods", Change::Reserved, &r);
        assert!(
            reserved.starts_with("network pods: reserved 10.80.3.0/30\n")
                && reserved.contains(
                    "10.80.3.1 is in use: it stays out of use once its holder is deleted"
                ),
            "{reserved}"
        );
        let unreserved = text("pods", Change::Unreserved, &r);
        assert!(
            unreserved.contains(
                "10.80.3.1 is in use: its holder keeps it; once deleted, it is handed out again"
            ) && !unreserved.contains("out of use"),
            "{unreserved}"
        );
    }

    #[test]
    fn an_address_is_its_host_prefix_and_host_bits_are_refused() {
        assert_eq!(cidr("10.80.0.7").unwrap().to_string(), "10.80.0.7/32");
        assert_eq!(cidr("fd80::7").unwrap().to_string(), "fd80::7/128");
        assert_eq!(cidr("10.80.3.0/28").unwrap().to_string(), "10.80.3.0/28");
        let err = cidr("10.80.3.1/28").unwrap_err();
        assert!(err.msg.contains("did you mean 10.80.3.0/28"), "{}", err.msg);
        assert!(cidr("ten").is_err());
    }
}

/// Keep an address or CIDR out of use in a network, on every node sharing its store,
/// from the next ADD on (through the module's `reservations` export). An address of
/// it in use is refused unless --force, which leaves the holder alone and keeps the
/// address out of use once it is deleted. See docs/cluster.md.
#[derive(clap::Args, Debug, PartialEq)]
pub struct ReserveCommand {
    /// An address (`10.80.0.10`) or a CIDR (`10.80.3.0/28`).
    pub cidr: String,
    /// The network's configuration (or conflist): its module and its store.
    #[arg(long)]
    pub netconf: PathBuf,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Why: shown by `list --reservations`.
    #[arg(long, default_value = "")]
    pub note: String,
    /// Reserve it even if some of its addresses are in use.
    #[arg(long)]
    pub force: bool,
}

impl ReserveCommand {
    pub fn run(self) -> Result<Output, CniError> {
        let net = cidr(&self.cidr)?;
        // A reservation may come before any pod: it creates the store as a call would.
        let asked = self.store.network_of(&self.netconf)?.creating_store();
        let mut notes = Vec::new();
        let made = reserve(&asked, net, &self.note, self.force, &mut notes)?;
        Ok(Output::with_notes(
            text(&asked.network, Change::Reserved, &made),
            notes,
        ))
    }
}

/// End the reservation of exactly this address or CIDR: its addresses can be handed
/// out again from the next ADD on.
#[derive(clap::Args, Debug, PartialEq)]
pub struct UnreserveCommand {
    /// The address or CIDR reserved.
    pub cidr: String,
    /// The network's configuration (or conflist): its module and its store.
    #[arg(long)]
    pub netconf: PathBuf,
    #[command(flatten)]
    pub store: StoreArgs,
}

impl UnreserveCommand {
    pub fn run(self) -> Result<Output, CniError> {
        let net = cidr(&self.cidr)?;
        let asked = self.store.network_of(&self.netconf)?;
        let mut notes = Vec::new();
        let ended = unreserve(&asked, net, &mut notes)?;
        Ok(Output::with_notes(
            text(&asked.network, Change::Unreserved, &ended),
            notes,
        ))
    }
}
