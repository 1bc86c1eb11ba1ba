//! The test harness: builds the modules once, gives each test its own lock, data dir
//! and log, and runs the plugin binary as a runtime would.

use serde_json::{Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

pub use crate::flocks::{hold_flock, holds_flock_of, waits_on_a_flock};
pub use crate::waiting::{wait_for, wait_for_explained, wait_until};

/// The binary under test. On a cache miss it runs `wasm-ipam-compile` from its own
/// directory, as installed; `cargo test --workspace` builds the compiler there (for
/// its own integration test), in the same build and so with the same engine.
pub fn bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_wasm-ipam"));
        let compiler = bin.with_file_name("wasm-ipam-compile");
        assert!(
            compiler.is_file(),
            "{} is missing: run the suite with `cargo test --workspace` (scripts/test.sh does), which builds it",
            compiler.display()
        );
        bin
    })
}

/// Versions the plugin speaks; every round trip runs under each.
pub const VERSIONS: &[&str] = &["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"];

/// Tests that start many processes, or that measure time, take this so they neither
/// load the machine under each other nor are measured while it is loaded.
pub fn exclusive() -> MutexGuard<'static, ()> {
    static HEAVY: Mutex<()> = Mutex::new(());
    HEAVY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// How long a call may take to reach the lock, or a holder to take it, on a loaded
/// machine: far beyond what either takes, so only a broken call reaches it.
const LOCK_PATIENCE: Duration = Duration::from_secs(120);

/// Waits for each spawned call in `children` and gathers the addresses their
/// replies hand out, each once: as many as calls when none was handed out twice.
pub fn distinct_addresses(
    children: Vec<std::process::Child>,
) -> std::collections::BTreeSet<String> {
    children
        .into_iter()
        .map(|child| {
            reply(child.wait_with_output().unwrap())
                .address()
                .to_string()
        })
        .collect()
}

/// Kills `child` and reaps it, so no zombie outlives the test.
pub fn kill_and_reap(child: &mut std::process::Child) {
    child.kill().unwrap();
    child.wait().unwrap();
}

/// The median of `values`, and their lowest and highest: how the measuring tests
/// report a figure and its noise.
pub fn median_and_range(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(f64::total_cmp);
    (
        values[values.len() / 2],
        values[0],
        values[values.len() - 1],
    )
}

/// Waits until process `pid` is blocked waiting for a flock (a `->` line in
/// /proc/locks), so a test knows the call is queued on the lock.
pub fn wait_until_blocked_on_lock(pid: u32) {
    wait_until(
        &format!("pid {pid} waited on the lock"),
        LOCK_PATIENCE,
        || waits_on_a_flock(pid),
    );
}

/// Waits until process `pid` holds the flock on `file` (a line in /proc/locks with
/// its pid and the file's inode, not a `->` waiter's).
pub fn wait_until_holding(pid: u32, file: &Path) {
    let what = format!("pid {pid} held the flock on {}", file.display());
    wait_until(&what, LOCK_PATIENCE, || holds_flock_of(pid, file));
}

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// The example and test modules, built for wasm32-wasip2 once per test run
/// ([`crate::builds`], shared with tests/cri): the directory holding the `.wasm` files.
pub fn modules_dir() -> &'static Path {
    crate::builds::modules_dir(&workspace())
}

/// One compiled-module cache for the whole run, so most calls skip compiling (the
/// cache tests use caches of their own).
pub fn shared_cache_dir() -> PathBuf {
    workspace().join("target/modules/cache")
}

/// A loopback port nobody listens on now. The kernel may hand it to another test
/// before the caller's process binds it: a start that fails that way is retried on a
/// fresh one by the callers that start peers.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A file's sha256, in lowercase hex (as `ipam.moduleSha256` and OCI digests write it).
pub fn sha256_hex(path: &Path) -> String {
    use sha2::Digest;
    format!("{:x}", sha2::Sha256::digest(std::fs::read(path).unwrap()))
}

pub fn probe_module() -> PathBuf {
    modules_dir().join("probe.wasm")
}

pub fn host_local_module() -> PathBuf {
    modules_dir().join("host_local.wasm")
}

/// `examples/minimal`: the SDK's smallest real module (cni:ipam@0.2.5).
pub fn minimal_module() -> PathBuf {
    modules_dir().join("minimal.wasm")
}

/// `examples/cluster-pool`: one pool shared by nodes through a shared store.
pub fn cluster_pool_module() -> PathBuf {
    modules_dir().join("cluster_pool.wasm")
}

/// `tests/modules/legacy-v0-1`: a module built against cni:ipam@0.1.0.
pub fn legacy_module() -> PathBuf {
    modules_dir().join("legacy_v0_1.wasm")
}

/// `tests/modules/legacy-v0-2`: a module built against cni:ipam@0.2.0, without `nodes`.
pub fn legacy_v0_2_module() -> PathBuf {
    modules_dir().join("legacy_v0_2.wasm")
}

/// One isolated node: its own lock file, data dir and log file.
pub struct Node {
    pub dir: tempfile::TempDir,
}

/// What the plugin did: exit status, stdout parsed as JSON (if any), raw streams.
#[derive(Debug)]
pub struct Reply {
    pub success: bool,
    pub json: Option<Value>,
    pub stdout: String,
    pub stderr: String,
}

impl Reply {
    /// The CNI error code, asserting the call failed the way the spec says: non-zero
    /// exit and an error JSON on stdout.
    pub fn error_code(&self) -> u64 {
        assert!(!self.success, "expected failure, got {self:?}");
        let json = self.json.as_ref().expect("error JSON on stdout");
        json["msg"].as_str().expect("error has a msg");
        json["code"].as_u64().expect("error has a code")
    }

    pub fn msg(&self) -> &str {
        self.json
            .as_ref()
            .and_then(|j| j["msg"].as_str())
            .unwrap_or_default()
    }

    /// The first address of a successful ADD's result (a CIDR), asserting success.
    pub fn address(&self) -> &str {
        self.assert_ok().json.as_ref().unwrap()["ips"][0]["address"]
            .as_str()
            .expect("an ADD result with an address")
    }

    /// Panics, showing the reply, unless the call succeeded; answers the reply.
    pub fn assert_ok(&self) -> &Self {
        assert!(
            self.success,
            "expected success, got {:?} (stderr: {:?})",
            self.json, self.stderr
        );
        self
    }
}

impl Node {
    pub fn new() -> Self {
        Node {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    pub fn lock_file(&self) -> PathBuf {
        self.dir.path().join("run/ipam.lock")
    }

    /// The flags naming this node's data dir and lock file, as every operator command
    /// that works on the node's store takes them.
    pub fn operator_flags(&self) -> Vec<String> {
        vec![
            "--data-dir".into(),
            self.data_dir().to_string_lossy().into_owned(),
            "--lock-file".into(),
            self.lock_file().to_string_lossy().into_owned(),
        ]
    }

    /// Holds the node's host-wide lock as another tool would (plain flock on
    /// `lockFile`), so the calls queue until the file is dropped.
    pub fn hold_lock(&self) -> std::fs::File {
        hold_flock(&self.lock_file())
    }
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }
    pub fn log_file(&self) -> PathBuf {
        self.dir.path().join("log/wasm-ipam.log")
    }

    /// A netconf for `module` with this node's paths; `ipam` keys are merged in.
    pub fn netconf(&self, version: &str, module: &Path, ipam: Value) -> Value {
        let mut conf = json!({
            "cniVersion": version,
            "name": "testnet",
            "type": "wasm-ipam",
            "ipam": {
                "type": "wasm-ipam",
                "module": module,
                "lockFile": self.lock_file(),
                "dataDir": self.data_dir(),
                "logFile": self.log_file(),
                "cacheDir": shared_cache_dir(),
            }
        });
        for (k, v) in ipam.as_object().expect("ipam keys as an object") {
            conf["ipam"][k] = v.clone();
        }
        conf
    }

    /// A netconf for the probe module (tests/modules/probe) with this node's paths.
    pub fn probe_netconf(&self, ipam: Value) -> Value {
        self.netconf("1.0.0", &probe_module(), ipam)
    }

    /// Every entry of `network` in the store, or nothing if the store was never made.
    pub fn store_entries(&self, network: &str) -> Vec<(String, String)> {
        if !self
            .data_dir()
            .join(wasm_ipam::store::sqlite::DATABASE_FILE)
            .exists()
        {
            return Vec::new();
        }
        let store =
            wasm_ipam::store::select::open_embedded(&self.data_dir(), std::time::Duration::ZERO)
                .unwrap();
        store
            .list(network, "")
            .unwrap()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
            .collect()
    }

    /// The `ip/` entries of `network` (the address keys host-local and the probe
    /// write: address → holder), or nothing if the store was never made.
    pub fn address_entries(&self, network: &str) -> Vec<(String, String)> {
        self.store_entries(network)
            .into_iter()
            .filter(|(k, _)| k.starts_with("ip/"))
            .collect()
    }

    /// Whether nobody holds the node's IPAM lock.
    pub fn lock_is_free(&self) -> bool {
        std::fs::File::open(self.lock_file())
            .unwrap()
            .try_lock()
            .is_ok()
    }

    /// The log's JSON lines with `target` equal to `target`.
    pub fn log_lines(&self, target: &str) -> Vec<Value> {
        let text = std::fs::read_to_string(self.log_file()).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("log lines are JSON"))
            .filter(|v| v["target"] == target)
            .collect()
    }
}

/// Runs `call` with `conf`, whose `ipam.deadlineSeconds` is 1, and checks the call
/// was stopped at that deadline: code 103 whose message names the key that sets the
/// budget and its value (the fix is in the message), no earlier than the deadline and
/// well before 20 s, `node`'s store as `before` and the lock free.
pub fn assert_stopped_at_deadline(
    node: &Node,
    before: &[(String, String)],
    call: &Call,
    conf: &Value,
) -> Reply {
    let started = Instant::now();
    let reply = call.run(conf);
    let took = started.elapsed();
    assert_eq!(reply.error_code(), 103, "{reply:?}");
    assert!(
        reply.msg().contains("ipam.deadlineSeconds is 1;"),
        "{}",
        reply.msg()
    );
    assert!(
        took >= Duration::from_secs(1),
        "stopped no earlier than the deadline: {took:?}"
    );
    assert!(
        took < Duration::from_secs(20),
        "stopped near the deadline: {took:?}"
    );
    assert_eq!(node.store_entries("testnet"), before, "store changed");
    assert!(node.lock_is_free(), "lock still held");
    reply
}

/// A node whose store already holds one allocation (made through the probe module),
/// so "the store is unchanged" means something; with that allocation.
pub fn node_with_state() -> (Node, Vec<(String, String)>) {
    let node = Node::new();
    let conf = node.probe_netconf(json!({"probe": {"write": ["ip/10.0.0.9=existing\r\neth0"]}}));
    Call::new("ADD", "existing").run(&conf).assert_ok();
    let before = node.store_entries("testnet");
    assert_eq!(before.len(), 1);
    (node, before)
}

/// A CNI call to make: command, container, ifname, extra environment.
pub struct Call<'a> {
    pub command: &'a str,
    pub container_id: &'a str,
    pub ifname: &'a str,
    pub env: Vec<(&'a str, String)>,
}

impl<'a> Call<'a> {
    pub fn new(command: &'a str, container_id: &'a str) -> Self {
        Call {
            command,
            container_id,
            ifname: "eth0",
            env: Vec::new(),
        }
    }

    pub fn env(mut self, key: &'a str, value: impl Into<String>) -> Self {
        self.env.push((key, value.into()));
        self
    }

    /// Starts the plugin with the environment a runtime sets, writing `stdin`.
    pub fn spawn_raw(&self, stdin: &[u8]) -> std::process::Child {
        self.spawn_plugin(bin(), stdin)
    }

    /// Starts the CNI plugin `bin` (ours or a reference one) as a runtime would.
    pub fn spawn_plugin(&self, bin: &Path, stdin: &[u8]) -> std::process::Child {
        self.spawn_command(Command::new(bin), stdin)
    }

    /// Starts `cmd` with the environment a runtime sets, writing `stdin`.
    pub fn spawn_command(&self, cmd: Command, stdin: &[u8]) -> std::process::Child {
        let mut child = self.start_command(cmd);
        child.stdin.take().unwrap().write_all(stdin).unwrap();
        child
    }

    /// Starts `cmd` with the environment a runtime sets; its stdin is left open for
    /// the caller to write (and close) when it chooses.
    pub fn start_command(&self, mut cmd: Command) -> std::process::Child {
        cmd.env_clear()
            .env("CNI_COMMAND", self.command)
            .env("CNI_CONTAINERID", self.container_id)
            .env("CNI_NETNS", format!("/var/run/netns/{}", self.container_id))
            .env("CNI_IFNAME", self.ifname)
            .env("CNI_PATH", "/opt/cni/bin")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in &self.env {
            if v.is_empty() {
                cmd.env_remove(k);
            } else {
                cmd.env(k, v);
            }
        }
        cmd.spawn().expect("start wasm-ipam")
    }

    pub fn spawn(&self, conf: &Value) -> std::process::Child {
        self.spawn_raw(conf.to_string().as_bytes())
    }

    pub fn run_raw(&self, stdin: &[u8]) -> Reply {
        reply(self.spawn_raw(stdin).wait_with_output().unwrap())
    }

    pub fn run(&self, conf: &Value) -> Reply {
        self.run_raw(conf.to_string().as_bytes())
    }

    /// Runs another CNI plugin binary (e.g. the reference host-local) the same way.
    pub fn run_plugin(&self, bin: &Path, conf: &Value) -> Reply {
        let child = self.spawn_plugin(bin, conf.to_string().as_bytes());
        reply(child.wait_with_output().unwrap())
    }
}

/// Runs an operator command (`wasm-ipam list ...`), asserting it succeeds; its stdout.
pub fn operator_command<S: AsRef<std::ffi::OsStr>>(args: impl IntoIterator<Item = S>) -> String {
    let args: Vec<S> = args.into_iter().collect();
    let out = Command::new(bin()).args(&args).output().unwrap();
    let shown: Vec<_> = args.iter().map(|a| a.as_ref().to_string_lossy()).collect();
    assert!(
        out.status.success(),
        "wasm-ipam {shown:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs an operator command that may fail: (succeeded, stdout, stderr).
pub fn operator_output<S: AsRef<std::ffi::OsStr>>(
    args: impl IntoIterator<Item = S>,
) -> (bool, String, String) {
    let out = Command::new(bin()).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// What a finished call cost, measured from outside the process.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// Peak resident memory of the process (or of a child it waited for), in MiB.
    pub peak_rss_mib: f64,
    /// From spawn to exit.
    pub wall: Duration,
}

impl Call<'_> {
    /// Runs the call and measures it: peak RSS as GNU time reports it, and wall time.
    ///
    /// The plugin runs under /usr/bin/time rather than straight from this test: Linux
    /// carries an exec'ing process's old high-water mark into its `ru_maxrss`, and a
    /// child spawned from this (large) test process would report the test's own.
    pub fn run_measured(&self, conf: &Value) -> (Reply, Measured) {
        let report = tempfile::NamedTempFile::new().unwrap();
        let started = Instant::now();
        let mut command = Command::new("/usr/bin/time");
        command
            .arg("--format=%M")
            .arg("--output")
            .arg(report.path())
            .arg(bin());
        let child = self.spawn_command(command, conf.to_string().as_bytes());
        let reply = reply(child.wait_with_output().unwrap());
        let wall = started.elapsed();
        let kib: f64 = std::fs::read_to_string(report.path())
            .unwrap()
            .lines()
            .last()
            .and_then(|l| l.trim().parse().ok())
            .expect("GNU time reports the peak RSS in KiB");
        let measured = Measured {
            peak_rss_mib: kib / 1024.0,
            wall,
        };
        (reply, measured)
    }
}

impl Call<'_> {
    /// Runs the call under strace and returns it with the disk syncs it made, one
    /// line each (`fdatasync(7</path>) = 0`), threads included. A sync another
    /// thread's event interrupted in the trace is printed in two lines, `<unfinished
    /// ...>` then `<... fdatasync resumed>`: counted once, by its first.
    pub fn run_counting_syncs(&self, conf: &Value) -> (Reply, Vec<String>) {
        let (reply, lines) = self.run_tracing(conf, "fsync,fdatasync,sync_file_range,syncfs");
        let syncs = lines
            .into_iter()
            .filter(|l| l.contains("sync") && !l.contains(" resumed>"))
            .collect();
        (reply, syncs)
    }

    /// Runs the call under strace, killed by SIGKILL on reaching the `when`th of
    /// `syscalls` (`when` as strace's `inject` takes it, e.g. "1" or "3").
    pub fn run_killed_at(&self, conf: &Value, syscalls: &str, when: &str) -> Reply {
        let mut strace = Command::new("strace");
        strace.args([
            "-f",
            "-qq",
            "-o",
            "/dev/null",
            &format!("-einject={syscalls}:signal=SIGKILL:when={when}"),
        ]);
        strace.arg(bin());
        let out = self
            .spawn_command(strace, conf.to_string().as_bytes())
            .wait_with_output()
            .unwrap();
        reply(out)
    }

    /// Runs the call under `strace -f -y -e trace=SYSCALLS`; the trace's lines, in order.
    pub fn run_tracing(&self, conf: &Value, syscalls: &str) -> (Reply, Vec<String>) {
        let trace = tempfile::NamedTempFile::new().unwrap();
        let mut command = Command::new("strace");
        command
            .args(["-f", "-y", "-e", &format!("trace={syscalls}"), "-o"])
            .arg(trace.path())
            .arg(bin());
        let child = self.spawn_command(command, conf.to_string().as_bytes());
        let reply = reply(child.wait_with_output().unwrap());
        let lines = std::fs::read_to_string(trace.path())
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect();
        (reply, lines)
    }
}

pub fn reply(out: Output) -> Reply {
    reply_from(out.status.success(), &out.stdout, &out.stderr)
}

fn reply_from(success: bool, stdout: &[u8], stderr: &[u8]) -> Reply {
    let stdout = String::from_utf8_lossy(stdout).into_owned();
    let json = (!stdout.trim().is_empty()).then(|| {
        serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("stdout is one JSON document ({e}): {stdout:?}"))
    });
    Reply {
        success,
        json,
        stdout,
        stderr: String::from_utf8_lossy(stderr).into_owned(),
    }
}

/// A small deterministic generator for tests that choose at random (kill instants,
/// mutations): the same stream on every run, so a failure reproduces.
pub struct Lcg(pub u64);

impl Lcg {
    /// The next number below `below` (0 when `below` is 0).
    pub fn next(&mut self, below: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % below.max(1) as u64) as usize
    }
}
