//! What the apiserver takes from the Kubernetes store and what the store makes of
//! it: credentials and kubeconfigs refused with what to do, an object edited by hand
//! refused or named, the per-object limits and names, and lists of several pages read
//! whole.

use crate::etcd::{operator_on, write_conf};
use crate::harness::*;
use crate::kube_api::KubeApi;
use crate::kube_store::{
    api, apply_manifests, cluster, entries, entries_of, node_kubeconfig, objects, objects_on, store,
};
use serde_json::{Value, json};
use std::path::Path;

/// 401, 403 and a server the kubeconfig's CA did not sign: each a clear error naming
/// the kubeconfig (and for 403 the verb, the resource and the command that prints the
/// RBAC); a kubeconfig missing, malformed or naming a context it lacks likewise.
#[test]
fn bad_credentials_and_bad_kubeconfigs_are_named_with_what_to_do() {
    let api = api();
    let node = Node::new();
    let run = |kubeconfig: &Path, extra: Value| {
        let mut conf = node.netconf(
            "1.1.0",
            &cluster_pool_module(),
            json!({"cidr": "10.73.0.0/16"}),
        );
        conf["name"] = "k-auth".into();
        conf["ipam"]["nodeName"] = "k-auth-node".into();
        let mut s = store(kubeconfig);
        for (k, v) in extra.as_object().unwrap() {
            s[k] = v.clone();
        }
        conf["ipam"]["store"] = s;
        Call::new("ADD", "pod").run(&conf)
    };
    let reply = run(&api.kubeconfig_bad_token(), json!({}));
    assert!(
        reply.msg().contains("401") && reply.msg().contains("kubeconfig"),
        "{reply:?}"
    );
    let nobody = api.kubeconfig_for("nobody", &[]);
    let reply = run(&nobody, json!({}));
    assert!(
        reply.msg().contains("403")
            && reply.msg().contains("ipamshards")
            && reply.msg().contains("wasm-ipam kubernetes manifests"),
        "{reply:?}"
    );
    let reply = run(&api.kubeconfig_wrong_ca(), json!({}));
    assert!(reply.msg().contains("certificate"), "{reply:?}");
    let missing = node.dir.path().join("missing.kubeconfig");
    let reply = run(&missing, json!({}));
    assert_eq!(reply.error_code(), 7);
    assert!(
        reply.msg().contains(&*missing.to_string_lossy()),
        "{reply:?}"
    );
    let malformed = node.dir.path().join("malformed.kubeconfig");
    std::fs::write(&malformed, "clusters: [{{{").unwrap();
    let reply = run(&malformed, json!({}));
    assert_eq!(reply.error_code(), 7, "{reply:?}");
    let reply = run(
        &node_kubeconfig(api, "k-auth-node"),
        json!({"context": "nowhere"}),
    );
    assert_eq!(reply.error_code(), 7, "{reply:?}");
    assert!(reply.msg().contains("nowhere"), "{reply:?}");
    // Nothing was written by any of them.
    assert!(objects("k-auth").is_empty());
}

/// An object edited by hand to hold one key twice is refused by the apiserver itself
/// (the entries are a map keyed by key); one whose entry's key belongs to another
/// group is named by the call, which changes nothing.
#[test]
fn a_doubled_entry_is_refused_by_the_apiserver_and_a_misplaced_one_named() {
    let network = "k-schema";
    let (_nodes, confs) = cluster(network, 1, &json!({"cidr": "10.74.0.0/16"}));
    let given = Call::new("ADD", "pod").run(&confs[0]);
    given.assert_ok();
    // The node's home, which holds its own records.
    let (name, spec) = objects(network)
        .into_iter()
        .find(|(_, s)| s["role"] == "node")
        .unwrap();
    // The object's entries replaced, as an operator's kubectl patch does.
    let patch = |entries: Value| {
        let patch = json!({"spec": {"entries": entries}});
        api().kubectl(&[
            "patch",
            "ipamshards",
            &name,
            "--type=merge",
            "-p",
            &patch.to_string(),
        ])
    };
    let entry = spec["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["key"].as_str().unwrap().starts_with("own/"))
        .unwrap()
        .clone();
    let out = patch(json!([entry.clone(), entry]));
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Duplicate value"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut moved = entry.clone();
    moved["key"] = "blk/elsewhere/x".into();
    let out = patch(json!([moved]));
    assert!(out.status.success());
    let reply = Call::new("ADD", "pod").run(&confs[0]);
    assert_eq!(reply.error_code(), 104, "{reply:?}");
    assert!(
        reply.msg().contains(&name) && reply.msg().contains("edited by hand"),
        "{reply:?}"
    );
    // Put back as the operator would: the call then finds its address again, nothing
    // lost, and the other tests' `check` sees a sound store.
    let out = patch(spec["entries"].clone());
    assert!(out.status.success(), "{out:?}");
    let again = Call::new("ADD", "pod").run(&confs[0]);
    again.assert_ok();
    assert_eq!(again.address(), given.address());
}

/// The per-object limits and names: 4097 entries for one group are refused before any
/// write (code 105, naming the limit) and 4096 are taken; a network whose name is no
/// DNS label on its own (`k-limits-`) still makes names the apiserver accepts.
#[test]
fn a_group_over_4096_entries_is_refused_whole_and_any_network_name_is_stored() {
    let api = api();
    let node = Node::new();
    let name = "k-limits-node";
    let kubeconfig = node_kubeconfig(api, name);
    let writes = |n: usize| -> Vec<String> { (0..n).map(|i| format!("g/one/{i:05}=x")).collect() };
    let mut conf = node.netconf(
        "1.1.0",
        &probe_module(),
        json!({"probe": {"write": writes(4097)}}),
    );
    conf["name"] = "k-limits-".into();
    conf["ipam"]["nodeName"] = name.into();
    conf["ipam"]["store"] =
        json!({"type": "kubernetes", "kubeconfig": kubeconfig, "qps": 1000, "burst": 1000});
    let refused = Call::new("ADD", "over").run(&conf);
    assert_eq!(refused.error_code(), 105, "{refused:?}");
    assert!(
        refused.msg().contains("4097") && refused.msg().contains("4096"),
        "{refused:?}"
    );
    assert!(objects("k-limits-").is_empty(), "nothing written");
    conf["ipam"]["probe"]["write"] = json!(writes(4096));
    Call::new("ADD", "at").run(&conf).assert_ok();
    let stored = entries("k-limits-");
    assert_eq!(
        stored.keys().filter(|k| k.starts_with("g/one/")).count(),
        4096
    );
}

/// Seeds `network` past one list page: a reservation made as an operator does (a
/// group of its own) is the model of 700 more objects, written as the admin would.
/// Returns the number seeded, the name of the node's home and its usage row counting
/// them, as commits writing them would have (not yet written).
fn seed_700_reservations(
    own: &KubeApi,
    node: &Node,
    conf_file: &Path,
    network: &str,
) -> (usize, String, Value) {
    let (ok, out, err) = operator_on(
        node,
        conf_file,
        &["reserve", "10.81.0.0/28", "--note", "seed"],
    );
    assert!(ok, "{out}{err}");
    let out = own.kubectl(&["get", "ipamshards", "-o", "json"]);
    assert!(out.status.success());
    let all: Value = serde_json::from_slice(&out.stdout).unwrap();
    let ours: Vec<&Value> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["spec"]["network"] == network)
        .collect();
    let model = ours
        .iter()
        .find(|o| o["spec"]["group"].as_str().unwrap().starts_with("rsv/"))
        .expect("the reservation's object");
    let home = ours
        .iter()
        .find(|o| o["spec"]["role"] == "node")
        .expect("the node's home");
    let seeded = 700;
    let mut items = Vec::new();
    let mut bytes = 0;
    for i in 0..seeded {
        let key = format!("rsv/10.{}.{}.0/24", 100 + i / 256, i % 256);
        let group = key.rsplit_once('/').unwrap().0.to_string();
        let value = "{\"note\":\"seeded\"}";
        bytes += key.len() + value.len();
        items.push(json!({
            "apiVersion": model["apiVersion"],
            "kind": model["kind"],
            "metadata": {"name": format!("k-pages.seed-{i}"), "labels": model["metadata"]["labels"]},
            "spec": {"role": "entries", "network": network, "group": group, "size": 1,
                     "entries": [{"key": key, "value": value}]},
        }));
    }
    let mut usage = home["spec"]["usage"].clone();
    usage["entries"] = json!(usage["entries"].as_i64().unwrap() + seeded as i64);
    usage["bytes"] = json!(usage["bytes"].as_i64().unwrap() + bytes as i64);
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items});
    let file = node.dir.path().join("seed.json");
    std::fs::write(&file, list.to_string()).unwrap();
    let out = own.kubectl(&["create", "-f", &file.to_string_lossy()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let home_name = home["metadata"]["name"].as_str().unwrap().to_string();
    (seeded, home_name, usage)
}

/// Runs `forget` until it succeeds: it lists the network's objects page by page and
/// removes them all, one request each, and a run cut short by its deadline says how
/// far it got and to run it again. Whether each run succeeded.
fn forget_until_done(node: &Node, conf_file: &Path, network: &str) -> Vec<bool> {
    let mut runs = Vec::new();
    loop {
        let (ok, stdout, stderr) = operator_on(node, conf_file, &["forget", network]);
        runs.push(ok);
        if ok {
            assert!(
                stdout.starts_with(&format!("forgot network {network}")),
                "{stdout}"
            );
            break;
        }
        let said = format!("objects of network {network:?}");
        assert!(
            stderr.contains("code 11")
                && stderr.contains(&said)
                && stderr.contains("run the same command again to remove the rest"),
            "{stderr}"
        );
        assert!(runs.len() < 6, "{runs:?}");
    }
    runs
}

/// A network of more objects than one list answer holds (the store lists 500 a
/// page): `store check` counts every entry of every page, and `forget` removes every
/// object of every page.
#[test]
fn lists_of_several_pages_are_read_whole_by_check_and_forget() {
    // An apiserver of its own: a forget cut short leaves the network's usage rows
    // and entries apart until it is run again, which the other tests' `store check`
    // across the shared apiserver would report.
    let own = KubeApi::start();
    apply_manifests(&own);
    let network = "k-pages";
    let node = Node::new();
    let name = "k-pages-node";
    let kubeconfig = own.kubeconfig_for(&format!("system:node:{name}"), &["system:nodes"]);
    let mut conf = node.netconf(
        "1.1.0",
        &cluster_pool_module(),
        json!({"cidr": "10.81.0.0/16"}),
    );
    conf["name"] = network.into();
    conf["ipam"]["nodeName"] = name.into();
    // A short deadline and a faster rate than the default, so each forget below gets
    // through a few hundred objects in a few seconds.
    conf["ipam"]["deadlineSeconds"] = json!(8);
    conf["ipam"]["store"] = json!({"type": "kubernetes", "kubeconfig": kubeconfig, "qps": 25});
    let conf_file = write_conf(&node, &conf);
    let (seeded, home_name, usage) = seed_700_reservations(&own, &node, &conf_file, network);
    // Entries no usage row counts yet: check names the mismatch (code 104).
    let (ok, stdout, stderr) = operator_on(&node, &conf_file, &["store", "check"]);
    assert!(
        !ok && stderr.contains("code 104")
            && stderr.contains(&format!("network \"{network}\": its usage records")),
        "{stdout}{stderr}"
    );
    let patch = json!({"spec": {"usage": usage}});
    let out = own.kubectl(&[
        "patch",
        "ipamshards",
        &home_name,
        "--type=merge",
        "-p",
        &patch.to_string(),
    ]);
    assert!(out.status.success(), "{out:?}");
    assert!(objects_on(&own, network).len() > 700);

    // check reads every page: the entries it counts agree with the usage rows.
    let (ok, stdout, stderr) = operator_on(&node, &conf_file, &["store", "check"]);
    assert!(ok, "{stdout}{stderr}");
    let held = entries_of(&objects_on(&own, network)).len();
    assert!(held > seeded, "{held}");
    // At 25 a second after a burst of 100, about 300 objects fit one command's 8 s.
    let runs = forget_until_done(&node, &conf_file, network);
    eprintln!("forget of {held} entries in {} runs", runs.len());
    assert!(
        runs.len() >= 2,
        "a removal cut short was run again: {runs:?}"
    );
    assert!(objects_on(&own, network).is_empty(), "every page removed");
}
