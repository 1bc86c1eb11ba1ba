//! Operators' view and migration, through the binary: `list`, `stats`, exclusions and
//! reuse cooldowns as a node sees them, and moving a node from the real host-local
//! with `import-host-local` without leaking or reusing an address.

use crate::harness::*;
use serde_json::{Value, json};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

fn operator(node: &Node, args: &[&str]) -> String {
    let lock = node.lock_file().to_string_lossy().into_owned();
    operator_command(args.iter().copied().chain(["--lock-file", &lock]))
}

#[test]
fn exclude_and_cooldown_show_in_list_and_stats() {
    let node = Node::new();
    let conf = node.netconf(
        "1.0.0",
        &host_local_module(),
        json!({"subnet": "10.40.0.0/29", "exclude": ["10.40.0.6"], "reuseCooldownSeconds": 3600}),
    );
    assert_eq!(Call::new("ADD", "c1").run(&conf).address(), "10.40.0.2/29");
    assert_eq!(Call::new("ADD", "c2").run(&conf).address(), "10.40.0.3/29");
    Call::new("DEL", "c1").run(&conf).assert_ok();

    let data_dir = node.data_dir().to_string_lossy().into_owned();
    let list: Value = serde_json::from_str(&operator(
        &node,
        &["list", "--json", "--data-dir", &data_dir],
    ))
    .unwrap();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert_eq!(list.as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list[0]["address"], "10.40.0.3");
    assert_eq!(list[0]["containerID"], "c2");
    assert_eq!(list[0]["ifname"], "eth0");
    assert!(
        now.abs_diff(list[0]["since"].as_u64().unwrap()) < 600,
        "{list}"
    );
    let table = operator(
        &node,
        &["list", "--network", "testnet", "--data-dir", &data_dir],
    );
    assert!(
        table.contains("10.40.0.3") && table.contains("c2"),
        "{table}"
    );

    let log = node.log_file().to_string_lossy().into_owned();
    let prom = operator(
        &node,
        &[
            "stats",
            "--prometheus",
            "--data-dir",
            &data_dir,
            "--log-file",
            &log,
        ],
    );
    for line in [
        "wasm_ipam_addresses_capacity{network=\"testnet\"} 5",
        "wasm_ipam_addresses_in_use{network=\"testnet\"} 1",
        "wasm_ipam_addresses_excluded{network=\"testnet\"} 1",
        "wasm_ipam_addresses_cooling_down{network=\"testnet\"} 1",
        "wasm_ipam_addresses_free{network=\"testnet\"} 2",
        "wasm_ipam_lock_wait_seconds_count 3",
        "wasm_ipam_budget_used_seconds_count 3",
    ] {
        assert!(
            prom.lines().any(|l| l == line),
            "missing {line:?} in\n{prom}"
        );
    }
    let table = operator(
        &node,
        &["stats", "--data-dir", &data_dir, "--log-file", &log],
    );
    assert!(
        table.contains("testnet") && table.contains("3 calls"),
        "{table}"
    );

    // The released .2 cools down and .6 is excluded: two addresses left, then none.
    assert_eq!(Call::new("ADD", "c3").run(&conf).address(), "10.40.0.4/29");
    assert_eq!(Call::new("ADD", "c4").run(&conf).address(), "10.40.0.5/29");
    let full = Call::new("ADD", "c5").run(&conf);
    full.error_code();
    assert!(
        full.msg().contains("no IP addresses available"),
        "{}",
        full.msg()
    );
}

/// An ordinary IPv6 exclusion (a /100, 2^28 addresses, inside a /64) costs ADD,
/// STATUS and stats one step, not one per excluded address: with a 10 s budget each
/// call that walked the addresses one by one would run to its deadline.
#[test]
fn a_large_ipv6_exclusion_costs_per_range() {
    let node = Node::new();
    let conf = node.netconf(
        "1.1.0",
        &host_local_module(),
        json!({"subnet": "fd00::/64", "exclude": ["fd00::/100"], "deadlineSeconds": 10}),
    );
    assert_eq!(
        Call::new("ADD", "c1").run(&conf).address(),
        "fd00::1000:0/64"
    );
    Call::new("STATUS", "").run(&conf).assert_ok();
    let line = node.log_lines("invocation").pop().unwrap();
    assert!(line["budget_used_ms"].as_f64().unwrap() < 5000.0, "{line}");
    let data_dir = node.data_dir().to_string_lossy().into_owned();
    let prom = operator(&node, &["stats", "--prometheus", "--data-dir", &data_dir]);
    // 2^28 less fd00:: (not in the range) and the gateway fd00::1 (never handed out).
    assert!(
        prom.contains("wasm_ipam_addresses_excluded{network=\"testnet\"} 268435454"),
        "{prom}"
    );
}

fn host_local(dir: &Path, command: &str, container: &str) -> Reply {
    let conf = json!({"cniVersion": "1.0.0", "name": "testnet", "type": "host-local",
        "ipam": {"type": "host-local", "subnet": "10.41.0.0/24", "dataDir": dir}});
    Call::new(command, container).run_plugin(Path::new("/usr/lib/cni/host-local"), &conf)
}

#[test]
fn import_from_host_local_continues_without_reuse() {
    let node = Node::new();
    let hl = node.dir.path().join("cni-networks");
    for c in ["c1", "c2", "c3"] {
        host_local(&hl, "ADD", c).assert_ok();
    }
    host_local(&hl, "DEL", "c2").assert_ok();

    let (hl_dir, data_dir) = (
        hl.to_string_lossy(),
        node.data_dir().to_string_lossy().into_owned(),
    );
    let import = |how: &[&str]| {
        let mut args = vec![
            "import-host-local",
            "--data-dir",
            &hl_dir,
            "--network",
            "testnet",
            "--store-dir",
            &data_dir,
        ];
        args.extend(how);
        let lock = node.lock_file().to_string_lossy().into_owned();
        operator_output(args.iter().copied().chain(["--lock-file", &lock]))
    };
    // A module without the migrate export cannot take the state over: nothing is written.
    let legacy = legacy_module().to_string_lossy().into_owned();
    let (ok, _, stderr) = import(&["--module", &legacy]);
    assert!(
        !ok && stderr.contains("does not export migrate (cni:ipam/migrate@0.2.0"),
        "{stderr}"
    );
    assert!(node.store_entries("testnet").is_empty());

    // The module the network will run, with its configuration, takes it over: two
    // addresses and host-local's last-reserved marker; host-local's lock file skipped.
    let conf = node.netconf(
        "1.0.0",
        &host_local_module(),
        json!({"subnet": "10.41.0.0/24"}),
    );
    let netconf = node.dir.path().join("testnet.conf");
    std::fs::write(&netconf, conf.to_string()).unwrap();
    let (ok, out, stderr) = import(&["--netconf", &netconf.to_string_lossy()]);
    assert!(ok, "{stderr}");
    assert!(out.contains("testnet: imported 3 entries"), "{out}");
    assert!(
        stderr.contains("lock: host-local's lock file, skipped"),
        "{stderr}"
    );
    // Again: all of it already present, nothing new.
    let (ok, out, _) = import(&["--netconf", &netconf.to_string_lossy()]);
    assert!(
        ok && out.contains("imported 0 entries") && out.contains("3 already present"),
        "{out}"
    );

    let data_dir = node.data_dir().to_string_lossy().into_owned();
    let list: Value = serde_json::from_str(&operator(
        &node,
        &["list", "--json", "--data-dir", &data_dir],
    ))
    .unwrap();
    let held: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["containerID"].as_str().unwrap())
        .collect();
    assert_eq!(held, ["c1", "c3"]);

    // wasm-ipam continues where host-local stopped: the next address is the one host-local
    // would hand out, never one still held.
    let ours = Call::new("ADD", "c4").run(&conf).address().to_string();
    let theirs = host_local(&hl, "ADD", "c4").address().to_string();
    assert_eq!(ours, theirs);
    assert_eq!(ours, "10.41.0.5/24");
    // An imported allocation is released by wasm-ipam's DEL.
    Call::new("DEL", "c1").run(&conf).assert_ok();
    assert!(
        !node
            .store_entries("testnet")
            .iter()
            .any(|(k, _)| k == "ip/10.41.0.2")
    );
}

#[test]
fn list_into_a_closed_pipe_stops_quietly() {
    let node = Node::new();
    let conf = node.netconf(
        "1.0.0",
        &host_local_module(),
        json!({"subnet": "10.41.0.0/24"}),
    );
    Call::new("ADD", "c1").run(&conf).assert_ok();
    // A reader that has gone before anything is written, as `| head -0` becomes.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = std::process::Command::new(bin())
        .arg("list")
        .args(node.operator_flags())
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(stderr.is_empty(), "{stderr}");
}

/// A network whose conflist is gone would stay in `stats` for good: `forget` removes
/// it, but not while its module reports allocations (or cannot be asked), unless forced.
#[test]
fn forget_removes_a_network_only_once_it_holds_nothing() {
    let node = Node::new();
    let conf = node.netconf(
        "1.1.0",
        &host_local_module(),
        json!({"subnet": "10.42.0.0/24"}),
    );
    let mut other = conf.clone();
    other["name"] = "kept".into();
    Call::new("ADD", "c1").run(&conf).assert_ok();
    Call::new("ADD", "c1").run(&other).assert_ok();
    let data_dir = node.data_dir().to_string_lossy().into_owned();
    let lock = node.lock_file().to_string_lossy().into_owned();
    let forget = |extra: &[&str]| {
        let mut args = vec![
            "forget",
            "testnet",
            "--data-dir",
            &data_dir,
            "--lock-file",
            &lock,
        ];
        args.extend(extra);
        operator_output(args)
    };
    let (ok, _, stderr) = forget(&[]);
    assert!(
        !ok && stderr.contains("still holds 1 allocation"),
        "{stderr}"
    );
    Call::new("DEL", "c1").run(&conf).assert_ok();
    let (ok, out, stderr) = forget(&[]);
    assert!(ok, "{stderr}");
    assert!(out.contains("forgot network testnet"), "{out}");
    let stats = operator(&node, &["stats", "--data-dir", &data_dir]);
    assert!(
        !stats.contains("testnet") && stats.contains("kept"),
        "{stats}"
    );
    assert!(stats.contains("no log given"), "{stats}");
    let (ok, _, stderr) = forget(&[]);
    assert!(!ok && stderr.contains("holds nothing"), "{stderr}");

    // A module that can no longer be asked: refused, unless forced.
    Call::new("ADD", "c2").run(&conf).assert_ok();
    let mut gone = conf.clone();
    gone["ipam"]["module"] = node
        .dir
        .path()
        .join("removed.wasm")
        .to_string_lossy()
        .into();
    std::fs::copy(host_local_module(), node.dir.path().join("removed.wasm")).unwrap();
    Call::new("ADD", "c3").run(&gone).assert_ok();
    std::fs::remove_file(node.dir.path().join("removed.wasm")).unwrap();
    let (ok, _, stderr) = forget(&[]);
    assert!(!ok && stderr.contains("cannot tell whether"), "{stderr}");
    let (ok, out, stderr) = forget(&["--force"]);
    assert!(ok, "{stderr}");
    assert!(out.contains("forgot network testnet"), "{out}");
    assert!(node.store_entries("testnet").is_empty());
    assert!(!node.store_entries("kept").is_empty());
}

#[test]
fn list_json_ends_with_a_newline() {
    let node = Node::new();
    let conf = node.netconf(
        "1.1.0",
        &host_local_module(),
        json!({"subnet": "10.43.0.0/24"}),
    );
    Call::new("ADD", "c1").run(&conf).assert_ok();
    let data_dir = node.data_dir().to_string_lossy().into_owned();
    let out = operator(&node, &["list", "--json", "--data-dir", &data_dir]);
    assert!(out.ends_with("]\n"), "{out:?}");
}

#[test]
fn netconf_gives_operator_commands_its_data_dir_and_lock_file() {
    let node = Node::new();
    let conf = node.netconf(
        "1.1.0",
        &host_local_module(),
        json!({"subnet": "10.43.0.0/24"}),
    );
    let address = Call::new("ADD", "c1").run(&conf).address().to_string();
    let conf_file = node.dir.path().join("net.conf");
    std::fs::write(&conf_file, conf.to_string()).unwrap();
    let conf_arg = conf_file.to_string_lossy().into_owned();

    // Only --netconf: its ipam.dataDir holds the allocation.
    let (ok, listed, stderr) = operator_output(["list", "--json", "--netconf", &conf_arg]);
    assert!(ok, "{stderr}");
    let listed: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(
        format!("{}/24", listed[0]["address"].as_str().unwrap()),
        address
    );

    // Its ipam.lockFile is the lock taken: held here, the command waits on it.
    let lock = node.hold_lock();
    let (ok, _, stderr) = operator_output(["list", "--netconf", &conf_arg, "--lock-timeout", "1"]);
    assert!(!ok && stderr.contains("code 11"), "{stderr}");
    lock.unlock().unwrap();

    // A flag still wins over the netconf: its directory, holding no store, is named.
    let elsewhere = node.dir.path().join("elsewhere");
    let (ok, _, stderr) = operator_output([
        "list",
        "--json",
        "--netconf",
        &conf_arg,
        "--data-dir",
        &elsewhere.to_string_lossy(),
    ]);
    assert!(
        !ok && stderr.contains(&format!("no store at {}/store.sqlite", elsewhere.display())),
        "{stderr}"
    );
}

/// Every option `list` and `stats` take is honoured or refused: a network or a node
/// that names nothing is an error listing those that do, never another network's
/// answer or an empty table with exit 0.
#[test]
fn a_network_or_node_that_names_nothing_is_refused_listing_the_known_ones() {
    let node = Node::new();
    let mut conf = node.netconf(
        "1.1.0",
        &host_local_module(),
        json!({"subnet": "10.44.0.0/24", "nodeName": "node-a"}),
    );
    let mut kept = conf.clone();
    kept["name"] = "kept".into();
    kept["ipam"]["subnet"] = "10.45.0.0/24".into();
    Call::new("ADD", "c1").run(&conf).assert_ok();
    Call::new("ADD", "k1").run(&kept).assert_ok();
    let conf_file = node.dir.path().join("net.conf");
    std::fs::write(&conf_file, conf.to_string()).unwrap();
    let conf_arg = conf_file.to_string_lossy().into_owned();
    let data_dir = node.data_dir().to_string_lossy().into_owned();
    let lock = node.lock_file().to_string_lossy().into_owned();
    let run = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--lock-file", &lock]);
        operator_output(all)
    };
    let refused = |args: &[&str], said: &str, known: &str| {
        let (ok, stdout, stderr) = run(args);
        assert!(
            !ok && stdout.is_empty()
                && stderr.contains("code 7")
                && stderr.contains(said)
                && stderr.contains(known),
            "{args:?}: {stdout}{stderr}"
        );
    };
    let known_networks = "(the networks it records: kept, testnet)";
    for command in ["list", "stats"] {
        // With the netconf, a network it does not configure and its store does not
        // record: refused, not the netconf's network listed instead.
        refused(
            &[command, "--netconf", &conf_arg, "--network", "borrow"],
            "no module is recorded for network borrow in store",
            known_networks,
        );
        // A misspelt network in the node's store.
        refused(
            &[command, "--data-dir", &data_dir, "--network", "tesnet"],
            "no module is recorded for network tesnet",
            known_networks,
        );
    }
    // With the netconf, another network its store records is that network.
    let (ok, listed, stderr) = run(&[
        "list",
        "--json",
        "--netconf",
        &conf_arg,
        "--network",
        "kept",
    ]);
    assert!(ok, "{stderr}");
    let listed: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["network"], "kept");
    assert_eq!(listed[0]["containerID"], "k1");

    // A node no network knows: refused, naming the ones they do.
    refused(
        &["list", "--data-dir", &data_dir, "--node", "node-zz"],
        "no network asked knows node node-zz",
        "(the nodes they know: node-a)",
    );
    // The node a network's own store serves holds that network's allocations.
    let (ok, listed, stderr) = run(&[
        "list",
        "--json",
        "--data-dir",
        &data_dir,
        "--node",
        "node-a",
    ]);
    assert!(ok, "{stderr}");
    let listed: Value = serde_json::from_str(&listed).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    // A node with nothing listed but known to a network is an empty answer, not an
    // error: node-b is its netconf's node, whose network holds nothing on it.
    conf["ipam"]["nodeName"] = "node-b".into();
    std::fs::write(&conf_file, conf.to_string()).unwrap();
    Call::new("DEL", "c1").run(&conf).assert_ok();
    let (ok, listed, stderr) = run(&["list", "--json", "--netconf", &conf_arg, "--node", "node-b"]);
    assert!(ok, "{stderr}");
    assert_eq!(listed.trim(), "[]");
    // Reservations have no node: the two are refused together.
    let (ok, _, stderr) = run(&["list", "--reservations", "--node", "node-a"]);
    assert!(!ok && stderr.contains("--node"), "{stderr}");
}
