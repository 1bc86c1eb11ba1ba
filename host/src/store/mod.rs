//! The durable store behind the `cni:ipam/store` interface: every network's key/value
//! entries, and each network's size (entries, key and value bytes) so a quota is
//! checked without a scan.
//!
//! [`Store`] is what the call path and the operator commands need of any backend, and
//! every backend commits through the one skeleton of [`commit`], preparing only its own
//! write. What only some backends do is in two small traits a backend hands out:
//! [`Shared`], of a store several nodes share (its attempts may conflict, it keeps
//! node-local copies to confirm, it records who committed when), and [`Local`], of the
//! node's own store (the host's attachment records). [`select`] opens the backend a
//! netconf names. A fourth backend is a folder of its own beside the three, plus its
//! line in [`select`], its keys in [`crate::config::StoreConfig`] and, for a shared
//! one, its [`Remote`] name in the call's log record:
//!
//! - [`sqlite`], the embedded store, chosen over redb by measurement (see
//!   BENCHMARKS.md, "Store engine"): one fsync per committing call and none for a call
//!   that commits nothing;
//! - [`etcd`] and [`kubernetes`], the cluster stores.
//!
//! The store is opened only under the host-wide lock, so it has one writer a node.

pub mod commit;
pub mod etcd;
mod kept;
pub mod kubernetes;
mod legacy;
mod rate;
pub mod select;
pub mod silence;
pub mod sqlite;

use crate::error::{CniError, code};
use crate::health::StoreSeen;
use commit::Prepared;
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Staged changes for one network: `Some` puts, `None` deletes.
pub type Changes = BTreeMap<String, Option<Vec<u8>>>;

/// The most a network may hold; a commit that would grow it past either is refused.
#[derive(Debug, Clone, Copy)]
pub struct Quota {
    pub entries: u64,
    pub bytes: u64,
}

impl Quota {
    pub const UNLIMITED: Quota = Quota {
        entries: u64::MAX,
        bytes: u64::MAX,
    };
}

/// A network's size in the store.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub entries: u64,
    pub bytes: u64,
}

fn entry_bytes(key: &str, value: &[u8]) -> u64 {
    (key.len() + value.len()) as u64
}

/// A commit that is written (the next call to open the store reads it) but not yet
/// on disk. A call releases its locks before syncing it, so the next call need not
/// wait for this one's disk sync: the store's log is appended in order and one sync
/// makes everything before it durable, so whichever call syncs first makes both
/// durable. A call answers only after its own commit's sync, so no answer ever
/// reports a commit a crash could still lose.
#[must_use = "a commit is durable only once synced"]
pub struct Written(Option<std::fs::File>);

impl Written {
    /// Nothing to sync: no changes, or already durable.
    pub fn durable() -> Self {
        Written(None)
    }

    pub fn sync(self) -> Result<(), CniError> {
        match self.0 {
            Some(log) => log
                .sync_data()
                .map_err(|e| store_error("cannot make the commit durable", e)),
            None => Ok(()),
        }
    }
}

/// Which module serves a network, as the last call that committed to it ran it: what
/// the operators' views (`list`, `stats`) need to ask that module through its
/// `inspect` export without a netconf. Kept by the host in its own table, beside the
/// module's entries, never among them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ServedBy {
    pub module: PathBuf,
    pub sha256: String,
    /// The contract the module targets, `cni:ipam@0.2.0` or `cni:ipam@0.1.0`.
    pub contract: String,
    /// The network's configuration JSON without what varies per call
    /// ([`crate::config::NetConf::network_config`]), if the host had one.
    pub config: Option<String>,
}

/// Every network's record, in network order; one the store cannot read is its error.
pub type Records = Vec<(String, Result<ServedBy, String>)>;

/// The host's own record of one attachment, beside the module's entries and never
/// among them: when its ADD committed, on which node, in which network namespace.
/// `gc` reads it for a module that records no age, and to keep an attachment whose
/// network namespace still exists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttachmentRecord {
    pub container_id: String,
    pub ifname: String,
    pub node: String,
    /// `CNI_NETNS` of the ADD (may be empty).
    pub netns: String,
    /// Unix seconds of the ADD's grant.
    pub added: u64,
}

/// How a commit changes the host's attachment records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttachmentChange {
    /// An ADD committed.
    Added(AttachmentRecord),
    /// A DEL committed.
    Removed {
        container_id: String,
        ifname: String,
    },
    /// A GC committed: every record of `node` whose attachment is not in `valid`
    /// (container id, ifname) goes.
    Collected {
        node: String,
        valid: Vec<(String, String)>,
    },
}

impl ServedBy {
    fn to_json(&self) -> String {
        serde_json::to_string(self).expect("serialisable")
    }

    fn from_json(text: &str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| format!("unreadable record: {e}"))
    }
}

/// One store backend. Reads see the last commit; [`Store::commit`] applies one
/// network's changes atomically and durably, or not at all.
pub trait Store: Send {
    fn get(&self, network: &str, key: &str) -> Result<Option<Vec<u8>>, CniError>;

    /// Shows `visit` each entry of `network` whose key starts with `prefix`, in key
    /// order, until it breaks: a caller can bound what it keeps without a copy of all.
    fn visit_prefix(
        &self,
        network: &str,
        prefix: &str,
        visit: &mut dyn FnMut(&str, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), CniError>;

    /// [`Store::get`] whose answer the commit does not check ([`Store::peek_prefix`]'s
    /// rule for one key).
    fn peek(&self, network: &str, key: &str) -> Result<Option<Vec<u8>>, CniError> {
        self.get(network, key)
    }

    /// [`Store::visit_prefix`] for figures that only inform (`store.peek-prefix`): a
    /// store that checks a call's reads at its commit leaves these out, so another
    /// writer's change to them does not make the call run again.
    fn peek_prefix(
        &self,
        network: &str,
        prefix: &str,
        visit: &mut dyn FnMut(&str, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), CniError> {
        self.visit_prefix(network, prefix, visit)
    }

    /// How many more distinct keys a call that has staged `staged` may read or write
    /// before its commit exceeds what this store takes in one transaction
    /// (`store.commit-room`); `None` when the store has no such limit.
    fn commit_room(&self, _network: &str, _staged: &Changes) -> Option<u64> {
        None
    }

    /// Every entry of every network (or of `network` only), as (network, key, value).
    fn entries(&self, network: Option<&str>) -> Result<Vec<(String, String, Vec<u8>)>, CniError>;

    /// The backend's part of a commit of `changes` (not empty) to `network`: the write,
    /// prepared and not yet done, which [`commit::run`] checks and then has written.
    fn prepare<'a>(
        &'a mut self,
        network: &'a str,
        changes: &'a Changes,
    ) -> Result<Box<dyn Prepared + 'a>, CniError>;

    /// Applies `changes` to `network` in one transaction, unless that would grow the
    /// network past `quota` (code 108) or `expired()` turns true before every change
    /// is written (code 103): then nothing is committed. No changes, no transaction.
    /// Returns once the commit is written and visible to the next opener, before it
    /// is durable: the caller releases its locks, then [`Written::sync`]s it. The same
    /// steps for every backend: [`commit::run`].
    fn commit_written(
        &mut self,
        network: &str,
        changes: &Changes,
        quota: Quota,
        expired: &dyn Fn() -> bool,
    ) -> Result<Written, CniError> {
        commit::run(self, network, changes, quota, expired)
    }

    /// [`Store::commit_written`], then its sync: a durable commit.
    fn commit(
        &mut self,
        network: &str,
        changes: &Changes,
        quota: Quota,
        expired: &dyn Fn() -> bool,
    ) -> Result<(), CniError> {
        self.commit_written(network, changes, quota, expired)?
            .sync()
    }

    /// `network`'s size as of the last commit, as the quota check reads it.
    fn usage(&self, network: &str) -> Result<Usage, CniError>;

    /// Records which module serves `network`, written with (and only with) this
    /// store's next commit to `network` that changes an entry.
    fn record_served_by(&mut self, network: &str, served_by: &ServedBy);

    /// Every network's record, in network order (an unreadable one as its error).
    fn served_by(&self) -> Result<Records, CniError>;

    /// Removes `network` whole, in one transaction: its entries, its usage, its record
    /// and its attachment records. Returns how many entries it held, and the removal
    /// to sync once the caller has let go of its locks, as a commit's.
    fn forget(&mut self, network: &str) -> Result<(u64, Written), CniError>;

    /// What is wrong with the store, if anything: its own consistency check (pages,
    /// indexes), then every network's recorded usage against its entries
    /// ([`usage_problems`]).
    fn check(&self) -> Result<Vec<String>, CniError>;

    /// The store, as an operator's message names it: its directory, or its cluster
    /// and prefix.
    fn describe(&self) -> String;

    /// Writes a consistent copy of the whole store to `to`, a new file, for
    /// [`select::restore`] to put back; a store whose own tools back it up refuses,
    /// saying which.
    fn backup(&self, to: &Path) -> Result<(), CniError>;

    /// Every entry of `network` whose key starts with `prefix`, in key order.
    fn list(&self, network: &str, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, CniError> {
        let mut out = Vec::new();
        self.visit_prefix(network, prefix, &mut |key, value| {
            out.push((key.to_string(), value.to_vec()));
            ControlFlow::Continue(())
        })?;
        Ok(out)
    }

    /// What the store does as one several nodes share; `None` for the node's own.
    fn shared(&self) -> Option<&dyn Shared> {
        None
    }

    fn shared_mut(&mut self) -> Option<&mut dyn Shared> {
        None
    }

    /// What the store does as the node's own; `None` for one nodes share.
    fn local(&self) -> Option<&dyn Local> {
        None
    }

    fn local_mut(&mut self) -> Option<&mut dyn Local> {
        None
    }
}

/// What a store several nodes share (etcd, the Kubernetes API) does beyond [`Store`].
pub trait Shared {
    /// When each node last committed to `network` (Unix seconds by that node's clock;
    /// `None` for a node whose record predates it), for `release-node` to refuse a
    /// node still calling.
    fn last_commits(&self, network: &str) -> Result<Vec<(String, Option<u64>)>, CniError>;

    /// Whether the last commit failed only because another writer changed what this
    /// call read since it read it (an optimistic transaction): the call may run its
    /// handler again, after [`Shared::begin`].
    fn conflicted(&self) -> bool;

    /// Starts a new attempt: forgets what the last one read.
    fn begin(&mut self);

    /// The store serves a runtime's call (not an operator's command): for a store
    /// that places what a call creates by who creates it (the Kubernetes store keeps
    /// what a node's calls start in that node's own object).
    fn serve_runtime(&mut self) {}

    /// For an attempt that commits nothing: checks that what it read from a node-local
    /// copy is still what the store holds (else [`Shared::conflicted`], and the call
    /// runs again), so an answer from a read alone is never from a stale copy.
    fn confirm_reads(&mut self) -> Result<(), CniError> {
        Ok(())
    }

    /// Which store this is, for the names of its [`Figures`] in the call's log record.
    fn remote(&self) -> Remote;

    /// What the call asked of the store, for its log record and the metrics.
    fn figures(&self) -> Figures;

    /// Whether the store answered this call's last request, for CNI STATUS
    /// ([`crate::health`]).
    fn seen(&self) -> StoreSeen;
}

/// What the node's own store (the embedded one) does beyond [`Store`]: the host's
/// records of each attachment, beside the module's entries.
pub trait Local {
    /// Changes the host's attachment records of `network` with (and only with) this
    /// store's next commit to `network` that changes an entry.
    fn record_attachment(&mut self, network: &str, change: AttachmentChange);

    /// The host's attachment records of `network`.
    fn attachments(&self, network: &str) -> Result<Vec<AttachmentRecord>, CniError>;
}

/// Which shared store a call's [`Figures`] are of: the names of its figures in the
/// call's log record (`etcd_requests`, `kube_requests`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remote {
    Etcd,
    Kubernetes,
}

/// What one call asked of a shared store, for its log record and the metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct Figures {
    /// Requests sent (reads and writes).
    pub requests: u64,
    /// Commits refused because another writer changed what the call read.
    pub conflicts: u64,
    /// Time spent waiting for the store's answers.
    pub time: Duration,
    /// Time spent waiting for the node's rate limiter.
    pub rate_wait: Duration,
}

/// When each node last committed to the network ([`Shared::last_commits`]); refused
/// for the embedded store, which has one node and no other's calls to look at.
pub fn last_commits(
    store: &dyn Store,
    network: &str,
) -> Result<Vec<(String, Option<u64>)>, CniError> {
    match store.shared() {
        Some(shared) => shared.last_commits(network),
        None => Err(CniError::config(format!(
            "network {network}: its store is this node's own (embedded), so no other node's calls are recorded in it; releasing a node is for a store nodes share (etcd, kubernetes)"
        ))),
    }
}

/// What opening a store does when there is none yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IfMissing {
    /// Create it: a CNI call, or an operator command that writes (an import, a
    /// reservation) on a node where nothing has been committed yet.
    Create,
    /// Refuse, naming where it was looked for: a command that reads, or acts on what
    /// is there, must create nothing (an empty store made by a typo in `--data-dir`
    /// would answer "nothing here" about the wrong place).
    Refuse,
}

/// The refusal of [`IfMissing::Refuse`]: which file is missing and how to name the
/// right one.
fn missing(path: &Path) -> CniError {
    CniError::config(format!(
        "no store at {}: no call has committed there, and this command creates none; pass --data-dir DIR naming the store the network's calls use (their ipam.dataDir); a network whose store is etcd is recorded in etcd, not on the node: name it with --netconf FILE",
        path.display()
    ))
}

/// Every network whose recorded usage (what the quota check reads) differs from the
/// entries it holds.
fn usage_problems(store: &dyn Store) -> Result<Vec<String>, CniError> {
    let entries = store.entries(None)?;
    usage_mismatches(
        entries
            .iter()
            .map(|(n, k, v)| (n.as_str(), k.as_str(), v.as_slice())),
        |network| store.usage(network),
    )
}

/// Every network among `entries` (network, key, value) whose usage as `recorded`
/// gives it differs from the entries it holds there.
fn usage_mismatches<'a>(
    entries: impl IntoIterator<Item = (&'a str, &'a str, &'a [u8])>,
    recorded: impl Fn(&str) -> Result<Usage, CniError>,
) -> Result<Vec<String>, CniError> {
    let mut counted: BTreeMap<&str, Usage> = BTreeMap::new();
    for (network, key, value) in entries {
        let usage = counted.entry(network).or_default();
        usage.entries += 1;
        usage.bytes += entry_bytes(key, value);
    }
    let mut problems = Vec::new();
    for (network, actual) in counted {
        let recorded = recorded(network)?;
        if recorded != actual {
            problems.push(format!(
                "network {network:?}: its usage records {} entries of {} bytes, it holds {} of {}",
                recorded.entries, recorded.bytes, actual.entries, actual.bytes
            ));
        }
    }
    Ok(problems)
}

fn store_error(what: &str, e: impl std::fmt::Display) -> CniError {
    CniError::new(code::STORE_FAILURE, format!("store: {what}")).with_details(e)
}
