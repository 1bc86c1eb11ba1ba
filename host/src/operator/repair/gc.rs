//! `wasm-ipam gc`: releases the addresses whose sandbox the container runtime no
//! longer has (a DEL that never came: a node reset, the runtime's state wiped, a
//! crash between the runtime's bookkeeping and its CNI DEL). Containerd 1.6/1.7 and
//! podman 4 never send CNI GC themselves; this is that GC, run by an operator or a
//! timer, and safer than wiping the store:
//!
//! - what each network holds is read *before* the runtime is asked, and only those
//!   allocations can be leaks: one committed after the question may belong to a
//!   sandbox the runtime lists only once its ADD has returned;
//! - an allocation younger than the grace period is kept (a pod being started is not
//!   listed yet), and so is one whose recorded network namespace still exists (the
//!   host records it on the embedded store only: on etcd, the module's records have
//!   no network namespace, and docs/install.md says so);
//! - a runtime that cannot answer, or lists no sandbox while the network holds
//!   addresses (a wrong socket and a reset runtime look alike), releases nothing;
//! - on a store shared by nodes, only this node's allocations are candidates;
//! - the host decides under the lock, in one hold with the release, and the module
//!   releases through its own CNI GC export, told every other allocation is valid:
//!   the host never edits a module's keys;
//! - a release that outgrows one etcd transaction goes in batches: the module
//!   releases what one holds (`store.commit-room`) and the host decides and runs
//!   again while a batch fills its transaction, each batch atomic and the whole safe
//!   to run again after a crash.

use crate::error::CniError;
use crate::operator::args::{Output, StoreArgs};
use crate::operator::ask::asked_all;
use crate::operator::repair::leaks::{DEFAULT_GRACE, DEFAULT_TIMEOUT, Leak, Options, gc};
use crate::operator::repair::runtime::Runtime;
use crate::operator::view::inventory::{self, printable};
use crate::operator::view::table::{Align, Table};
use std::path::PathBuf;

/// Release the addresses whose sandbox the container runtime no longer has (a DEL
/// that never came), through each network's module's CNI GC; see docs/install.md,
/// "Leaked addresses". Exits 0 when it ran, leaks or not; non-zero when it could not
/// (runtime, store or module error), having released nothing the runtime did not
/// confirm gone.
#[derive(clap::Args, Debug, PartialEq)]
pub struct GcCommand {
    #[command(flatten)]
    pub store: StoreArgs,
    /// The container runtime's CRI socket, as crictl takes it (default:
    /// $CONTAINER_RUNTIME_ENDPOINT, else the first of containerd's and CRI-O's sockets
    /// that exists).
    #[arg(long)]
    pub runtime_endpoint: Option<String>,
    /// For a runtime without CRI (podman): a file of the live container ids, one per
    /// line (`podman ps -aq --no-trunc`), instead of asking a CRI runtime.
    #[arg(long, conflicts_with = "runtime_endpoint")]
    pub valid_from: Option<PathBuf>,
    /// The network(s) to reconcile, as the store recorded them. Networks are named: a
    /// runtime must never be asked about another runtime's containers.
    #[arg(long, required_unless_present_any = ["netconf", "all_networks"])]
    pub network: Vec<String>,
    /// The network configuration (or conflist) of a network to reconcile.
    #[arg(long, conflicts_with_all = ["network", "all_networks"])]
    pub netconf: Option<PathBuf>,
    /// Every network the store holds (only when one runtime serves them all).
    #[arg(long, conflicts_with = "network")]
    pub all_networks: bool,
    /// An allocation younger than this is never released: a pod being started is
    /// listed by its runtime only once its ADD has returned. `0s` only on a node where
    /// nothing is being started.
    #[arg(long, default_value_t = DEFAULT_GRACE.into())]
    pub grace: humantime::Duration,
    /// How long the runtime may take to answer.
    #[arg(long, default_value_t = DEFAULT_TIMEOUT.into())]
    pub timeout: humantime::Duration,
    /// Print the leaks; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Release even when the runtime lists no sandbox at all.
    #[arg(long)]
    pub allow_empty: bool,
    /// JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

impl GcCommand {
    pub fn run(self) -> Result<Output, CniError> {
        let access = self.store.access_for(self.netconf.as_deref())?;
        let runtime =
            Runtime::chosen(self.valid_from.as_deref(), self.runtime_endpoint.as_deref())?;
        let networks = match (&self.netconf, self.all_networks) {
            (Some(_), _) => inventory::networks(&access, None, self.netconf.as_deref())?,
            (None, true) => access.served()?,
            (None, false) => {
                let (store, mut all) = access.records()?;
                for name in &self.network {
                    if !all.iter().any(|(n, _)| n == name) {
                        let known: Vec<String> = all.iter().map(|(n, _)| n.clone()).collect();
                        return Err(inventory::not_recorded(name, &store, &known));
                    }
                }
                all.retain(|(n, _)| self.network.contains(n));
                all
            }
        };
        let (asked, mut notes) = asked_all(&access, networks);
        let options = Options {
            runtime,
            grace: *self.grace,
            timeout: *self.timeout,
            dry_run: self.dry_run,
            allow_empty: self.allow_empty,
        };
        let outcome = gc(asked, &options)?;
        notes.extend(outcome.notes);
        let mut out = match self.json {
            true => Output::json(&outcome.leaks, notes),
            false => Output::with_notes(table(&outcome.leaks, self.dry_run), notes),
        };
        out.failed |= !outcome.unreconciled.is_empty();
        Ok(out)
    }
}

/// The leaks as a table, one per line, for a person.
pub fn table(leaks: &[Leak], dry_run: bool) -> String {
    let mut table = Table::new(&[
        ("NETWORK", Align::Left),
        ("ADDRESS", Align::Left),
        ("CONTAINER ID", Align::Left),
        ("IFNAME", Align::Left),
        ("AGE", Align::Left),
        ("NODE", Align::Left),
        ("RELEASED", Align::Left),
    ]);
    for leak in leaks {
        table.row(vec![
            printable(&leak.network),
            leak.address.to_string(),
            printable(&leak.container_id),
            printable(&leak.ifname),
            leak.age_seconds.map_or("-".into(), age),
            printable(&leak.node),
            match (dry_run, leak.released) {
                (true, _) => "no (dry run)",
                (false, true) => "yes",
                (false, false) => "no (the module kept it)",
            }
            .into(),
        ]);
    }
    table.render()
}

/// An age as kubectl prints one: `45s`, `12m`, `5h`, `3d`.
fn age(seconds: u64) -> String {
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leak(address: &str, age_seconds: Option<u64>, released: bool) -> Leak {
        Leak {
            network: "pods".into(),
            address: address.parse().unwrap(),
            container_id: "c1".into(),
            ifname: "eth0".into(),
            age_seconds,
            node: "node-a".into(),
            released,
        }
    }

    #[test]
    fn the_table_says_for_each_leak_whether_it_went() {
        let leaks = [
            leak("10.0.0.2", Some(45), true),
            leak("10.0.0.3", None, false),
        ];
        assert_eq!(
            table(&leaks, false),
            "NETWORK ADDRESS  CONTAINER ID IFNAME AGE NODE   RELEASED\n\
             pods    10.0.0.2 c1           eth0   45s node-a yes\n\
             pods    10.0.0.3 c1           eth0   -   node-a no (the module kept it)\n"
        );
        assert!(table(&leaks, true).contains("no (dry run)"));
        // A container id a runtime sent with a control character prints escaped.
        let mut odd = leak("10.0.0.4", None, true);
        odd.container_id = "c\u{1b}[2J".into();
        assert!(!table(&[odd], false).contains('\u{1b}'));
    }

    #[test]
    fn ages_read_as_kubectl_prints_them() {
        let ages = [0, 119, 120, 7199, 7200, 172_799, 172_800].map(age);
        assert_eq!(ages, ["0s", "119s", "2m", "119m", "2h", "47h", "2d"]);
    }
}
