//! Every operator command that runs a module goes through the one locked pipeline a
//! CNI call goes through, seen from outside in the system calls it makes: the store is
//! opened only while the host-wide lock is held, a commit is synced only after the
//! lock is released, and each run writes the `invocation` log line a call writes,
//! named by its command. Also `gc` for runtimes without CRI (`--valid-from`), through
//! the binary.

use crate::harness::*;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

/// Runs `wasm-ipam ARGS` under strace; (succeeded, stderr, the trace's lines).
fn traced(args: &[&str]) -> (bool, String, Vec<String>) {
    let trace = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new("strace")
        .args(["-f", "-y", "-e", "trace=flock,openat,close,fdatasync", "-o"])
        .arg(trace.path())
        .arg(bin())
        .args(args)
        .output()
        .expect("run strace");
    let lines = std::fs::read_to_string(trace.path())
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        lines,
    )
}

/// What one line of the trace does to the order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Granted,
    Released,
    StoreOpened,
    CommitSynced,
}

/// The trace as lock grants and releases, store opens and syncs of the store's log.
fn events(lines: &[String], node: &Node) -> Vec<Event> {
    let lock = format!("<{}>", node.lock_file().display());
    let store = node
        .data_dir()
        .join(wasm_ipam::store::sqlite::DATABASE_FILE);
    let wal = format!("<{}-wal>", store.display());
    let store = format!("\"{}\"", store.display());
    lines
        .iter()
        .filter_map(|l| {
            if l.contains("flock(") && l.contains(&lock) && l.contains("LOCK_EX") {
                Some(Event::Granted)
            } else if l.contains("close(") && l.contains(&lock) {
                Some(Event::Released)
            } else if l.contains("openat(") && l.contains(&store) && !l.contains("ENOENT") {
                Some(Event::StoreOpened)
            } else if l.contains("fdatasync(") && l.contains(&wal) && !l.contains(" resumed>") {
                Some(Event::CommitSynced)
            } else {
                None
            }
        })
        .collect()
}

/// The order every run keeps: the store is opened only under the lock, and the log is
/// synced only outside it. Returns how many commits were synced.
fn assert_pipeline_order(command: &str, events: &[Event]) -> usize {
    let mut held = false;
    let mut synced = 0;
    for (i, event) in events.iter().enumerate() {
        match event {
            Event::Granted => held = true,
            Event::Released => held = false,
            Event::StoreOpened => assert!(
                held,
                "{command}: the store was opened without the lock (event {i} of {events:?})"
            ),
            Event::CommitSynced => {
                assert!(
                    !held,
                    "{command}: a commit was synced under the lock (event {i} of {events:?})"
                );
                synced += 1;
            }
        }
    }
    assert!(
        events.contains(&Event::Granted) && events.contains(&Event::StoreOpened),
        "{command}: no locked run seen in {events:?}"
    );
    synced
}

fn with_node(node: &Node, args: &[&str]) -> Vec<String> {
    let mut all: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    all.extend(node.operator_flags());
    all
}

/// The `invocation` log lines of operator command `command`.
fn logged(node: &Node, command: &str) -> Vec<Value> {
    node.log_lines("invocation")
        .into_iter()
        .filter(|l| l["command"] == command)
        .collect()
}

#[test]
fn operator_commands_keep_the_call_order_and_write_its_log_line() {
    let node = Node::new();
    let conf = node.netconf(
        "1.0.0",
        &host_local_module(),
        json!({"subnet": "10.45.0.0/24"}),
    );
    Call::new("ADD", "live").run(&conf).assert_ok();
    Call::new("ADD", "lost").run(&conf).assert_ok();

    for command in ["list", "stats"] {
        let args = with_node(&node, &[command]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, stderr, lines) = traced(&args);
        assert!(ok, "{command}: {stderr}");
        let synced = assert_pipeline_order(command, &events(&lines, &node));
        assert_eq!(synced, 0, "{command} only reads");
        let line = logged(&node, command);
        assert_eq!(line.len(), 1, "{command}: {line:?}");
        assert_eq!(line[0]["outcome"], "ok");
        assert_eq!(line[0]["network"], "testnet");
        assert!(line[0]["lock_hold_ms"].as_f64().unwrap() > 0.0, "{line:?}");
    }

    // gc for a runtime without CRI: the live ids from a file. Releases `lost` alone.
    let valid = node.dir.path().join("live-ids");
    std::fs::write(&valid, "live\n").unwrap();
    let valid = valid.to_string_lossy().into_owned();
    let args = with_node(
        &node,
        &[
            "gc",
            "--network",
            "testnet",
            "--valid-from",
            &valid,
            "--grace",
            "0s",
            "--json",
        ],
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, stderr, lines) = traced(&args);
    assert!(ok, "gc: {stderr}");
    assert_eq!(assert_pipeline_order("gc", &events(&lines, &node)), 1);
    let entries = node.store_entries("testnet");
    assert!(
        entries.iter().any(|(_, v)| v.starts_with("live"))
            && !entries.iter().any(|(_, v)| v.starts_with("lost")),
        "{entries:?}"
    );
    assert!(logged(&node, "gc").iter().all(|l| l["outcome"] == "ok"));
    let released = node.log_lines("gc");
    assert_eq!(released.len(), 1, "{released:?}");
    assert_eq!(released[0]["container_id"], "lost");
    assert_eq!(released[0]["address"], "10.45.0.3");

    // forget: refused while an address is held; then, once released, forgotten under
    // the lock and synced after it.
    let args = with_node(&node, &["forget", "testnet"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, stderr, _) = traced(&args);
    assert!(
        !ok && stderr.contains("still holds 1 allocation"),
        "{stderr}"
    );
    Call::new("DEL", "live").run(&conf).assert_ok();
    let (ok, stderr, lines) = traced(&args);
    assert!(ok, "forget: {stderr}");
    assert_eq!(assert_pipeline_order("forget", &events(&lines, &node)), 1);
    assert!(node.store_entries("testnet").is_empty());
    let outcomes: Vec<Value> = logged(&node, "forget")
        .iter()
        .map(|l| l["outcome"].clone())
        .collect();
    assert_eq!(outcomes, [json!("error"), json!("ok")]);

    // import-host-local commits the module's writes: synced after the release.
    let hl = node.dir.path().join("cni-networks");
    let host_local = |command: &str, container: &str| {
        let conf = json!({"cniVersion": "1.0.0", "name": "testnet", "type": "host-local",
            "ipam": {"type": "host-local", "subnet": "10.45.0.0/24", "dataDir": hl}});
        Call::new(command, container)
            .run_plugin(Path::new("/usr/lib/cni/host-local"), &conf)
            .assert_ok();
    };
    host_local("ADD", "from-host-local");
    let netconf = node.dir.path().join("testnet.conf");
    std::fs::write(&netconf, conf.to_string()).unwrap();
    let (hl, netconf) = (
        hl.to_string_lossy().into_owned(),
        netconf.to_string_lossy().into_owned(),
    );
    let args = [
        "import-host-local",
        "--data-dir",
        &hl,
        "--network",
        "testnet",
        "--netconf",
        &netconf,
        "--store-dir",
        &node.data_dir().to_string_lossy(),
        "--lock-file",
        &node.lock_file().to_string_lossy(),
    ]
    .map(|a| a.to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, stderr, lines) = traced(&args);
    assert!(ok, "import-host-local: {stderr}");
    assert_eq!(
        assert_pipeline_order("import-host-local", &events(&lines, &node)),
        1
    );
    assert_eq!(logged(&node, "import-host-local").len(), 1);
}

#[test]
fn gc_from_a_file_keeps_young_and_listed_attachments_and_refuses_an_empty_list() {
    let node = Node::new();
    let conf = node.netconf(
        "1.0.0",
        &host_local_module(),
        json!({"subnet": "10.46.0.0/24"}),
    );
    for c in ["a", "b"] {
        Call::new("ADD", c).run(&conf).assert_ok();
    }
    let ids = node.dir.path().join("ids");
    let gc = |listed: &str, extra: &[&str]| {
        std::fs::write(&ids, listed).unwrap();
        let ids = ids.to_string_lossy().into_owned();
        let mut args = vec!["gc", "--network", "testnet", "--valid-from", &ids, "--json"];
        args.extend(extra);
        let args = with_node(&node, &args);
        operator_output(&args)
    };
    // Young: the default grace keeps both, though the runtime lists neither.
    let (ok, stdout, stderr) = gc("other\n", &[]);
    assert!(ok, "{stderr}");
    assert_eq!(serde_json::from_str::<Value>(&stdout).unwrap(), json!([]));
    // An empty list looks like a wrong runtime: nothing released, and it says so.
    let (ok, _, stderr) = gc("", &["--grace", "0s"]);
    assert!(!ok && stderr.contains("--allow-empty"), "{stderr}");
    let list = with_node(&node, &["list", "--json"]);
    let listed: Value = serde_json::from_str(&operator_command(&list)).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    // `stats` counts the leak candidates when given the runtime's view.
    std::fs::write(&ids, "a\n").unwrap();
    let ids_path = ids.to_string_lossy().into_owned();
    let stats = |extra: &[&str]| {
        let mut args = vec!["stats", "--valid-from", &ids_path];
        args.extend(extra);
        operator_command(with_node(&node, &args))
    };
    let prom = stats(&["--prometheus", "--grace", "0s"]);
    assert!(
        prom.contains("wasm_ipam_leak_candidates{network=\"testnet\"} 1\n"),
        "{prom}"
    );
    let table = stats(&[]);
    assert!(table.contains("LEAKS"), "{table}");
    let row = table.lines().find(|l| l.starts_with("testnet")).unwrap();
    assert!(row.ends_with(" 0"), "young with the default grace: {table}");
    // The dry run names the leak (full id, ifname, address) and changes nothing.
    let (ok, stdout, stderr) = gc("a\n", &["--grace", "0s", "--dry-run"]);
    assert!(ok, "{stderr}");
    let leaks: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(leaks.as_array().unwrap().len(), 1, "{leaks}");
    assert_eq!(leaks[0]["containerID"], "b");
    assert_eq!(leaks[0]["ifname"], "eth0");
    assert_eq!(leaks[0]["address"], "10.46.0.3");
    assert_eq!(leaks[0]["released"], false);
    let (ok, stdout, _) = gc("a\n", &["--grace", "0s"]);
    assert!(ok);
    let leaks: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(leaks[0]["released"], true, "{leaks}");
    let held: Vec<String> = node
        .store_entries("testnet")
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert!(
        held.iter().any(|v| v.starts_with('a')) && !held.iter().any(|v| v.starts_with('b')),
        "{held:?}"
    );
}
