//! `wasm-ipam release-node NODE --netconf FILE`: releases everything a node removed
//! from the cluster held in a network whose store nodes share (etcd). Nobody else
//! would: a gone node sends no DEL and no GC, and the other nodes collect only their
//! own attachments, so its addresses and blocks would stay taken for good.
//!
//! - The host never edits a module's keys: the module releases through its `nodes`
//!   export (cni:ipam@0.2.1), as its DELs and GC would, and the host commits its
//!   writes like a call's, through the same locked pipeline.
//! - A node that is not gone must not lose its addresses under running pods, so a
//!   node that committed a call within `window` is refused (unless `--force`), read
//!   from the store's record of each node's last commit in the same attempt as the
//!   release. If the node commits meanwhile, the module's reads of its keys conflict
//!   in the commit, the attempt runs again and sees that call.
//! - An embedded store is one node's own: there is no other node to release.
//! - A node's release can outgrow one etcd transaction (`--max-txn-ops`): the module
//!   releases what one holds (`store.commit-room`), and the host runs it again while a
//!   run fills its transaction, each batch atomic, its liveness check made again,
//!   and the whole safe to run again after a crash. A batch that fails leaves the
//!   ones before it done, and the command says what they did.

use crate::error::{CniError, code};
use crate::module::bindings::nodes;
use crate::module::question::ReleaseNode;
use crate::operator::args::{Output, StoreArgs};
use crate::operator::ask::{Batch, NetworkToAsk, Note};
use crate::pipeline::Writes;
use std::fmt::Write;
use std::path::PathBuf;
use std::time::Duration;

/// How recent a node's last committing call may be before it is refused: pods on a
/// node that just failed may still be being rescheduled, and a partitioned node may
/// come back.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(15 * 60);

pub struct Options {
    /// Refuse a node that committed a call within this.
    pub window: Duration,
    /// Release it whatever its last call.
    pub force: bool,
    /// Ask what would be released; change nothing.
    pub dry_run: bool,
}

/// What releasing a node from one network came to.
pub enum Released {
    /// What the module released (or, in a dry run, would release).
    Report(nodes::ReleaseReport),
    /// The node never committed to this network: nothing of it is here. Names the
    /// nodes that did.
    NeverSeen(Vec<String>),
}

/// Releases `node` from `asked`'s network.
pub fn release_node(
    asked: &NetworkToAsk,
    node: &str,
    options: &Options,
    notes: &mut Vec<Note>,
) -> Result<Released, CniError> {
    refuse_unless_another_node_of_a_shared_store(asked, node)?;
    let work = ReleaseNode {
        context: asked.nodes_context(),
        node: node.to_string(),
        dry_run: options.dry_run,
    };
    let writes = match options.dry_run {
        true => Writes::ReadOnly,
        false => Writes::Commit,
    };
    let mut report = nodes::ReleaseReport {
        addresses: Vec::new(),
        blocks: Vec::new(),
        notes: Vec::new(),
    };
    let mut batches = 0usize;
    loop {
        let batch = match release_batch(asked, node, &work, writes, options, notes) {
            Ok(batch) => batch,
            Err(e) if batches == 0 => return Err(e),
            Err(e) => return Err(partial(e, &report, batches)),
        };
        let answer = match batch.answer {
            Released::Report(answer) => answer,
            // Only the node's own commits write its record: a first batch that
            // finds none means nothing of it is here.
            Released::NeverSeen(known) if batches == 0 => return Ok(Released::NeverSeen(known)),
            Released::NeverSeen(_) => break,
        };
        batches += 1;
        report.addresses.extend(answer.addresses);
        report.blocks.extend(answer.blocks);
        report.notes.extend(answer.notes);
        if !batch.commit_was_full {
            break;
        }
    }
    if !options.dry_run {
        tracing::info!(
            target: "release-node",
            network = %asked.network,
            node,
            addresses = report.addresses.len(),
            blocks = report.blocks.len(),
            batches,
            "released a node that is gone"
        );
    }
    Ok(Released::Report(report))
}

/// Refuses a network whose store is this node's own (no other node calls in it),
/// and the node this command runs as.
fn refuse_unless_another_node_of_a_shared_store(
    asked: &NetworkToAsk,
    node: &str,
) -> Result<(), CniError> {
    if !asked.shared() {
        return Err(CniError::config(format!(
            "network {}: its store is this node's own (embedded), so there is no other node to release; release-node is for a store nodes share (etcd)",
            asked.network
        )));
    }
    let own = asked.node_name();
    if node == own {
        return Err(CniError::config(format!(
            "node {node} is the node this command runs as (ipam.nodeName, else the hostname): run it on a live node of the cluster"
        )));
    }
    Ok(())
}

/// One run of the module's release of `node` (`work`), through the locked pipeline:
/// refused when the node committed within the window (unless `--force`), never
/// seen when it never committed to the network.
fn release_batch(
    asked: &NetworkToAsk,
    node: &str,
    work: &ReleaseNode,
    writes: Writes,
    options: &Options,
    notes: &mut Vec<Note>,
) -> Result<Batch<Released>, CniError> {
    asked.run_batch("release-node", notes, |session| {
        if let Some(refused) = session.module().refusal(work) {
            return Err(refused);
        }
        let now = session.granted_unix();
        let last_commits = session.last_commits()?;
        if !last_commits.iter().any(|(n, _)| n == node) {
            let known = last_commits.iter().map(|(n, _)| n.clone()).collect();
            return Ok(Released::NeverSeen(known));
        }
        if !options.force
            && let Some(refused) = refusal(&last_commits, node, now, options.window)
        {
            return Err(refused);
        }
        session.ask(work.clone(), writes).map(Released::Report)
    })
}

/// Refuses `node` if it committed to `asked`'s network within the window (unless
/// `--force`): asked of every network before any is released, so a node still
/// calling in one network loses nothing in the others.
pub fn check_quiet(
    asked: &NetworkToAsk,
    node: &str,
    options: &Options,
    notes: &mut Vec<Note>,
) -> Result<(), CniError> {
    // The command's own refusals (an embedded store, the node it runs as) are
    // release_node's to say.
    if options.force || !asked.shared() || node == asked.node_name() {
        return Ok(());
    }
    asked.run("release-node", notes, |session| {
        let now = session.granted_unix();
        match refusal(&session.last_commits()?, node, now, options.window) {
            Some(refused) => Err(refused),
            None => Ok(()),
        }
    })
}

/// A batch's failure after others committed: what those did, then why it stopped.
fn partial(e: CniError, done: &nodes::ReleaseReport, batches: usize) -> CniError {
    CniError {
        msg: format!(
            "{} after {batches} batch(es) had released {} address(es) and {} block(s); run release-node again to finish",
            e.msg,
            done.addresses.len(),
            done.blocks.len()
        ),
        ..e
    }
}

/// A node that never committed to any network of the store (a typo, another
/// cluster's node): its name is refused rather than "released" with nothing, so the
/// operator looks again. `known`: the nodes that did commit.
pub fn unknown(
    networks: &[String],
    known: &std::collections::BTreeSet<String>,
    node: &str,
) -> CniError {
    crate::operator::args::unknown(
        &format!(
            "node {node} has never committed to network {} in this store",
            networks.join(", ")
        ),
        "the nodes that have",
        known.iter().map(String::as_str),
        "nothing was released: check the name (ipam.nodeName, else the node's hostname)",
    )
}

/// Why `node` may not be released now, from each node's last commit (Unix seconds):
/// it committed within `window` of `now` (or later than `now`, by a clock ahead of
/// this one), or its last commit is not recorded.
fn refusal(
    last_commits: &[(String, Option<u64>)],
    node: &str,
    now: u64,
    window: Duration,
) -> Option<CniError> {
    let (_, last) = last_commits.iter().find(|(n, _)| n == node)?;
    let window_text = humantime::format_duration(window);
    let Some(last) = *last else {
        return Some(CniError::config(format!(
            "node {node}'s last call is not recorded (its record was written by a wasm-ipam that did not record it), so it may still be running; pass --force once it is surely gone"
        )));
    };
    super::committed_within(last, now, window).map(|ago| {
        CniError::new(
            code::TRY_AGAIN_LATER,
            format!(
                "node {node} committed a call {ago} s ago, within --window {window_text}: it may still be running pods; nothing was released (try again once it has been quiet that long, or pass --force once it is surely gone)"
            ),
        )
    })
}

/// What `release-node` prints.
pub fn text(network: &str, node: &str, report: &nodes::ReleaseReport, dry_run: bool) -> String {
    let mut out = String::new();
    let verb = if dry_run { "would release" } else { "released" };
    let _ = writeln!(
        out,
        "network {network}, node {node}: {verb} {} address(es) and {} block(s)",
        report.addresses.len(),
        report.blocks.len()
    );
    for a in &report.addresses {
        let _ = writeln!(
            out,
            "address {:<40} container {} ifname {}",
            crate::operator::view::inventory::printable(&a.address),
            crate::operator::view::inventory::printable(&a.container_id),
            crate::operator::view::inventory::printable(&a.ifname)
        );
    }
    for block in &report.blocks {
        let _ = writeln!(
            out,
            "block   {}",
            crate::operator::view::inventory::printable(block)
        );
    }
    for note in &report.notes {
        let _ = writeln!(
            out,
            "note    {}",
            crate::operator::view::inventory::printable(note)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(900);

    fn rows(rows: &[(&str, Option<u64>)]) -> Vec<(String, Option<u64>)> {
        rows.iter().map(|(n, l)| (n.to_string(), *l)).collect()
    }

    #[test]
    fn a_node_quiet_for_the_window_may_go_and_one_that_called_within_it_may_not() {
        let last = rows(&[("a", Some(9_990)), ("c", Some(9_000))]);
        assert!(
            refusal(&last, "c", 10_000, WINDOW).is_none(),
            "quiet 1000 s"
        );
        let err = refusal(&last, "a", 10_000, WINDOW).unwrap();
        assert_eq!(err.code, code::TRY_AGAIN_LATER);
        assert!(
            err.msg.contains("10 s ago, within --window 15m"),
            "{}",
            err.msg
        );
        // A clock ahead of ours: not quiet.
        assert!(refusal(&last, "a", 9_000, WINDOW).is_some());
        // No window at all: only a commit in the future stops it.
        assert!(refusal(&last, "a", 10_000, Duration::ZERO).is_none());
    }

    #[test]
    fn an_unrecorded_last_call_is_refused_and_a_node_with_no_record_has_nothing_to_wait_for() {
        let last = rows(&[("old", None)]);
        let err = refusal(&last, "old", 10_000, WINDOW).unwrap();
        assert_eq!(err.code, code::INVALID_NETWORK_CONFIG);
        assert!(err.msg.contains("--force"), "{}", err.msg);
        assert!(refusal(&last, "never-committed", 10_000, WINDOW).is_none());
    }

    #[test]
    fn a_node_that_never_committed_is_an_error_naming_the_ones_that_did() {
        let known = ["node-a".to_string(), "node-b".to_string()].into();
        let err = unknown(&["pods".into()], &known, "node-9");
        assert_eq!(err.code, code::INVALID_NETWORK_CONFIG);
        assert!(
            err.msg
                .contains("node node-9 has never committed to network pods")
                && err.msg.contains("(the nodes that have: node-a, node-b)"),
            "{}",
            err.msg
        );
        let none = unknown(&["a".into(), "b".into()], &Default::default(), "x");
        assert!(none.msg.contains("network a, b") && none.msg.contains("have: none"));
    }
}

/// Release everything a node removed from the cluster held in a network whose store
/// nodes share (etcd): its addresses and its blocks, through the network's module
/// (its `nodes` export). Refused for a node that committed a call within --window,
/// unless --force; see docs/cluster.md, "A node removed from the cluster". Exits
/// non-zero when refused or when it fails, having released nothing.
#[derive(clap::Args, Debug, PartialEq)]
pub struct ReleaseNodeCommand {
    /// The node's name, as its calls gave it (`ipam.nodeName`, else its hostname).
    pub node: String,
    /// The network's configuration (or conflist): its module and its store.
    #[arg(long)]
    pub netconf: PathBuf,
    #[command(flatten)]
    pub store: StoreArgs,
    /// Refuse a node that committed a call more recently than this.
    #[arg(long, default_value_t = DEFAULT_WINDOW.into())]
    pub window: humantime::Duration,
    /// Release it whenever it last called.
    #[arg(long)]
    pub force: bool,
    /// Print what would be released; change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

impl ReleaseNodeCommand {
    /// The network `netconf` names first (its refusal refuses all), then every other
    /// network recorded in the same shared store, each as its own run.
    pub fn run(self) -> Result<Output, CniError> {
        let options = Options {
            window: *self.window,
            force: self.force,
            dry_run: self.dry_run,
        };
        let node = self.node.as_str();
        let first = self.store.network_of(&self.netconf)?;
        let mut notes = Vec::new();
        let mut networks = Vec::new();
        if first.shared() {
            let access = self.store.access_for(Some(&self.netconf))?;
            for (name, record) in first.networks_of_store()? {
                if name == first.network {
                    continue;
                }
                let asked = record
                    .map_err(CniError::config)
                    .and_then(|served_by| NetworkToAsk::new(&name, served_by, &access));
                match asked {
                    Ok(asked) => networks.push(asked.as_node(first.node_name())),
                    Err(e) => notes.push(Note::Missing(format!("network {name}: {}", e.msg))),
                }
            }
        }
        networks.insert(0, first);
        for asked in &networks {
            check_quiet(asked, node, &options, &mut notes)?;
        }
        let (mut text, mut never, mut known) =
            (String::new(), Vec::new(), std::collections::BTreeSet::new());
        for (n, asked) in networks.iter().enumerate() {
            match release_node(asked, node, &options, &mut notes) {
                Ok(Released::Report(report)) => {
                    text += &self::text(&asked.network, node, &report, options.dry_run);
                }
                Ok(Released::NeverSeen(nodes)) => {
                    never.push(asked.network.clone());
                    known.extend(nodes);
                }
                Err(e) if n == 0 => return Err(e),
                Err(e) => notes.push(Note::Missing(e.msg)),
            }
        }
        if text.is_empty() && !notes.iter().any(Note::fails) {
            return Err(unknown(&never, &known, node));
        }
        for network in never {
            text += &format!(
                "network {network}, node {node}: never committed here; nothing to release\n"
            );
        }
        Ok(Output::with_notes(text, notes))
    }
}
