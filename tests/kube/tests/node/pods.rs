//! Pods as a user writes them, and what the cluster and the runtime say of them.

use super::{Node, wait_for};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// A pod on the node running the pause image: no scheduler runs, so `nodeName` is
/// set; no controller-manager mints tokens, so none is mounted; no cluster DNS.
pub fn pod(name: &str, group: &str, annotations: &[(&str, &str)]) -> Value {
    let annotations: BTreeMap<&str, &str> = annotations.iter().copied().collect();
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"group": group},
            "annotations": annotations,
        },
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

/// `count` pods of `group`, created with one `kubectl apply`, as a Deployment's
/// scale-up would bring them at once.
pub fn create(node: &Node, group: &str, count: usize) -> Vec<String> {
    let names: Vec<String> = (0..count).map(|i| format!("{group}-{i}")).collect();
    let items: Vec<Value> = names.iter().map(|n| pod(n, group, &[])).collect();
    node.apply(&json!({"apiVersion": "v1", "kind": "List", "items": items}));
    names
}

/// The pods of `group`, by name.
pub fn of_group(node: &Node, group: &str) -> BTreeMap<String, Value> {
    let list = node.kubectl_json(&["get", "pods", "-l", &format!("group={group}")]);
    list["items"]
        .as_array()
        .expect("a pod list")
        .iter()
        .map(|p| {
            (
                p["metadata"]["name"].as_str().unwrap().to_string(),
                p.clone(),
            )
        })
        .collect()
}

pub fn phase(pod: &Value) -> &str {
    pod["status"]["phase"].as_str().unwrap_or("")
}

pub fn pod_ips(pod: &Value) -> Vec<String> {
    pod["status"]["podIPs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|ip| ip["ip"].as_str().map(String::from))
        .collect()
}

/// Waits until every pod of `group` is Running; each pod's time from the first
/// creation to its Ready condition, and the whole wait.
pub fn until_running(node: &Node, group: &str, count: usize, limit: Duration) -> Vec<Duration> {
    wait_for(&format!("{count} pods of {group} Running"), limit, || {
        let pods = of_group(node, group);
        (pods.len() == count && pods.values().all(|p| phase(p) == "Running")).then_some(())
    });
    of_group(node, group).values().map(start_to_ready).collect()
}

/// A pod's creation to its Ready condition (the API's own timestamps, in seconds).
fn start_to_ready(pod: &Value) -> Duration {
    let created = seconds(pod["metadata"]["creationTimestamp"].as_str().unwrap());
    let ready = pod["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Ready" && c["status"] == "True")
        .and_then(|c| c["lastTransitionTime"].as_str())
        .map(seconds)
        .expect("a Running pod has a Ready condition");
    Duration::from_secs(ready.saturating_sub(created))
}

/// An RFC 3339 UTC timestamp (`2026-12-05T07:40:34Z`) as seconds since the epoch.
fn seconds(timestamp: &str) -> u64 {
    let digits: Vec<u64> = timestamp
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    let (y, m, d, hh, mm, ss) = (
        digits[0], digits[1], digits[2], digits[3], digits[4], digits[5],
    );
    // Days from the civil date (Howard Hinnant's algorithm).
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y / 400;
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days * 86_400 + hh * 3600 + mm * 60 + ss
}

/// The runtime's sandboxes: id → (namespace/name, ready).
pub fn sandboxes(node: &Node) -> BTreeMap<String, (String, bool)> {
    let pods = node.crictl_json(&["pods"]);
    pods["items"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            let meta = &s["metadata"];
            (
                s["id"].as_str().unwrap().to_string(),
                (
                    format!(
                        "{}/{}",
                        meta["namespace"].as_str().unwrap(),
                        meta["name"].as_str().unwrap()
                    ),
                    s["state"] == "SANDBOX_READY",
                ),
            )
        })
        .collect()
}

/// Deletes every pod of `group` at once and waits until the runtime has torn down
/// the last of their sandboxes (none ready) and the API holds none of them: how long
/// that took.
pub fn delete_all(node: &Node, group: &str, limit: Duration) -> Duration {
    let started = Instant::now();
    node.kubectl_ok(&[
        "delete",
        "pods",
        "-l",
        &format!("group={group}"),
        "--wait=false",
    ]);
    let prefix = format!("default/{group}-");
    wait_for(
        &format!("every sandbox of {group} torn down and its pods gone"),
        limit,
        || {
            let torn_down = !sandboxes(node)
                .values()
                .any(|(pod, ready)| *ready && pod.starts_with(&prefix));
            (torn_down && of_group(node, group).is_empty()).then_some(())
        },
    );
    started.elapsed()
}
