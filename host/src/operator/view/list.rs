//! `wasm-ipam list`: every allocation (or reservation), as each network's module
//! reports it.

use crate::error::CniError;
use crate::operator::args::{Output, StoreArgs};
use crate::operator::view::inventory::{self, Reservation, printable};
use crate::operator::view::table::{Align, Table};
use std::path::PathBuf;

/// Print every allocation: network, address, container id, ifname, since when, as
/// the module serving each network reports them (its `inspect` export).
#[derive(clap::Args, Debug, PartialEq)]
pub struct ListCommand {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Only this network.
    #[arg(long)]
    pub network: Option<String>,
    /// Ask the module this network configuration (or conflist) names, for its
    /// network, instead of the one the store recorded; its store is the one read.
    /// With --network naming another network, that network's record in this store.
    #[arg(long)]
    pub netconf: Option<PathBuf>,
    /// Only allocations on this node: those the module reports there (its `node`
    /// attribute, for a network shared by nodes through etcd, whose `list` is
    /// cluster-wide), and for this node, those of a network whose store is its own.
    /// A node no network knows is an error listing those they know.
    #[arg(long, conflicts_with = "reservations")]
    pub node: Option<String>,
    /// JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// List the reservations (`wasm-ipam reserve`) instead of the allocations.
    #[arg(long)]
    pub reservations: bool,
}

impl ListCommand {
    pub fn run(self) -> Result<Output, CniError> {
        let access = self.store.access_for(self.netconf.as_deref())?;
        let networks =
            inventory::networks(&access, self.network.as_deref(), self.netconf.as_deref())?;
        let mut notes = Vec::new();
        if self.reservations {
            let reservations = inventory::reservations(&access, networks, &mut notes);
            return Ok(match self.json {
                true => Output::json(&reservations, notes),
                false => Output::with_notes(reservation_table(reservations), notes),
            });
        }
        crate::test_hook::test_panic("list");
        let mut allocations = inventory::allocations(&access, networks.clone(), &mut notes);
        if let Some(node) = &self.node {
            allocations = inventory::on_node(&access, networks, node, allocations)?;
        }
        Ok(match self.json {
            true => Output::json(&allocations, notes),
            false => Output::with_notes(inventory::allocation_table(&allocations), notes),
        })
    }
}

/// `list --reservations` as a table.
fn reservation_table(reservations: Vec<Reservation>) -> String {
    let mut table = Table::new(&[
        ("NETWORK", Align::Left),
        ("RESERVED", Align::Left),
        ("SINCE", Align::Left),
        ("HELD", Align::Right),
        ("NOTE", Align::Left),
    ]);
    for r in reservations {
        table.row(vec![
            printable(&r.network),
            printable(&r.cidr),
            inventory::since(r.since),
            r.held.len().to_string(),
            printable(&r.note),
        ]);
    }
    table.render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::cli::{Cli, Operation};
    use clap::Parser;

    #[test]
    fn its_arguments_parse_with_their_defaults() {
        let cli = Cli::try_parse_from(["wasm-ipam", "list", "--json", "--node", "n1"]).unwrap();
        let Operation::List(list) = cli.command else {
            panic!("not list")
        };
        assert!(list.json && !list.reservations);
        assert_eq!(list.node.as_deref(), Some("n1"));
        assert_eq!(list.store.lock_timeout, 30.0);
        assert!(list.store.data_dir.is_none() && list.netconf.is_none());
    }

    #[test]
    fn reservations_are_a_table_with_held_counts_right_aligned() {
        let table = reservation_table(vec![Reservation {
            network: "n".into(),
            cidr: "10.0.0.10/32".into(),
            note: "the VIP\u{1b}[31m".into(),
            since: 1_700_000_000,
            held: vec!["10.0.0.10".into(), "10.0.0.11".into()],
        }]);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(
            lines[0].split_whitespace().collect::<Vec<_>>(),
            ["NETWORK", "RESERVED", "SINCE", "HELD", "NOTE"]
        );
        assert!(lines[1].contains("2023-11-14T22:13:20Z"), "{table}");
        assert!(lines[1].contains(" 2 "), "{table}");
        assert!(
            !table.contains('\u{1b}'),
            "a module's text is printed escaped: {table}"
        );
    }
}
