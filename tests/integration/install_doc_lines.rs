//! The install lines the docs show, run as written: each writes a conflist an ADD and
//! a DEL pass through ([`crate::install`]'s tree and runtime), and an install whose
//! conflist every ADD would refuse fails, naming the flag, and writes nothing.

use crate::etcd::Etcd;
use crate::harness::*;
use crate::install::Tree;
use serde_json::json;
use std::path::PathBuf;

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
