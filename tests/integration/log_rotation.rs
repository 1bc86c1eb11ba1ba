//! The log over time (`logMaxMiB`, `logFiles`): it stays within its files however many
//! calls write to it, one at a time or in a herd, every line whole and in exactly one
//! file; an external logrotate still works; `stats` reads the renamed files; and a log
//! that cannot be written never fails a call.

use crate::harness::*;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const MIB: u64 = 1 << 20;
/// The longest line the host writes: a 4 KiB module message and its JSON.
const LONGEST_LINE: u64 = 4096 + 512;

/// `log` and its renamed files `log.1` … `log.<kept>`, those that exist.
fn log_files(log: &Path, kept: u32) -> Vec<PathBuf> {
    std::iter::once(log.to_path_buf())
        .chain((1..=kept).map(|n| wasm_ipam::log_rotation::rotated(log, n)))
        .filter(|p| p.exists())
        .collect()
}

/// Every line of `files`, parsed: a line cut in half or two glued together fails here.
fn lines(files: &[PathBuf]) -> Vec<Value> {
    files
        .iter()
        .flat_map(|f| {
            let text = std::fs::read_to_string(f).unwrap();
            text.lines()
                .map(|l| {
                    serde_json::from_str::<Value>(l).unwrap_or_else(|e| {
                        panic!("{}: a line that is not JSON ({e}): {l:.200}", f.display())
                    })
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// How many invocation lines each container id has across `files`.
fn calls_by_container(files: &[PathBuf]) -> HashMap<String, usize> {
    let mut calls = HashMap::new();
    for line in lines(files) {
        if line["target"] == "invocation" {
            *calls
                .entry(line["container_id"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
    }
    calls
}

fn size(files: &[PathBuf]) -> u64 {
    files
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum()
}

/// A netconf whose module logs about `kib` KiB a call, rotating at 1 MiB.
fn logging_conf(node: &Node, kib: u64, kept: u32) -> Value {
    node.probe_netconf(json!({
        "logMaxMiB": 1,
        "logFiles": kept,
        "probe": {"logMessages": kib / 2, "logBytes": 2000},
    }))
}

#[test]
fn the_log_stays_within_its_files_over_many_calls_and_stats_reads_them_all() {
    let _heavy = exclusive();
    let node = Node::new();
    let log = node.log_file();
    // ~100 KiB a call: the 1 MiB file fills every ~10 calls, so 60 calls rotate it
    // five times and remove the oldest file three times.
    let conf = logging_conf(&node, 100, 2);
    let calls = 60;
    for i in 0..calls {
        Call::new("ADD", &format!("c{i}")).run(&conf).assert_ok();
        let files = log_files(&log, 3);
        assert!(files.len() <= 3, "more than logFiles + 1 files: {files:?}");
        // Each file stops at the first line written after it reached 1 MiB.
        let bound = 3 * (MIB + LONGEST_LINE);
        assert!(
            size(&files) <= bound,
            "after call {i}: {} bytes over {bound}",
            size(&files)
        );
    }
    let files = log_files(&log, 2);
    assert_eq!(files.len(), 3, "the log was never rotated twice");
    let logged = calls_by_container(&files);
    assert!(
        logged.values().all(|&n| n == 1),
        "a call logged twice: {logged:?}"
    );
    // Two full files and the current one hold well over the last 15 calls (~1.5 MiB).
    for i in calls - 15..calls {
        assert!(
            logged.contains_key(&format!("c{i}")),
            "call c{i}'s line is gone"
        );
    }
    assert!(
        !logged.contains_key("c0"),
        "the oldest file was never removed"
    );

    let data_dir = node.data_dir();
    let count = |last: Option<&str>| -> usize {
        let mut args = vec![
            "stats",
            "--prometheus",
            "--data-dir",
            data_dir.to_str().unwrap(),
        ];
        args.extend(["--log-file", log.to_str().unwrap()]);
        if let Some(last) = last {
            args.extend(["--last", last]);
        }
        let text = operator_command(args);
        text.lines()
            .find_map(|l| l.strip_prefix("wasm_ipam_lock_wait_seconds_count "))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no count in\n{text}"))
    };
    assert_eq!(
        count(None),
        logged.len(),
        "stats missed calls in the renamed files"
    );
    assert_eq!(count(Some("7")), 7);
}

#[test]
fn a_herd_across_a_rotation_logs_every_call_in_exactly_one_file() {
    let _heavy = exclusive();
    let node = Node::new();
    let log = node.log_file();
    // 24 calls of ~90 KiB: two rotations or more while they run; enough files kept
    // that none is removed.
    let conf = logging_conf(&node, 90, 10);
    let ids: Vec<String> = (0..24).map(|i| format!("herd-{i}")).collect();
    let children: Vec<_> = ids
        .iter()
        .map(|id| Call::new("ADD", id).spawn(&conf))
        .collect();
    for child in children {
        reply(child.wait_with_output().unwrap()).assert_ok();
    }
    let files = log_files(&log, 10);
    assert!(
        files.len() >= 3,
        "the herd did not rotate the log twice: {files:?}"
    );
    let logged = calls_by_container(&files);
    for id in &ids {
        assert_eq!(
            logged.get(id),
            Some(&1),
            "{id} is not in exactly one file: {logged:?}"
        );
    }
    // A file stops growing at the line after it filled, give or take the lines the
    // herd wrote in that instant.
    for f in &files {
        let len = std::fs::metadata(f).unwrap().len();
        assert!(
            len <= MIB + 24 * LONGEST_LINE,
            "{}: {len} bytes",
            f.display()
        );
    }
}

#[test]
fn an_external_logrotate_with_copytruncate_or_create_keeps_working() {
    let node = Node::new();
    let log = node.log_file();
    let conf = logging_conf(&node, 4, 2);
    let run = |id: &str| Call::new("ADD", id).run(&conf).assert_ok().stderr.clone();
    run("before");
    let copied = node.dir.path().join("copied");
    // copytruncate: the file is copied, then truncated under the writers. Calls
    // append (O_APPEND) at the new end: no hole of zeros, no half line.
    std::fs::copy(&log, &copied).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&log)
        .unwrap()
        .set_len(0)
        .unwrap();
    assert_eq!(run("after-truncate"), "");
    let logged = calls_by_container(std::slice::from_ref(&log));
    assert_eq!(logged.keys().collect::<Vec<_>>(), ["after-truncate"]);
    // create: the file is renamed away and the next call starts a fresh one, private.
    let moved = node.dir.path().join("moved");
    std::fs::rename(&log, &moved).unwrap();
    run("after-rename");
    assert_eq!(
        calls_by_container(std::slice::from_ref(&log))
            .keys()
            .collect::<Vec<_>>(),
        ["after-rename"]
    );
    assert_eq!(
        calls_by_container(&[moved]).keys().collect::<Vec<_>>(),
        ["after-truncate"]
    );
    assert_eq!(
        calls_by_container(&[copied]).keys().collect::<Vec<_>>(),
        ["before"]
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&log).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

/// Runs one ADD in a mount namespace of its own whose `disk` is a 1 MiB tmpfs holding
/// the log (only the log), filled before the call: (exit code, stdout, stderr).
fn add_with_the_log_on_a_full_disk(node: &Node) -> (i32, String, String) {
    let disk = node.dir.path().join("disk");
    std::fs::create_dir_all(&disk).unwrap();
    let mut conf = node.probe_netconf(json!({"probe": {"logMessages": 3, "logBytes": 100}}));
    conf["ipam"]["logFile"] = disk.join("log/ipam.log").to_str().unwrap().into();
    let conf_path = node.dir.path().join("conf.json");
    std::fs::write(&conf_path, conf.to_string()).unwrap();
    let script = r#"set -u
mount -t tmpfs -o size=1m wasm-ipam-test "$DISK" || exit 90
mkdir "$DISK/log" && : > "$DISK/log/ipam.log"
head -c 100M /dev/zero > "$DISK/fill" 2>/dev/null
env -i CNI_COMMAND=ADD CNI_CONTAINERID=c1 CNI_NETNS=/var/run/netns/c1 \
    CNI_IFNAME=eth0 CNI_PATH=/opt/cni/bin "$BIN" < "$CONF" > "$OUT/stdout" 2> "$OUT/stderr"
echo $? > "$OUT/rc"
"#;
    let status = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", script])
        .env("DISK", &disk)
        .env("BIN", bin())
        .env("CONF", &conf_path)
        .env("OUT", node.dir.path())
        .status()
        .unwrap();
    assert!(status.success(), "the scenario failed: {status:?}");
    let read = |name: &str| std::fs::read_to_string(node.dir.path().join(name)).unwrap();
    (
        read("rc").trim().parse().unwrap(),
        read("stdout"),
        read("stderr"),
    )
}

#[test]
fn a_log_that_cannot_be_written_never_fails_the_call() {
    // A full disk: the call answers its result; one line on stderr says why it is
    // not logged.
    let node = Node::new();
    let (rc, stdout, stderr) = add_with_the_log_on_a_full_disk(&node);
    assert_eq!(rc, 0, "{stdout} {stderr}");
    let result: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(result["ips"][0]["address"], "10.99.0.2/24", "{stdout}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("cannot write log file"), "{stderr}");

    // A log whose directory cannot be made (its parent is a file).
    let node = Node::new();
    let blocker = node.dir.path().join("not-a-dir");
    std::fs::write(&blocker, "").unwrap();
    let mut conf = node.probe_netconf(json!({}));
    conf["ipam"]["logFile"] = blocker.join("ipam.log").to_str().unwrap().into();
    let reply = Call::new("ADD", "c1").run(&conf);
    assert_eq!(reply.address(), "10.99.0.2/24");
    assert_eq!(reply.stderr.lines().count(), 1, "{}", reply.stderr);
    assert!(
        reply.stderr.contains("cannot open log file"),
        "{}",
        reply.stderr
    );

    // A log directory removed between calls is made again, and the call logged.
    let node = Node::new();
    let conf = node.probe_netconf(json!({}));
    Call::new("ADD", "c1").run(&conf).assert_ok();
    std::fs::remove_dir_all(node.log_file().parent().unwrap()).unwrap();
    let reply = Call::new("ADD", "c2").run(&conf);
    assert_eq!(reply.assert_ok().stderr, "");
    let logged = node.log_lines("invocation");
    assert_eq!(logged.len(), 1);
    assert_eq!(logged[0]["container_id"], "c2");
}
