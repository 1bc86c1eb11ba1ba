//! `wasm-ipam install` on a Kubernetes store, against a real apiserver: the node's
//! kubeconfig (`--kubeconfig`) is checked and copied beside the conflist, an ADD uses
//! it, and one install cannot use is refused before anything is written.

use crate::harness::*;
use crate::install::Tree;
use crate::kube_api::KubeApi;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

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
