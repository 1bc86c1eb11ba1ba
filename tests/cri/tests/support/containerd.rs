//! A private containerd with the CRI plugin, as a node runs it but touching nothing of
//! the node's: its root, state, socket, CNI bin and conf dirs, and wasm-ipam's lock,
//! store, cache and log all live in one temporary directory.
//!
//! containerd 1.6 puts its shims' sockets under /run/containerd/s whatever its config
//! says, and the CNI library caches results in /var/lib/cni. So containerd runs in
//! mount and PID namespaces of its own (`unshare`), with fresh tmpfs over /run and
//! /var/lib there: the node's /run/containerd, /var/lib/containerd and /var/lib/cni
//! are never seen, and killing containerd, the namespace's first process, kills every
//! shim and sandbox it started. The network is the host's, as on a node: the bridge
//! link and the host sides of the veths are made there, and removed on drop.

use super::cri::Cri;
use super::image::{PAUSE_IMAGE, write_pause_image};
use super::ipam::IpamPaths;
use super::wait_for;
use k8s_cri::v1::{DnsConfig, LinuxPodSandboxConfig, PodSandboxConfig, PodSandboxMetadata};
use serde_json::json;
use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The plugins the bin dir holds, as /opt/cni/bin does on a node (containerd 1.6 takes
/// one `bin_dir`, so wasm-ipam goes beside them).
const CNI_PLUGINS: &[&str] = &["bridge", "loopback", "portmap", "host-local"];

/// How long containerd may take to answer, on a loaded machine.
const START_LIMIT: Duration = Duration::from_secs(90);

const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

/// Why this machine cannot run containerd here.
pub struct CannotRun(pub String);

pub struct Containerd {
    pub cri: Cri,
    pub ipam: IpamPaths,
    /// The CNI bin dir (`plugins."io.containerd.grpc.v1.cri".cni.bin_dir`).
    pub cni_bin_dir: PathBuf,
    /// Where the CRI plugin mounts each sandbox's network namespace.
    netns_dir: PathBuf,
    bridge: String,
    /// The pods' cgroup parent (kubelet always gives one), removed on drop.
    cgroup_parent: String,
    socket: PathBuf,
    config: PathBuf,
    /// containerd's `root` and `state`: what a reset node loses.
    root: PathBuf,
    state: PathBuf,
    log: PathBuf,
    /// `unshare`, whose child (the namespaces' first process) is containerd.
    unshare: Child,
    ip_forward: String,
    dir: tempfile::TempDir,
}

impl Containerd {
    /// Starts containerd with a conflist running `bridge` (link `bridge`) with
    /// wasm-ipam as its IPAM over `subnet`, imports the pause image and waits until the
    /// CRI plugin reports the network ready.
    pub fn start(bridge: &str, subnet: &str) -> Result<Self, CannotRun> {
        require_root_and_tools()?;
        let (bin, module) = (super::wasm_ipam_bin(), super::host_local_module());
        let dir = private_dir();
        let path = |p: &str| dir.path().join(p);
        let ipam = IpamPaths {
            lock_file: path("ipam/run/ipam.lock"),
            data_dir: path("ipam/data"),
            cache_dir: path("ipam/cache"),
            log_file: path("ipam/log/wasm-ipam.log"),
        };
        let cni_bin_dir = path("cni/bin");
        let cni_conf_dir = path("cni/net.d");
        link_plugins(&cni_bin_dir, bin);
        precompile(bin, module, &ipam.cache_dir);
        write_conflist(&cni_conf_dir, bridge, subnet, module, &ipam);

        let state = path("state");
        let socket = path("containerd.sock");
        let config = path("config.toml");
        std::fs::write(
            &config,
            config_toml(dir.path(), &state, &socket, &cni_bin_dir, &cni_conf_dir),
        )
        .unwrap();
        let log = path("containerd.log");
        let unshare = start_in_namespaces(&config, &log);
        let tag = dir
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace(['.', '_'], "-");
        let mut containerd = Containerd {
            cri: Cri::new(&socket),
            ipam,
            cni_bin_dir,
            netns_dir: state.join("io.containerd.grpc.v1.cri/netns"),
            bridge: bridge.to_string(),
            cgroup_parent: format!("/{tag}"),
            socket,
            config,
            root: path("root"),
            state,
            log,
            unshare,
            ip_forward: std::fs::read_to_string(IP_FORWARD).unwrap_or_default(),
            dir,
        };
        containerd.until_ready()?;
        Ok(containerd)
    }

    /// The runtime's CRI socket, as `crictl --runtime-endpoint` takes it.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket.display())
    }

    /// What a node reset does to the runtime: containerd, its shims and its pods are
    /// killed at once (no StopPodSandbox, so no CNI DEL), and its root and state are
    /// wiped, sandboxes' network namespaces with them; then containerd starts again,
    /// knowing no pod. wasm-ipam's store is untouched, so it still holds the killed
    /// pods' addresses: leaked, as on a real node.
    pub fn crash_and_wipe(&mut self) {
        self.kill();
        for dir in [&self.root, &self.state] {
            std::fs::remove_dir_all(dir)
                .unwrap_or_else(|e| panic!("wiping {}: {e}", dir.display()));
        }
        let _ = std::fs::remove_file(&self.socket);
        self.unshare = start_in_namespaces(&self.config, &self.log);
        if let Err(CannotRun(why)) = self.until_ready() {
            panic!("containerd did not start again: {why}");
        }
    }

    /// Waits until the CRI plugin serves, imports the pause image, and waits until the
    /// plugin reports the network ready.
    fn until_ready(&mut self) -> Result<(), CannotRun> {
        self.wait_until_serving()?;
        self.import_pause_image();
        wait_for(
            "the CRI plugin reports NetworkReady (it loaded the conflist)",
            START_LIMIT,
            || {
                let status = self.cri.status().ok()?.status?;
                status
                    .conditions
                    .iter()
                    .any(|c| c.r#type == "NetworkReady" && c.status)
                    .then_some(())
            },
        );
        Ok(())
    }

    /// Kills containerd and with it every process of its PID namespace (shims, runc,
    /// sandboxes; the mounts of its mount namespace go with them).
    fn kill(&mut self) {
        match init_of(self.unshare.id()) {
            // SAFETY: kill has no memory-safety preconditions.
            Some(init) => unsafe {
                libc::kill(init as libc::pid_t, libc::SIGKILL);
            },
            None => {
                let _ = self.unshare.kill();
            }
        }
        // unshare returns once its child has gone, and the kernel lets a PID
        // namespace's first process go only after every other process in it.
        let _ = self.unshare.wait();
    }

    /// Waits until the CRI plugin answers Version; an error if containerd exits first.
    fn wait_until_serving(&mut self) -> Result<(), CannotRun> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.unshare.try_wait().unwrap() {
                return Err(CannotRun(format!(
                    "containerd (in its own namespaces, by unshare) exited with {status}; its log ends:\n{}",
                    self.log_tail()
                )));
            }
            if self.socket.exists() && self.cri.version(Duration::from_secs(5)).is_ok() {
                return Ok(());
            }
            assert!(
                started.elapsed() < START_LIMIT,
                "containerd runs but its CRI plugin did not answer Version within {START_LIMIT:?}; its log ends:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Imports the pause image into the CRI plugin's namespace (`k8s.io`), unpacked
    /// for its snapshotter, and waits until the image service lists it.
    fn import_pause_image(&self) {
        let tarball = self.dir.path().join("pause.tar");
        write_pause_image(&tarball);
        let out = Command::new("ctr")
            .arg("-a")
            .arg(&self.socket)
            .args([
                "-n",
                "k8s.io",
                "images",
                "import",
                "--snapshotter",
                "native",
            ])
            .arg(&tarball)
            .output()
            .expect("run ctr");
        assert!(
            out.status.success(),
            "ctr images import: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        wait_for(
            &format!("the CRI image service lists {PAUSE_IMAGE}"),
            START_LIMIT,
            || self.cri.has_image(PAUSE_IMAGE).ok()?.then_some(()),
        );
    }

    /// A pod's sandbox config as kubelet gives it: metadata, a cgroup parent, a DNS
    /// config (so the host's resolv.conf is not read) and a log directory.
    pub fn pod_config(&self, name: &str) -> PodSandboxConfig {
        let log_directory = self.dir.path().join("pods").join(name);
        PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: name.to_string(),
                uid: format!("uid-{name}"),
                namespace: "wasm-ipam-test".to_string(),
                attempt: 0,
            }),
            hostname: name.to_string(),
            log_directory: log_directory.to_string_lossy().into_owned(),
            dns_config: Some(DnsConfig::default()),
            linux: Some(LinuxPodSandboxConfig {
                cgroup_parent: self.cgroup_parent.clone(),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// The network namespaces the CRI plugin has mounted and not yet removed.
    pub fn netns_left(&self) -> Vec<String> {
        match std::fs::read_dir(&self.netns_dir) {
            Ok(entries) => entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect(),
            Err(_) => Vec::new(),
        }
    }

    /// The links still attached to the bridge (the host ends of the pods' veths).
    pub fn bridge_ports(&self) -> Vec<String> {
        let out = Command::new("ip")
            .args(["-o", "link", "show", "master", &self.bridge])
            .output()
            .expect("run ip (iproute2)");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| line.split(": ").nth(1))
            .map(|name| name.split('@').next().unwrap_or(name).to_string())
            .collect()
    }

    /// The last lines of containerd's log, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }
}

impl Drop for Containerd {
    /// Kills containerd and with it every process of its PID namespace (shims, runc,
    /// sandboxes; the mounts of its mount namespace go with them), then removes what
    /// the host kept: the bridge link, the pods' cgroups, IPv4 forwarding as it was.
    /// The temporary directory goes last, with the fields.
    fn drop(&mut self) {
        self.kill();
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .stderr(Stdio::null())
            .status();
        if let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") {
            let parent = self.cgroup_parent.trim_start_matches('/');
            remove_cgroup(&Path::new("/sys/fs/cgroup").join(parent));
            for hierarchy in hierarchies.flatten() {
                remove_cgroup(&hierarchy.path().join(parent));
            }
        }
        if !self.ip_forward.is_empty() {
            let _ = std::fs::write(IP_FORWARD, &self.ip_forward);
        }
    }
}

/// containerd 1.6's config (version 2): every path in `dir`, the CRI plugin's CNI dirs
/// (one bin dir, one conf dir, of which the lexically first config file is used), the
/// local pause image, and network namespaces mounted under the state dir.
fn config_toml(dir: &Path, state: &Path, socket: &Path, bin_dir: &Path, conf_dir: &Path) -> String {
    let root = dir.join("root");
    let opt = dir.join("opt");
    let (root, state, socket, opt) = (
        root.display(),
        state.display(),
        socket.display(),
        opt.display(),
    );
    let (bin_dir, conf_dir) = (bin_dir.display(), conf_dir.display());
    format!(
        r#"version = 2
root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{socket}"

[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  # The CRI plugin gives sandboxes oom_score_adj -998, which needs CAP_SYS_RESOURCE;
  # where root lacks it (some VMs and containers) this keeps it at containerd's own.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true

[plugins."io.containerd.grpc.v1.cri".containerd]
  snapshotter = "native"
  default_runtime_name = "runc"

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "{bin_dir}"
  conf_dir = "{conf_dir}"
  max_conf_num = 1
"#
    )
}

/// Starts containerd as the first process of new mount and PID namespaces, with a
/// fresh /proc, and tmpfs over /run and /var/lib. `unshare` is killed with the thread
/// that started it (the test's), and containerd with `unshare`: a test killed outright
/// leaves no containerd behind either.
fn start_in_namespaces(config: &Path, log: &Path) -> Child {
    let log = File::create(log).unwrap();
    let mut command = Command::new("unshare");
    command
        .args([
            "--mount",
            "--pid",
            "--fork",
            "--mount-proc",
            "--propagation",
            "private",
            "--kill-child",
            "--",
            "sh",
            "-c",
            r#"mount -t tmpfs -o mode=0755 wasm-ipam-cri /run &&
mkdir -m 0711 /run/containerd &&
mount -t tmpfs -o mode=0755 wasm-ipam-cri /var/lib &&
mkdir /var/lib/cni &&
exec containerd --log-level info --config "$0""#,
        ])
        .arg(config)
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    command.spawn().expect("run unshare (util-linux)")
}

/// The child of `unshare` (pid `unshare`): the namespaces' first process.
fn init_of(unshare: u32) -> Option<u32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_string_lossy().parse().ok()?;
            (super::ipam::parent_of(pid)? == unshare).then_some(pid)
        })
}

/// Removes a cgroup and its children (rmdir, deepest first); nothing if absent.
fn remove_cgroup(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup(&entry.path());
            }
        }
        let _ = std::fs::remove_dir(dir);
    }
}

fn which(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .chain(["/usr/sbin".into(), "/sbin".into()])
        .map(|dir| dir.join(tool))
        .find(|candidate| candidate.is_file())
}

/// Refuses to run as anyone but root, and requires the runtime's tools.
fn require_root_and_tools() -> Result<(), CannotRun> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        return Err(CannotRun(
            "not root (containerd and its network namespaces need it)".into(),
        ));
    }
    for tool in [
        "containerd",
        "containerd-shim-runc-v2",
        "ctr",
        "runc",
        "unshare",
    ] {
        assert!(
            which(tool).is_some(),
            "{tool} is not on the PATH: install containerd, runc and util-linux (scripts/test.sh does)"
        );
    }
    Ok(())
}

/// The runtime's own directory, outside what its mount namespace hides.
fn private_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("wasm-ipam-cri")
        .tempdir()
        .unwrap();
    // These are hidden in containerd's mount namespace.
    assert!(
        !dir.path().starts_with("/run") && !dir.path().starts_with("/var/lib"),
        "the temporary dir {} must not be under /run or /var/lib (set TMPDIR)",
        dir.path().display()
    );
    dir
}

/// The CNI bin dir: Debian's reference plugins and wasm-ipam (`bin`), linked.
fn link_plugins(cni_bin_dir: &Path, bin: &Path) {
    std::fs::create_dir_all(cni_bin_dir).unwrap();
    for plugin in CNI_PLUGINS {
        let source = Path::new("/usr/lib/cni").join(plugin);
        assert!(
            source.exists(),
            "{} is missing: install containernetworking-plugins",
            source.display()
        );
        std::os::unix::fs::symlink(&source, cni_bin_dir.join(plugin)).unwrap();
    }
    std::os::unix::fs::symlink(bin, cni_bin_dir.join("wasm-ipam")).unwrap();
}

/// Compiles the module ahead, as docs/install.md says, so no pod pays for it.
fn precompile(bin: &Path, module: &Path, cache_dir: &Path) {
    let precompile = Command::new(bin)
        .arg("precompile")
        .arg(module)
        .arg("--cache-dir")
        .arg(cache_dir)
        .output()
        .unwrap();
    assert!(
        precompile.status.success(),
        "wasm-ipam precompile: {}",
        String::from_utf8_lossy(&precompile.stderr)
    );
}

/// The shape `wasm-ipam install` writes: the versions every libcni reads
/// (containerd 1.6's reads cniVersion only) and bridge declaring the
/// pod-annotations capability, so containerd passes the pod's annotations on.
fn write_conflist(
    cni_conf_dir: &Path,
    bridge: &str,
    subnet: &str,
    module: &Path,
    ipam: &IpamPaths,
) {
    std::fs::create_dir_all(cni_conf_dir).unwrap();
    let conflist = json!({
        "cniVersion": "1.0.0",
        "cniVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0"],
        "name": "wasm-ipam-cri",
        "plugins": [{
            "type": "bridge",
            "bridge": bridge,
            "isGateway": true,
            "capabilities": {"io.kubernetes.cri.pod-annotations": true},
            "ipam": {
                "type": "wasm-ipam",
                "module": module,
                "lockFile": ipam.lock_file,
                "dataDir": ipam.data_dir,
                "cacheDir": ipam.cache_dir,
                "logFile": ipam.log_file,
                "ranges": [[{"subnet": subnet}]],
                "routes": [{"dst": "0.0.0.0/0"}],
            },
        }],
    });
    std::fs::write(
        cni_conf_dir.join("10-wasm-ipam.conflist"),
        serde_json::to_string_pretty(&conflist).unwrap(),
    )
    .unwrap();
}
