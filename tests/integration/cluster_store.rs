//! The two cluster stores behind one face, so that each cluster feature test runs on
//! both: a real etcd (a one-member [`Etcd`] of the test's own) and the shared
//! kube-apiserver ([`crate::kube_store::api`]). A module sees no difference between
//! them; the tests see one only where they ask the store itself what it holds, which
//! [`Cluster::keys`] and [`Cluster::values`] answer for either: etcd's keys under the
//! network's `n/<network>/e/`, the Kubernetes objects' entries of the network.
//!
//! A feature test is a function taking the store, and [`on_both_stores!`] makes one
//! `#[test]` per store that calls it: `MODULE::TEST::on_etcd` and
//! `MODULE::TEST::on_kubernetes`.
//!
//! Isolation. The apiserver is shared by the whole test binary and keys its objects by
//! network, and `release-node` and `forget` look at every network of the store: so each
//! test names its networks and nodes apart (nodes `<network>-<suffix>`), on etcd as on
//! Kubernetes, and on etcd each test's first network also names its prefix
//! (`/<network>/`), which the test's other networks share.

use crate::etcd::{Etcd, node_conf, operator_on, write_conf};
use crate::harness::*;
use crate::kube_store;
use base64::Engine;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Makes `TEST::on_etcd` and `TEST::on_kubernetes`, each calling the function `TEST`
/// with its store. An attribute after `kubernetes:` applies to the Kubernetes variant
/// only (an `#[ignore = "kubernetes store: DEFECT"]` for a defect of that store).
macro_rules! on_both_stores {
    ($test:ident $(, kubernetes: #[$attr:meta])?) => {
        mod $test {
            #[test]
            fn on_etcd() {
                super::$test(&$crate::cluster_store::ClusterStore::etcd());
            }
            #[test]
            $(#[$attr])?
            fn on_kubernetes() {
                super::$test(&$crate::cluster_store::ClusterStore::kubernetes());
            }
        }
    };
}
pub(crate) use on_both_stores;

/// A cluster store, started (etcd) or obtained (the shared apiserver) for one test.
pub enum ClusterStore {
    Etcd(Etcd),
    Kubernetes,
}

impl ClusterStore {
    /// A one-member etcd of the test's own.
    pub fn etcd() -> ClusterStore {
        ClusterStore::Etcd(Etcd::start(1))
    }

    /// The apiserver the test binary shares, with the store's CRD and RBAC applied.
    pub fn kubernetes() -> ClusterStore {
        kube_store::api();
        ClusterStore::Kubernetes
    }

    pub fn is_etcd(&self) -> bool {
        matches!(self, ClusterStore::Etcd(_))
    }

    /// The figure of a call's log record that counts the requests it made to the store.
    pub fn requests_field(&self) -> &'static str {
        match self {
            ClusterStore::Etcd(_) => "etcd_requests",
            ClusterStore::Kubernetes => "kube_requests",
        }
    }

    /// Simulated nodes `<network>-node-0`, `-node-1`, ... of `network`, running
    /// cluster-pool with these `ipam` keys.
    pub fn cluster(&self, network: &str, nodes: usize, ipam: &Value) -> Cluster<'_> {
        let suffixes: Vec<String> = (0..nodes).map(|n| format!("node-{n}")).collect();
        let suffixes: Vec<&str> = suffixes.iter().map(String::as_str).collect();
        self.cluster_of(network, &suffixes, &cluster_pool_module(), ipam)
    }

    /// Simulated nodes `<network>-<suffix>` of `network`, running `module` with these
    /// `ipam` keys.
    pub fn cluster_of(
        &self,
        network: &str,
        suffixes: &[&str],
        module: &Path,
        ipam: &Value,
    ) -> Cluster<'_> {
        let mut cluster = Cluster {
            store: self,
            prefix: format!("/{network}/"),
            network: network.to_string(),
            nodes: Vec::new(),
            names: Vec::new(),
            confs: Vec::new(),
        };
        for suffix in suffixes {
            let node = Node::new();
            let name = format!("{network}-{suffix}");
            let conf = cluster.conf_on(&node, &name, module, ipam.clone());
            cluster.nodes.push(node);
            cluster.names.push(name);
            cluster.confs.push(conf);
        }
        cluster
    }
}

/// One network's simulated nodes on a [`ClusterStore`]: node `n` is `nodes[n]` (its
/// lock, data dir and log), named `names[n]`, calling with `confs[n]`.
pub struct Cluster<'s> {
    pub store: &'s ClusterStore,
    /// On etcd, the prefix of every network of this cluster: `/<network>/`.
    pub prefix: String,
    pub network: String,
    pub nodes: Vec<Node>,
    pub names: Vec<String>,
    pub confs: Vec<Value>,
}

impl Cluster<'_> {
    /// A netconf of this cluster's network for `node`, named `name`, running `module`.
    pub fn conf_on(&self, node: &Node, name: &str, module: &Path, ipam: Value) -> Value {
        let store = match self.store {
            ClusterStore::Etcd(etcd) => etcd.store(&self.prefix),
            // The node limiter's default (qps 5) would make these feature tests mostly
            // waiting, a call making 10 to 20 requests: the limiter is tested on its
            // own in kube_store_flow_control.rs.
            ClusterStore::Kubernetes => json!({
                "type": "kubernetes",
                "kubeconfig": kube_store::node_kubeconfig(kube_store::api(), name),
                "qps": 1000,
                "burst": 1000,
            }),
        };
        let mut conf = node_conf(node, name, module, &store, ipam);
        conf["name"] = self.network.clone().into();
        conf
    }

    /// Node `n`'s netconf for the network `<network>-<suffix>` on the same store.
    pub fn other_network(&self, n: usize, suffix: &str) -> Value {
        let mut conf = self.confs[n].clone();
        conf["name"] = self.other_name(suffix).into();
        conf
    }

    /// The name of the network `<network>-<suffix>`.
    pub fn other_name(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.network)
    }

    /// The store as the host names it to node `n` in its messages.
    pub fn describe(&self, n: usize) -> String {
        match self.store {
            ClusterStore::Etcd(etcd) => {
                format!(
                    "etcd store {} (prefix {})",
                    etcd.endpoints()[0],
                    self.prefix
                )
            }
            // The server as the kubeconfig's URL prints it, with its root path.
            ClusterStore::Kubernetes => format!(
                "Kubernetes store {}/ ({})",
                kube_store::api().url(),
                self.kubeconfig(n).display()
            ),
        }
    }

    /// Node `n`'s kubeconfig, on the Kubernetes store.
    pub fn kubeconfig(&self, n: usize) -> PathBuf {
        PathBuf::from(
            self.confs[n]["ipam"]["store"]["kubeconfig"]
                .as_str()
                .unwrap(),
        )
    }

    /// Node `n`'s netconf, written to a file of its own.
    pub fn conf_file(&self, n: usize) -> PathBuf {
        write_conf(&self.nodes[n], &self.confs[n])
    }

    /// An operator command on node `n`, with its netconf.
    pub fn operator(&self, n: usize, args: &[&str]) -> (bool, String, String) {
        operator_on(&self.nodes[n], &self.conf_file(n), args)
    }

    /// The keys of the network's module entries that start with `start`, in order.
    pub fn keys(&self, start: &str) -> Vec<String> {
        self.values_of(&self.network, start).into_keys().collect()
    }

    /// The keys of network `network`'s module entries that start with `start`.
    pub fn keys_of(&self, network: &str, start: &str) -> Vec<String> {
        self.values_of(network, start).into_keys().collect()
    }

    /// The network's module entries whose keys start with `start`, each value as JSON
    /// (null for one that is not).
    pub fn values(&self, start: &str) -> BTreeMap<String, Value> {
        self.values_of(&self.network, start)
    }

    fn values_of(&self, network: &str, start: &str) -> BTreeMap<String, Value> {
        match self.store {
            ClusterStore::Etcd(etcd) => {
                let entries = format!("{}n/{network}/e/", self.prefix);
                etcd_values(etcd, &format!("{entries}{start}"))
                    .into_iter()
                    .map(|(k, v)| (k[entries.len()..].to_string(), v))
                    .collect()
            }
            ClusterStore::Kubernetes => kube_store::entries(network)
                .into_iter()
                .filter(|(k, _)| k.starts_with(start))
                .collect(),
        }
    }

    /// Whether the store holds anything at all for `network`: on etcd any key of it
    /// (entries, usage rows, the record of its module), on Kubernetes any object.
    pub fn holds_network(&self, network: &str) -> bool {
        match self.store {
            ClusterStore::Etcd(etcd) => {
                let record = format!("{}s/{network}", self.prefix);
                !etcd
                    .keys(&format!("{}n/{network}/", self.prefix))
                    .is_empty()
                    || !etcd.ctl(&["get", "--keys-only", &record]).trim().is_empty()
            }
            ClusterStore::Kubernetes => !kube_store::objects(network).is_empty(),
        }
    }
}

/// Every key under `prefix` in `etcd`, with its value as JSON (null if it is not).
fn etcd_values(etcd: &Etcd, prefix: &str) -> BTreeMap<String, Value> {
    let out: Value =
        serde_json::from_str(&etcd.ctl(&["get", "--prefix", prefix, "-w", "json"])).unwrap();
    let decode = |v: &Value| {
        base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or_default())
            .unwrap()
    };
    out["kvs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|kv| {
            let key = String::from_utf8(decode(&kv["key"])).unwrap();
            let value = serde_json::from_slice(&decode(&kv["value"])).unwrap_or(Value::Null);
            (key, value)
        })
        .collect()
}
