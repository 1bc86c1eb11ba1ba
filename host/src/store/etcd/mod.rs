//! The cluster-wide store on etcd (`"store": {"type": "etcd", ...}`): one network's
//! entries shared by every node, with the embedded store's guarantee kept across the
//! cluster — a call's writes take effect all together or not at all, and as if the
//! call had run alone.
//!
//! Optimistic transactions. Every read of one attempt is made at one revision (the
//! first read's), so the handler sees one consistent snapshot; the store remembers
//! each key it read with its modification revision (0: absent) and each prefix it
//! listed. The commit is one etcd `Txn` whose compares check that nothing read has
//! changed since: each key still has the revision it was read at (so a deleted key
//! fails, and a key read as absent must still be absent), and no key under a listed
//! prefix was modified or created after the snapshot. A failed compare is a
//! conflict: nothing is written, [`Store::conflicted`] says so, and the call path
//! runs the handler again on a fresh instance and a fresh snapshot while its
//! deadline allows. Together the compares give serializability: a committed call's
//! reads are exactly what they would have been had it run alone at its commit.
//!
//! Every etcd request, and every wait for the node's rate limiter before one, is
//! bounded by the call's remaining budget; running out is code 11 (try again later)
//! naming what was waited for. An etcd that does not answer costs a call at most
//! `ipam.store.timeoutSeconds` per request, not its deadline: a request that no member
//! answers within it fails the call with code 11, so the host-wide lock is freed for
//! the node's other networks (see [`EtcdStore::request`]). The client runs on a
//! runtime thread of its own because the store is called from inside the engine's
//! runtime, which must not block on another.
//!
//! Keys: `<prefix>n/<network>/e/<key>` (entries), `<prefix>n/<network>/u/<node>`
//! (each node's net change to the network's size, summed for the quota),
//! `<prefix>s/<network>` (which module serves it). A network name's `%` and `/` are
//! escaped so no name reaches into another's keys.

mod cache;

use super::commit::{NodeUsage, Prepared, others_may_stand_in, too_late};
use super::{
    Changes, Figures, Quota, Records, Remote, ServedBy, Shared, Store, Usage, Written,
    usage_problems,
};
use crate::config::EtcdConfig;
use crate::error::{CniError, code};
use crate::health::{Condition, StoreSeen};
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, GetOptions, Identity, KeyValue,
    KvClient, TlsOptions, Txn, TxnOp, TxnOpResponse,
};
use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::ops::ControlFlow;
use std::path::Path;
use std::time::{Duration, Instant};

/// The longest a connect to one member may take before the next member is tried.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// The pause before trying every member again once each has failed.
const ROUND_PAUSE: Duration = Duration::from_millis(100);
/// In a cluster of several members, one try of a request may take this share of
/// `timeoutSeconds` before the next member is tried: a frozen or partitioned member
/// accepts the connection and never answers, and a third leaves room to pass over it
/// and still try two others (a three-member cluster's other two) within the bound.
const TRIES_PER_TIMEOUT: u32 = 3;

use super::rate::RateLimiter;
use cache::{Cache, Seen};

/// The node's etcd rate limiter's state, in `dataDir`.
pub const RATE_FILE: &str = "etcd-rate";

pub struct EtcdStore {
    /// Taken only by `drop`.
    runtime: Option<tokio::runtime::Runtime>,
    /// One client per endpoint: a request that cannot reach one member is sent to
    /// the next, so a cluster with a member down keeps serving.
    clients: Vec<KvClient>,
    /// The endpoint tried first: at first spread over the members by node name, then
    /// the last member that answered, so a member passed over once in a call is not
    /// tried again by its later requests and its commit.
    preferred: Cell<usize>,
    prefix: String,
    node: String,
    max_txn_ops: usize,
    /// The call's deadline.
    until: Instant,
    /// `timeoutSeconds`: the longest one request may go unanswered by every member.
    timeout: Duration,
    /// The longest one try of a request may wait for its member's answer.
    try_timeout: Duration,
    endpoints: String,
    /// The node's copies of what its calls read and wrote, in `dataDir`.
    cache: Cache,
    /// The store is read through `&self` ([`Store::get`]); what reads record lives here.
    state: RefCell<State>,
}

#[derive(Default)]
struct State {
    limiter: Option<RateLimiter>,
    /// The revision every read of this attempt sees, fixed by its first read.
    snapshot: Option<i64>,
    /// Each key read, with its modification revision (0: absent) and value length.
    reads: BTreeMap<Vec<u8>, (i64, u64)>,
    /// Each prefix listed.
    listed: BTreeSet<Vec<u8>>,
    conflicted: bool,
    figures: Figures,
    served_by: Option<(String, ServedBy)>,
    /// Whether the last request was answered, for CNI STATUS ([`crate::health`]).
    seen: StoreSeen,
    /// Each network's copies from the cache, as loaded by this store's first use.
    copies: BTreeMap<String, cache::Network>,
    /// The keys this attempt read one at a time, by network, as it saw them.
    read_keys: BTreeMap<String, BTreeMap<String, Seen>>,
    /// Whether this attempt read a key from the cache.
    from_cache: bool,
}

impl EtcdStore {
    /// Connects to `config`'s endpoints as node `node`, with `wait` as the budget of
    /// everything this store does (each request is bounded by `config.timeout` too);
    /// `data_dir` keeps the node's rate-limiter state.
    pub fn open(
        config: &EtcdConfig,
        node: &str,
        data_dir: &Path,
        wait: Duration,
    ) -> Result<Self, CniError> {
        let until = Instant::now() + wait;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| {
                CniError::new(code::IO_FAILURE, "etcd: cannot start the client's runtime")
                    .with_details(e)
            })?;
        let timeout = config.timeout.min(wait);
        let try_timeout = match config.endpoints.len() {
            1 => timeout,
            _ => timeout / TRIES_PER_TIMEOUT,
        };
        // A member that does not answer a connect within this is skipped for the
        // next: one blackholed member must not eat the call's whole budget.
        let connect_timeout = try_timeout.min(CONNECT_TIMEOUT);
        let mut options = ConnectOptions::new()
            .with_connect_timeout(connect_timeout)
            .with_timeout(try_timeout);
        if let Some(tls) = &config.tls {
            let mut options_tls =
                TlsOptions::new().ca_certificate(Certificate::from_pem(read_tls_file(&tls.ca)?));
            if let (Some(cert), Some(key)) = (&tls.cert, &tls.key) {
                options_tls = options_tls.identity(Identity::from_pem(
                    read_tls_file(cert)?,
                    read_tls_file(key)?,
                ));
            }
            options = options.with_tls(options_tls);
        }
        let mut clients = Vec::new();
        for endpoint in &config.endpoints {
            // Connecting is lazy: nothing is sent until the first request.
            let connect = runtime.block_on(async {
                tokio::time::timeout(timeout, Client::connect([endpoint], Some(options.clone())))
                    .await
            });
            match connect {
                Ok(Ok(client)) => clients.push(client.kv_client()),
                Ok(Err(e)) => return Err(etcd_error("connect", endpoint, e)),
                Err(_) => return Err(out_of_budget("connecting", endpoint)),
            }
        }
        let limiter = RateLimiter::open(data_dir, "etcd", RATE_FILE, config.qps, config.burst)?;
        let first = node.bytes().fold(0usize, |h, b| {
            h.wrapping_mul(31).wrapping_add(usize::from(b))
        }) % clients.len();
        Ok(EtcdStore {
            clients,
            preferred: Cell::new(first),
            runtime: Some(runtime),
            prefix: config.prefix.clone(),
            node: node.to_string(),
            max_txn_ops: config.max_txn_ops,
            until,
            timeout,
            try_timeout,
            endpoints: config.endpoints.join(","),
            cache: Cache::new(
                data_dir,
                &named(&config.endpoints.join(","), &config.prefix),
            ),
            state: RefCell::new(State {
                limiter: Some(limiter),
                ..State::default()
            }),
        })
    }

    fn network_key(&self, network: &str) -> String {
        format!("{}n/{}/", self.prefix, escape(network))
    }

    fn entry_key(&self, network: &str, key: &str) -> Vec<u8> {
        format!("{}e/{key}", self.network_key(network)).into_bytes()
    }

    fn usage_prefix(&self, network: &str) -> Vec<u8> {
        format!("{}u/", self.network_key(network)).into_bytes()
    }

    fn served_by_key(&self, network: &str) -> Vec<u8> {
        format!("{}s/{}", self.prefix, escape(network)).into_bytes()
    }

    /// Sends one request made by `make` for a member's client: first the rate
    /// limiter's token, then the request, both within the budget left. A request no
    /// member answers within `timeoutSeconds` fails with code 11: one try waits at
    /// most `try_timeout` for its member, then the next member is tried, every member
    /// in turn (pausing between rounds) until one answers or the bound is reached.
    /// `resend` says which failed tries may be sent again.
    fn request<T, F, Fut>(
        &self,
        what: &str,
        resend: Resend,
        make: F,
    ) -> Result<Answered<T>, CniError>
    where
        T: Send + 'static,
        F: Fn(KvClient) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
    {
        let sent = Instant::now();
        let answered = self.request_members(what, resend, make);
        // One line per request at logLevel debug, as the Kubernetes store writes.
        match &answered {
            Ok(_) => {
                tracing::debug!(target: "store", "etcd: {what}: answered after {:.1} ms", sent.elapsed().as_secs_f64() * 1e3)
            }
            Err(e) => tracing::debug!(target: "store", "etcd: {what}: {e}"),
        }
        self.state.borrow_mut().seen = match &answered {
            Ok(_) => StoreSeen::Reached,
            Err(e) => StoreSeen::Unreached(Condition::of(e)),
        };
        answered
    }

    /// [`Self::request`], sent to each member in turn.
    fn request_members<T, F, Fut>(
        &self,
        what: &str,
        resend: Resend,
        make: F,
    ) -> Result<Answered<T>, CniError>
    where
        T: Send + 'static,
        F: Fn(KvClient) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
    {
        let members = self.clients.len();
        let bound = Instant::now() + self.timeout;
        let until = bound.min(self.until);
        let mut member = self.preferred.get();
        let mut tries = 0usize;
        // Whether a try of this request may have reached etcd without its answer
        // reaching us.
        let mut maybe_left = false;
        loop {
            let failure = match self.send(what, until, make(self.clients[member].clone())) {
                Ok(value) => {
                    super::silence::answered();
                    self.preferred.set(member);
                    return Ok(Answered { value, maybe_left });
                }
                Err(Failure::Budget(e)) => return Err(e),
                Err(failure) => failure,
            };
            let again = match resend {
                Resend::Always | Resend::AtMostOnce => failure.transient(),
                Resend::IfNeverLeft => failure.never_left(),
            };
            maybe_left |= !failure.never_left();
            let unknown = resend != Resend::Always && maybe_left;
            if !again {
                return Err(failure.into_error(what, &self.endpoints, unknown));
            }
            tries += 1;
            member = (member + 1) % members;
            if tries.is_multiple_of(members) {
                std::thread::sleep(
                    ROUND_PAUSE.min(until.saturating_duration_since(Instant::now())),
                );
            }
            if Instant::now() >= until {
                let budget = until == self.until && self.until < bound;
                return Err(self.gave_up(what, budget, unknown, &failure));
            }
        }
    }

    /// The error of a request given up on once its time ran out: the call's deadline
    /// (`budget`) or `timeoutSeconds`; `unknown` when a try of a write may have
    /// reached etcd.
    fn gave_up(&self, what: &str, budget: bool, unknown: bool, last: &Failure) -> CniError {
        let endpoints = &self.endpoints;
        if !budget {
            super::silence::silent();
        }
        let waited = match budget {
            true => format!("the call's budget ran out waiting for {what} (endpoints {endpoints})"),
            false => format!(
                "no member answered {what} within ipam.store.timeoutSeconds ({} s) (endpoints {endpoints})",
                self.timeout.as_secs_f64()
            ),
        };
        CniError::new(
            code::TRY_AGAIN_LATER,
            format!("etcd: {waited}; {}", outcome(unknown)),
        )
        .with_details(last.to_string())
    }

    /// One try of one request, answered before `until` and within `try_timeout`.
    fn send<T: Send + 'static>(
        &self,
        what: &str,
        until: Instant,
        fut: impl Future<Output = Result<T, etcd_client::Error>> + Send + 'static,
    ) -> Result<T, Failure> {
        let waited = {
            let mut state = self.state.borrow_mut();
            let limiter = state.limiter.as_mut().expect("set at open");
            limiter.take(self.until, what).map_err(Failure::Budget)?
        };
        let left = self
            .try_timeout
            .min(until.saturating_duration_since(Instant::now()));
        if left.is_zero() {
            return Err(Failure::NoAnswer(left));
        }
        let started = Instant::now();
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let runtime = self.runtime.as_ref().expect("taken only by drop");
        runtime.spawn(async move {
            let _ = tx.send(tokio::time::timeout(left, fut).await);
        });
        let answer = rx.recv_timeout(left + Duration::from_millis(100));
        {
            let mut state = self.state.borrow_mut();
            state.figures.requests += 1;
            state.figures.time += started.elapsed();
            state.figures.rate_wait += waited;
        }
        match answer {
            Ok(Ok(Ok(value))) => Ok(value),
            Ok(Ok(Err(e))) => Err(Failure::Etcd(e)),
            Ok(Err(_)) | Err(_) => Err(Failure::NoAnswer(left)),
        }
    }

    /// Reads `key` (or every key under it) at this attempt's snapshot, fixing the
    /// snapshot on the first read. A snapshot compacted away is a conflict: the
    /// attempt cannot go on, and the next one reads a fresh snapshot.
    fn read(&self, what: &str, key: Vec<u8>, prefix: bool) -> Result<Vec<KeyValue>, CniError> {
        let snapshot = self.state.borrow().snapshot;
        let mut options = GetOptions::new();
        if prefix {
            options = options.with_prefix();
        }
        if let Some(revision) = snapshot {
            options = options.with_revision(revision);
        }
        let what = format!(
            "{what} {}{}",
            String::from_utf8_lossy(&key),
            if prefix { "*" } else { "" }
        );
        let answer = self
            .request(&what, Resend::Always, |mut kv| {
                let (key, options) = (key.clone(), options.clone());
                async move { kv.get(key, Some(options)).await }
            })
            .map(|answered| answered.value);
        let mut response = match answer {
            Ok(response) => response,
            Err(e) if e.details.contains("required revision has been compacted") => {
                self.state.borrow_mut().conflicted = true;
                return Err(conflict("its snapshot was compacted away"));
            }
            Err(e) => return Err(e),
        };
        let revision = response.header().map_or(0, |h| h.revision());
        self.state.borrow_mut().snapshot.get_or_insert(revision);
        Ok(response.take_kvs())
    }

    /// [`EtcdStore::read`] for the handler: the keys it sees are recorded, so the
    /// commit can check them.
    fn guarded_read(&self, key: Vec<u8>, prefix: bool) -> Result<Vec<KeyValue>, CniError> {
        let kvs = self.read("read", key.clone(), prefix)?;
        // A key this attempt took from the cache must be as etcd holds it at the
        // snapshot: else the handler saw two values of one key.
        let stale = {
            let state = self.state.borrow();
            let found: BTreeMap<&[u8], i64> =
                kvs.iter().map(|kv| (kv.key(), kv.mod_revision())).collect();
            state.reads.iter().any(|(read, (revision, _))| {
                let under = match prefix {
                    true => read.starts_with(&key),
                    false => *read == key,
                };
                under && found.get(read.as_slice()).copied().unwrap_or(0) != *revision
            })
        };
        if stale {
            return Err(self.stale_copies());
        }
        let mut state = self.state.borrow_mut();
        if prefix {
            state.listed.insert(key);
        } else if kvs.is_empty() {
            state.reads.insert(key, (0, 0));
        }
        for kv in &kvs {
            state.reads.insert(
                kv.key().to_vec(),
                (kv.mod_revision(), kv.value().len() as u64),
            );
        }
        Ok(kvs)
    }

    /// Shows `visit` each of `network`'s entries in `kvs` by its key within the
    /// network, until it breaks.
    fn visit_entries(
        &self,
        network: &str,
        kvs: &[KeyValue],
        visit: &mut dyn FnMut(&str, &[u8]) -> ControlFlow<()>,
    ) {
        let entries = self.entry_key(network, "");
        for kv in kvs {
            let key = String::from_utf8_lossy(&kv.key()[entries.len()..]);
            if visit(&key, kv.value()).is_break() {
                break;
            }
        }
    }

    /// Sends a commit `txn` whose compares include that this node's usage row
    /// `own_key` still has `own_revision` and whose writes include `own_row` there;
    /// whether it applied (false: a compare failed).
    ///
    /// At most once, so it may be sent again after any failure, to any member. The
    /// txn's compare on the node's own row fails once the txn has applied, since the
    /// txn itself rewrites that row: however many of its sends reach etcd, at most
    /// one applies. A send whose answer was lost (a member frozen, killed or cut off
    /// mid-request, a leader change) is sent again within `timeoutSeconds`; when the
    /// resend finds a compare failed, the txn's else-branch reads the row, and the
    /// row changed since the snapshot to exactly `own_row` means an earlier send
    /// applied. Nothing else writes that row meanwhile: only this node's commits do,
    /// one at a time under the node's lock; a commit of an earlier call of this node
    /// applied late (its answer lost too) could only look the same had it been sent
    /// within the same second (`own_row` carries it) and changed the row by exactly
    /// as much.
    fn commit_txn(
        &self,
        txn: Txn,
        own_key: Vec<u8>,
        own_revision: i64,
        own_row: &[u8],
    ) -> Result<Applied, CniError> {
        let txn = txn.or_else(vec![TxnOp::get(own_key, None)]);
        let answered = self.request("commit", Resend::AtMostOnce, |mut kv| {
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })?;
        let response = answered.value;
        if response.succeeded() {
            return Ok(Applied::Now(response.header().map_or(0, |h| h.revision())));
        }
        let applied_before = answered.maybe_left
            && response.op_responses().into_iter().any(|op| match op {
                TxnOpResponse::Get(get) => get
                    .kvs()
                    .first()
                    .is_some_and(|kv| kv.mod_revision() != own_revision && kv.value() == own_row),
                _ => false,
            });
        Ok(match applied_before {
            true => Applied::Before,
            false => Applied::Not,
        })
    }

    /// After a commit applied at `revision`: the node keeps what the call read and
    /// wrote of `network`, and its usage row `mine`, for its next calls.
    fn keep_copies(&self, network: &str, changes: &Changes, mine: &NodeUsage, revision: i64) {
        let mut state = self.state.borrow_mut();
        let read = state.read_keys.remove(network).unwrap_or_default();
        let copies = state
            .copies
            .entry(network.to_string())
            .or_insert_with(|| self.cache.get(network));
        copies.keys.extend(read);
        for (key, change) in changes {
            let seen = match change {
                Some(value) => Seen::new(revision, Some(value)),
                None => Seen::new(0, None),
            };
            copies.keys.insert(key.clone(), seen);
        }
        let own = NodeUsage {
            last: mine.last,
            ..*mine
        };
        copies.own_row = Some((serde_json::to_string(&own).expect("serialisable"), revision));
        self.cache.put(network, copies.clone());
    }

    /// The node's copy of `key` of `network`, if the cache has one.
    fn cached(&self, network: &str, key: &str) -> Option<Seen> {
        let mut state = self.state.borrow_mut();
        let copies = state
            .copies
            .entry(network.to_string())
            .or_insert_with(|| self.cache.get(network));
        copies.keys.get(key).cloned()
    }

    /// Forgets the node's copies of `network`.
    fn forget_copies(&self, network: &str) {
        self.state
            .borrow_mut()
            .copies
            .insert(network.to_string(), cache::Network::default());
        self.cache.put(network, cache::Network::default());
    }

    /// A read found a copy stale: the attempt runs again on fresh reads.
    fn stale_copies(&self) -> CniError {
        let networks: Vec<String> = self.state.borrow().copies.keys().cloned().collect();
        for network in networks {
            self.forget_copies(&network);
        }
        let mut state = self.state.borrow_mut();
        state.conflicted = true;
        state.figures.conflicts += 1;
        conflict("a key the node had kept from an earlier call has changed since")
    }

    /// The compares that check every read of this attempt: each key at its revision
    /// (absent: still absent), nothing under a listed prefix changed since the snapshot.
    fn read_compares(&self) -> Vec<Compare> {
        let state = self.state.borrow();
        let mut compares = Vec::new();
        for (key, (revision, _)) in &state.reads {
            compares.push(match revision {
                0 => Compare::version(key.clone(), CompareOp::Equal, 0),
                r => Compare::mod_revision(key.clone(), CompareOp::Equal, *r),
            });
        }
        if let Some(snapshot) = state.snapshot {
            for prefix in &state.listed {
                compares.push(
                    Compare::mod_revision(prefix.clone(), CompareOp::Less, snapshot + 1)
                        .with_prefix(),
                );
            }
        }
        compares
    }

    /// This node's usage row of `network` and its revision, and the other nodes'
    /// rows summed (zero when `others` is `None`). The node's row comes from its
    /// copy; the others' from theirs when `others` lets them stand in, given their age
    /// and the network's size with them. Else both are read.
    fn usage_now(
        &self,
        network: &str,
        others: Option<&dyn Fn(Option<u64>, NodeUsage) -> bool>,
    ) -> Result<(NodeUsage, i64, NodeUsage), CniError> {
        let now = crate::health::unix_now();
        let copies = {
            let mut state = self.state.borrow_mut();
            state
                .copies
                .entry(network.to_string())
                .or_insert_with(|| self.cache.get(network))
                .clone()
        };
        let parse = |text: &str| serde_json::from_str::<NodeUsage>(text).ok();
        let own = copies
            .own_row
            .as_ref()
            .and_then(|(text, rev)| Some((parse(text)?, *rev)));
        let kept_others = copies
            .others
            .as_ref()
            .and_then(|(text, at)| Some((parse(text)?, now.checked_sub(*at))));
        if let Some((mine, rev)) = own {
            match (others, kept_others) {
                (None, _) => return Ok((mine, rev, NodeUsage::default())),
                (Some(stand_in), Some((kept, age))) if stand_in(age, mine.plus(kept)) => {
                    return Ok((mine, rev, kept));
                }
                _ => {}
            }
        }
        let rows = self.usage_rows(network)?;
        let (total, mine, rev) = sum(&rows, &self.node);
        let others = NodeUsage {
            entries: total.entries - mine.entries,
            bytes: total.bytes - mine.bytes,
            last: None,
        };
        let row = |u: &NodeUsage| serde_json::to_string(u).expect("serialisable");
        let mut state = self.state.borrow_mut();
        let copies = state.copies.entry(network.to_string()).or_default();
        copies.own_row = (rev != 0).then(|| (row(&mine), rev));
        copies.others = Some((row(&others), now));
        Ok((mine, rev, others))
    }

    /// The per-node usage rows of `network` at the snapshot (not guarded: the quota
    /// is checked against the sum as of the snapshot, see docs/cluster.md).
    fn usage_rows(&self, network: &str) -> Result<Vec<(String, NodeUsage, i64)>, CniError> {
        let prefix = self.usage_prefix(network);
        let kvs = self.read("read usage", prefix.clone(), true)?;
        kvs.iter()
            .map(|kv| {
                let node = String::from_utf8_lossy(&kv.key()[prefix.len()..]).into_owned();
                let usage: NodeUsage = serde_json::from_slice(kv.value()).map_err(|e| {
                    CniError::new(code::STORE_FAILURE, "etcd: unreadable usage row")
                        .with_details(format!("{node}: {e}"))
                })?;
                Ok((node, usage, kv.mod_revision()))
            })
            .collect()
    }
}

/// How a commit's transaction went.
enum Applied {
    /// Applied now, at this revision.
    Now(i64),
    /// Applied by an earlier send of it, whose answer was lost.
    Before,
    /// A compare failed: nothing was written.
    Not,
}

/// The network's usage (summed with each row's sign: a row is clamped only in the
/// total), `own`'s row and its revision.
fn sum(rows: &[(String, NodeUsage, i64)], own: &str) -> (NodeUsage, NodeUsage, i64) {
    let mut total = NodeUsage::default();
    let mut mine = NodeUsage::default();
    let mut revision = 0;
    for (node, usage, rev) in rows {
        total = total.plus(*usage);
        if node == own {
            mine = *usage;
            revision = *rev;
        }
    }
    (total, mine, revision)
}

/// An etcd commit, its keys read and its size change known: one transaction that
/// compares every read and writes every change with the node's usage row.
struct EtcdCommit<'a> {
    store: &'a EtcdStore,
    network: &'a str,
    changes: &'a Changes,
    delta: NodeUsage,
    /// The node's row, its revision and the other nodes' rows, once read.
    usage: Option<(NodeUsage, i64, NodeUsage)>,
}

impl Prepared for EtcdCommit<'_> {
    fn delta(&self) -> NodeUsage {
        self.delta
    }

    fn usage_before(&mut self, quota: Quota) -> Result<Usage, CniError> {
        let delta = self.delta;
        let stand_in = |age, total: NodeUsage| others_may_stand_in(age, total.plus(delta), quota);
        let (mine, revision, others) = self.store.usage_now(self.network, Some(&stand_in))?;
        self.usage = Some((mine, revision, others));
        Ok(mine.plus(others).into())
    }

    fn write(self: Box<Self>, expired: &dyn Fn() -> bool) -> Result<Written, CniError> {
        let EtcdCommit {
            store,
            network,
            changes,
            delta,
            usage,
        } = *self;
        let (mine, own_revision, _) = match usage {
            Some(usage) => usage,
            None => store.usage_now(network, None)?,
        };
        let mut compares = store.read_compares();
        let state = store.state.borrow();
        let own_key = [store.usage_prefix(network), store.node.as_bytes().to_vec()].concat();
        compares.push(match own_revision {
            0 => Compare::version(own_key.clone(), CompareOp::Equal, 0),
            r => Compare::mod_revision(own_key.clone(), CompareOp::Equal, r),
        });
        let mut ops: Vec<TxnOp> = changes
            .iter()
            .map(|(key, change)| {
                let full = store.entry_key(network, key);
                match change {
                    Some(value) => TxnOp::put(full, value.clone(), None),
                    None => TxnOp::delete(full, None),
                }
            })
            .collect();
        let mine = NodeUsage {
            last: Some(crate::health::unix_now()),
            ..mine.plus(delta)
        };
        let own_row = serde_json::to_vec(&mine).expect("serialisable");
        ops.push(TxnOp::put(own_key.clone(), own_row.clone(), None));
        if let Some((net, record)) = &state.served_by
            && net == network
        {
            ops.push(TxnOp::put(
                store.served_by_key(network),
                serde_json::to_vec(record).expect("serialisable"),
                None,
            ));
        }
        let most = compares.len().max(ops.len());
        if most > store.max_txn_ops {
            return Err(CniError::new(
                code::LIMIT_EXCEEDED,
                format!(
                    "etcd: this call's commit needs {most} compares or writes in one transaction, over ipam.store.maxTxnOps ({}, etcd's --max-txn-ops); nothing was committed",
                    store.max_txn_ops
                ),
            )
            .with_details(format!(
                "{} keys read, {} prefixes listed, {} changes",
                state.reads.len(),
                state.listed.len(),
                changes.len()
            )));
        }
        drop(state);
        if expired() {
            return Err(too_late(changes.len()));
        }
        let txn = Txn::new().when(compares).and_then(ops);
        match store.commit_txn(txn, own_key, own_revision, &own_row)? {
            Applied::Now(revision) => store.keep_copies(network, changes, &mine, revision),
            // Applied by a send whose answer was lost: the revisions are unknown.
            Applied::Before => store.forget_copies(network),
            Applied::Not => {
                store.forget_copies(network);
                let mut state = store.state.borrow_mut();
                state.conflicted = true;
                state.figures.conflicts += 1;
                return Err(conflict("a compare of the commit failed"));
            }
        }
        // etcd answers once a quorum has the commit on disk.
        Ok(Written::durable())
    }
}

impl Drop for EtcdStore {
    fn drop(&mut self) {
        // Without blocking: dropping a runtime the blocking way panics if this store
        // is ever dropped inside another runtime (the engine's).
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// One of `ipam.store.tls`'s PEM files, read as a call reads it (CNI STATUS checks
/// them the same way, without connecting).
pub fn read_tls_file(path: &Path) -> Result<Vec<u8>, CniError> {
    std::fs::read(path).map_err(|e| {
        CniError::config(format!("ipam.store.tls: cannot read {}", path.display())).with_details(e)
    })
}

/// A network name as it appears in a key: `%` and `/` escaped, so no name reaches
/// into another network's keys.
fn escape(network: &str) -> String {
    network.replace('%', "%25").replace('/', "%2F")
}

fn unescape(escaped: &str) -> String {
    escaped.replace("%2F", "/").replace("%25", "%")
}

/// How an operator's message names an etcd store.
fn named(endpoints: &str, prefix: &str) -> String {
    format!("etcd store {endpoints} (prefix {prefix})")
}

/// `store restore`'s refusal for the etcd store `config` (see [`kept_by_etcd`]).
pub fn restored_by_etcd(config: &EtcdConfig) -> CniError {
    kept_by_etcd(&config.endpoints.join(","), &config.prefix, "restore")
}

/// Why `store backup` and `store restore` refuse an etcd store: etcd's own snapshot
/// copies every network and node's keys at one revision, and putting one network's
/// keys back under nodes still calling would undo their commits.
fn kept_by_etcd(endpoints: &str, prefix: &str, action: &str) -> CniError {
    CniError::config(format!(
        "{}: `wasm-ipam store {action}` copies the embedded store only; nothing was done. Back up an etcd store with etcd's own snapshot, `etcdctl --endpoints {endpoints} snapshot save FILE`, and restore it with `etcdutl snapshot restore FILE` (docs/cluster.md, \"The keys in etcd\")",
        named(endpoints, prefix)
    ))
}

fn conflict(why: &str) -> CniError {
    CniError::new(
        code::TRY_AGAIN_LATER,
        format!("etcd: another writer changed what this call read ({why}); nothing was committed"),
    )
}

fn out_of_budget(what: &str, endpoints: &str) -> CniError {
    CniError::new(
        code::TRY_AGAIN_LATER,
        format!(
            "etcd: the call's budget ran out waiting for {what} (endpoints {endpoints}); nothing was committed"
        ),
    )
}

/// How a request may be sent again after a try of it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resend {
    /// A read: after any unavailability, to the next member.
    Always,
    /// A write that could apply twice: only when it surely never left.
    IfNeverLeft,
    /// A commit: after any unavailability, because it applies at most once (see
    /// [`EtcdStore::commit_txn`]).
    AtMostOnce,
}

/// A request's answer, and whether an earlier try of it may have reached etcd.
struct Answered<T> {
    value: T,
    maybe_left: bool,
}

/// Why one try of a request failed.
enum Failure {
    Etcd(etcd_client::Error),
    /// The member gave no answer within the try's time.
    NoAnswer(Duration),
    Budget(CniError),
}

impl Failure {
    /// Whether another try may get an answer: etcd unreachable, silent, or without
    /// a leader for now (`Unavailable` covers "no leader", "leader changed" and
    /// "request timed out").
    fn transient(&self) -> bool {
        use etcd_client::Error as E;
        match self {
            Failure::Etcd(E::TransportError(_) | E::IoError(_)) | Failure::NoAnswer(_) => true,
            // tonic answers a try that ran past its own timeout (a frozen member)
            // as Cancelled, "Timeout expired".
            Failure::Etcd(E::GRpcStatus(status)) => matches!(
                status.code(),
                tonic::Code::Unavailable
                    | tonic::Code::DeadlineExceeded
                    | tonic::Code::Aborted
                    | tonic::Code::Cancelled
            ),
            Failure::Etcd(_) | Failure::Budget(_) => false,
        }
    }

    /// Whether the request surely never reached etcd: the connection could not be
    /// made.
    fn never_left(&self) -> bool {
        use etcd_client::Error as E;
        match self {
            Failure::Etcd(E::TransportError(_) | E::IoError(_)) => true,
            Failure::Etcd(E::GRpcStatus(status)) => {
                status.code() == tonic::Code::Unavailable && status.message().contains("connect")
            }
            _ => false,
        }
    }

    /// The call's error for a failure not tried again: code 11 when transient, else
    /// a store failure; `unknown` when a try of a write may have reached etcd.
    fn into_error(self, what: &str, endpoints: &str, unknown: bool) -> CniError {
        let code = match self.transient() {
            true => code::TRY_AGAIN_LATER,
            false => code::STORE_FAILURE,
        };
        match self {
            Failure::Budget(e) => e,
            failure => CniError::new(
                code,
                format!(
                    "etcd: {what} failed (endpoints {endpoints}); {}",
                    outcome(unknown)
                ),
            )
            .with_details(failure.to_string()),
        }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Etcd(e) => write!(f, "{e}"),
            Failure::NoAnswer(waited) => {
                write!(f, "no answer within {:.1} s", waited.as_secs_f64())
            }
            Failure::Budget(e) => write!(f, "{e}"),
        }
    }
}

/// What a failed call left in etcd.
fn outcome(unknown: bool) -> &'static str {
    match unknown {
        true => "the commit's outcome is unknown: etcd may have applied it",
        false => "nothing was committed",
    }
}

/// etcd refused to connect or answered with an error.
fn etcd_error(what: &str, endpoints: &str, e: etcd_client::Error) -> CniError {
    Failure::Etcd(e).into_error(what, endpoints, false)
}

impl Store for EtcdStore {
    fn get(&self, network: &str, key: &str) -> Result<Option<Vec<u8>>, CniError> {
        let full = self.entry_key(network, key);
        // What this attempt saw of the key already, from etcd or the cache.
        let seen = self
            .state
            .borrow()
            .read_keys
            .get(network)
            .and_then(|keys| keys.get(key).cloned());
        if let Some(seen) = seen {
            return Ok(seen.value());
        }
        let read_before = self.state.borrow().reads.contains_key(&full);
        if !read_before && let Some(seen) = self.cached(network, key) {
            let value = seen.value();
            let mut state = self.state.borrow_mut();
            let len = value.as_ref().map_or(0, |v| v.len() as u64);
            state.reads.insert(full, (seen.revision, len));
            state.from_cache = true;
            state
                .read_keys
                .entry(network.to_string())
                .or_default()
                .insert(key.to_string(), seen);
            return Ok(value);
        }
        let kvs = self.guarded_read(full, false)?;
        let kv = kvs.first();
        let seen = Seen::new(
            kv.map_or(0, KeyValue::mod_revision),
            kv.map(KeyValue::value),
        );
        self.state
            .borrow_mut()
            .read_keys
            .entry(network.to_string())
            .or_default()
            .insert(key.to_string(), seen);
        Ok(kv.map(|kv| kv.value().to_vec()))
    }

    fn visit_prefix(
        &self,
        network: &str,
        prefix: &str,
        visit: &mut dyn FnMut(&str, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), CniError> {
        let kvs = self.guarded_read(self.entry_key(network, prefix), true)?;
        self.visit_entries(network, &kvs, visit);
        Ok(())
    }

    /// At the call's snapshot, like every read, but not recorded: the commit does not
    /// compare what a peek saw.
    fn peek(&self, network: &str, key: &str) -> Result<Option<Vec<u8>>, CniError> {
        let kvs = self.read("peek", self.entry_key(network, key), false)?;
        Ok(kvs.first().map(|kv| kv.value().to_vec()))
    }

    /// [`Store::peek`] for every key under `prefix`.
    fn peek_prefix(
        &self,
        network: &str,
        prefix: &str,
        visit: &mut dyn FnMut(&str, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), CniError> {
        let kvs = self.read("peek", self.entry_key(network, prefix), true)?;
        self.visit_entries(network, &kvs, visit);
        Ok(())
    }

    /// The commit's transaction holds a compare per key read (a changed key unread is
    /// read at the commit), one per prefix listed and one on the node's usage row;
    /// and a write per change, the usage row and the record of the serving module.
    /// Counted as each distinct key once, each prefix once and two for the host's
    /// own: never less than either count needs.
    fn commit_room(&self, network: &str, staged: &Changes) -> Option<u64> {
        let state = self.state.borrow();
        let unread = staged
            .keys()
            .filter(|key| !state.reads.contains_key(&self.entry_key(network, key)))
            .count();
        let keys = state.reads.len() + unread + state.listed.len();
        Some(self.max_txn_ops.saturating_sub(keys + 2) as u64)
    }

    fn entries(&self, network: Option<&str>) -> Result<Vec<(String, String, Vec<u8>)>, CniError> {
        let all = format!("{}n/", self.prefix).into_bytes();
        let key = match network {
            Some(network) => self.network_key(network).into_bytes(),
            None => all.clone(),
        };
        let kvs = self.read("list entries", key, true)?;
        let mut out = Vec::new();
        for kv in kvs {
            let rest = String::from_utf8_lossy(&kv.key()[all.len()..]).into_owned();
            let Some((escaped, tail)) = rest.split_once('/') else {
                continue;
            };
            let Some(key) = tail.strip_prefix("e/") else {
                continue;
            };
            out.push((unescape(escaped), key.to_string(), kv.value().to_vec()));
        }
        Ok(out)
    }

    fn prepare<'a>(
        &'a mut self,
        network: &'a str,
        changes: &'a Changes,
    ) -> Result<Box<dyn Prepared + 'a>, CniError> {
        // Each changed key's size before, for the usage change; read (and so checked)
        // if the handler did not read it itself.
        for key in changes.keys() {
            let full = self.entry_key(network, key);
            if !self.state.borrow().reads.contains_key(&full) {
                self.get(network, key)?;
            }
        }
        let mut delta = NodeUsage::default();
        {
            let state = self.state.borrow();
            for (key, change) in changes {
                let (revision, old_len) = state.reads[&self.entry_key(network, key)];
                let old = (revision != 0).then_some(old_len);
                let new = change.as_ref().map(|v| v.len() as u64);
                delta = delta.plus(NodeUsage::of_change(key, old, new));
            }
        }
        Ok(Box::new(EtcdCommit {
            store: self,
            network,
            changes,
            delta,
            usage: None,
        }))
    }

    fn usage(&self, network: &str) -> Result<Usage, CniError> {
        let rows = self.usage_rows(network)?;
        Ok(sum(&rows, "").0.into())
    }

    fn record_served_by(&mut self, network: &str, served_by: &ServedBy) {
        self.state.borrow_mut().served_by = Some((network.to_string(), served_by.clone()));
    }

    fn served_by(&self) -> Result<Records, CniError> {
        let prefix = format!("{}s/", self.prefix).into_bytes();
        let kvs = self.read("list networks", prefix.clone(), true)?;
        Ok(kvs
            .iter()
            .map(|kv| {
                let network = unescape(&String::from_utf8_lossy(&kv.key()[prefix.len()..]));
                let record = std::str::from_utf8(kv.value())
                    .map_err(|e| e.to_string())
                    .and_then(ServedBy::from_json);
                (network, record)
            })
            .collect())
    }

    fn forget(&mut self, network: &str) -> Result<(u64, Written), CniError> {
        let held = self.entries(Some(network))?.len() as u64;
        let txn = Txn::new().and_then(vec![
            TxnOp::delete(
                self.network_key(network),
                Some(etcd_client::DeleteOptions::new().with_prefix()),
            ),
            TxnOp::delete(self.served_by_key(network), None),
        ]);
        self.request("forget", Resend::IfNeverLeft, |mut kv| {
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })?;
        self.forget_copies(network);
        Ok((held, Written::durable()))
    }

    fn check(&self) -> Result<Vec<String>, CniError> {
        usage_problems(self)
    }

    fn describe(&self) -> String {
        named(&self.endpoints, &self.prefix)
    }

    fn backup(&self, _to: &Path) -> Result<(), CniError> {
        Err(kept_by_etcd(&self.endpoints, &self.prefix, "backup"))
    }

    fn shared(&self) -> Option<&dyn Shared> {
        Some(self)
    }

    fn shared_mut(&mut self) -> Option<&mut dyn Shared> {
        Some(self)
    }
}

impl Shared for EtcdStore {
    fn last_commits(&self, network: &str) -> Result<Vec<(String, Option<u64>)>, CniError> {
        Ok(self
            .usage_rows(network)?
            .into_iter()
            .map(|(node, usage, _)| (node, usage.last))
            .collect())
    }

    fn conflicted(&self) -> bool {
        self.state.borrow().conflicted
    }

    fn begin(&mut self) {
        let mut state = self.state.borrow_mut();
        state.snapshot = None;
        state.reads.clear();
        state.listed.clear();
        state.read_keys.clear();
        state.from_cache = false;
        state.conflicted = false;
    }

    /// A call that read a copy from the cache and commits nothing: one transaction of
    /// compares alone checks every read, as a commit's would.
    fn confirm_reads(&mut self) -> Result<(), CniError> {
        if !self.state.borrow().from_cache {
            return Ok(());
        }
        let txn = Txn::new().when(self.read_compares());
        let answered = self.request("confirm", Resend::Always, |mut kv| {
            let txn = txn.clone();
            async move { kv.txn(txn).await }
        })?;
        if answered.value.succeeded() {
            return Ok(());
        }
        let networks: Vec<String> = self.state.borrow().read_keys.keys().cloned().collect();
        for network in networks {
            self.forget_copies(&network);
        }
        let mut state = self.state.borrow_mut();
        state.conflicted = true;
        state.figures.conflicts += 1;
        Err(conflict(
            "a key the node had kept from an earlier call has changed since",
        ))
    }

    fn remote(&self) -> Remote {
        Remote::Etcd
    }

    fn figures(&self) -> Figures {
        self.state.borrow().figures
    }

    fn seen(&self) -> StoreSeen {
        self.state.borrow().seen.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::{NodeUsage, escape, sum, unescape};

    #[test]
    fn a_negative_row_counts_with_its_sign_and_old_rows_read_without_a_last_commit() {
        let row = |entries, bytes| NodeUsage {
            entries,
            bytes,
            last: Some(7),
        };
        // Node b deleted two of a's entries: its row is negative, and the sum exact.
        let rows = [
            ("a".to_string(), row(5, 50), 3),
            ("b".to_string(), row(-2, -20), 4),
        ];
        let (total, mine, revision) = sum(&rows, "b");
        assert_eq!((total.entries, total.bytes), (3, 30));
        assert_eq!((mine.entries, mine.bytes, revision), (-2, -20, 4));
        let old: NodeUsage = serde_json::from_str(r#"{"entries":1,"bytes":9}"#).unwrap();
        assert_eq!(old.last, None);
        let text = serde_json::to_string(&row(1, 9)).unwrap();
        assert_eq!(text, r#"{"entries":1,"bytes":9,"last":7}"#);
    }

    #[test]
    fn network_names_escape_without_collisions_and_come_back() {
        // "a/e" with key "x" and "a" with key "e/x" must not share a key.
        assert_ne!(
            format!("{}/e/x", escape("a/e")),
            format!("{}/e/e/x", escape("a"))
        );
        for name in ["a/e", "100%", "%2F", "plain-net.1"] {
            assert!(!escape(name).contains('/'));
            assert_eq!(unescape(&escape(name)), name);
        }
    }
}
