//! The durable store behind the `cni:ipam/store` interface: every network's key/value
//! entries, and each network's size (entries, key and value bytes) so a quota is
//! checked without a scan.
//!
//! [`Store`] is what the call path and the operator commands need of a backend; the
//! embedded one is SQLite ([`sqlite`]), chosen over redb by measurement (see
//! BENCHMARKS.md, "Store engine"): one fsync per committing call and none for a call
//! that commits nothing. The store is opened only under the host-wide lock, so it
//! has one writer at a time.

pub mod etcd;
mod kept;
pub mod kubernetes;
mod legacy;
mod rate;
pub mod silence;
pub mod sqlite;

use crate::config::StoreConfig;
use crate::error::{CniError, code};
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use sqlite::DATABASE_FILE;

/// How many entries a commit writes between looks at the clock.
const WRITES_PER_CLOCK_CHECK: usize = 256;

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
    Kept {
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

    /// Applies `changes` to `network` in one transaction, unless that would grow the
    /// network past `quota` (code 108) or `expired()` turns true before every change
    /// is written (code 103): then nothing is committed. No changes, no transaction.
    /// Returns once the commit is written and visible to the next opener, before it
    /// is durable: the caller releases its locks, then [`Written::sync`]s it.
    fn commit_written(
        &mut self,
        network: &str,
        changes: &Changes,
        quota: Quota,
        expired: &dyn Fn() -> bool,
    ) -> Result<Written, CniError>;

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

    /// When each node last committed to `network` (Unix seconds by that node's clock;
    /// `None` for a node whose record predates it), for `release-node` to refuse a
    /// node still calling. Only a store several nodes share keeps it; the embedded
    /// store has one node and says so.
    fn last_commits(&self, network: &str) -> Result<Vec<(String, Option<u64>)>, CniError> {
        Err(CniError::config(format!(
            "network {network}: its store is this node's own (embedded), so no other node's calls are recorded in it; releasing a node is for a store nodes share (etcd)"
        )))
    }

    /// Changes the host's attachment records of `network` with (and only with) this
    /// store's next commit to `network` that changes an entry. A store that keeps no
    /// such records (etcd: a module there records its own ages and nodes) ignores it.
    fn record_attachment(&mut self, _network: &str, _change: AttachmentChange) {}

    /// The host's attachment records of `network`.
    fn attachments(&self, _network: &str) -> Result<Vec<AttachmentRecord>, CniError> {
        Ok(Vec::new())
    }

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
    /// [`restore`] to put back; a store whose own tools back it up refuses, saying
    /// which.
    fn backup(&self, to: &Path) -> Result<(), CniError>;

    /// Whether the last commit failed only because another writer changed what this
    /// call read since it read it (a shared store's optimistic transaction): the call
    /// may run its handler again, after [`Store::begin`]. Never for the embedded
    /// store, whose single writer holds the lock.
    fn conflicted(&self) -> bool {
        false
    }

    /// Starts a new attempt: forgets what the last one read.
    fn begin(&mut self) {}

    /// The store serves a runtime's call (not an operator's command): for a store
    /// that places what a call creates by who creates it (the Kubernetes store keeps
    /// what a node's calls start in that node's own object).
    fn serve_runtime(&mut self) {}

    /// For an attempt that commits nothing: checks that what it read from a node-local
    /// copy is still what the store holds (else [`Store::conflicted`], and the call
    /// runs again), so an answer from a read alone is never from a stale copy.
    fn confirm_reads(&mut self) -> Result<(), CniError> {
        Ok(())
    }

    /// What the call did with etcd, when the store is etcd.
    fn etcd_figures(&self) -> Option<etcd::Figures> {
        None
    }

    /// What the call did with the Kubernetes API, when the store is Kubernetes.
    fn kubernetes_figures(&self) -> Option<kubernetes::Figures> {
        None
    }

    /// Whether a cluster store answered this call's last request, for CNI STATUS
    /// ([`crate::health`]); `Unknown` for the embedded store.
    fn seen(&self) -> crate::health::StoreSeen {
        crate::health::StoreSeen::Unknown
    }

    /// Every entry of `network` whose key starts with `prefix`, in key order.
    fn list(&self, network: &str, prefix: &str) -> Result<Vec<(String, Vec<u8>)>, CniError> {
        let mut out = Vec::new();
        self.visit_prefix(network, prefix, &mut |key, value| {
            out.push((key.to_string(), value.to_vec()));
            ControlFlow::Continue(())
        })?;
        Ok(out)
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

/// Opens the embedded store in `data_dir`, creating it (or migrating a v0.1 redb
/// store) when there is none. `wait` bounds the wait for a call using the same store
/// under another lock file (see [`sqlite::STORE_LOCK`]).
pub fn open(data_dir: &Path, wait: Duration) -> Result<Box<dyn Store>, CniError> {
    Ok(Box::new(sqlite::SqliteStore::open(data_dir, wait)?))
}

/// Opens the store `config` selects: the embedded one in `data_dir`, or etcd, with
/// `wait` as the budget of opening (and, for etcd, of every request after). `node`
/// is the node's name (etcd keeps a usage row per node); for etcd, `data_dir` is
/// where the node's rate limiter keeps its state. A cluster store always exists;
/// `if_missing` says what to do when the embedded one does not.
pub fn open_with(
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
    let mut counted: BTreeMap<String, Usage> = BTreeMap::new();
    for (network, key, value) in store.entries(None)? {
        let usage = counted.entry(network).or_default();
        usage.entries += 1;
        usage.bytes += entry_bytes(&key, &value);
    }
    let mut problems = Vec::new();
    for (network, actual) in counted {
        let recorded = store.usage(&network)?;
        if recorded != actual {
            problems.push(format!(
                "network {network:?}: its usage records {} entries of {} bytes, it holds {} of {}",
                recorded.entries, recorded.bytes, actual.entries, actual.bytes
            ));
        }
    }
    Ok(problems)
}

/// Puts the backup `from` (made by [`Store::backup`]) in place of the store `config`
/// selects. The embedded store in `data_dir` is replaced whole (it need not exist),
/// what was there kept beside it under a `.replaced-<unix time>` suffix, whose path
/// is returned; a store whose own tools restore it refuses, saying which. Call it
/// under the host-wide lock. `wait` bounds the wait for `store.lock`, as [`open`]'s
/// does.
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

fn store_error(what: &str, e: impl std::fmt::Display) -> CniError {
    CniError::new(code::STORE_FAILURE, format!("store: {what}")).with_details(e)
}

fn too_late(changes: &Changes) -> CniError {
    CniError::new(
        code::DEADLINE_EXCEEDED,
        "the module's writes could not be committed before its deadline; nothing was committed",
    )
    .with_details(format!("{} staged changes", changes.len()))
}

/// Refuses growth past the quota; shrinking is always allowed, so a network already
/// over a lowered quota can still release addresses.
fn check_quota(network: &str, before: Usage, after: Usage, quota: Quota) -> Result<(), CniError> {
    let over = |what: &str, before: u64, after: u64, limit: u64, key: &str| {
        (after > limit && after > before).then(|| {
            CniError::new(
                code::STORE_QUOTA_EXCEEDED,
                format!(
                    "network {network:?} would hold {after} {what} in the store, over its quota of {limit} (ipam.{key}); nothing was committed"
                ),
            )
        })
    };
    match over(
        "entries",
        before.entries,
        after.entries,
        quota.entries,
        "storeQuotaEntries",
    )
    .or_else(|| {
        over(
            "bytes",
            before.bytes,
            after.bytes,
            quota.bytes,
            "storeQuotaMiB",
        )
    }) {
        Some(err) => Err(err),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commit_then_read_per_network() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path(), Duration::ZERO).unwrap();
        assert_eq!(store.get("a", "k").unwrap(), None);
        assert!(store.list("a", "").unwrap().is_empty());
        let mut changes = Changes::new();
        changes.insert("ip/10.0.0.2".into(), Some(b"c1".to_vec()));
        changes.insert("ip/10.0.0.3".into(), Some(b"c2".to_vec()));
        changes.insert("last".into(), Some(b"10.0.0.3".to_vec()));
        store
            .commit("a", &changes, Quota::UNLIMITED, &|| false)
            .unwrap();
        store
            .commit("b", &put("ip/x", "other"), Quota::UNLIMITED, &|| false)
            .unwrap();
        assert_eq!(
            store.get("a", "last").unwrap().as_deref(),
            Some(&b"10.0.0.3"[..])
        );
        let listed: Vec<String> = store
            .list("a", "ip/")
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(listed, ["ip/10.0.0.2", "ip/10.0.0.3"]);
        store
            .commit(
                "a",
                &Changes::from([("ip/10.0.0.2".into(), None)]),
                Quota::UNLIMITED,
                &|| false,
            )
            .unwrap();
        assert_eq!(store.list("a", "ip/").unwrap().len(), 1);
        assert_eq!(store.list("b", "").unwrap().len(), 1);
        assert_eq!(store.entries(None).unwrap().len(), 3);
        assert_eq!(store.entries(Some("b")).unwrap().len(), 1);
        drop(store);
        let reopened = open(dir.path(), Duration::ZERO).unwrap();
        assert_eq!(reopened.list("a", "").unwrap().len(), 2);
    }

    #[test]
    fn opening_to_read_where_there_is_no_store_creates_nothing_and_names_it() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let refused = |data: &Path| {
            open_with(
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
                data.join(DATABASE_FILE).display()
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

        open(&data, Duration::ZERO).unwrap();
        let store = open_with(
            &StoreConfig::Embedded,
            &data,
            "n",
            Duration::ZERO,
            IfMissing::Refuse,
        )
        .unwrap();
        assert_eq!(store.describe(), format!("store {}", data.display()));
    }

    #[test]
    fn prefixes_are_literal_and_networks_do_not_leak_into_each_other() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path(), Duration::ZERO).unwrap();
        for (net, key) in [
            ("n", "a%b"),
            ("n", "a_c"),
            ("n", "axb"),
            ("n2", "a%b"),
            ("n", "a%"),
        ] {
            store
                .commit(net, &put(key, "v"), Quota::UNLIMITED, &|| false)
                .unwrap();
        }
        let keys = |prefix| -> Vec<String> {
            store
                .list("n", prefix)
                .unwrap()
                .into_iter()
                .map(|(k, _)| k)
                .collect()
        };
        assert_eq!(keys("a%"), ["a%", "a%b"]);
        assert_eq!(keys("a_"), ["a_c"]);
        assert_eq!(keys(""), ["a%", "a%b", "a_c", "axb"]);
    }

    fn put(key: &str, value: &str) -> Changes {
        Changes::from([(key.to_string(), Some(value.as_bytes().to_vec()))])
    }

    #[test]
    fn usage_follows_commits_and_quota_refuses_growth_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path(), Duration::ZERO).unwrap();
        let quota = Quota {
            entries: 2,
            bytes: 1000,
        };
        store
            .commit("n", &put("a", "12345"), quota, &|| false)
            .unwrap();
        store.commit("n", &put("b", "1"), quota, &|| false).unwrap();
        assert_eq!(
            store.usage("n").unwrap(),
            Usage {
                entries: 2,
                bytes: 8
            }
        );
        let err = store
            .commit("n", &put("c", "1"), quota, &|| false)
            .unwrap_err();
        assert_eq!(err.code, code::STORE_QUOTA_EXCEEDED, "{err}");
        assert!(err.msg.contains("storeQuotaEntries"), "{err}");
        assert_eq!(store.get("n", "c").unwrap(), None, "nothing committed");
        // Replacing a value in place is no growth in entries.
        store.commit("n", &put("a", "x"), quota, &|| false).unwrap();
        let small = Quota {
            entries: 10,
            bytes: 3,
        };
        let err = store
            .commit("n", &put("d", "big"), small, &|| false)
            .unwrap_err();
        assert!(err.msg.contains("storeQuotaMiB"), "{err}");
        // Over a lowered quota, releasing still works.
        let tiny = Quota {
            entries: 0,
            bytes: 0,
        };
        store
            .commit("n", &Changes::from([("a".into(), None)]), tiny, &|| false)
            .unwrap();
        assert_eq!(store.usage("n").unwrap().entries, 1);
    }

    #[test]
    fn a_commit_past_its_deadline_writes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = open(dir.path(), Duration::ZERO).unwrap();
        let changes: Changes = (0..2000)
            .map(|i| (format!("k{i:05}"), Some(vec![0u8; 8])))
            .collect();
        let looks = std::cell::Cell::new(0);
        // The clock runs out after a few looks, i.e. midway through the writes.
        let expired = || {
            looks.set(looks.get() + 1);
            looks.get() > 3
        };
        let err = store
            .commit("n", &changes, Quota::UNLIMITED, &expired)
            .unwrap_err();
        assert_eq!(err.code, code::DEADLINE_EXCEEDED, "{err}");
        assert!(store.list("n", "").unwrap().is_empty());
        assert_eq!(store.usage("n").unwrap(), Usage::default());
        let err = store
            .commit("n", &changes, Quota::UNLIMITED, &|| true)
            .unwrap_err();
        assert_eq!(err.code, code::DEADLINE_EXCEEDED);
    }
}
