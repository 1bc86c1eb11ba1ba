//! The module contract across versions: modules built against cni:ipam@0.1.0, 0.2.0
//! and 0.2.5 run side by side on one node; `list` and `stats` ask
//! each network's module (its `inspect` export) and say plainly when it has none;
//! `wasm-ipam inspect` describes a module, which functions it implements and why the
//! host would refuse it.

use crate::harness::*;
use serde_json::{Value, json};
use std::path::Path;

fn named(mut conf: Value, name: &str) -> Value {
    conf["name"] = name.into();
    conf
}

fn list_json(node: &Node, extra: &[&str]) -> (bool, Value, String) {
    let mut args = vec!["list".to_string(), "--json".into()];
    args.extend(node.operator_flags());
    args.extend(extra.iter().map(|s| s.to_string()));
    let (ok, stdout, stderr) = operator_output(&args);
    (ok, serde_json::from_str(&stdout).expect(&stdout), stderr)
}

/// The node's four networks, one a contract version: `legacy` (0.1.0), `v020`
/// (0.2.0, built against the frozen 0.2.0 with wit-bindgen alone: the host, built
/// from 0.2.5, finds its 0.2.0 exports and serves its 0.2.0 imports), and `hl` and
/// `mini` (0.2.5).
struct Networks {
    legacy: Value,
    v0_2_0: Value,
    host_local: Value,
    minimal: Value,
}

fn networks(node: &Node) -> Networks {
    let legacy = named(
        node.netconf(
            "1.1.0",
            &legacy_module(),
            json!({"addresses": ["10.71.0.2/24", "10.71.0.3/24"]}),
        ),
        "legacy",
    );
    let host_local = named(
        node.netconf(
            "1.1.0",
            &host_local_module(),
            json!({"subnet": "10.72.0.0/24"}),
        ),
        "hl",
    );
    let minimal = named(
        node.netconf(
            "1.1.0",
            &minimal_module(),
            json!({"addresses": ["10.73.0.2/29", "10.73.0.3/29"]}),
        ),
        "mini",
    );
    let v0_2_0 = named(
        node.netconf(
            "1.1.0",
            &legacy_v0_2_module(),
            json!({"addresses": ["10.75.0.2/24", "10.75.0.3/24"]}),
        ),
        "v020",
    );
    Networks {
        legacy,
        v0_2_0,
        host_local,
        minimal,
    }
}

/// Every command of the 0.1.0 module, through the same call path, a 0.2.0 module's
/// and the 0.2.5 ones'.
fn check_every_version_answers_its_calls(networks: &Networks) {
    let Networks {
        legacy,
        v0_2_0,
        host_local,
        minimal,
    } = networks;
    assert_eq!(Call::new("ADD", "c1").run(legacy).address(), "10.71.0.2/24");
    assert_eq!(Call::new("ADD", "c2").run(legacy).address(), "10.71.0.3/24");
    assert_eq!(Call::new("ADD", "c3").run(legacy).error_code(), 11);
    Call::new("CHECK", "c1").run(legacy).assert_ok();
    Call::new("DEL", "c1").run(legacy).assert_ok();
    assert_eq!(Call::new("CHECK", "c1").run(legacy).error_code(), 3);
    Call::new("STATUS", "").run(legacy).assert_ok();
    // A 0.2.0 module's.
    assert_eq!(Call::new("ADD", "c1").run(v0_2_0).address(), "10.75.0.2/24");
    assert_eq!(Call::new("ADD", "c2").run(v0_2_0).address(), "10.75.0.3/24");
    Call::new("CHECK", "c2").run(v0_2_0).assert_ok();
    Call::new("DEL", "c1").run(v0_2_0).assert_ok();
    Call::new("STATUS", "").run(v0_2_0).assert_ok();
    // And the 0.2.5 ones.
    assert_eq!(
        Call::new("ADD", "c1").run(host_local).address(),
        "10.72.0.2/24"
    );
    assert_eq!(
        Call::new("ADD", "c1").run(minimal).address(),
        "10.73.0.2/29"
    );
    Call::new("DEL", "c1").run(minimal).assert_ok();
    Call::new("DEL", "c1").run(minimal).assert_ok();
    Call::new("ADD", "c9").run(minimal).assert_ok();
}

/// `list` asks each network's module: the 0.2.x ones answer, the 0.1.0 one cannot,
/// says so, and makes the command fail without hiding the others.
fn check_list_asks_each_module(node: &Node) {
    let (ok, list, stderr) = list_json(node, &[]);
    assert!(!ok, "a network could not be listed: exit 1");
    assert!(
        stderr.contains("network legacy")
            && stderr.contains("does not export inspect")
            && stderr.contains("cni:ipam@0.1.0"),
        "{stderr}"
    );
    let rows: Vec<(&str, &str, &str)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["network"].as_str().unwrap(),
                a["address"].as_str().unwrap(),
                a["containerID"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(rows.len(), 3, "{list}");
    assert_eq!(rows[0], ("hl", "10.72.0.2", "c1"));
    assert_eq!(rows[1].0, "mini");
    assert_eq!(rows[1].2, "c9");
    assert_eq!(
        rows[2],
        ("v020", "10.75.0.3", "c2"),
        "its 0.2.0 inspect answered"
    );
}

/// One network at a time, and `stats` likewise; a 0.2.0 module (`v0_2_0`) keeps no
/// reservations: reserve says so and changes nothing.
fn check_one_network_stats_and_reserve(node: &Node, v0_2_0: &Value) {
    let (ok, list, stderr) = list_json(node, &["--network", "hl"]);
    assert!(ok, "{stderr}");
    assert_eq!(list.as_array().unwrap().len(), 1);
    let mut args = vec!["stats".to_string(), "--network".into(), "legacy".into()];
    args.extend(node.operator_flags());
    let (ok, _, stderr) = operator_output(&args);
    assert!(
        !ok && stderr.contains("does not export inspect"),
        "{stderr}"
    );
    let file = node.dir.path().join("v020.json");
    std::fs::write(&file, v0_2_0.to_string()).unwrap();
    let mut args = vec![
        "reserve".to_string(),
        "10.75.0.9".into(),
        "--netconf".into(),
        file.display().to_string(),
    ];
    args.extend(node.operator_flags());
    let (ok, _, stderr) = operator_output(&args);
    assert!(
        !ok && stderr.contains("does not export reservations"),
        "{stderr}"
    );
    let mut args = vec!["stats".to_string(), "--prometheus".into()];
    args.extend(node.operator_flags());
    let (_, prom, _) = operator_output(&args);
    for line in [
        "wasm_ipam_addresses_in_use{network=\"hl\"} 1",
        "wasm_ipam_addresses_in_use{network=\"mini\"} 1",
    ] {
        assert!(
            prom.lines().any(|l| l == line),
            "missing {line:?} in\n{prom}"
        );
    }
    assert!(!prom.contains("network=\"legacy\""), "{prom}");
}

#[test]
fn modules_of_every_contract_version_run_side_by_side() {
    let node = Node::new();
    let networks = networks(&node);
    check_every_version_answers_its_calls(&networks);
    check_list_asks_each_module(&node);
    check_one_network_stats_and_reserve(&node, &networks.v0_2_0);
}

#[test]
fn list_never_writes_and_a_network_without_a_record_needs_its_netconf() {
    let node = Node::new();
    let conf = node.netconf(
        "1.0.0",
        &host_local_module(),
        json!({"subnet": "10.74.0.0/24"}),
    );
    Call::new("ADD", "c1").run(&conf).assert_ok();
    let before = node.store_entries("testnet");
    let (ok, list, stderr) = list_json(&node, &[]);
    assert!(ok, "{stderr}");
    assert_eq!(list[0]["containerID"], "c1");
    assert_eq!(node.store_entries("testnet"), before, "list wrote nothing");

    // A network no call has committed to since 0.2 is not recorded: `--netconf` names
    // its module.
    let (ok, _, stderr) = operator_output(
        ["list", "--network", "nobody"]
            .iter()
            .map(|s| s.to_string())
            .chain(node.operator_flags()),
    );
    assert!(!ok && stderr.contains("--netconf"), "{stderr}");
    let netconf = node.dir.path().join("net.conflist");
    let conflist = json!({"cniVersion": "1.0.0", "name": "testnet",
        "plugins": [{"type": "bridge", "ipam": conf["ipam"].clone()}]});
    std::fs::write(&netconf, conflist.to_string()).unwrap();
    let (ok, list, stderr) = list_json(&node, &["--netconf", &netconf.to_string_lossy()]);
    assert!(ok, "{stderr}");
    assert_eq!(list[0]["address"], "10.74.0.2");
}

fn describe(node: &Node, module: &Path) -> (bool, Value) {
    let cache = node.dir.path().join("cache").to_string_lossy().into_owned();
    let (ok, stdout, stderr) = operator_output([
        "inspect".as_ref(),
        module.as_os_str(),
        "--json".as_ref(),
        "--cache-dir".as_ref(),
        cache.as_ref(),
    ]);
    (
        ok,
        serde_json::from_str(&stdout).unwrap_or_else(|_| panic!("{stdout} {stderr}")),
    )
}

fn text(node: &Node, module: &Path) -> String {
    let cache = node.dir.path().join("cache").to_string_lossy().into_owned();
    let (ok, stdout, stderr) = operator_output([
        "inspect".as_ref(),
        module.as_os_str(),
        "--cache-dir".as_ref(),
        cache.as_ref(),
    ]);
    assert!(ok, "{stdout} {stderr}");
    stdout
}

fn origin(description: &Value, function: &str) -> String {
    let functions = description["functions"].as_array().expect("functions");
    let found = functions.iter().find(|f| f["name"] == function);
    found.unwrap_or_else(|| panic!("{function} in {description}"))["origin"]
        .as_str()
        .unwrap()
        .to_string()
}

/// An SDK module exports every interface; `inspect` tells its own functions from the
/// SDK's defaults by the module's `capabilities`, not by its exports.
#[test]
fn inspect_tells_what_a_module_implements_from_its_defaults() {
    let node = Node::new();
    let (ok, minimal) = describe(&node, &minimal_module());
    assert!(ok, "{minimal}");
    assert_eq!(minimal["exports_migrate"], true, "exported all the same");
    assert_eq!(origin(&minimal, "migrate.import-state"), "not-implemented");
    assert_eq!(origin(&minimal, "nodes.release-node"), "not-implemented");
    assert_eq!(origin(&minimal, "inspect.allocations"), "module");
    assert_eq!(origin(&minimal, "handler.check"), "derived");
    assert_eq!(origin(&minimal, "reservations.reserve"), "not-implemented");
    assert_eq!(origin(&minimal, "usage.pools"), "derived");
    let printed = text(&node, &minimal_module());
    for line in [
        "inspect      yes ",
        "migrate      default (not implemented) ",
        "nodes        default (not implemented) ",
        "reservations default (not implemented) ",
        "usage        default (built on what it implements) ",
    ] {
        assert!(printed.contains(line), "{line:?} not in:\n{printed}");
    }

    let (ok, host_local) = describe(&node, &host_local_module());
    assert!(ok, "{host_local}");
    assert_eq!(origin(&host_local, "migrate.import-state"), "module");
    assert_eq!(origin(&host_local, "handler.gc"), "module");
    assert_eq!(origin(&host_local, "nodes.release-node"), "not-implemented");
    let printed = text(&node, &host_local_module());
    assert!(printed.contains("migrate      yes "), "{printed}");
    assert!(
        printed.contains("nodes        default (not implemented) "),
        "{printed}"
    );
}

#[test]
fn inspect_describes_a_module_and_why_it_is_refused() {
    let node = Node::new();
    let (ok, d) = describe(&node, &host_local_module());
    assert!(ok, "{d}");
    assert_eq!(d["contract"], "cni:ipam@0.2.5");
    assert_eq!(d["exports_inspect"], true);
    assert_eq!(d["exports_migrate"], true);
    assert_eq!(d["exports_nodes"], true);
    assert_eq!(d["exports_reservations"], true);
    assert_eq!(d["exports_usage"], true);
    assert_eq!(d["accepted"], true);
    assert_eq!(d["cached_before"], false);
    assert_eq!(d["compile"]["how"], "compiled");
    assert_eq!(d["sha256"].as_str().unwrap().len(), 64, "{}", d["sha256"]);
    assert!(
        d["imports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["name"] == "cni:ipam/store@0.2.5" && i["provided"] == true),
        "{d}"
    );
    // Described again, it comes from the cache the first run filled.
    let (_, d) = describe(&node, &host_local_module());
    assert_eq!(d["cached_before"], true);
    assert_eq!(d["compile"]["how"], "cache");

    let (ok, d) = describe(&node, &legacy_module());
    assert!(ok);
    assert_eq!(d["contract"], "cni:ipam@0.1.0");
    assert_eq!(d["exports_inspect"], false);

    // A 0.2.0 module: accepted, its 0.2.0 imports provided, no `nodes`.
    let (ok, d) = describe(&node, &legacy_v0_2_module());
    assert!(ok, "{d}");
    assert_eq!(d["contract"], "cni:ipam@0.2.0");
    assert_eq!(d["exports_inspect"], true);
    assert_eq!(d["exports_nodes"], false);
    // It cannot say which functions it implements: its exports are all `inspect` knows.
    assert!(d["functions"].is_null(), "{d}");
    assert!(
        d["functions_unknown"]
            .as_str()
            .unwrap()
            .contains("does not export cni:ipam/capabilities"),
        "{d}"
    );
    assert!(
        text(&node, &legacy_v0_2_module())
            .contains("migrate      exported (implemented or not: unknown)"),
    );
    assert!(
        d["imports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["name"] == "cni:ipam/store@0.2.0" && i["provided"] == true),
        "{d}"
    );

    // A patch version newer than the host's may export what it cannot call: refused,
    // saying which versions it runs.
    let path = node.dir.path().join("newer.wasm");
    let component = wat::parse_str(
        r#"(component
             (core module $m (func (export "f")))
             (core instance $i (instantiate $m))
             (func $f (canon lift (core func $i "f")))
             (instance $h (export "status" (func $f)))
             (export "cni:ipam/handler@0.2.9" (instance $h)))"#,
    )
    .unwrap();
    std::fs::write(&path, component).unwrap();
    let (ok, d) = describe(&node, &path);
    assert!(!ok);
    assert!(d["contract"].is_null(), "{d}");
    assert!(
        d["refused_because"]
            .as_str()
            .unwrap()
            .contains("cni:ipam/handler the host runs (0.2.0 to 0.2.5, or 0.1.0)"),
        "{d}"
    );

    // Refused: an import the host does not provide, named; exit status 1.
    let path = node.dir.path().join("imports.wasm");
    let component =
        wat::parse_str(r#"(component (import "evil:net/raw-socket@1.0.0" (instance)))"#).unwrap();
    std::fs::write(&path, component).unwrap();
    let (ok, d) = describe(&node, &path);
    assert!(!ok);
    assert_eq!(d["accepted"], false);
    assert_eq!(d["imports"][0]["provided"], false);
    assert!(
        d["refused_because"]
            .as_str()
            .unwrap()
            .contains("evil:net/raw-socket@1.0.0"),
        "{d}"
    );
    // Not a component at all: why, as a call would say it.
    std::fs::write(&path, b"\0asm\x01\0\0\0").unwrap();
    let (ok, d) = describe(&node, &path);
    assert!(!ok);
    assert!(
        d["refused_because"].as_str().unwrap().contains("code 100"),
        "{d}"
    );
    assert!(d["contract"].is_null());
}

/// The request names the node: `ipam.nodeName`, else the machine's hostname. A bad
/// `nodeName` is the netconf's error (7), found before anything runs.
#[test]
fn the_request_carries_the_node_name() {
    let node = Node::new();
    let node_names = |node: &Node| -> Vec<String> {
        node.log_lines("guest")
            .iter()
            .filter_map(|l| {
                l["message"]
                    .as_str()?
                    .strip_prefix("node_name=")
                    .map(String::from)
            })
            .collect()
    };
    let conf = node.netconf(
        "1.1.0",
        &probe_module(),
        json!({"probe": {"reportNode": true}}),
    );
    Call::new("ADD", "c1").run(&conf).assert_ok();
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(node_names(&node), [hostname.trim()]);

    let mut conf = conf;
    conf["ipam"]["nodeName"] = "worker-7".into();
    Call::new("ADD", "c2").run(&conf).assert_ok();
    assert_eq!(node_names(&node).last().unwrap(), "worker-7");

    for bad in [json!(""), json!("a\nb"), json!("x".repeat(254)), json!(7)] {
        conf["ipam"]["nodeName"] = bad.clone();
        assert_eq!(Call::new("ADD", "c3").run(&conf).error_code(), 7, "{bad}");
    }
}

/// `list` asks a stranger's code under the host-wide lock, so it gets what a CNI call
/// gets: the network's deadline from the grant (a module that never answers is stopped
/// with 103 and the lock is free again), no writes (refused, nothing committed), and
/// an answer bounded before it reaches a terminal.
#[test]
fn inspect_is_bounded_and_read_only() {
    let node = Node::new();
    let conf = |inspect: &str| {
        let mut conf = node.netconf(
            "1.1.0",
            &probe_module(),
            json!({"deadlineSeconds": 2, "probe": {"inspect": inspect, "write": ["ip/10.99.0.2=c1"]}}),
        );
        conf["name"] = inspect.into();
        conf
    };
    for inspect in ["write", "spin", "garbage", "list"] {
        Call::new("ADD", "c1").run(&conf(inspect)).assert_ok();
    }
    let before: Vec<_> = ["write", "spin"].map(|n| node.store_entries(n)).into();

    let list = |network: &str| {
        let mut args = vec!["list".to_string(), "--network".into(), network.into()];
        args.extend(node.operator_flags());
        operator_output(&args)
    };
    let (ok, _, stderr) = list("write");
    assert!(!ok, "a refused write fails the module's answer");
    assert!(
        stderr.contains("code 120") && stderr.contains("may only read"),
        "{stderr}"
    );

    let started = std::time::Instant::now();
    let (ok, _, stderr) = list("spin");
    assert!(!ok && stderr.contains("code 103"), "{stderr}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "stopped at its 2 s deadline, not left running: {:?}",
        started.elapsed()
    );
    assert!(node.lock_is_free());
    let after: Vec<_> = ["write", "spin"].map(|n| node.store_entries(n)).into();
    assert_eq!(before, after, "inspect committed nothing");

    let (ok, table, stderr) = list("garbage");
    assert!(!ok, "a dropped allocation is reported");
    assert!(stderr.contains("not an IP address"), "{stderr}");
    assert!(table.contains("evil\\u{1b}[2J"), "escaped: {table}");
    assert!(!table.contains('\u{1b}'), "{table}");
    assert!(table.contains("18446744073709551615"), "{table}");

    let (ok, table, stderr) = list("list");
    assert!(ok, "{stderr}");
    assert!(
        table.contains("10.99.0.2") && table.contains("c1"),
        "{table}"
    );
}
