//! The locked run in process, in seconds and without root: a module built here from
//! core WAT (it writes one store entry, then answers, traps or loops), the embedded
//! store in a temporary directory behind a wrapper that can conflict or be slow to
//! commit, and the lock file beside it. What each test shows is the order the
//! module's header promises and what each failure leaves: the store as it was and the
//! lock free.

use super::*;
use crate::config::NetConf;
use crate::module::cache::ModuleCache;
use crate::module::question::{Call, Handle};
use crate::store::{Records, Usage};
use crate::test_support::waiting::wait_until;
use crate::test_support::wat_component::{HANDLER_EXPORTS, component_from_core_wat};
use sha2::{Digest, Sha256};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A conditional wait's limit: far beyond what any condition here takes on a loaded
/// machine, so only a broken pipeline reaches it.
const PATIENCE: Duration = Duration::from_secs(30);

/// What the module does after staging its entry `k` = [1].
#[derive(Clone, Copy)]
enum Then {
    /// Answers ok (an empty result).
    Answer,
    Trap,
    Loop,
}

/// The node a test runs on: its directories, its network and its module.
struct Node {
    dir: tempfile::TempDir,
    network: Network,
}

impl Node {
    fn new(then: Then, deadline_seconds: f64) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let module = build_module(dir.path(), then);
        let at = |name: &str| dir.path().join(name).to_string_lossy().into_owned();
        let conf = serde_json::json!({
            "cniVersion": "1.0.0",
            "name": "net",
            "ipam": {
                "type": "wasm-ipam",
                "module": module,
                "dataDir": at("data"),
                "cacheDir": at("cache"),
                "lockFile": at("lock"),
                "deadlineSeconds": deadline_seconds,
            },
        });
        let conf = NetConf::parse(conf.to_string().as_bytes()).unwrap();
        Node {
            network: Network::of(&conf),
            dir,
        }
    }

    fn lock_file(&self) -> &Path {
        &self.network.ipam.lock_file
    }

    /// Runs an ADD under the lock, over the embedded store behind `store`'s wrapper.
    fn add(&self, store: &Arc<Wrapper>, caller_gone: &dyn Fn() -> bool) -> Result<(), CniError> {
        let data_dir = self.network.ipam.data_dir.clone();
        let open = |wait: Duration| -> Result<Box<dyn store::Store>, CniError> {
            store.opened.lock().unwrap().push((Instant::now(), wait));
            Ok(Box::new(Wrapped {
                inner: store::select::open_embedded(&data_dir, wait)?,
                wrapper: Arc::clone(store),
                conflicts_left: store.conflicts,
                conflicted: false,
            }))
        };
        let request = request();
        let label = Label::operator("test");
        let ran = run_on(&self.network, &label, caller_gone, &open, |session| {
            store.asks.fetch_add(1, Ordering::SeqCst);
            let add = Handle {
                request: request.clone(),
                call: Call::Add,
            };
            session.ask(add, Writes::Commit)
        });
        ran.result.map(|answer| {
            assert!(answer.is_some(), "not an ADD's answer");
        })
    }

    /// The network's entries in the embedded store, read as the next call would.
    fn entries(&self) -> Vec<(String, Vec<u8>)> {
        let store = store::select::open_embedded(&self.network.ipam.data_dir, PATIENCE).unwrap();
        store.list("net", "").unwrap()
    }

    /// Whether the lock can be taken now, without waiting.
    fn lock_is_free(&self) -> bool {
        lock::acquire(self.lock_file(), Some(Duration::ZERO)).is_ok()
    }
}

/// A core module exporting `cni:ipam/handler@0.1.0` whose every handler puts `k` =
/// [1] and then does `then`, made a component, and compiled into the node's cache (the per-call code
/// has no compiler; the test build's wasmtime has one).
fn build_module(dir: &Path, then: Then) -> PathBuf {
    let then = match then {
        Then::Answer => "",
        Then::Trap => "(unreachable)",
        Then::Loop => "(loop $spin (br $spin))",
    };
    // Memory at 512 is all zero: `ok` with no ips, routes or DNS.
    let core = format!(
        r#"(module
          (import "cni:ipam/store@0.1.0" "put" (func $put (param i32 i32 i32 i32 i32)))
          (memory (export "memory") 1)
          (data (i32.const 0) "k")
          (data (i32.const 16) "\01")
          (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 1024))
          (func $handler (param i32) (result i32)
            (call $put (i32.const 0) (i32.const 1) (i32.const 16) (i32.const 1) (i32.const 64))
            {then}
            (i32.const 512))
          {HANDLER_EXPORTS})"#
    );
    let bytes = component_from_core_wat(&core);
    let engine = wasmtime::Engine::new(&crate::module::engine::config()).unwrap();
    let artifact = wasmtime::component::Component::new(&engine, &bytes)
        .unwrap()
        .serialize()
        .unwrap();
    ModuleCache::open(&dir.join("cache"))
        .unwrap()
        .store_artifact(&format!("{:x}", Sha256::digest(&bytes)), &artifact)
        .unwrap();
    let path = dir.join("module.wasm");
    std::fs::write(&path, bytes).unwrap();
    path
}

fn request() -> types::Request {
    types::Request {
        command: types::Command::Add,
        container_id: "c1".into(),
        netns: String::new(),
        ifname: "eth0".into(),
        args: Vec::new(),
        network_name: "net".into(),
        cni_version: "1.0.0".into(),
        config: "{}".into(),
        prev_result: None,
        lock_granted_at: UNTIL_GRANTED,
        node_name: "node".into(),
    }
}

/// What a test sees of the store and makes go wrong in it.
#[derive(Default)]
struct Wrapper {
    /// How many commits fail as a shared store's conflict does.
    conflicts: usize,
    /// Each commit waits until the deadline has passed before the store writes it.
    late: bool,
    /// When each open came, and the budget it was given.
    opened: Mutex<Vec<(Instant, Duration)>>,
    asks: AtomicUsize,
    commits: AtomicUsize,
    begins: AtomicUsize,
}

struct Wrapped {
    inner: Box<dyn store::Store>,
    wrapper: Arc<Wrapper>,
    conflicts_left: usize,
    conflicted: bool,
}

impl store::Store for Wrapped {
    fn get(&self, network: &str, key: &str) -> Result<Option<Vec<u8>>, CniError> {
        self.inner.get(network, key)
    }

    fn visit_prefix(
        &self,
        network: &str,
        prefix: &str,
        visit: &mut dyn FnMut(&str, &[u8]) -> ControlFlow<()>,
    ) -> Result<(), CniError> {
        self.inner.visit_prefix(network, prefix, visit)
    }

    fn entries(&self, network: Option<&str>) -> Result<Vec<(String, String, Vec<u8>)>, CniError> {
        self.inner.entries(network)
    }

    fn prepare<'a>(
        &'a mut self,
        network: &'a str,
        changes: &'a Changes,
    ) -> Result<Box<dyn store::commit::Prepared + 'a>, CniError> {
        self.inner.prepare(network, changes)
    }

    /// The inner store's commit, after the conflicts and the lateness asked for.
    fn commit_written(
        &mut self,
        network: &str,
        changes: &Changes,
        quota: Quota,
        expired: &dyn Fn() -> bool,
    ) -> Result<Written, CniError> {
        self.wrapper.commits.fetch_add(1, Ordering::SeqCst);
        self.conflicted = false;
        if self.conflicts_left > 0 {
            self.conflicts_left -= 1;
            self.conflicted = true;
            return Err(CniError::new(
                code::TRY_AGAIN_LATER,
                "another writer changed what this call read",
            ));
        }
        if self.wrapper.late {
            wait_until("the deadline passed", PATIENCE, expired);
        }
        self.inner.commit_written(network, changes, quota, expired)
    }

    fn usage(&self, network: &str) -> Result<Usage, CniError> {
        self.inner.usage(network)
    }

    fn record_served_by(&mut self, network: &str, served_by: &ServedBy) {
        self.inner.record_served_by(network, served_by)
    }

    fn served_by(&self) -> Result<Records, CniError> {
        self.inner.served_by()
    }

    fn forget(&mut self, network: &str) -> Result<(u64, Written), CniError> {
        self.inner.forget(network)
    }

    fn check(&self) -> Result<Vec<String>, CniError> {
        self.inner.check()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn backup(&self, to: &Path) -> Result<(), CniError> {
        self.inner.backup(to)
    }

    fn local(&self) -> Option<&dyn store::Local> {
        self.inner.local()
    }

    fn local_mut(&mut self) -> Option<&mut dyn store::Local> {
        self.inner.local_mut()
    }

    /// Shared as a cluster store is, for its conflicts.
    fn shared(&self) -> Option<&dyn store::Shared> {
        Some(self)
    }

    fn shared_mut(&mut self) -> Option<&mut dyn store::Shared> {
        Some(self)
    }
}

impl store::Shared for Wrapped {
    fn last_commits(&self, _network: &str) -> Result<Vec<(String, Option<u64>)>, CniError> {
        Ok(Vec::new())
    }

    fn conflicted(&self) -> bool {
        self.conflicted
    }

    fn begin(&mut self) {
        self.wrapper.begins.fetch_add(1, Ordering::SeqCst);
    }

    fn remote(&self) -> store::Remote {
        store::Remote::Etcd
    }

    fn figures(&self) -> store::Figures {
        store::Figures::default()
    }

    fn seen(&self) -> crate::health::StoreSeen {
        crate::health::StoreSeen::Unknown
    }
}

/// A run queued behind a holder for longer than its whole budget still gets that
/// budget: the store is opened only after the grant, with the budget (nearly) whole,
/// and the module answers and commits.
#[test]
fn the_budget_starts_at_the_grant_however_long_the_queue() {
    let budget = Duration::from_secs(2);
    let node = Node::new(Then::Answer, budget.as_secs_f64());
    let store = Arc::new(Wrapper::default());
    let holder = lock::acquire(node.lock_file(), None).unwrap();
    let queued = AtomicBool::new(false);
    // A waiting run asks whether its caller is still there as it waits.
    let gone = || {
        queued.store(true, Ordering::SeqCst);
        false
    };
    let released = std::thread::scope(|s| {
        let run = s.spawn(|| node.add(&store, &gone));
        wait_until("the run queued on the lock", PATIENCE, || {
            queued.load(Ordering::SeqCst)
        });
        assert!(store.opened.lock().unwrap().is_empty(), "opened unlocked");
        // Held past the whole budget of the queued run.
        std::thread::sleep(budget + Duration::from_millis(500));
        let released = Instant::now();
        drop(holder);
        run.join().unwrap().unwrap();
        released
    });
    let opened = store.opened.lock().unwrap();
    let [(at, budget_left)] = opened[..] else {
        panic!("opened {} times", opened.len());
    };
    assert!(at >= released, "the store was opened before the grant");
    assert!(
        budget_left > budget / 2,
        "{budget_left:?} of {budget:?} left"
    );
    assert_eq!(node.entries(), [("k".to_string(), vec![1])]);
    assert!(node.lock_is_free());
}

/// A module that traps after staging a write leaves the store as it was: nothing is
/// committed, the answer is 102, and the lock is free once the run returns.
#[test]
fn a_trap_commits_nothing_and_frees_the_lock() {
    let node = Node::new(Then::Trap, 10.0);
    let store = Arc::new(Wrapper::default());
    let err = node.add(&store, &|| false).unwrap_err();
    assert_eq!(err.code, code::MODULE_TRAPPED, "{err:?}");
    assert_eq!(store.commits.load(Ordering::SeqCst), 0);
    assert_eq!(node.entries(), []);
    assert!(node.lock_is_free());
}

/// A module still running at its deadline is stopped there (103) and commits nothing.
#[test]
fn a_module_past_its_deadline_is_stopped_and_commits_nothing() {
    let node = Node::new(Then::Loop, 0.5);
    let store = Arc::new(Wrapper::default());
    let err = node.add(&store, &|| false).unwrap_err();
    assert_eq!(err.code, code::DEADLINE_EXCEEDED, "{err:?}");
    assert_eq!(store.commits.load(Ordering::SeqCst), 0);
    assert_eq!(node.entries(), []);
    assert!(node.lock_is_free());
}

/// A module that answered in time but whose commit comes after the deadline (a slow
/// disk, a slow etcd) commits nothing: the store refuses the late commit (103).
#[test]
fn a_commit_reached_after_the_deadline_writes_nothing() {
    let node = Node::new(Then::Answer, 0.5);
    let store = Arc::new(Wrapper {
        late: true,
        ..Wrapper::default()
    });
    let err = node.add(&store, &|| false).unwrap_err();
    assert_eq!(err.code, code::DEADLINE_EXCEEDED, "{err:?}");
    assert_eq!(store.commits.load(Ordering::SeqCst), 1);
    assert_eq!(node.entries(), []);
    assert!(node.lock_is_free());
}

/// A commit refused because another writer changed what the run read (a shared
/// store's conflict) runs the module again on a fresh instance and a fresh snapshot,
/// under the same hold, until one commits.
#[test]
fn a_conflicted_commit_runs_the_module_again_on_a_fresh_snapshot() {
    let node = Node::new(Then::Answer, 10.0);
    let store = Arc::new(Wrapper {
        conflicts: 2,
        ..Wrapper::default()
    });
    node.add(&store, &|| false).unwrap();
    assert_eq!(store.asks.load(Ordering::SeqCst), 3);
    assert_eq!(store.commits.load(Ordering::SeqCst), 3);
    assert_eq!(store.begins.load(Ordering::SeqCst), 2);
    assert_eq!(store.opened.lock().unwrap().len(), 1, "one open per run");
    assert_eq!(node.entries(), [("k".to_string(), vec![1])]);
}

/// Conflicts that go on past the deadline end the run, nothing committed: with the
/// conflict's error when the deadline passes between attempts, or stopped at the
/// deadline (103) when it passes while the module runs.
#[test]
fn conflicts_past_the_deadline_end_the_run_with_nothing_committed() {
    let node = Node::new(Then::Answer, 0.5);
    let store = Arc::new(Wrapper {
        conflicts: usize::MAX,
        ..Wrapper::default()
    });
    let began = Instant::now();
    let err = node.add(&store, &|| false).unwrap_err();
    assert!(
        [code::TRY_AGAIN_LATER, code::DEADLINE_EXCEEDED].contains(&err.code),
        "{err:?}"
    );
    assert!(began.elapsed() >= Duration::from_millis(500));
    let commits = store.commits.load(Ordering::SeqCst);
    assert!(commits >= 2, "{commits} attempts");
    let asks = store.asks.load(Ordering::SeqCst);
    assert!(
        asks == commits || asks == commits + 1,
        "{asks} asks, {commits} commits"
    );
    assert_eq!(node.entries(), []);
    assert!(node.lock_is_free());
}

/// A caller that goes while its run waits in the queue ends the run there: the store
/// is never opened, the module never asked, and the answer says to try again (11).
/// The lock is the holder's until it lets go, then free.
#[test]
fn a_caller_gone_while_queued_runs_nothing() {
    let node = Node::new(Then::Answer, 10.0);
    let store = Arc::new(Wrapper::default());
    let holder = lock::acquire(node.lock_file(), None).unwrap();
    let polls = AtomicUsize::new(0);
    // Present at the first look while queued, gone at the second.
    let gone = || polls.fetch_add(1, Ordering::SeqCst) >= 1;
    let err = node.add(&store, &gone).unwrap_err();
    assert_eq!(err.code, code::TRY_AGAIN_LATER, "{err:?}");
    assert!(err.msg.contains("gone"), "{}", err.msg);
    drop(holder);
    assert!(store.opened.lock().unwrap().is_empty());
    assert_eq!(store.asks.load(Ordering::SeqCst), 0);
    assert_eq!(node.entries(), []);
    // The abandoned wait's thread may hold the grant for a moment before dropping it.
    assert!(lock::acquire(node.lock_file(), Some(PATIENCE)).is_ok());
}

/// A caller found gone at the grant: the lock is let go at once, nothing is run.
#[test]
fn a_caller_gone_at_the_grant_runs_nothing() {
    let node = Node::new(Then::Answer, 10.0);
    let store = Arc::new(Wrapper::default());
    let err = node.add(&store, &|| true).unwrap_err();
    assert_eq!(err.code, code::TRY_AGAIN_LATER, "{err:?}");
    assert!(store.opened.lock().unwrap().is_empty());
    assert_eq!(store.asks.load(Ordering::SeqCst), 0);
    assert!(node.lock_is_free());
    assert!(
        !node
            .dir
            .path()
            .join("data")
            .join(store::sqlite::DATABASE_FILE)
            .exists()
    );
}
