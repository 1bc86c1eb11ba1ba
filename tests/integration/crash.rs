//! Crash consistency: a call killed at any instant — while the very first call
//! creates the store, in the middle of a commit, or at a random point among
//! concurrent calls — leaves the store whole (the old state or the new, never a
//! mix), the lock free, and no address handed out twice or lost.
//!
//! The exact instants come from strace's fault injection, which delivers SIGKILL
//! when the call reaches a given system call; the random ones from a seeded clock.

use crate::harness::*;
use serde_json::{Value, json};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Fills the shared compiled-module cache for `module` and settles it, so the calls
/// below make no writes of the cache's own: a digest is recorded (written and renamed
/// into place) by the first call after its file is older than the racy window, so
/// this waits for that and makes that call.
fn warm(module: &Path, ipam: Value) {
    let node = Node::new();
    let conf = node.netconf("1.0.0", module, ipam);
    Call::new("DEL", "warm").run(&conf).assert_ok();
    let window = wasm_ipam::module::cache::RACY_WINDOW + Duration::from_millis(200);
    let mut files = vec![module.to_path_buf()];
    files.extend(
        std::fs::read_dir(shared_cache_dir())
            .unwrap()
            .map(|e| e.unwrap().path()),
    );
    let newest = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| std::time::UNIX_EPOCH + Duration::new(m.ctime() as u64, m.ctime_nsec() as u32))
        .max()
        .unwrap();
    let settled = newest + window;
    while std::time::SystemTime::now() < settled {
        std::thread::sleep(Duration::from_millis(100));
    }
    Call::new("DEL", "warm").run(&conf).assert_ok();
}

#[test]
fn a_first_call_killed_while_creating_the_store_leaves_none_and_the_next_call_works() {
    let ipam = json!({"subnet": "10.2.0.0/24"});
    warm(&host_local_module(), ipam.clone());
    let database = |node: &Node| {
        node.data_dir()
            .join(wasm_ipam::store::sqlite::DATABASE_FILE)
    };
    // At the temporary database's fsync, and at its rename into place.
    for syscalls in ["fsync", "rename,renameat,renameat2"] {
        let node = Node::new();
        let conf = node.netconf("1.0.0", &host_local_module(), ipam.clone());
        let killed = Call::new("ADD", "c1").run_killed_at(&conf, syscalls, "1");
        assert!(!killed.success, "{syscalls}: the call was not killed");
        assert!(!database(&node).exists(), "{syscalls}: a store appeared");
        let temporary = node
            .data_dir()
            .join(format!("{}.new", wasm_ipam::store::sqlite::DATABASE_FILE));
        assert!(
            temporary.exists(),
            "{syscalls}: the kill missed the store's creation"
        );
        assert!(node.lock_is_free());
        let reply = Call::new("ADD", "c2").run(&conf);
        reply.assert_ok();
        let entries = node.store_entries("testnet");
        assert!(
            entries
                .iter()
                .any(|(k, v)| k.starts_with("ip/") && v.starts_with("c2")),
            "{syscalls}: {entries:?}"
        );
        assert!(
            !entries.iter().any(|(_, v)| v.starts_with("c1")),
            "{entries:?}"
        );
    }
}

#[test]
fn a_call_killed_mid_commit_leaves_all_of_its_writes_or_none() {
    let writes = json!({"probe": {"write": ["k1=one", "k2=two", "k3=three"]}});
    warm(&probe_module(), writes.clone());
    let written: Vec<(String, String)> = ["k1=one", "k2=two", "k3=three"]
        .iter()
        .map(|w| {
            let (k, v) = w.split_once('=').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect();
    // Uncontended, the call writes nothing to the lock's queue: its first pwrites are
    // the log's two frames (a header and a page each, the second frame's header
    // marking the commit), then the fdatasync that makes the commit durable. Killed
    // at each of them in turn.
    let points = [
        ("pwrite64", "1"),
        ("pwrite64", "2"),
        ("pwrite64", "3"),
        ("pwrite64", "4"),
        ("fdatasync", "1"),
    ];
    let mut seen_whole = false;
    for (syscalls, when) in points {
        let (node, before) = node_with_state();
        let conf = node.probe_netconf(writes.clone());
        let killed = Call::new("ADD", "c1").run_killed_at(&conf, syscalls, when);
        assert!(
            !killed.success,
            "{syscalls}#{when}: the call was not killed"
        );
        assert!(node.lock_is_free());
        let after = node.store_entries("testnet");
        let mut whole = before.clone();
        whole.extend(written.iter().cloned());
        whole.sort();
        assert!(
            after == before || after == whole,
            "{syscalls}#{when}: part of a commit survived: {after:?}"
        );
        seen_whole |= after == whole;
        // And the store goes on working.
        let next = node.probe_netconf(json!({"probe": {"write": ["k9=nine"]}}));
        Call::new("ADD", "c2").run(&next).assert_ok();
        assert!(
            node.store_entries("testnet")
                .contains(&("k9".into(), "nine".into()))
        );
    }
    // Killed at the sync, the frames were already written: the commit is whole.
    assert!(seen_whole, "no kill point came after the commit's writes");
}

#[test]
fn calls_killed_at_random_instants_never_double_book_or_leak() {
    let _heavy = exclusive();
    let ipam = json!({"subnet": "10.3.0.0/24"});
    warm(&host_local_module(), ipam.clone());
    let mut rng = Lcg(0x5eed);
    let mut killed_total = 0;
    for round in 0..24 {
        // A fresh node every sixth round, so kills also land in the store's creation.
        let node = Node::new();
        let conf = node.netconf("1.0.0", &host_local_module(), ipam.clone());
        for batch in 0..if round % 6 == 0 { 1 } else { 3 } {
            let ids: Vec<String> = (0..5).map(|i| format!("r{round}b{batch}c{i}")).collect();
            let mut children: Vec<_> = ids
                .iter()
                .map(|id| Call::new("ADD", id).spawn(&conf))
                .collect();
            let victim = rng.next(children.len());
            std::thread::sleep(Duration::from_millis(rng.next(40) as u64));
            let _ = children[victim].kill();
            let mut handed_out = Vec::new();
            for (id, child) in ids.iter().zip(children) {
                let reply = reply(child.wait_with_output().unwrap());
                if reply.success {
                    let address = reply.address().split('/').next().unwrap().to_string();
                    handed_out.push((address, id.clone()));
                } else {
                    killed_total += 1;
                }
            }
            assert!(node.lock_is_free(), "round {round}: the lock is still held");
            // Every address a call was given is in the store, held by that call.
            let entries = node.store_entries("testnet");
            for (address, id) in &handed_out {
                let holder = entries
                    .iter()
                    .find(|(k, _)| *k == format!("ip/{address}"))
                    .map(|(_, v)| v.split("\r\n").next().unwrap().to_string());
                assert_eq!(
                    holder.as_deref(),
                    Some(id.as_str()),
                    "round {round}: {entries:?}"
                );
            }
            // A runtime DELs every ADD it saw fail; after that nothing is left held.
            for id in &ids {
                Call::new("DEL", id).run(&conf).assert_ok();
            }
            let left = node.address_entries("testnet");
            assert!(left.is_empty(), "round {round}: leaked {left:?}");
        }
    }
    assert!(killed_total > 0, "no kill landed before a call finished");
}

/// Runs `scenario` (shell) in a mount namespace of its own, with a 1 MiB tmpfs at
/// `disk` holding the node's lock, store and log, so the test can fill it. Inside,
/// `call COMMAND ID NAME` runs one call as a runtime does, leaving its stdout in
/// `$OUT/NAME.json` and its exit code in `$OUT/NAME.rc`; `fill` fills the disk.
fn on_a_small_disk(scenario: &str) -> (Node, std::path::PathBuf) {
    let node = Node::new();
    let disk = node.dir.path().join("disk");
    let out = node.dir.path().join("out");
    std::fs::create_dir_all(&disk).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    let mut conf = node.netconf(
        "1.0.0",
        &host_local_module(),
        json!({"subnet": "10.4.0.0/24"}),
    );
    for (key, path) in [
        ("lockFile", "run/ipam.lock"),
        ("dataDir", "data"),
        ("logFile", "log/ipam.log"),
    ] {
        conf["ipam"][key] = disk.join(path).to_str().unwrap().into();
    }
    let conf_path = node.dir.path().join("conf.json");
    std::fs::write(&conf_path, conf.to_string()).unwrap();
    let script = format!(
        r#"set -u
mount -t tmpfs -o size=1m wasm-ipam-test "$DISK" || exit 90
call() {{
    env -i CNI_COMMAND="$1" CNI_CONTAINERID="$2" CNI_NETNS="/var/run/netns/$2" \
        CNI_IFNAME=eth0 CNI_PATH=/opt/cni/bin "$BIN" < "$CONF" > "$OUT/$3.json"
    echo $? > "$OUT/$3.rc"
}}
fill() {{ head -c 100M /dev/zero > "$DISK/fill" 2>/dev/null; }}
{scenario}
"#
    );
    let status = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .env("DISK", &disk)
        .env("BIN", bin())
        .env("CONF", &conf_path)
        .env("OUT", &out)
        .status()
        .unwrap();
    assert!(status.success(), "the scenario failed: {status:?}");
    (node, out)
}

/// What call `name` of a scenario printed and exited with.
fn outcome(out: &Path, name: &str) -> (i32, Value) {
    let rc = std::fs::read_to_string(out.join(format!("{name}.rc")))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let text = std::fs::read_to_string(out.join(format!("{name}.json"))).unwrap();
    (rc, serde_json::from_str(&text).unwrap_or(Value::Null))
}

#[test]
fn on_a_full_disk_a_del_with_nothing_to_release_succeeds_and_nothing_is_half_written() {
    warm(&host_local_module(), json!({"subnet": "10.4.0.0/24"}));
    let (_node, out) = on_a_small_disk(
        r#"call ADD c1 add
fill
call DEL unknown del-unknown
call DEL c1 del-c1-full
ls -a "$DISK/data" > "$OUT/data-full"
rm "$DISK/fill"
call DEL c1 del-c1
call ADD c2 add-c2
call ADD c1 add-c1-again
"#,
    );
    assert_eq!(outcome(&out, "add").0, 0, "{:?}", outcome(&out, "add"));
    // host-local succeeds here too: there is nothing to release, so nothing to write.
    assert_eq!(outcome(&out, "del-unknown"), (0, Value::Null));
    // A DEL that must write cannot on a full disk: it fails as an error, and its
    // address stays held until a DEL that can write.
    let (rc, json) = outcome(&out, "del-c1-full");
    if rc != 0 {
        assert_eq!(json["code"], 104, "{json}");
    }
    assert_eq!(outcome(&out, "del-c1").0, 0);
    let (rc, json) = outcome(&out, "add-c2");
    assert_eq!(rc, 0, "{json}");
    // c1's address was released exactly once: the next ADD can have it.
    let (rc, json) = outcome(&out, "add-c1-again");
    assert_eq!(rc, 0, "{json}");
    assert_ne!(
        json["ips"][0]["address"],
        outcome(&out, "add-c2").1["ips"][0]["address"]
    );
}

#[test]
fn a_first_call_on_a_full_disk_fails_cleanly_and_the_next_one_creates_the_store() {
    warm(&host_local_module(), json!({"subnet": "10.4.0.0/24"}));
    let (_node, out) = on_a_small_disk(
        r#"fill
call ADD c1 add-full
ls -a "$DISK/data" > "$OUT/data-full" 2>&1
rm "$DISK/fill"
call ADD c1 add
call ADD c2 add-c2
"#,
    );
    let (rc, json) = outcome(&out, "add-full");
    assert_ne!(rc, 0);
    assert!(json["code"].as_u64().is_some(), "no CNI error JSON: {json}");
    let listed = std::fs::read_to_string(out.join("data-full")).unwrap();
    assert!(
        !listed
            .lines()
            .any(|l| l == wasm_ipam::store::sqlite::DATABASE_FILE),
        "a store was left on the full disk: {listed}"
    );
    let (rc, json) = outcome(&out, "add");
    assert_eq!(rc, 0, "{json}");
    assert_eq!(json["ips"][0]["address"], "10.4.0.2/24");
    assert_eq!(
        outcome(&out, "add-c2").1["ips"][0]["address"],
        "10.4.0.3/24"
    );
}

#[test]
fn a_panic_answers_with_cni_error_json_and_leaves_the_store_whole() {
    // The debug binary under test panics where WASM_IPAM_TEST_PANIC says, standing in
    // for a bug there (release builds have no such hook).
    let writes = json!({"probe": {"write": ["k1=one"]}});
    for (point, committed, code) in [
        ("under-lock", false, 109),
        ("store-commit", false, 104),
        ("after-commit", true, 109),
    ] {
        let (node, before) = node_with_state();
        let conf = node.probe_netconf(writes.clone());
        let reply = Call::new("ADD", "c1")
            .env("WASM_IPAM_TEST_PANIC", point)
            .run(&conf);
        assert_eq!(reply.error_code(), code, "{point}: {reply:?}");
        let json = reply.json.as_ref().unwrap();
        assert_eq!(json["cniVersion"], "1.0.0");
        assert!(json["details"].as_str().unwrap().contains(point), "{json}");
        assert!(!reply.stderr.contains("panicked"), "{}", reply.stderr);
        assert!(node.lock_is_free(), "{point}");
        let mut expected = before.clone();
        if committed {
            expected.push(("k1".into(), "one".into()));
            expected.sort();
        }
        assert_eq!(node.store_entries("testnet"), expected, "{point}");
        Call::new("DEL", "c2").run(&conf).assert_ok();
    }
    // An operator command says so in one line and exits 1.
    let (node, _) = node_with_state();
    let out = Command::new(bin())
        .arg("list")
        .args(node.operator_flags())
        .env("WASM_IPAM_TEST_PANIC", "list")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with("wasm-ipam: internal error"), "{stderr}");
    assert!(node.lock_is_free());
}
