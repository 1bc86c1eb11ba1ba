//! The node the scenarios run on: `scripts/kube-node.sh up` once per store, the tools
//! a user drives it with (kubectl, crictl, `wasm-ipam list`), and pods as manifests.

#[path = "../../../shared/builds.rs"]
mod builds;
#[path = "../../../shared/plugin_binary.rs"]
mod plugin_binary;
pub mod pods;
#[allow(dead_code, reason = "shared by several suites, each using part of it")]
#[path = "../../../shared/waiting.rs"]
mod waiting;

pub use plugin_binary::{wasm_ipam_bin, workspace};
pub use waiting::{wait_for, wait_for_explained};

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

pub fn module(file: &str) -> PathBuf {
    builds::modules_dir(&workspace()).join(file)
}

/// Which store the node's network keeps its addresses in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    /// The embedded store and the host-local module, under bridge.
    Local,
    /// etcd (the cluster's own) and the cluster-pool module with /28 blocks, under ptp.
    Etcd,
    /// The Kubernetes API (ipamshards, with the kubelet's credentials) and the
    /// cluster-pool module with /28 blocks, under ptp, at qps 5 and burst 10.
    Kubernetes,
}

impl Store {
    pub fn name(self) -> &'static str {
        match self {
            Store::Local => "local",
            Store::Etcd => "etcd",
            Store::Kubernetes => "kubernetes",
        }
    }
}

pub struct Node {
    pub dir: tempfile::TempDir,
    /// `DIR/env`, which `up` writes: the node's paths and names.
    env: BTreeMap<String, String>,
}

impl Node {
    /// Brings a node up, replacing one a killed run left running; panics with the
    /// script's own words when it cannot.
    pub fn up(store: Store) -> Node {
        match Node::start(store, &["--replace"]) {
            (Ok(node), _) => node,
            (Err(()), said) => panic!("scripts/kube-node.sh up --store {}: {said}", store.name()),
        }
    }

    /// `scripts/kube-node.sh up` with `flags`: the node when it came up, and what the
    /// script said on stderr either way.
    pub fn start(store: Store, flags: &[&str]) -> (Result<Node, ()>, String) {
        let dir = tempfile::Builder::new()
            .prefix("wasm-ipam-kube-node")
            .tempdir()
            .expect("a temporary dir");
        let module = match store {
            Store::Local => module("host_local.wasm"),
            Store::Etcd | Store::Kubernetes => module("cluster_pool.wasm"),
        };
        let started = Instant::now();
        let mut script = Command::new(workspace().join("scripts/kube-node.sh"));
        script
            .arg("up")
            .arg(dir.path())
            .args(["--store", store.name()])
            .args(flags)
            .env("WASM_IPAM_BIN", wasm_ipam_bin())
            .env("WASM_IPAM_MODULE", &module);
        match store {
            // A /26 holds 61 addresses: the herd of 60 leaves one free, so a pool
            // too small for the pods needs only a few more.
            Store::Local => script.args(["--subnet", "10.244.0.0/26"]),
            // Blocks small enough that the node needs several of them.
            Store::Etcd => script.args(["--block-size", "28"]),
            // And the node's requests paced at qps 5 and burst 10, the rate of the
            // DEL herd its issue names (a burst far under the default 100).
            Store::Kubernetes => script.args(["--block-size", "28", "--qps", "5", "--burst", "10"]),
        };
        let up = script.output().expect("run scripts/kube-node.sh");
        let said = String::from_utf8_lossy(&up.stderr).into_owned();
        let node = Node {
            env: read_env(&dir.path().join("env")),
            dir,
        };
        if !up.status.success() {
            // `up` took down what it started; the dir goes with `node`.
            return (Err(()), said);
        }
        eprintln!(
            "kube: node up on the {} store in {:.1} s",
            store.name(),
            started.elapsed().as_secs_f64()
        );
        (Ok(node), said)
    }

    /// Every process of the node killed with SIGKILL, as when its machine stops or
    /// its run is killed with it: the daemons `up` started, everything in the node's
    /// network namespace (shims) and in its cgroups (pods). Returns when all are gone;
    /// what they left (namespace, mounts, cgroups) stays.
    pub fn kill_all(&self) {
        let mut pids: Vec<String> = Vec::new();
        for entry in std::fs::read_dir(self.dir.path().join("pids")).expect("DIR/pids") {
            pids.push(std::fs::read_to_string(entry.unwrap().path()).unwrap());
        }
        let in_netns = Command::new("ip")
            .args(["netns", "pids", self.env("NODE_NETNS")])
            .output()
            .expect("run ip netns pids");
        pids.push(String::from_utf8_lossy(&in_netns.stdout).into_owned());
        let cgroup = Path::new("/sys/fs/cgroup/pids/wasm-ipam-node");
        let procs = Command::new("find")
            .arg(cgroup)
            .args(["-name", "cgroup.procs", "-exec", "cat", "{}", "+"])
            .output()
            .expect("run find");
        pids.push(String::from_utf8_lossy(&procs.stdout).into_owned());
        let pids: Vec<i32> = pids
            .iter()
            .flat_map(|text| text.split_whitespace())
            .filter_map(|pid| pid.parse().ok())
            .collect();
        // Some may be gone already: kill's status says nothing here, the wait does.
        let _ = Command::new("kill")
            .arg("-KILL")
            .args(pids.iter().map(|pid| pid.to_string()))
            .status();
        let alive = |pid: &i32| {
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                !stat
                    .rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
        };
        wait_for(
            "every process of the node gone",
            Duration::from_secs(30),
            || (!pids.iter().any(alive)).then_some(()),
        );
    }

    /// What `up` wrote in DIR/env.
    pub fn env(&self, key: &str) -> &str {
        self.env
            .get(key)
            .unwrap_or_else(|| panic!("DIR/env has no {key}"))
    }

    pub fn peer(&self, command: &str) -> PathBuf {
        Path::new(self.env("PEERS")).join(command)
    }

    pub fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(self.peer("kubectl"))
            .arg("--kubeconfig")
            .arg(self.env("KUBECONFIG"))
            .args(args)
            .output()
            .expect("run kubectl")
    }

    /// kubectl that must succeed; its stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("kubectl prints UTF-8")
    }

    pub fn kubectl_json(&self, args: &[&str]) -> Value {
        let mut args = args.to_vec();
        args.extend(["-o", "json"]);
        serde_json::from_str(&self.kubectl_ok(&args)).expect("kubectl -o json prints JSON")
    }

    /// `kubectl apply -f -` of `manifest`.
    pub fn apply(&self, manifest: &Value) {
        let mut child = Command::new(self.peer("kubectl"))
            .arg("--kubeconfig")
            .arg(self.env("KUBECONFIG"))
            .args(["apply", "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run kubectl apply");
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(manifest.to_string().as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "kubectl apply: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    pub fn crictl_json(&self, args: &[&str]) -> Value {
        let out = Command::new(self.peer("crictl"))
            .args(["--runtime-endpoint", self.env("RUNTIME_ENDPOINT")])
            // crictl's default of 2 s per request is shorter than containerd's
            // ListPodSandbox takes while it tears a herd of 200 sandboxes down on a
            // loaded 2-core machine (seen: DeadlineExceeded); the waits that poll
            // through here bound the whole.
            .args(["--timeout", "30s"])
            .args(args)
            .args(["-o", "json"])
            .output()
            .expect("run crictl");
        assert!(
            out.status.success(),
            "crictl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("crictl -o json prints JSON")
    }

    /// The conflist `wasm-ipam install` wrote for the node.
    pub fn conflist(&self) -> PathBuf {
        Path::new(self.env("CNI_CONF_DIR")).join("00-wasm-ipam.conflist")
    }

    /// `wasm-ipam ARGS --netconf <the node's conflist>`, as an operator on the node runs it.
    pub fn wasm_ipam(&self, args: &[&str]) -> Output {
        Command::new(wasm_ipam_bin())
            .args(args)
            .arg("--netconf")
            .arg(self.conflist())
            .output()
            .expect("run wasm-ipam")
    }

    /// `wasm-ipam list --json`: the network's allocations.
    pub fn allocations(&self) -> Vec<Value> {
        let out = self.wasm_ipam(&["list", "--json"]);
        assert!(
            out.status.success(),
            "wasm-ipam list: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        match serde_json::from_slice(&out.stdout).expect("list --json prints JSON") {
            Value::Array(rows) => rows,
            other => panic!("list --json printed {other}"),
        }
    }

    /// The Node's Ready condition: its status and message.
    pub fn ready(&self) -> (String, String) {
        let node = self.kubectl_json(&["get", "node", self.env("NODE_NAME")]);
        let ready = node["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready")
            .cloned()
            .unwrap_or_default();
        (
            ready["status"].as_str().unwrap_or("").to_string(),
            ready["message"].as_str().unwrap_or("").to_string(),
        )
    }

    /// `ping -c 1` to `ip` from the node's network namespace.
    pub fn ping(&self, ip: &str) -> bool {
        Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", self.env("NODE_NETNS")))
            .args(["ping", "-c", "1", "-W", "2", ip])
            .output()
            .is_ok_and(|o| o.status.success())
    }

    pub fn log(&self, key: &str) -> String {
        std::fs::read_to_string(self.env(key)).unwrap_or_default()
    }

    /// containerd killed (SIGKILL, as a crash) and started again, as the node started
    /// it; `wipe`: as a node reset, with its shims, pods and state gone too. Returns
    /// when it answers.
    pub fn restart_containerd(&self, wipe: bool) {
        let restart = Command::new(workspace().join("scripts/kube-node.sh"))
            .arg("restart-runtime")
            .arg(self.dir.path())
            .args(wipe.then_some("--wipe"))
            .output()
            .expect("run scripts/kube-node.sh restart-runtime");
        assert!(
            restart.status.success(),
            "scripts/kube-node.sh restart-runtime: {}",
            String::from_utf8_lossy(&restart.stderr)
        );
    }

    /// Takes the node down (also on drop), failing if anything is left behind.
    pub fn down(&mut self) {
        if self.env.is_empty() {
            return;
        }
        self.env.clear();
        let down = Command::new(workspace().join("scripts/kube-node.sh"))
            .arg("down")
            .arg(self.dir.path())
            .output()
            .expect("run scripts/kube-node.sh down");
        assert!(
            down.status.success(),
            "scripts/kube-node.sh down: {}",
            String::from_utf8_lossy(&down.stderr)
        );
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if !self.env.is_empty() {
            self.env.clear();
            let _ = Command::new(workspace().join("scripts/kube-node.sh"))
                .arg("down")
                .arg(self.dir.path())
                .status();
        }
    }
}

fn read_env(path: &Path) -> BTreeMap<String, String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

impl Node {
    /// The last `count` lines of the log `key` (DIR/env) holding any of `words`.
    pub fn log_lines_with(&self, key: &str, words: &[&str], count: usize) -> String {
        let log = self.log(key);
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| words.iter().any(|w| l.contains(w)))
            .collect();
        lines[lines.len().saturating_sub(count)..].join("\n")
    }
}
