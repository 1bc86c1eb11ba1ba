//! `wasm-ipam install`, as a node image or a DaemonSet's init container runs it, into
//! an empty tree: it puts the binary, its compiler, the module, the main plugins and a
//! conflist in place, compiles the module into the cache, changes nothing when run
//! again, says (and fails) when the node still is not ready, and `--dry-run` touches
//! nothing. Then a runtime's view: the conflist it wrote, run through `bridge` from
//! the bin dir it filled, in a network namespace, gives a pod an address. Every
//! install line of the docs writes a conflist an ADD and a DEL pass through, and an
//! install whose conflist every ADD would refuse fails, naming the flag, and writes
//! nothing. On a Kubernetes store, `--kubeconfig` is checked against a real apiserver
//! and copied beside the conflist.

use crate::etcd::Etcd;
use crate::harness::*;
use crate::kube_api::KubeApi;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

const NETNS: &str = "wasm-ipam-install";
const BRIDGE: &str = "wi-install0";
const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

struct Tree {
    root: tempfile::TempDir,
}

impl Tree {
    fn new() -> Tree {
        Tree {
            root: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.root.path().join(name)
    }

    /// The flags that put every file install writes under the tree, but `skip`.
    fn places(&self, skip: &[&str]) -> Vec<String> {
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
    fn install_in(&self, dir: &Path, flags: &[String]) -> (bool, String, String) {
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
    fn files(&self) -> Vec<PathBuf> {
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
    fn runtime_view(&self) -> Value {
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
    fn add_and_del(&self) -> String {
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

/// The install lines the docs show, each as it is written there and the flags that
/// run it here (the doc's own, with every file kept under the tree by
/// [`Tree::places`]). `MODULE_DIR` stands for the directory holding the test modules,
/// where a line naming `host_local.wasm` bare is run; `CLUSTER_JSON` for a file of
/// cluster-pool keys on a real etcd, as kubernetes-node.md's `cluster.json`.
const DOC_LINES: &[(&str, &str, &[&str])] = &[
    (
        "docs/install.md",
        "./wasm-ipam install --module host_local.wasm --subnet 10.22.0.0/24 [--dry-run]",
        &["--module", "host_local.wasm", "--subnet", "10.22.0.0/24"],
    ),
    (
        "docs/operations.md",
        "wasm-ipam install --module M --subnet CIDR [--dry-run]",
        &[
            "--module",
            "MODULE_DIR/host_local.wasm",
            "--subnet",
            "10.22.0.0/24",
        ],
    ),
    (
        "README.md",
        "wasm-ipam install --module host_local.wasm --subnet 10.22.0.0/24 --gc-timer",
        &[
            "--module",
            "host_local.wasm",
            "--subnet",
            "10.22.0.0/24",
            "--gc-timer",
        ],
    ),
    (
        "docs/kubernetes-node.md",
        "wasm-ipam install --module /path/host_local.wasm --subnet 10.244.0.0/24 --bin-dir /opt/cni/bin --conf-dir /etc/cni/net.d",
        &[
            "--module",
            "MODULE_DIR/host_local.wasm",
            "--subnet",
            "10.244.0.0/24",
        ],
    ),
    (
        "docs/install.md",
        "exec /wasm-ipam install --module /host-local.wasm --subnet \"$(kubectl get node \"$NODE_NAME\" -o jsonpath='{.spec.podCIDR}')\" --network k8s-pod-network",
        &[
            "--module",
            "MODULE_DIR/host_local.wasm",
            "--subnet",
            "10.244.1.0/24",
            "--network",
            "k8s-pod-network",
        ],
    ),
    (
        "docs/operations.md",
        "wasm-ipam install --module M --main-plugin ptp --ipam-config F",
        &[
            "--module",
            "MODULE_DIR/cluster_pool.wasm",
            "--main-plugin",
            "ptp",
            "--ipam-config",
            "CLUSTER_JSON",
        ],
    ),
    (
        "docs/kubernetes-node.md",
        "wasm-ipam install --module /path/cluster_pool.wasm --main-plugin ptp --ipam-config /etc/wasm-ipam/cluster.json ...",
        &[
            "--module",
            "MODULE_DIR/cluster_pool.wasm",
            "--main-plugin",
            "ptp",
            "--ipam-config",
            "CLUSTER_JSON",
        ],
    ),
    // A Kubernetes store needs an apiserver: this file's
    // `install_writes_the_nodes_kubeconfig_and_an_add_uses_it` runs this line's flags.
    (
        "docs/install.md",
        "wasm-ipam install --module /path/cluster_pool.wasm --main-plugin ptp --ipam-config /etc/wasm-ipam/cluster.json --kubeconfig /etc/kubernetes/kubelet.conf",
        &[],
    ),
    // The production checklist's line: the same flags but the module's path, which
    // `install_writes_the_nodes_kubeconfig_and_an_add_uses_it` runs.
    (
        "docs/kubernetes-production.md",
        "wasm-ipam install --module /opt/cni/wasm/cluster_pool.wasm --main-plugin ptp --ipam-config /etc/wasm-ipam/cluster.json --kubeconfig /etc/kubernetes/kubelet.conf",
        &[],
    ),
    // An OCI reference needs a registry: supply_chain.rs runs this one
    // (`install_pulls_a_module_from_a_registry_and_pins_it`, and the guide itself).
    (
        "docs/supply-chain.md",
        "wasm-ipam install --module oci://$REGISTRY/acme/my-ipam:1.0 --subnet 10.85.0.0/24",
        &[],
    ),
];

/// The docs' command lines that run `wasm-ipam install`: a line ending in `\\`, or
/// followed by lines of flags (the DaemonSet's YAML), joined with what follows; a
/// shell comment left out.
fn install_lines_in(text: &str) -> Vec<String> {
    let starts = [
        "wasm-ipam install ",
        "./wasm-ipam install ",
        "exec /wasm-ipam install",
    ];
    let mut lines: Vec<String> = Vec::new();
    let mut open = false;
    for line in text.lines() {
        let line = line.split(" # ").next().unwrap_or_default().trim();
        if let Some(last) = lines.last_mut().filter(|_| open)
            && (last.ends_with('\\') || line.starts_with("--"))
        {
            *last = format!("{} {line}", last.trim_end_matches('\\').trim_end());
            continue;
        }
        open = starts.iter().any(|s| line.starts_with(s));
        if open {
            lines.push(line.to_string());
        }
    }
    lines
}

/// Every install line the docs show writes a conflist through which an ADD and a
/// DEL pass: `install` checks that before writing anything, and this checks it after.
/// Each line is looked up in its doc, and each install line of the docs must be
/// here, so a new one is run too.
#[test]
fn every_install_line_the_docs_show_writes_a_conflist_an_add_passes() {
    let workspace = workspace();
    let mut shown = Vec::new();
    for doc in ["README.md", "docs"] {
        let path = workspace.join(doc);
        let files: Vec<PathBuf> = match path.is_dir() {
            true => std::fs::read_dir(&path)
                .unwrap()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "md"))
                .collect(),
            false => vec![path],
        };
        for file in files {
            let name = file.strip_prefix(&workspace).unwrap().display().to_string();
            let text = std::fs::read_to_string(&file).unwrap();
            shown.extend(
                install_lines_in(&text)
                    .into_iter()
                    .map(|l| (name.clone(), l)),
            );
        }
    }
    for (doc, line) in &shown {
        assert!(
            DOC_LINES.iter().any(|(d, l, _)| d == doc && l == line),
            "{doc} shows `{line}`: add it to DOC_LINES, so it is run"
        );
    }
    for (doc, line, _) in DOC_LINES {
        assert!(
            shown.iter().any(|(d, l)| d == doc && l == line),
            "{doc} no longer shows `{line}`"
        );
    }

    let etcd = Etcd::start(1);
    let modules = modules_dir();
    let lines = DOC_LINES.iter().filter(|(_, _, f)| !f.is_empty());
    for (i, (doc, line, flags)) in lines.enumerate() {
        let tree = Tree::new();
        // Each line's network on etcd under a prefix of its own.
        let prefix = format!("/line-{i}/");
        let cluster_json = tree.path("cluster.json");
        std::fs::write(
            &cluster_json,
            json!({"cidr": "10.244.0.0/16", "blockSize": 26, "nodeName": "worker-1",
                   "store": etcd.store(&prefix)})
            .to_string(),
        )
        .unwrap();
        let mut args: Vec<String> = flags
            .iter()
            .map(|f| {
                f.replace("MODULE_DIR", &modules.to_string_lossy())
                    .replace("CLUSTER_JSON", &cluster_json.to_string_lossy())
            })
            .collect();
        args.extend(tree.places(&[]));
        let written = tree.files();
        if line.contains("[--dry-run]") {
            let mut dry = args.clone();
            dry.push("--dry-run".into());
            let (ok, out, stderr) = tree.install_in(modules, &dry);
            assert!(ok, "{doc}: {line} --dry-run: {out}{stderr}");
            assert_eq!(tree.files(), written, "{doc}: {line} --dry-run wrote files");
        }
        let (ok, out, stderr) = tree.install_in(modules, &args);
        assert!(ok, "{doc}: {line}: {out}{stderr}");
        assert!(out.contains("checked an ADD and a DEL"), "{out}");
        // The check ran on a store of its own: the cluster's has nothing yet.
        assert_eq!(etcd.keys(&prefix), Vec::<String>::new(), "{doc}: {line}");
        let address = tree.add_and_del();
        assert!(!address.is_empty(), "{doc}: {line}");
        if line.contains("--ipam-config") {
            assert!(!etcd.keys(&prefix).is_empty(), "the ADD's block is on etcd");
        }
    }
}

/// An install whose conflist every ADD would refuse exits non-zero, names the flag
/// that made it so (with the fix), and writes nothing.
#[test]
fn install_refuses_a_conflist_every_add_would_refuse_and_writes_nothing() {
    let module = host_local_module().to_string_lossy().into_owned();
    // Host bits set: the module refuses the range.
    let tree = Tree::new();
    let mut args: Vec<String> = ["--module", &module, "--subnet", "10.22.0.1/24"]
        .map(String::from)
        .to_vec();
    args.extend(tree.places(&[]));
    let (ok, out, stderr) = tree.install_in(tree.root.path(), &args);
    assert!(!ok, "{out}");
    assert!(
        stderr.contains("--subnet 10.22.0.1/24")
            && stderr.contains("host bits set")
            && stderr.contains("the network address is 10.22.0.0"),
        "{stderr}"
    );
    assert_eq!(tree.files(), Vec::<PathBuf>::new());

    // Relative paths: a runtime would read them from its own working directory.
    for (relative, fix) in [
        (
            &["--module-dir", "inst5/wasm", "--cache-dir", "inst5/cache"][..],
            "did you mean --module-dir ",
        ),
        (
            &["--cache-dir", "inst5/cache"][..],
            "did you mean --cache-dir ",
        ),
        (
            &["--log-file", "wasm-ipam.log"][..],
            "did you mean --log-file ",
        ),
    ] {
        let tree = Tree::new();
        let mut args: Vec<String> = ["--module", &module, "--subnet", "10.22.0.0/24"]
            .map(String::from)
            .to_vec();
        args.extend(relative.iter().map(|s| s.to_string()));
        let skipped: Vec<&str> = relative.iter().copied().step_by(2).collect();
        args.extend(tree.places(&skipped));
        let (ok, out, stderr) = tree.install_in(tree.root.path(), &args);
        assert!(!ok, "{relative:?}: {out}");
        let flag = format!("{} {}", relative[0], relative[1]);
        assert!(
            stderr.contains(&flag)
                && stderr.contains("must be an absolute path")
                && stderr.contains(&format!(
                    "{fix}{}",
                    tree.root.path().join(relative[1]).display()
                )),
            "{relative:?}: {stderr}"
        );
        assert_eq!(tree.files(), Vec::<PathBuf>::new(), "{relative:?}");
    }
}

/// A kubelet's kubeconfig in `dir` (`dir/kubelet.conf`) for `api`, as `user` in
/// `groups`, naming its CA, certificate and key by paths relative to `dir`, as a
/// kubeadm node's does not but a hand-written one may.
fn relative_kubeconfig(api: &KubeApi, dir: &Path, user: &str, groups: &[&str]) -> PathBuf {
    let minted: Value =
        serde_json::from_str(&std::fs::read_to_string(api.kubeconfig_for(user, groups)).unwrap())
            .unwrap();
    std::fs::create_dir_all(dir.join("pki")).unwrap();
    let mut config = minted.clone();
    for (pointer, file) in [
        ("/clusters/0/cluster/certificate-authority", "ca.crt"),
        ("/users/0/user/client-certificate", "node.crt"),
        ("/users/0/user/client-key", "node.key"),
    ] {
        let from = minted.pointer(pointer).unwrap().as_str().unwrap();
        std::fs::copy(from, dir.join("pki").join(file)).unwrap();
        *config.pointer_mut(pointer).unwrap() = json!(format!("pki/{file}"));
    }
    let path = dir.join("kubelet.conf");
    std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
    path
}

/// `install` of cluster-pool under ptp on a Kubernetes store whose keys are `store`,
/// with `extra` flags, in `tree`; the module's keys in `inputs`.
fn install_kube(
    tree: &Tree,
    inputs: &Path,
    network: &str,
    store: Value,
    extra: &[String],
) -> (bool, String, String) {
    let keys = inputs.join(format!("{network}.json"));
    std::fs::write(
        &keys,
        json!({"cidr": "10.246.0.0/16", "blockSize": 26, "nodeName": network, "store": store})
            .to_string(),
    )
    .unwrap();
    let mut args: Vec<String> = [
        "--module",
        &cluster_pool_module().to_string_lossy(),
        "--main-plugin",
        "ptp",
        "--ipam-config",
        &keys.to_string_lossy(),
        "--network",
        network,
    ]
    .map(String::from)
    .to_vec();
    args.extend(tree.places(&[]));
    args.extend(extra.iter().cloned());
    tree.install_in(inputs, &args)
}

/// `--kubeconfig`: the node's kubeconfig, checked against the apiserver, is copied
/// beside the conflist with its context only, 0600, every path absolute; the
/// conflist's store names the copy, and an ADD and a DEL through it reach the
/// apiserver. The copy names the certificate files by path, so new ones written there
/// (a rotation) are what the next call uses.
#[test]
fn install_writes_the_nodes_kubeconfig_and_an_add_uses_it() {
    let api = crate::kube_store::api();
    let inputs = tempfile::tempdir().unwrap();
    let node = "install-kube-node";
    let source = relative_kubeconfig(
        api,
        &inputs.path().join("kubelet"),
        &format!("system:node:{node}"),
        &["system:nodes"],
    );
    let tree = Tree::new();
    let network = "installed-kube";
    // Relative to install's working directory, as an operator may type it.
    let (ok, out, stderr) = install_kube(
        &tree,
        inputs.path(),
        network,
        json!({"type": "kubernetes"}),
        &["--kubeconfig".into(), "kubelet/kubelet.conf".into()],
    );
    assert!(ok, "{out}{stderr}");
    assert!(
        out.contains(&format!("checked --kubeconfig {}", source.display()))
            && out.contains("may list ipamshards.ipam.wasm-ipam.dev"),
        "{out}"
    );
    let copy = tree.path("etc/cni/net.d/00-wasm-ipam.kubeconfig");
    assert!(
        out.contains(&format!("installed {}", copy.display())),
        "{out}"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&copy).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let written: Value = serde_json::from_str(&std::fs::read_to_string(&copy).unwrap()).unwrap();
    let pki = inputs.path().join("kubelet/pki");
    for (pointer, file) in [
        ("/clusters/0/cluster/certificate-authority", "ca.crt"),
        ("/users/0/user/client-certificate", "node.crt"),
        ("/users/0/user/client-key", "node.key"),
    ] {
        assert_eq!(
            written.pointer(pointer).and_then(Value::as_str),
            Some(pki.join(file).to_str().unwrap()),
            "{written:#}"
        );
    }
    assert_eq!(written["contexts"].as_array().unwrap().len(), 1);
    assert_eq!(
        tree.runtime_view()["ipam"]["store"],
        json!({"type": "kubernetes", "kubeconfig": copy})
    );

    // Again: nothing changes.
    let (ok, again, stderr) = install_kube(
        &tree,
        inputs.path(),
        network,
        json!({"type": "kubernetes"}),
        &["--kubeconfig".into(), source.to_string_lossy().into_owned()],
    );
    assert!(ok, "{again}{stderr}");
    assert!(
        again.contains(&format!("unchanged {}", copy.display())),
        "{again}"
    );

    // An ADD through the conflist commits to the apiserver with the copy.
    let plugin = tree.runtime_view();
    let wasm_ipam = tree.path("opt/cni/bin/wasm-ipam");
    let added = Call::new("ADD", "kube-pod1").run_plugin(&wasm_ipam, &plugin);
    let address = added.address().to_string();
    assert!(address.starts_with("10.246."), "{address}");
    let shards = api.kubectl(&["get", "ipamshards", "-o", "json"]);
    let shards: Value = serde_json::from_slice(&shards.stdout).unwrap();
    assert!(
        shards["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["spec"]["network"] == network),
        "no ipamshard of {network} after the ADD"
    );
    Call::new("DEL", "kube-pod1")
        .run_plugin(&wasm_ipam, &plugin)
        .assert_ok();

    // The files it names rewritten with another identity's, one the RBAC does not
    // bind: the next call uses them and is refused.
    let stranger: Value = serde_json::from_str(
        &std::fs::read_to_string(api.kubeconfig_for("install-stranger", &[])).unwrap(),
    )
    .unwrap();
    for (pointer, file) in [
        ("/users/0/user/client-certificate", "node.crt"),
        ("/users/0/user/client-key", "node.key"),
    ] {
        let from = stranger.pointer(pointer).unwrap().as_str().unwrap();
        std::fs::copy(from, pki.join(file)).unwrap();
    }
    let refused = Call::new("ADD", "kube-pod2").run_plugin(&wasm_ipam, &plugin);
    assert!(
        !refused.success && refused.msg().contains("403 Forbidden"),
        "{refused:?}"
    );
}

/// `--kubeconfig` an install cannot use is refused before anything is written: a
/// cluster without the store's CRD (naming the command that applies it), an identity
/// the RBAC does not bind (naming the verb and resource), a context the kubeconfig
/// lacks, a file it names that cannot be read, and a network whose store is not the
/// Kubernetes API.
#[test]
fn install_refuses_a_kubeconfig_it_cannot_use_and_writes_nothing() {
    let inputs = tempfile::tempdir().unwrap();
    let flag = |path: &Path| vec!["--kubeconfig".to_string(), path.display().to_string()];
    let refused = |store: Value, extra: Vec<String>, says: &[&str]| {
        let tree = Tree::new();
        let (ok, out, stderr) = install_kube(&tree, inputs.path(), "refused-kube", store, &extra);
        assert!(!ok, "{out}");
        for said in says {
            assert!(stderr.contains(said), "{said:?} not in {stderr}");
        }
        assert_eq!(tree.files(), Vec::<PathBuf>::new(), "{stderr}");
    };
    let kubernetes = json!({"type": "kubernetes"});

    // A cluster whose apiserver has no ipamshards.
    let bare = KubeApi::start();
    let node = bare.kubeconfig_for("system:node:install-bare", &["system:nodes"]);
    refused(
        kubernetes.clone(),
        flag(&node),
        &[
            &format!("--kubeconfig {}", node.display()),
            "wasm-ipam kubernetes manifests | kubectl apply -f -",
        ],
    );
    drop(bare);

    let api = crate::kube_store::api();
    let stranger = api.kubeconfig_for("install-stranger", &[]);
    refused(
        kubernetes.clone(),
        flag(&stranger),
        &[
            "may not list ipamshards.ipam.wasm-ipam.dev",
            "403 Forbidden",
        ],
    );
    let node = api.kubeconfig_for("system:node:install-refused", &["system:nodes"]);
    refused(
        json!({"type": "kubernetes", "context": "elsewhere"}),
        flag(&node),
        &["no context \"elsewhere\"", "ipam.store.context"],
    );
    let lost = relative_kubeconfig(
        api,
        &inputs.path().join("lost"),
        "system:node:install-refused",
        &["system:nodes"],
    );
    let key = inputs.path().join("lost/pki/node.key");
    std::fs::remove_file(&key).unwrap();
    refused(
        kubernetes.clone(),
        flag(&lost),
        &["client-key", &key.display().to_string(), "cannot be read"],
    );
    refused(
        json!({"type": "etcd", "endpoints": ["http://127.0.0.1:1"]}),
        flag(&node),
        &["--kubeconfig is for a Kubernetes store"],
    );
    refused(
        json!({"type": "kubernetes", "kubeconfig": node}),
        flag(&node),
        &["sets ipam.store.kubeconfig, which install writes itself"],
    );
    refused(
        kubernetes,
        Vec::new(),
        &["names no kubeconfig: pass --kubeconfig FILE"],
    );
}
