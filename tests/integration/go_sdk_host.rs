//! Every type of the handler world through the real host, for a module in Go (the
//! probe in `tests/modules/probe-go`): requests and results of each CNI version,
//! readiness, the store's room to commit, the optional exports through the operator's
//! commands, and the call's deadline.

use crate::go_sdk::probe_go_module;
use crate::harness::*;
use serde_json::{Value, json};
use std::ffi::OsStr;

fn probe_conf(node: &Node, version: &str, probe: Value) -> Value {
    node.netconf(
        version,
        &probe_go_module(),
        json!({"nodeName": "node-go", "probe": probe}),
    )
}

/// The probe's log lines `<what>=<JSON>`, in order.
fn logged(node: &Node, what: &str) -> Vec<Value> {
    let prefix = format!("{what}=");
    node.log_lines("guest")
        .iter()
        .filter_map(|l| {
            l["message"]
                .as_str()?
                .strip_prefix(&prefix)
                .map(str::to_string)
        })
        .map(|json| serde_json::from_str(&json).unwrap())
        .collect()
}

#[test]
fn a_request_arrives_whole_and_a_result_with_every_field_leaves_whole() {
    let node = Node::new();
    let result = json!({
        "ips": [
            {"address": "10.80.0.5/24", "gateway": "10.80.0.1"},
            {"address": "fd80::5/64"}
        ],
        "routes": [
            {"dst": "0.0.0.0/0", "gw": "10.80.0.1", "mtu": 1400, "advmss": 1360, "priority": 7, "table": 100, "scope": 253},
            {"dst": "192.168.0.0/16"},
            {"dst": "::/0", "gw": "fd80::1", "scope": 0}
        ],
        "dns": {
            "nameservers": ["10.80.0.53", "fd80::53"],
            "domain": "example.test",
            "search": ["a.example.test", "b.example.test"],
            "options": ["ndots:2", "edns0"]
        }
    });
    let mut conf = probe_conf(&node, "1.1.0", json!({"echo": true, "result": result}));
    let prev = json!({"cniVersion": "1.1.0", "ips": [{"address": "10.80.0.9/24"}]});
    conf["prevResult"] = prev.clone();
    let reply = Call::new("ADD", "ctr-go")
        .env("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=pod-é;EMPTY=")
        .run(&conf);
    let printed = reply.assert_ok().json.clone().unwrap();
    assert_eq!(printed["ips"], result["ips"]);
    assert_eq!(
        printed["routes"], result["routes"],
        "every route attribute, at cniVersion 1.1.0"
    );
    assert_eq!(printed["dns"], result["dns"]);

    let echoed = &logged(&node, "request")[0];
    let request = &echoed["request"];
    assert_eq!(request["Command"], 0, "add");
    assert_eq!(request["ContainerID"], "ctr-go");
    assert_eq!(request["Netns"], "/var/run/netns/ctr-go");
    assert_eq!(request["Ifname"], "eth0");
    assert_eq!(
        request["Args"],
        json!([
            {"Key": "IgnoreUnknown", "Value": "1"},
            {"Key": "K8S_POD_NAME", "Value": "pod-é"},
            {"Key": "EMPTY", "Value": ""}
        ])
    );
    assert_eq!(request["NetworkName"], "testnet");
    assert_eq!(request["CNIVersion"], "1.1.0");
    let config: Value = serde_json::from_str(request["Config"].as_str().unwrap()).unwrap();
    assert_eq!(config["ipam"]["probe"]["result"], result);
    let prev_result: Value = serde_json::from_str(request["PrevResult"].as_str().unwrap()).unwrap();
    assert_eq!(prev_result, prev);
    assert_eq!(request["NodeName"], "node-go");
    let granted = request["LockGrantedAt"]["Seconds"].as_u64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        granted + 600 > now && granted <= now,
        "lock granted at {granted}, now {now}"
    );
    assert!(request["LockGrantedAt"]["Nanoseconds"].as_u64().unwrap() < 1_000_000_000);
    assert_eq!(echoed["extra"], Value::Null);

    // Without prevResult, at another command.
    let conf = probe_conf(&node, "1.1.0", json!({"echo": true}));
    Call::new("DEL", "ctr-go").run(&conf).assert_ok();
    let request = &logged(&node, "request")[1]["request"];
    assert_eq!(
        (request["Command"].as_u64(), &request["PrevResult"]),
        (Some(1), &Value::Null)
    );
    assert_eq!(request["Args"], json!([]));
}

#[test]
fn gc_hands_the_valid_attachments_over_and_errors_come_back_whole() {
    let node = Node::new();
    let mut conf = probe_conf(&node, "1.1.0", json!({"echo": true}));
    conf["cni.dev/valid-attachments"] = json!([
        {"containerID": "keep-1", "ifname": "eth0"},
        {"containerID": "keep-2", "ifname": "net1"}
    ]);
    Call::new("GC", "").run(&conf).assert_ok();
    let echoed = &logged(&node, "request")[0];
    assert_eq!(echoed["request"]["Command"], 3, "gc");
    assert_eq!(
        echoed["extra"],
        json!([
            {"ContainerID": "keep-1", "Ifname": "eth0"},
            {"ContainerID": "keep-2", "Ifname": "net1"}
        ])
    );
    let long = "m".repeat(900);
    for command in ["ADD", "DEL", "CHECK", "GC"] {
        let error = json!({"code": 142, "msg": long, "details": "the probe's details"});
        let mut conf = probe_conf(&node, "1.1.0", json!({"error": error}));
        conf["cni.dev/valid-attachments"] = json!([]);
        let reply = Call::new(command, "c1").run(&conf);
        assert_eq!(reply.error_code(), 142, "{command}");
        assert_eq!(reply.msg(), long, "{command}");
        assert_eq!(
            reply.json.as_ref().unwrap()["details"],
            "the probe's details",
            "{command}"
        );
    }
}

/// `readiness.degraded`: a list of error records, lowered by the Go glue, reaches
/// the host whole; STATUS (answered by the host, not the module) stays ready and
/// logs it, `strictStatus` fails on it, and an empty list clears it.
#[test]
fn degraded_conditions_reach_status_whole_and_an_empty_list_clears_them() {
    let node = Node::new();
    let conditions = json!([
        {"code": 140, "msg": "pool blue has no address left", "details": "free one with a DEL"},
        {"code": 141, "msg": "pool green is 95% used"}
    ]);
    let conf = probe_conf(&node, "1.1.0", json!({"degraded": conditions}));
    Call::new("ADD", "c1").run(&conf).assert_ok();
    Call::new("STATUS", "").run(&conf).assert_ok();
    let warned: Vec<String> = node
        .log_lines("status")
        .iter()
        .filter(|l| l["level"] == "WARN")
        .filter_map(|l| l["message"].as_str().map(str::to_string))
        .collect();
    for expected in ["pool blue has no address left", "pool green is 95% used"] {
        assert!(
            warned.iter().any(|m| m.contains(expected)),
            "{expected}: {warned:?}"
        );
    }
    let mut strict = conf.clone();
    strict["ipam"]["strictStatus"] = true.into();
    let refused = Call::new("STATUS", "").run(&strict);
    assert_eq!(refused.error_code(), 50, "{refused:?}");
    assert!(
        refused.msg().contains("pool blue has no address left"),
        "{}",
        refused.msg()
    );
    let clear = probe_conf(&node, "1.1.0", json!({"degraded": []}));
    Call::new("DEL", "c1").run(&clear).assert_ok();
    Call::new("STATUS", "").run(&strict).assert_ok();
}

#[test]
fn the_store_stages_writes_reads_them_back_and_commits_them_only_on_ok() {
    let node = Node::new();
    let value: Vec<u8> = vec![0, 1, 127, 128, 255];
    let ops = json!([
        {"op": "put", "key": "k/1", "value": value},
        {"op": "put", "key": "k/2", "value": []},
        {"op": "get", "key": "k/1"},
        {"op": "get", "key": "k/none"},
        {"op": "list", "key": "k/"},
        {"op": "peek", "key": "k/"},
        {"op": "delete", "key": "k/2"},
        {"op": "delete", "key": "k/2"},
        {"op": "put", "key": "k".repeat(1025), "value": [1]},
        {"op": "list", "key": "nothing/"}
    ]);
    Call::new("ADD", "c1")
        .run(&probe_conf(&node, "1.0.0", json!({"store": ops})))
        .assert_ok();
    let answers: Vec<Value> = logged(&node, "store")
        .into_iter()
        .map(|l| l["answer"].clone())
        .collect();
    assert_eq!(answers[0], Value::Null, "put: ok");
    assert_eq!(answers[1], Value::Null, "put of an empty value: ok");
    assert_eq!(
        answers[2],
        json!({"present": true, "value": value}),
        "reads see the call's writes"
    );
    assert_eq!(answers[3], json!({"present": false, "value": []}));
    let listed = json!([["k/1", value], ["k/2", []]]);
    assert_eq!(answers[4], listed);
    assert_eq!(answers[5], listed);
    assert_eq!(answers[6], json!({"present": true, "error": null}));
    assert_eq!(answers[7], json!({"present": false, "error": null}));
    assert_eq!(answers[8]["Code"], 120, "{}", answers[8]);
    assert_eq!(answers[8]["Msg"], "store write refused");
    assert!(
        answers[8]["Details"]
            .as_str()
            .unwrap()
            .contains("key of 1025 bytes"),
        "{}",
        answers[8]
    );
    assert_eq!(answers[9], json!([]));
    let committed = node.store_entries("testnet");
    assert_eq!(
        committed,
        [(
            "k/1".to_string(),
            String::from_utf8_lossy(&value).into_owned()
        )]
    );

    // A call that fails leaves nothing of its writes.
    let failing = json!({
        "store": [{"op": "put", "key": "k/3", "value": [3]}, {"op": "delete", "key": "k/1"}],
        "error": {"code": 150, "msg": "refused"}
    });
    let reply = Call::new("ADD", "c2").run(&probe_conf(&node, "1.0.0", failing));
    assert_eq!(reply.error_code(), 150);
    assert_eq!(node.store_entries("testnet"), committed);
}

/// `store.commit-room`: none on the embedded store; on etcd under `maxTxnOps`, the
/// room left, one less for each key the call reads or writes. And, on the same etcd
/// (release-node is for a store nodes share), `nodes.release-node`'s parameters and
/// report through `wasm-ipam release-node`.
#[test]
fn on_etcd_commit_room_counts_down_and_a_release_report_comes_back_whole() {
    let node = Node::new();
    let ops = json!([{"op": "room"}, {"op": "put", "key": "k/1", "value": [1]}, {"op": "room"}]);
    Call::new("ADD", "c1")
        .run(&probe_conf(&node, "1.1.0", json!({"store": ops})))
        .assert_ok();
    let rooms: Vec<Value> = logged(&node, "store")
        .into_iter()
        .filter(|l| l["op"] == "room")
        .map(|l| l["answer"].clone())
        .collect();
    assert_eq!(rooms, vec![json!({"room": 0, "limited": false}); 2]);

    let etcd = crate::etcd::Etcd::start(1);
    let node = Node::new();
    let mut conf = probe_conf(&node, "1.1.0", json!({"store": ops}));
    conf["ipam"]["store"] = etcd.store("/go-room");
    conf["ipam"]["store"]["maxTxnOps"] = 64.into();
    let ops = json!([
        {"op": "room"},
        {"op": "put", "key": "k/1", "value": [1]},
        {"op": "room"},
        {"op": "get", "key": "k/1"},
        {"op": "get", "key": "k/2"},
        {"op": "room"}
    ]);
    conf["ipam"]["probe"]["store"] = ops;
    Call::new("ADD", "c1").run(&conf).assert_ok();
    let rooms: Vec<u64> = logged(&node, "store")
        .into_iter()
        .filter(|l| l["op"] == "room")
        .map(|l| {
            assert_eq!(l["answer"]["limited"], true, "{l}");
            l["answer"]["room"].as_u64().unwrap()
        })
        .collect();
    assert!(rooms[0] > 2 && rooms[0] <= 64, "{rooms:?}");
    assert_eq!(rooms[1..], [rooms[0] - 1, rooms[0] - 2], "k/1 counts once");

    // The node released must have committed to the store: a call of its own.
    let mut gone = conf.clone();
    gone["ipam"]["nodeName"] = "node-gone".into();
    gone["ipam"]["probe"] = json!({"store": [{"op": "put", "key": "k/gone", "value": [1]}]});
    Call::new("ADD", "c9").run(&gone).assert_ok();
    conf["ipam"]["probe"] = json!({"release": {
        "addresses": [{"address": "10.80.0.7", "containerID": "c9", "ifname": "eth0"}],
        "blocks": ["10.80.0.64/26", "fd80::40/122"],
        "notes": ["kept 10.80.0.9: reserved"]
    }});
    let file = crate::etcd::write_conf(&node, &conf);
    let (ok, out, err) = crate::etcd::operator_on(
        &node,
        &file,
        &["release-node", "node-gone", "--force", "--dry-run"],
    );
    assert!(ok, "{err}");
    for shown in [
        "10.80.0.7",
        "c9",
        "10.80.0.64/26",
        "fd80::40/122",
        "kept 10.80.0.9: reserved",
        "node node-gone, dry run true",
    ] {
        assert!(out.contains(shown), "{shown}: {out}");
    }
}

/// The optional exports through the operator's commands: `list` (inspect.allocations
/// and reservations.all), `stats` (usage.pools), `reserve` and `unreserve`
/// (reservations), `inspect` (capabilities.functions), every record field coming back
/// as the module gave it. (`inspect.pools` the host asks only of a module without
/// `usage`, which every Go SDK module exports: its layout is the wasip1 glue test's.)
#[test]
fn the_operator_commands_read_every_field_of_the_optional_exports() {
    let node = Node::new();
    let probe = json!({
        "allocations": [
            {"address": "10.80.0.5", "containerID": "c1", "ifname": "eth0", "since": 1_700_000_001u64,
             "attributes": [{"name": "node", "value": "node-go"}, {"name": "pool", "value": "default"}]},
            {"address": "fd80::5", "containerID": "c1", "ifname": ""}
        ],
        "usage": [
            {"kind": 0, "name": "pool default", "capacity": 62464, "inUse": 3, "excluded": 1, "coolingDown": 4,
             "reserved": 2, "borrowed": 1, "free": 62454, "warnPercent": 90},
            {"kind": 1, "name": "10.80.0.0/26", "parent": "pool default", "node": "node-go", "capacity": 61,
             "inUse": 18446744073709551615u64}
        ],
        "reservations": [
            {"cidr": "10.80.0.10/32", "note": "the VIP", "since": 1_700_000_002u64, "held": ["10.80.0.10"]}
        ]
    });
    let conf = probe_conf(&node, "1.1.0", probe);
    // A call makes the node's store: the operator commands read it and create none.
    Call::new("DEL", "c0").run(&conf).assert_ok();
    let file = crate::etcd::write_conf(&node, &conf);
    let run = |args: &[&str]| {
        let (ok, out, err) = crate::etcd::operator_on(&node, &file, args);
        assert!(ok, "{args:?}: {err}");
        out
    };
    let listed: Value = serde_json::from_str(&run(&["list", "--json"])).unwrap();
    assert_eq!(
        listed,
        json!([
            {"network": "testnet", "address": "10.80.0.5", "containerID": "c1", "ifname": "eth0",
             "since": 1_700_000_001u64, "attributes": {"node": "node-go", "pool": "default"}},
            {"network": "testnet", "address": "fd80::5", "containerID": "c1", "ifname": "", "since": null}
        ])
    );
    let reserved: Value =
        serde_json::from_str(&run(&["list", "--reservations", "--json"])).unwrap();
    assert_eq!(
        reserved,
        json!([{"network": "testnet", "cidr": "10.80.0.10/32", "note": "the VIP",
                "since": 1_700_000_002u64, "held": ["10.80.0.10"]}])
    );
    let stats: Value = serde_json::from_str(&run(&["stats", "--json", "--blocks"])).unwrap();
    assert_eq!(
        stats[0]["pools"],
        json!([{"network": "testnet", "pool": "pool default", "parent": null, "node": null,
                "capacity": 62464, "in_use": 3, "excluded": 1, "cooling_down": 4, "reserved": 2,
                "borrowed": 1, "free": 62454, "warn_percent": 90}])
    );
    assert_eq!(
        stats[0]["blocks"],
        json!([{"network": "testnet", "pool": "10.80.0.0/26", "parent": "pool default",
                "node": "node-go", "capacity": 61, "in_use": 18446744073709551615u64, "excluded": 0,
                "cooling_down": 0, "reserved": 0, "borrowed": 0, "free": null, "warn_percent": null}])
    );
    let out = run(&["reserve", "10.80.0.11", "--note", "a VIP", "--force"]);
    assert!(out.contains("reserved 10.80.0.11/32 (a VIP)"), "{out}");
    assert!(out.contains("held is in use"), "{out}");
    let out = run(&["unreserve", "10.80.0.11/32"]);
    assert!(
        out.contains("unreserved 10.80.0.11/32 (was reserved)"),
        "{out}"
    );

    let inspected = operator_command([
        OsStr::new("inspect"),
        OsStr::new("--json"),
        probe_go_module().as_os_str(),
    ]);
    let inspected: Value = serde_json::from_str(&inspected).unwrap();
    let origins: Vec<(String, String)> = inspected["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().into(),
                f["origin"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(origins.len(), 12, "{origins:?}");
    for (name, origin) in &origins {
        let expected = if name == "handler.status" {
            "derived"
        } else {
            "module"
        };
        assert_eq!(origin, expected, "{name}");
    }
    assert_eq!(inspected["exports_migrate"], false);
    assert_eq!(inspected["exports_usage"], true);
}

#[test]
fn the_deadline_is_the_calls_budget() {
    let node = Node::new();
    let mut conf = probe_conf(&node, "1.0.0", json!({"deadline": true}));
    conf["ipam"]["deadlineSeconds"] = 7.into();
    Call::new("DEL", "c1").run(&conf).assert_ok();
    let deadline = &logged(&node, "deadline")[0];
    assert_eq!(deadline["budget"], 7_000_000_000u64);
    let remaining = deadline["remaining"].as_u64().unwrap();
    assert!(remaining > 0 && remaining < 7_000_000_000, "{deadline}");
    assert_eq!(deadline["expired"], false);
}
