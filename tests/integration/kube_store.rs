//! The Kubernetes store (`"store": {"type": "kubernetes"}`) against a real
//! kube-apiserver and its etcd (scripts/kube-peers.sh, started by [`KubeApi`]), with
//! RBAC on: the CRD and the nodes' RBAC applied as `wasm-ipam kubernetes manifests`
//! prints them, and each simulated node calling with a kubeconfig of its own identity
//! (`system:node:<name>` in `system:nodes`), as a kubelet's credentials are. This
//! file is the apiserver and the helpers the `kube_store_*` tests share: `calls`,
//! `objects`, `outages` and `flow_control`.

use crate::harness::*;
use crate::kube_api::KubeApi;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The shared apiserver, with the store's CRD and RBAC applied (once).
pub fn api() -> &'static KubeApi {
    static READY: OnceLock<()> = OnceLock::new();
    let api = KubeApi::shared();
    READY.get_or_init(|| apply_manifests(api));
    api
}

pub fn apply_manifests(api: &KubeApi) {
    let manifests = operator_output(["kubernetes", "manifests"]);
    assert!(manifests.0, "{}", manifests.2);
    api.apply(&manifests.1);
    let established = api.kubectl(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/ipamshards.ipam.wasm-ipam.dev",
    ]);
    assert!(
        established.status.success(),
        "{}",
        String::from_utf8_lossy(&established.stderr)
    );
}

/// A node's kubeconfig: the identity its kubelet has.
pub fn node_kubeconfig(api: &KubeApi, node: &str) -> PathBuf {
    api.kubeconfig_for(&format!("system:node:{node}"), &["system:nodes"])
}

pub fn store(kubeconfig: &Path) -> Value {
    json!({"type": "kubernetes", "kubeconfig": kubeconfig})
}

/// `nodes` simulated nodes of network `network` on the shared apiserver, running
/// cluster-pool with these `ipam` keys.
pub fn cluster(network: &str, nodes: usize, ipam: &Value) -> (Vec<Node>, Vec<Value>) {
    let api = api();
    let cluster: Vec<Node> = (0..nodes).map(|_| Node::new()).collect();
    let confs = cluster
        .iter()
        .enumerate()
        .map(|(n, node)| {
            let name = format!("{network}-node-{n}");
            let mut conf = node.netconf("1.1.0", &cluster_pool_module(), ipam.clone());
            conf["name"] = network.into();
            conf["ipam"]["nodeName"] = name.clone().into();
            conf["ipam"]["store"] = store(&node_kubeconfig(api, &name));
            conf
        })
        .collect();
    (cluster, confs)
}

/// The objects of `network` as the admin reads them: name → spec.
pub fn objects(network: &str) -> BTreeMap<String, Value> {
    objects_on(api(), network)
}

/// [`objects`] on the apiserver `api`.
pub fn objects_on(api: &KubeApi, network: &str) -> BTreeMap<String, Value> {
    let out = api.kubectl(&["get", "ipamshards", "-o", "json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["spec"]["network"] == network)
        .map(|o| {
            (
                o["metadata"]["name"].as_str().unwrap().to_string(),
                o["spec"].clone(),
            )
        })
        .collect()
}

/// Every entry of `network`'s objects, by key; panics on a key held twice.
pub fn entries(network: &str) -> BTreeMap<String, Value> {
    entries_of(&objects(network))
}

/// The entries of `objects` (name → spec), by key; panics on a key held twice.
pub fn entries_of(objects: &BTreeMap<String, Value>) -> BTreeMap<String, Value> {
    let mut all = BTreeMap::new();
    for spec in objects.values() {
        for entry in spec["entries"].as_array().into_iter().flatten() {
            let key = entry["key"].as_str().unwrap().to_string();
            let value: Value = serde_json::from_str(entry["value"].as_str().unwrap_or("null"))
                .unwrap_or(Value::Null);
            assert!(all.insert(key.clone(), value).is_none(), "{key} twice");
        }
    }
    all
}

/// The addresses the blocks of `network` hand out, with their holder.
pub fn held(network: &str) -> BTreeMap<String, String> {
    held_in(&entries(network))
}

/// The addresses the blocks among `entries` hand out, with their holder.
pub fn held_in(entries: &BTreeMap<String, Value>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (key, block) in entries {
        if !key.starts_with("blk/") {
            continue;
        }
        for (ip, holder) in block["ips"].as_object().into_iter().flatten() {
            let id = holder["id"].as_str().unwrap_or_default().to_string();
            assert!(out.insert(ip.clone(), id).is_none(), "{ip} held twice");
        }
    }
    out
}

/// No object of `network` is locked.
pub fn unlocked(network: &str) -> bool {
    objects(network).values().all(|s| s.get("lock").is_none())
}

pub fn kube_requests(node: &Node) -> Vec<u64> {
    node.log_lines("invocation")
        .iter()
        .map(|l| l["kube_requests"].as_u64().unwrap())
        .collect()
}
