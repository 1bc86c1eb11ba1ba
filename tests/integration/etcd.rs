//! The etcd store (`"store": {"type": "etcd"}`) against a real etcd: Debian's
//! etcd-server, started by each test on loopback on free ports in a temporary
//! directory, and killed when the test ends. Nodes are simulated as the cluster
//! issue asks: each has its own lock file, data dir and `nodeName`. This file is the
//! peer and the helpers the cluster tests share.
//!
//! The tests of features a module or an operator sees (a shared pool, blocks per node,
//! `list --node`, `forget` and the store commands, `release-node`: `cluster_calls`,
//! `cluster_serializable`, `cluster_operator_commands`) run on the Kubernetes store too
//! ([`crate::cluster_store`]); those of etcd's own workings (`etcd_workings`:
//! transactions and their limits, members lost, TLS, the rate limiter, the requests a
//! call makes) run on etcd only.

use crate::cluster_store::Cluster;
use crate::harness::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ETCD: &str = "/usr/bin/etcd";
const ETCDCTL: &str = "/usr/bin/etcdctl";

/// An etcd cluster of one or more members on loopback.
pub struct Etcd {
    dir: tempfile::TempDir,
    members: Vec<Member>,
    token: String,
    /// CA, server certificate and key, when clients must speak TLS with a client
    /// certificate signed by the CA.
    tls: Option<(PathBuf, PathBuf, PathBuf)>,
}

struct Member {
    name: String,
    client: u16,
    peer: u16,
    child: Option<Child>,
}

impl Etcd {
    /// Starts `members` members and waits until the cluster answers.
    pub fn start(members: usize) -> Etcd {
        Etcd::started(members, None)
    }

    /// Starts a one-member etcd serving TLS: server certificate `cert`/`key`, clients
    /// must present a certificate signed by `ca`.
    pub fn start_tls(ca: &Path, cert: &Path, key: &Path) -> Etcd {
        Etcd::started(1, Some((ca.into(), cert.into(), key.into())))
    }

    fn started(members: usize, tls: Option<(PathBuf, PathBuf, PathBuf)>) -> Etcd {
        assert!(
            Path::new(ETCD).exists() && Path::new(ETCDCTL).exists(),
            "the etcd tests need Debian's etcd-server and etcd-client (scripts/test.sh installs them)"
        );
        let dir = tempfile::tempdir().unwrap();
        let token = format!(
            "wasm-ipam-test-{}-{}",
            std::process::id(),
            dir.path().file_name().unwrap().to_string_lossy()
        );
        let mut etcd = Etcd {
            dir,
            members: (0..members)
                .map(|i| Member {
                    name: format!("m{i}"),
                    client: free_port(),
                    peer: free_port(),
                    child: None,
                })
                .collect(),
            token,
            tls,
        };
        for i in 0..members {
            etcd.spawn(i);
        }
        etcd.wait_healthy();
        etcd
    }

    fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    fn spawn(&mut self, i: usize) {
        let cluster: Vec<String> = self
            .members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer))
            .collect();
        let m = &self.members[i];
        let client_url = format!("{}://127.0.0.1:{}", self.scheme(), m.client);
        let peer_url = format!("http://127.0.0.1:{}", m.peer);
        let log = std::fs::File::create(self.dir.path().join(format!("{}.log", m.name))).unwrap();
        let mut cmd = Command::new(ETCD);
        cmd.arg("--name")
            .arg(&m.name)
            .arg("--data-dir")
            .arg(self.dir.path().join(&m.name))
            .args(["--listen-client-urls", &client_url])
            .args(["--advertise-client-urls", &client_url])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &cluster.join(",")])
            .args(["--initial-cluster-token", &self.token])
            .args(["--initial-cluster-state", "new"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        if let Some((ca, cert, key)) = &self.tls {
            cmd.arg("--cert-file")
                .arg(cert)
                .arg("--key-file")
                .arg(key)
                .arg("--trusted-ca-file")
                .arg(ca)
                .arg("--client-cert-auth");
        }
        self.members[i].child = Some(cmd.spawn().expect("etcd starts"));
    }

    /// Every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        self.members
            .iter()
            .map(|m| format!("{}://127.0.0.1:{}", self.scheme(), m.client))
            .collect()
    }

    /// The `ipam.store` for these endpoints under `prefix`.
    pub fn store(&self, prefix: &str) -> Value {
        json!({"type": "etcd", "endpoints": self.endpoints(), "prefix": prefix})
    }

    /// Kills member `i` at once, as a crash would.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops member `i` with SIGSTOP, as a frozen or partitioned member: the kernel
    /// still accepts connections to it, and nothing answers them.
    pub fn freeze(&mut self, i: usize) {
        self.signal(i, libc::SIGSTOP);
    }

    /// Lets a frozen member `i` run again (SIGCONT).
    pub fn thaw(&mut self, i: usize) {
        self.signal(i, libc::SIGCONT);
    }

    fn signal(&self, i: usize, signal: libc::c_int) {
        let child = self.members[i].child.as_ref().expect("member is running");
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        // SAFETY: kill(2) on our own child, which has not been waited for.
        assert_eq!(
            unsafe { libc::kill(pid, signal) },
            0,
            "signal {signal} to {pid}"
        );
    }

    /// The index of the member that is the cluster's leader now.
    pub fn leader(&self) -> usize {
        let status: Value =
            serde_json::from_str(&self.ctl(&["endpoint", "status", "-w", "json"])).unwrap();
        let statuses = status.as_array().unwrap();
        let leader = statuses[0]["Status"]["leader"].as_u64().unwrap();
        let endpoint = statuses
            .iter()
            .find(|s| s["Status"]["header"]["member_id"].as_u64() == Some(leader))
            .expect("the leader answers")["Endpoint"]
            .as_str()
            .unwrap()
            .to_string();
        self.endpoints()
            .iter()
            .position(|e| *e == endpoint)
            .unwrap()
    }

    /// Waits until every live member answers (after a thaw or an election).
    pub fn wait_until_healthy(&self) {
        self.wait_healthy();
    }

    /// Starts member `i` again on its data and ports, and waits until it answers.
    pub fn restart(&mut self, i: usize) {
        self.spawn(i);
        self.wait_healthy();
    }

    /// `etcdctl` aimed at the live members (with the server's certificate as its
    /// client certificate under TLS: the test CA signs it for both uses).
    fn etcdctl(&self) -> Command {
        let live: Vec<String> = self
            .endpoints()
            .into_iter()
            .zip(&self.members)
            .filter(|(_, m)| m.child.is_some())
            .map(|(url, _)| url)
            .collect();
        let mut cmd = Command::new(ETCDCTL);
        cmd.arg("--endpoints")
            .arg(live.join(","))
            .env("ETCDCTL_API", "3");
        if let Some((ca, cert, key)) = &self.tls {
            cmd.arg("--cacert")
                .arg(ca)
                .arg("--cert")
                .arg(cert)
                .arg("--key")
                .arg(key);
        }
        cmd
    }

    /// `etcdctl` against the live members; stdout.
    pub fn ctl(&self, args: &[&str]) -> String {
        let out = self.etcdctl().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// The keys under `prefix`, in order.
    pub fn keys(&self, prefix: &str) -> Vec<String> {
        self.ctl(&["get", "--prefix", "--keys-only", prefix])
            .lines()
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    }

    fn wait_healthy(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ok = self
                .etcdctl()
                .args(["endpoint", "health"])
                .stderr(Stdio::null())
                .stdout(Stdio::null())
                .status()
                .unwrap()
                .success();
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "etcd never became healthy: {}",
                std::fs::read_to_string(self.dir.path().join("m0.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}

/// A node of the simulated cluster, named `name`.
pub fn node_conf(node: &Node, name: &str, module: &Path, store: &Value, ipam: Value) -> Value {
    let mut conf = node.netconf("1.1.0", module, ipam);
    conf["ipam"]["nodeName"] = name.into();
    conf["ipam"]["store"] = store.clone();
    conf
}

/// An operator command on `node`'s lock and data dir, with `conf_file` as its netconf.
pub fn operator_on(node: &Node, conf_file: &Path, args: &[&str]) -> (bool, String, String) {
    let mut all: Vec<std::ffi::OsString> = args.iter().map(|a| a.into()).collect();
    all.extend(["--netconf".into(), conf_file.into()]);
    all.extend(node.operator_flags().into_iter().map(Into::into));
    operator_output(all)
}

/// `wasm-ipam list --json --netconf CONF_FILE EXTRA` on `node`'s lock and data dir.
pub fn list_json(node: &Node, conf_file: &Path, extra: &[&str]) -> (bool, String, String) {
    let mut args = vec!["list", "--json"];
    args.extend_from_slice(extra);
    operator_on(node, conf_file, &args)
}

pub fn write_conf(node: &Node, conf: &Value) -> PathBuf {
    let path = node.dir.path().join("net.conf");
    std::fs::write(&path, conf.to_string()).unwrap();
    path
}

/// The last invocation line of a node's log.
pub fn last_call(node: &Node) -> Value {
    node.log_lines("invocation").pop().expect("a logged call")
}

/// Each block's node, from cluster-pool's `blk/` records under `prefix`.
pub fn block_owners(cluster: &Cluster) -> std::collections::BTreeMap<String, String> {
    cluster
        .values("blk/")
        .into_iter()
        .map(|(key, record)| {
            (
                key["blk/".len()..].to_string(),
                record["node"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The store retries of the calls `cluster`'s nodes made: in all, and the most one
/// call made.
pub fn retries(cluster: &[Node]) -> (u64, u64) {
    let lines: Vec<Value> = cluster
        .iter()
        .flat_map(|n| n.log_lines("invocation"))
        .collect();
    let total = lines
        .iter()
        .map(|l| l["store_retries"].as_u64().unwrap())
        .sum();
    let most = lines
        .iter()
        .map(|l| l["store_retries"].as_u64().unwrap())
        .max()
        .unwrap_or(0);
    (total, most)
}
