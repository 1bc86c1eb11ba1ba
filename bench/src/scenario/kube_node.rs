//! Pods under kubelet: a real node (scripts/kube-node.sh: kubelet and containerd 2,
//! the 1.10 bridge) creates N pods at once and then deletes them at once, with
//! wasm-ipam as its IPAM and with the reference host-local 1.10, one node after the
//! other in the same run. Per pod: from the apply to the pod seen Ready in a watch of
//! the API; in all: the apply to the last pod Ready, and the delete to the last
//! sandbox torn down (crictl lists none of them ready) with every pod gone from the API.

use crate::report::{Section, table};
use crate::setup::{Paths, workspace};
use crate::stats::{Samples, ratio};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::{self, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub struct Options {
    /// Pods created at once, then deleted at once.
    pub pods: usize,
}

/// What one IPAM's node measured.
struct Measured {
    /// Each pod's apply → seen Ready, in milliseconds.
    per_pod_ms: Samples,
    /// The apply → the last pod Ready.
    all_running: Duration,
    /// The delete → the last sandbox torn down and every pod gone.
    all_deleted: Duration,
}

#[derive(Clone, Copy)]
enum Ipam {
    WasmIpam,
    HostLocal,
}

impl Ipam {
    fn name(self) -> &'static str {
        match self {
            Ipam::WasmIpam => "wasm-ipam",
            Ipam::HostLocal => "host-local",
        }
    }
}

/// How long a loaded machine may take for one phase.
const LIMIT: Duration = Duration::from_secs(900);

pub fn run(paths: &Paths, opts: &Options) -> io::Result<Section> {
    let mut rows = Vec::new();
    let mut measured = Vec::new();
    for ipam in [Ipam::WasmIpam, Ipam::HostLocal] {
        let m = on_a_node(paths, ipam, opts.pods)?;
        rows.push(vec![
            ipam.name().to_string(),
            opts.pods.to_string(),
            format!("{:.1} s", m.all_running.as_secs_f64()),
            format!("{:.0} ms", m.per_pod_ms.median()),
            format!("{:.0} ms", m.per_pod_ms.percentile(0.99)),
            format!("{:.1} s", m.all_deleted.as_secs_f64()),
        ]);
        measured.push(m);
    }
    let (w, h) = (&measured[0], &measured[1]);
    rows.push(vec![
        "ratio wasm-ipam / host-local".into(),
        String::new(),
        ratio(w.all_running.as_secs_f64(), h.all_running.as_secs_f64()),
        ratio(w.per_pod_ms.median(), h.per_pod_ms.median()),
        ratio(w.per_pod_ms.percentile(0.99), h.per_pod_ms.percentile(0.99)),
        ratio(w.all_deleted.as_secs_f64(), h.all_deleted.as_secs_f64()),
    ]);
    let body = format!(
        "A one-node cluster of real processes (scripts/kube-node.sh: kube-apiserver, \
         kubelet and containerd 2 built from their Go modules, the 1.10 bridge as the \
         main plugin), {n} pods created with one `kubectl apply`, then deleted with one \
         `kubectl delete`; first with wasm-ipam (the host-local module, embedded store) \
         as the IPAM, then with the reference host-local 1.10, each on a node of its \
         own brought up the same way. Per pod: the apply to the pod seen Ready in a \
         watch of the API. Deleted: the delete to the last sandbox torn down (none of \
         them ready in `crictl pods`) and every pod gone from the API.\n\n{}",
        table(
            &[
                "IPAM",
                "pods",
                "all Running",
                "per pod median",
                "per pod p99",
                "all deleted",
            ],
            &rows
        ),
        n = opts.pods
    );
    Ok(Section {
        title: "Pods under kubelet and containerd 2".into(),
        body,
        targets: Vec::new(),
    })
}

fn on_a_node(paths: &Paths, ipam: Ipam, pods: usize) -> io::Result<Measured> {
    let node = KubeNode::up(
        paths,
        ipam.name(),
        &["--store", "local", "--ipam", ipam.name()],
        &paths.host_local_module,
    )?;
    let per_pod = node.run_pods(pods)?;
    let all_running = per_pod.iter().max().copied().unwrap_or_default();
    let per_pod_ms = Samples::new(per_pod.iter().map(|d| d.as_secs_f64() * 1000.0).collect());
    let all_deleted = node.delete_pods()?;
    Ok(Measured {
        per_pod_ms,
        all_running,
        all_deleted,
    })
}

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"group": "bench"}},
        "spec": {
            "nodeName": "kube-node",
            "automountServiceAccountToken": false,
            "dnsPolicy": "Default",
            "terminationGracePeriodSeconds": 1,
            "containers": [{
                "name": "pause",
                "image": "registry.k8s.io/pause:3.10.1",
                "imagePullPolicy": "Never",
            }],
        },
    })
}

fn until(limit: Duration, what: &str, mut done: impl FnMut() -> bool) -> io::Result<()> {
    let started = Instant::now();
    while !done() {
        if started.elapsed() > limit {
            return Err(io::Error::other(format!("waited {limit:?}: never {what}")));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

/// A node brought up by scripts/kube-node.sh, taken down on drop.
pub(crate) struct KubeNode {
    pub(crate) dir: PathBuf,
    kubeconfig: PathBuf,
    peers: PathBuf,
    runtime_endpoint: String,
    /// `DIR/env`, as `up` wrote it.
    env: String,
}

impl KubeNode {
    /// `scripts/kube-node.sh up` with `flags` (`--replace` added), wasm-ipam running
    /// `module`; `label` names its DIR.
    pub(crate) fn up(
        paths: &Paths,
        label: &str,
        flags: &[&str],
        module: &Path,
    ) -> io::Result<KubeNode> {
        let dir = std::env::temp_dir().join(format!(
            "wasm-ipam-bench-kube-{label}-{}",
            std::process::id()
        ));
        let out = Command::new(workspace().join("scripts/kube-node.sh"))
            .arg("up")
            .arg(&dir)
            .args(flags)
            .arg("--replace")
            .env("WASM_IPAM_BIN", &paths.wasm_ipam)
            .env("WASM_IPAM_MODULE", module)
            .output()?;
        if !out.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(io::Error::other(format!(
                "scripts/kube-node.sh up: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        let env = std::fs::read_to_string(dir.join("env"))?;
        let get = |key: &str| {
            env.lines()
                .find_map(|l| l.strip_prefix(&format!("{key}=")))
                .map(String::from)
                .unwrap_or_default()
        };
        Ok(KubeNode {
            kubeconfig: get("KUBECONFIG").into(),
            peers: get("PEERS").into(),
            runtime_endpoint: get("RUNTIME_ENDPOINT"),
            dir,
            env,
        })
    }

    /// A path or name `up` wrote in DIR/env.
    pub(crate) fn env(&self, key: &str) -> String {
        self.env
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(String::from)
            .unwrap_or_default()
    }

    /// `pods` pods of group `bench` created with one `kubectl apply`: how long each
    /// took from the apply to being seen Ready in a watch of the API.
    pub(crate) fn run_pods(&self, pods: usize) -> io::Result<Vec<Duration>> {
        let seen_ready: Arc<Mutex<BTreeMap<String, Instant>>> = Arc::default();
        let mut watch = self.watch_ready(Arc::clone(&seen_ready))?;
        let started = Instant::now();
        let items: Vec<Value> = (0..pods).map(|i| pod(&format!("bench-{i}"))).collect();
        let ran = self
            .kubectl_stdin(
                &["apply", "-f", "-"],
                &json!({"apiVersion": "v1", "kind": "List", "items": items}),
            )
            .and_then(|()| {
                until(LIMIT, "every pod Ready", || {
                    seen_ready.lock().unwrap().len() == pods
                })
            });
        let _ = watch.kill();
        let _ = watch.wait();
        ran?;
        let ready = seen_ready.lock().unwrap();
        Ok(ready.values().map(|t| t.duration_since(started)).collect())
    }

    /// Every pod of group `bench` deleted with one `kubectl delete`: how long until
    /// the last sandbox was torn down and every pod gone from the API.
    pub(crate) fn delete_pods(&self) -> io::Result<Duration> {
        let deleting = Instant::now();
        self.kubectl(&["delete", "pods", "-l", "group=bench", "--wait=false"])?;
        until(LIMIT, "every sandbox torn down and every pod gone", || {
            self.ready_sandboxes().is_ok_and(|n| n == 0) && self.pods_left().is_ok_and(|n| n == 0)
        })?;
        Ok(deleting.elapsed())
    }

    fn command(&self, tool: &str) -> Command {
        let mut command = Command::new(Path::new(&self.peers).join(tool));
        if tool == "kubectl" {
            command.arg("--kubeconfig").arg(&self.kubeconfig);
        } else {
            command.args(["--runtime-endpoint", &self.runtime_endpoint]);
        }
        command
    }

    pub(crate) fn kubectl(&self, args: &[&str]) -> io::Result<String> {
        let out = self.command("kubectl").args(args).output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn kubectl_stdin(&self, args: &[&str], input: &Value) -> io::Result<()> {
        use std::io::Write;
        let mut child = self
            .command("kubectl")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()?;
        child
            .stdin
            .take()
            .expect("piped")
            .write_all(input.to_string().as_bytes())?;
        match child.wait()?.success() {
            true => Ok(()),
            false => Err(io::Error::other(format!("kubectl {}", args.join(" ")))),
        }
    }

    /// `kubectl get pods --watch`, recording when each pod is first seen Ready.
    fn watch_ready(&self, seen: Arc<Mutex<BTreeMap<String, Instant>>>) -> io::Result<Child> {
        let mut child = self
            .command("kubectl")
            .args(["get", "pods", "-l", "group=bench", "--watch", "-o", "json"])
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().expect("piped");
        std::thread::spawn(move || {
            for pod in
                serde_json::Deserializer::from_reader(BufReader::new(stdout)).into_iter::<Value>()
            {
                let Ok(pod) = pod else { break };
                let ready = pod["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True");
                if ready && let Some(name) = pod["metadata"]["name"].as_str() {
                    seen.lock()
                        .unwrap()
                        .entry(name.to_string())
                        .or_insert_with(Instant::now);
                }
            }
        });
        Ok(child)
    }

    fn ready_sandboxes(&self) -> io::Result<usize> {
        let out = self
            .command("crictl")
            .args(["pods", "--label", "group=bench", "--state", "ready", "-q"])
            .output()?;
        if !out.status.success() {
            return Err(io::Error::other(
                String::from_utf8_lossy(&out.stderr).into_owned(),
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).lines().count())
    }

    fn pods_left(&self) -> io::Result<usize> {
        Ok(self
            .kubectl(&["get", "pods", "-l", "group=bench", "-o", "name"])?
            .lines()
            .count())
    }
}

impl Drop for KubeNode {
    fn drop(&mut self) {
        let _ = Command::new(workspace().join("scripts/kube-node.sh"))
            .arg("down")
            .arg(&self.dir)
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
