//! The CNI protocol as a runtime sees it: VERSION, ADD/CHECK/DEL round trips under
//! every supported version, idempotent DEL, GC and STATUS, a clean stdout.

use crate::harness::*;
use serde_json::{Value, json};

#[test]
fn version_lists_supported_versions() {
    let reply = Call::new("VERSION", "").run_raw(b"");
    reply.assert_ok();
    assert_eq!(
        reply.json.unwrap(),
        json!({"cniVersion": "1.1.0", "supportedVersions": ["0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"]})
    );
}

fn range_conf(node: &Node, version: &str) -> Value {
    node.netconf(
        version,
        &host_local_module(),
        json!({"subnet": "10.10.0.0/24", "routes": [{"dst": "0.0.0.0/0"}]}),
    )
}

#[test]
fn add_check_del_round_trip_under_every_version() {
    for version in VERSIONS {
        let node = Node::new();
        let conf = range_conf(&node, version);
        let add = Call::new("ADD", "ctr1").run(&conf);
        add.assert_ok();
        let result = add.json.unwrap();
        assert_eq!(result["cniVersion"], *version);
        assert_eq!(result["ips"][0]["address"], "10.10.0.2/24", "{version}");
        assert_eq!(result["ips"][0]["gateway"], "10.10.0.1");
        assert_eq!(result["routes"], json!([{"dst": "0.0.0.0/0"}]));
        let old = version.starts_with("0.");
        assert_eq!(
            result["ips"][0].get("version").is_some(),
            old,
            "{version}: ips[].version"
        );
        if old {
            assert_eq!(result["ips"][0]["version"], "4");
        }
        let allocated = node.store_entries("testnet");
        assert!(
            allocated
                .iter()
                .any(|(k, v)| k == "ip/10.10.0.2" && v == "ctr1\r\neth0"),
            "{allocated:?}"
        );

        let check = Call::new("CHECK", "ctr1").run(&conf);
        if *version == "0.3.0" || *version == "0.3.1" {
            assert_eq!(check.error_code(), 1, "CHECK needs 0.4.0");
        } else {
            check.assert_ok();
            assert!(check.stdout.is_empty());
            // An attachment that holds nothing fails CHECK.
            Call::new("CHECK", "ctr-unknown").run(&conf).error_code();
        }

        let del = Call::new("DEL", "ctr1").run(&conf);
        del.assert_ok();
        assert!(del.stdout.is_empty());
        assert!(
            !node
                .store_entries("testnet")
                .iter()
                .any(|(k, _)| k.starts_with("ip/")),
            "DEL released the address"
        );
        // DEL is idempotent: nothing allocated is success.
        Call::new("DEL", "ctr1").run(&conf).assert_ok();
    }
}

#[test]
fn del_without_any_allocation_succeeds() {
    let node = Node::new();
    let conf = range_conf(&node, "1.0.0");
    Call::new("DEL", "never-added").run(&conf).assert_ok();
    // DEL may come without a netns (the runtime already removed it).
    Call::new("DEL", "never-added")
        .env("CNI_NETNS", "")
        .run(&conf)
        .assert_ok();
}

#[test]
fn guest_output_never_reaches_stdout() {
    let node = Node::new();
    let conf = node.probe_netconf(json!({"probe": {"print": "noise from the guest"}}));
    let reply = Call::new("ADD", "c1").run(&conf);
    reply.assert_ok();
    assert!(!reply.stdout.contains("noise"), "{}", reply.stdout);
    let guest = node.log_lines("guest");
    assert!(
        guest
            .iter()
            .any(|l| l["message"] == "noise from the guest" && l["stream"] == "stdout"),
        "{guest:?}"
    );
    assert!(
        guest
            .iter()
            .any(|l| l["message"] == "noise from the guest" && l["stream"] == "stderr")
    );
}

#[test]
fn one_log_line_per_invocation() {
    let node = Node::new();
    let conf = node.probe_netconf(json!({}));
    Call::new("ADD", "c1").run(&conf).assert_ok();
    let failing = node.probe_netconf(json!({"probe": {"then": "error"}}));
    Call::new("DEL", "c1").run(&failing).error_code();
    let lines = node.log_lines("invocation");
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["command"], "ADD");
    assert_eq!(lines[0]["container_id"], "c1");
    assert_eq!(lines[0]["outcome"], "ok");
    for key in ["lock_wait_ms", "lock_hold_ms", "budget_used_ms"] {
        assert!(lines[0][key].as_f64().is_some(), "{key} in {:?}", lines[0]);
    }
    assert_eq!(lines[1]["outcome"], "error");
    assert_eq!(lines[1]["error_code"], 142);
}

#[test]
fn gc_and_status_reach_the_module_under_1_1_0() {
    let node = Node::new();
    let mut conf = node.netconf(
        "1.1.0",
        &probe_module(),
        json!({"probe": {"write": ["gc=ran"]}}),
    );
    conf["cni.dev/valid-attachments"] = json!([{"containerID": "c1", "ifname": "eth0"}]);
    Call::new("GC", "").run(&conf).assert_ok();
    assert_eq!(
        node.store_entries("testnet"),
        vec![("gc".to_string(), "ran".to_string())]
    );
    let status = node.netconf("1.1.0", &probe_module(), json!({}));
    Call::new("STATUS", "").run(&status).assert_ok();
    // GC under an older version is refused, as skel does.
    let old = node.probe_netconf(json!({}));
    assert_eq!(Call::new("GC", "").run(&old).error_code(), 1);
}

#[test]
fn concurrent_adds_get_distinct_addresses() {
    let _serial = exclusive();
    let node = Node::new();
    let conf = range_conf(&node, "1.0.0");
    let ids: Vec<String> = (0..50).map(|i| format!("ctr{i}")).collect();
    let children: Vec<_> = ids
        .iter()
        .map(|id| Call::new("ADD", id).spawn(&conf))
        .collect();
    let addresses = distinct_addresses(children);
    assert_eq!(addresses.len(), 50, "50 ADDs got 50 distinct addresses");
    let stored = node.address_entries("testnet").len();
    assert_eq!(stored, 50);
}
