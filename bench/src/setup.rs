//! Where the binaries under test are, and the throwaway directories each scenario runs
//! in: every lock, store, cache and log lives under a temporary directory that is
//! removed when the scenario ends, never under /var.

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The CNI network name every netconf uses.
pub const NETWORK: &str = "benchnet";
/// The subnet every netconf allocates from: a /16, room for the largest herd.
pub const SUBNET: &str = "10.22.0.0/16";

/// The wasm-ipam workspace this suite lives in (bench/'s parent).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("bench/ is inside the workspace")
        .to_path_buf()
}

/// The binaries and modules under test.
#[derive(Clone, Debug)]
pub struct Paths {
    pub wasm_ipam: PathBuf,
    pub host_local_module: PathBuf,
    pub probe_module: PathBuf,
    /// `examples/cluster-pool`, for the herds on the etcd store.
    pub cluster_pool_module: PathBuf,
    /// `examples/static-go` (built by `guest-go/build.sh`) and `examples/static-py`
    /// (by its `build.sh`; optional), for the modules in other languages.
    pub static_go_module: PathBuf,
    pub static_py_module: PathBuf,
    /// The reference peer, Debian's host-local.
    pub host_local: PathBuf,
    /// The model of Calico's old DEL (timer before the lock).
    pub prefix_del: PathBuf,
    /// The same model with the timer after the lock.
    pub postfix_del: PathBuf,
}

impl Paths {
    /// The default layout: the wasm-ipam workspace's release outputs, Debian's
    /// host-local, and the model binaries next to this driver.
    pub fn defaults() -> Self {
        let workspace = workspace();
        let modules = workspace.join("target/wasm32-wasip2/release");
        let here = std::env::current_exe()
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .unwrap_or_default();
        Paths {
            wasm_ipam: workspace.join("target/release/wasm-ipam"),
            host_local_module: modules.join("host_local.wasm"),
            probe_module: modules.join("probe.wasm"),
            cluster_pool_module: modules.join("cluster_pool.wasm"),
            static_go_module: workspace.join("target/modules/go/static_go.wasm"),
            static_py_module: workspace.join("target/modules/bench/static_py.wasm"),
            host_local: PathBuf::from("/usr/lib/cni/host-local"),
            prefix_del: here.join("prefix_del"),
            postfix_del: here.join("postfix_del"),
        }
    }

    /// Fails early, naming what is missing, rather than mid-run. The Go module, which
    /// needs the Go toolchain to build, only for the scenarios that run it.
    pub fn check(&self, scenario: &str) -> Result<(), String> {
        let mut all = vec![
            &self.wasm_ipam,
            &self.host_local_module,
            &self.probe_module,
            &self.cluster_pool_module,
            &self.host_local,
            &self.prefix_del,
            &self.postfix_del,
        ];
        if ["all", "languages"].contains(&scenario) {
            all.push(&self.static_go_module);
        }
        match all.iter().find(|p| !p.exists()) {
            Some(missing) => Err(format!(
                "{} does not exist (run ./bench/run.sh, which builds everything)",
                missing.display()
            )),
            None => Ok(()),
        }
    }
}

/// The directory a build script of the workspace (`scripts/kube-peers.sh`,
/// `scripts/whereabouts.sh`) prints: cached, it only checks its files; otherwise it
/// builds them, which takes minutes, its progress on stderr.
pub fn script_dir(script: &str) -> std::io::Result<PathBuf> {
    let root = workspace();
    let out = std::process::Command::new(root.join(script))
        .current_dir(&root)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::inherit())
        .output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(format!(
            "{script} failed ({}); its progress is on stderr above",
            out.status
        )));
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// A directory under the system temp dir, removed (with its contents) on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> std::io::Result<Self> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "wasm-ipam-bench-{}-{label}-{n}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(TempDir(dir))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One isolated node: its own lock, store, log and netconf, in a [`TempDir`].
pub struct Node {
    pub dir: TempDir,
}

impl Node {
    pub fn new(label: &str) -> std::io::Result<Self> {
        Ok(Node {
            dir: TempDir::new(label)?,
        })
    }

    pub fn log_file(&self) -> PathBuf {
        self.dir.join("ipam.log")
    }

    /// Where call `name`'s stdout goes.
    pub fn out(&self, name: &str) -> PathBuf {
        let dir = self.dir.join("out");
        let _ = std::fs::create_dir_all(&dir);
        dir.join(name)
    }

    /// Writes a wasm-ipam netconf running `module` with this node's lock, store and
    /// log and the compiled-module cache `cache_dir`; `extra` keys are merged into
    /// `ipam`. Returns the file (the calls' stdin).
    pub fn wasm_ipam_netconf(&self, module: &Path, cache_dir: &Path, extra: Value) -> PathBuf {
        let mut conf = json!({
            "cniVersion": "1.0.0",
            "name": NETWORK,
            "type": "bridge",
            "ipam": {
                "type": "wasm-ipam",
                "module": module,
                "subnet": SUBNET,
                "lockFile": self.dir.join("ipam.lock"),
                "dataDir": self.dir.join("data"),
                "cacheDir": cache_dir,
                "logFile": self.log_file(),
            }
        });
        if let Some(extra) = extra.as_object() {
            for (k, v) in extra {
                conf["ipam"][k] = v.clone();
            }
        }
        self.write_netconf("wasm-ipam.json", &conf)
    }

    /// Writes the same network's netconf for Debian's host-local (its own data dir;
    /// host-local speaks cniVersion up to 1.0.0).
    pub fn host_local_netconf(&self) -> PathBuf {
        let conf = json!({
            "cniVersion": "1.0.0",
            "name": NETWORK,
            "type": "bridge",
            "ipam": {
                "type": "host-local",
                "subnet": SUBNET,
                "dataDir": self.dir.join("host-local-data"),
            }
        });
        self.write_netconf("host-local.json", &conf)
    }

    fn write_netconf(&self, name: &str, conf: &Value) -> PathBuf {
        let path = self.dir.join(name);
        std::fs::write(&path, conf.to_string()).expect("write the netconf");
        path
    }
}
