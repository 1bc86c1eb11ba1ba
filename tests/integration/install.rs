//! `wasm-ipam install`, as a node image or a DaemonSet's init container runs it, into
//! an empty tree: it puts the binary, its compiler, the module, the main plugins and a
//! conflist in place, compiles the module into the cache, changes nothing when run
//! again, says (and fails) when the node still is not ready, and `--dry-run` touches
//! nothing. Then a runtime's view: the conflist it wrote, run through `bridge` from
//! the bin dir it filled, in a network namespace, gives a pod an address. Every
//! install line of the docs writes a conflist an ADD and a DEL pass through, and an
//! install whose conflist every ADD would refuse fails, naming the flag, and writes
//! nothing (`install_doc_lines`). On a Kubernetes store, `--kubeconfig` is checked
//! against a real apiserver and copied beside the conflist (`install_kubeconfig`).
//! This file holds the tree and the runtime's view both use.

use crate::harness::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const NETNS: &str = "wasm-ipam-install";
const BRIDGE: &str = "wi-install0";
const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

pub struct Tree {
    pub root: tempfile::TempDir,
}

impl Tree {
    pub fn new() -> Tree {
        Tree {
            root: tempfile::tempdir().unwrap(),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    /// The flags that put every file install writes under the tree, but `skip`.
    pub fn places(&self, skip: &[&str]) -> Vec<String> {
        let path = |name: &str| self.path(name).to_string_lossy().into_owned();
        [
            ("--bin-dir", path("opt/cni/bin")),
            ("--module-dir", path("opt/cni/wasm")),
            ("--conf-dir", path("etc/cni/net.d")),
            ("--cache-dir", path("var/cache/wasm-ipam")),
            ("--data-dir", path("var/lib/wasm-ipam")),
            ("--lock-file", path("run/wasm-ipam/ipam.lock")),
            ("--systemd-dir", path("etc/systemd/system")),
        ]
        .into_iter()
        .filter(|(flag, _)| !skip.contains(flag))
        .flat_map(|(flag, value)| [flag.to_string(), value])
        .collect()
    }

    fn install(&self, extra: &[&str]) -> (bool, String, String) {
        let module = host_local_module().to_string_lossy().into_owned();
        let mut args: Vec<String> = [
            "install",
            "--module",
            &module,
            "--subnet",
            "10.77.0.0/24",
            "--network",
            "installed",
            "--bridge",
            BRIDGE,
        ]
        .map(String::from)
        .to_vec();
        args.extend(self.places(&[]));
        args.extend(extra.iter().map(|s| s.to_string()));
        operator_output(args)
    }

    /// `wasm-ipam install` with `flags`, run in `dir`.
    pub fn install_in(&self, dir: &Path, flags: &[String]) -> (bool, String, String) {
        let out = Command::new(bin())
            .arg("install")
            .args(flags)
            .current_dir(dir)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Every file and directory under the tree.
    pub fn files(&self) -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                let path = entry.path();
                out.push(path.clone());
                if path.is_dir() {
                    walk(&path, out);
                }
            }
        }
        let mut files = Vec::new();
        walk(self.root.path(), &mut files);
        files
    }

    /// What the runtime hands the IPAM plugin for the conflist install wrote: its
    /// main plugin's object with the list's name and version.
    pub fn runtime_view(&self) -> Value {
        let conflist: Value = serde_json::from_str(
            &std::fs::read_to_string(self.path("etc/cni/net.d/00-wasm-ipam.conflist")).unwrap(),
        )
        .unwrap();
        let mut plugin = conflist["plugins"][0].clone();
        plugin["name"] = conflist["name"].clone();
        plugin["cniVersion"] = conflist["cniVersion"].clone();
        plugin
    }

    /// An ADD then a DEL through the written conflist, as its main plugin makes them:
    /// the installed wasm-ipam run with the plugin's stdin. The ADD's address.
    pub fn add_and_del(&self) -> String {
        let plugin = self.runtime_view();
        let wasm_ipam = self.path("opt/cni/bin/wasm-ipam");
        let added = Call::new("ADD", "pod1").run_plugin(&wasm_ipam, &plugin);
        let address = added.address().to_string();
        Call::new("DEL", "pod1")
            .run_plugin(&wasm_ipam, &plugin)
            .assert_ok();
        address
    }
}

/// The network namespace, the bridge and the forwarding setting, restored on drop.
struct Cleanup(String);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", NETNS]).status();
        let _ = Command::new("ip").args(["link", "del", BRIDGE]).status();
        let _ = std::fs::write(IP_FORWARD, &self.0);
    }
}

fn same_bytes(a: &Path, b: &Path) -> bool {
    std::fs::read(a).unwrap() == std::fs::read(b).unwrap()
}

#[test]
fn install_fills_an_empty_node_once_and_the_runtime_can_use_it() {
    let _serial = exclusive();
    let _cleanup = Cleanup(std::fs::read_to_string(IP_FORWARD).unwrap());
    let tree = Tree::new();

    // A dry run says what it would do and does nothing.
    let (ok, out, stderr) = tree.install(&["--dry-run"]);
    assert!(ok, "{stderr}");
    assert!(
        out.contains("would install") && out.contains("would link"),
        "{out}"
    );
    assert!(out.contains("would compile"), "{out}");
    assert!(!tree.path("opt").exists() && !tree.path("etc").exists());

    let (ok, out, stderr) = tree.install(&[]);
    assert!(ok, "{out}\n{stderr}");
    let bin = tree.path("opt/cni/bin");
    assert!(same_bytes(&bin.join("wasm-ipam"), crate::harness::bin()));
    assert!(bin.join("wasm-ipam-compile").is_file(), "{out}");
    assert!(same_bytes(
        &tree.path("opt/cni/wasm/host_local.wasm"),
        &host_local_module()
    ));
    for plugin in ["bridge", "portmap", "loopback"] {
        let link = std::fs::read_link(bin.join(plugin)).unwrap();
        assert_eq!(link, Path::new("/usr/lib/cni").join(plugin));
    }
    assert!(out.contains("compiled"), "{out}");
    let cached = std::fs::read_dir(tree.path("var/cache/wasm-ipam"))
        .unwrap()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().ends_with(".cwasm"));
    assert!(cached, "the module was compiled into the cache");
    let conflist_path = tree.path("etc/cni/net.d/00-wasm-ipam.conflist");
    let conflist: Value =
        serde_json::from_str(&std::fs::read_to_string(&conflist_path).unwrap()).unwrap();
    assert_eq!(conflist["name"], "installed");
    let ipam = &conflist["plugins"][0]["ipam"];
    assert_eq!(ipam["type"], "wasm-ipam");
    assert_eq!(ipam["ranges"][0][0]["subnet"], "10.77.0.0/24");
    let worst =
        ipam["lockTimeoutSeconds"].as_f64().unwrap() + ipam["deadlineSeconds"].as_f64().unwrap();
    assert!(
        worst < 120.0,
        "within kubelet's 2-minute request timeout: {worst}"
    );
    // Debian's plugins support up to 1.0.0: that is the list's version, and the
    // output says why 1.1.0 (STATUS and GC) is absent.
    assert_eq!(conflist["cniVersion"], "1.0.0");
    assert_eq!(
        conflist["cniVersions"],
        serde_json::json!(["0.3.0", "0.3.1", "0.4.0", "1.0.0"])
    );
    assert!(
        out.contains("bridge supports up to 1.0.0") && out.contains("STATUS and GC"),
        "{out}"
    );
    assert_eq!(
        conflist["plugins"][0]["capabilities"]["io.kubernetes.cri.pod-annotations"],
        true
    );

    // Again: nothing to do.
    let (ok, again, stderr) = tree.install(&[]);
    assert!(ok, "{stderr}");
    for line in again.lines() {
        assert!(
            line.starts_with("unchanged")
                || line.starts_with("present")
                || line.starts_with("checked an ADD and a DEL")
                || line.starts_with("versions: ")
                || line.starts_with("already compiled"),
            "{again}"
        );
    }

    // A conflist that sorts first would be used instead: said, and a failure.
    let first = tree.path("etc/cni/net.d/0-other.conflist");
    std::fs::write(&first, "{}").unwrap();
    let (ok, _, stderr) = tree.install(&[]);
    assert!(!ok && stderr.contains("0-other.conflist"), "{stderr}");
    std::fs::remove_file(first).unwrap();
    // A main plugin nowhere to be found: said, and a failure.
    std::fs::remove_file(bin.join("portmap")).unwrap();
    let (ok, _, stderr) = tree.install(&["--plugin-dir", "/nonexistent"]);
    assert!(!ok && stderr.contains("portmap"), "{stderr}");

    // The runtime's view: its first plugin, with the list's name and version, run by
    // bridge from the filled bin dir.
    let mut plugin = conflist["plugins"][0].clone();
    plugin["name"] = conflist["name"].clone();
    plugin["cniVersion"] = conflist["cniVersion"].clone();
    let status = Command::new("ip")
        .args(["netns", "add", NETNS])
        .status()
        .unwrap();
    assert!(status.success());
    let run = |command: &str| {
        let call = Call::new(command, "pod1")
            .env("CNI_NETNS", format!("/var/run/netns/{NETNS}"))
            .env("CNI_PATH", bin.to_string_lossy())
            // bridge's ipMasq runs iptables.
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
        call.run_plugin(&bin.join("bridge"), &plugin)
    };
    let added = run("ADD");
    assert_eq!(added.address(), "10.77.0.2/24", "{added:?}");
    run("DEL").assert_ok();
}

/// A chain whose plugins support 1.1.0 (here scripts answering VERSION as a newer
/// release of the plugins would): the conflist lists 1.1.0, and keeps 1.0.0 as the
/// version older libcni reads.
#[test]
fn install_lists_1_1_0_when_every_plugin_of_the_chain_has_it() {
    let tree = Tree::new();
    let plugins = tree.path("newer-plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    for plugin in ["bridge", "portmap", "loopback"] {
        let path = plugins.join(plugin);
        std::fs::write(
            &path,
            "#!/bin/sh\necho '{\"cniVersion\":\"1.1.0\",\"supportedVersions\":[\"0.4.0\",\"1.0.0\",\"1.1.0\"]}'\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let (ok, out, stderr) = tree.install(&["--plugin-dir", &plugins.to_string_lossy()]);
    assert!(ok, "{out}\n{stderr}");
    assert!(!out.contains("left out"), "{out}");
    let conflist: Value = serde_json::from_str(
        &std::fs::read_to_string(tree.path("etc/cni/net.d/00-wasm-ipam.conflist")).unwrap(),
    )
    .unwrap();
    assert_eq!(conflist["cniVersion"], "1.0.0");
    assert_eq!(
        conflist["cniVersions"],
        serde_json::json!(["0.4.0", "1.0.0", "1.1.0"])
    );
}

/// `--gc-timer` writes a systemd service and timer whose command is a `wasm-ipam gc`
/// this binary accepts, for the installed network, its store and lock; again, it
/// changes nothing.
#[test]
fn install_writes_a_gc_timer_whose_command_runs() {
    let tree = Tree::new();
    let socket = format!("unix://{}", tree.path("run/containerd.sock").display());
    let args = ["--gc-timer", "--runtime-endpoint", &socket];
    let (ok, stdout, stderr) = tree.install(&args);
    assert!(ok, "{stdout}{stderr}");
    assert!(
        stdout.contains("systemctl enable --now wasm-ipam-gc.timer"),
        "{stdout}"
    );
    let service =
        std::fs::read_to_string(tree.path("etc/systemd/system/wasm-ipam-gc.service")).unwrap();
    let timer =
        std::fs::read_to_string(tree.path("etc/systemd/system/wasm-ipam-gc.timer")).unwrap();
    assert!(timer.contains("OnUnitActiveSec=5min") && timer.contains("WantedBy=timers.target"));
    let exec = service
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap_or_else(|| panic!("no ExecStart in {service}"));
    let words: Vec<&str> = exec.split(' ').collect();
    assert_eq!(
        words[0],
        tree.path("opt/cni/bin/wasm-ipam").to_str().unwrap()
    );
    assert!(
        exec.contains("gc --network installed")
            && exec.contains(&format!("--runtime-endpoint {socket}"))
            && exec.contains(tree.path("var/lib/wasm-ipam").to_str().unwrap()),
        "{exec}"
    );
    // The installed binary takes the command: it reaches the store's directory, where
    // no call has made a store yet, and says so (creating none).
    let out = Command::new(words[0]).args(&words[1..]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains(&format!(
                "no store at {}",
                tree.path("var/lib/wasm-ipam/store.sqlite").display()
            )),
        "{stderr}"
    );
    let (ok, stdout, _) = tree.install(&args);
    assert!(ok, "{stdout}");
    for unit in ["wasm-ipam-gc.service", "wasm-ipam-gc.timer"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with("unchanged") && l.ends_with(unit)),
            "{stdout}"
        );
    }
}
