//! The store's contract as a runtime sees it: a commit is one disk sync and a call
//! that changes nothing syncs nothing; a store that lost its contents is refused,
//! never silently replaced by an empty one.

use crate::harness::*;
use serde_json::{Value, json};

fn conf(node: &Node) -> Value {
    node.netconf(
        "1.0.0",
        &host_local_module(),
        json!({ "ranges": [[{ "subnet": "10.81.0.0/24" }]] }),
    )
}

#[test]
fn one_sync_per_committing_call_and_none_for_a_call_that_changes_nothing() {
    let node = Node::new();
    let conf = conf(&node);
    // The first calls create the store and start its log; not what is counted.
    Call::new("ADD", "c1").run(&conf).assert_ok();
    let added = Call::new("ADD", "c2").run(&conf).assert_ok().json.clone();

    let (reply, syncs) = Call::new("ADD", "c3").run_counting_syncs(&conf);
    reply.assert_ok();
    assert_eq!(syncs.len(), 1, "an ADD: {syncs:#?}");
    assert!(
        syncs[0].contains(" fdatasync(") && syncs[0].contains("store.sqlite-wal>"),
        "the one sync is the log's: {syncs:#?}"
    );
    let (reply, syncs) = Call::new("DEL", "c3").run_counting_syncs(&conf);
    reply.assert_ok();
    assert_eq!(syncs.len(), 1, "a DEL that frees an address: {syncs:#?}");

    for (command, id) in [("DEL", "never-added"), ("CHECK", "c2")] {
        let mut conf = conf.clone();
        if command == "CHECK" {
            conf["prevResult"] = added.clone().expect("ADD's result");
        }
        let (reply, syncs) = Call::new(command, id).run_counting_syncs(&conf);
        reply.assert_ok();
        assert!(syncs.is_empty(), "{command} changes nothing: {syncs:#?}");
    }
}

#[test]
fn an_emptied_store_is_refused_with_cni_error_json_and_left_as_it_is() {
    let node = Node::new();
    let conf = conf(&node);
    Call::new("ADD", "c1").run(&conf).assert_ok();
    let store = node
        .data_dir()
        .join(wasm_ipam::store::sqlite::DATABASE_FILE);
    std::fs::write(&store, b"").unwrap();
    let log = node.data_dir().join("store.sqlite-wal");
    let _ = std::fs::remove_file(&log);

    let reply = Call::new("ADD", "c2").run(&conf);
    assert_eq!(reply.error_code(), 104, "{reply:?}");
    assert!(
        reply.msg().contains("restore it from a backup"),
        "{reply:?}"
    );
    assert_eq!(std::fs::metadata(&store).unwrap().len(), 0, "left as it is");
}

/// `wasm-ipam store ACTION` on `node`'s store, with `extra` arguments.
fn store_command(node: &Node, action: &str, extra: &[&std::ffi::OsStr]) -> std::process::Output {
    std::process::Command::new(bin())
        .args(["store", action])
        .args(node.operator_flags())
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn a_damaged_page_fails_calls_with_104_store_check_names_it_and_a_backup_restores() {
    use std::os::unix::fs::{FileExt, MetadataExt};
    let node = Node::new();
    let conf = conf(&node);
    Call::new("ADD", "c1").run(&conf).assert_ok();
    Call::new("ADD", "c2").run(&conf).assert_ok();
    let checked = store_command(&node, "check", &[]);
    assert!(checked.status.success(), "{checked:?}");
    assert!(String::from_utf8_lossy(&checked.stdout).contains(": ok, "));
    let backup = node.dir.path().join("backup.sqlite");
    let made = store_command(&node, "backup", &["--to".as_ref(), backup.as_os_str()]);
    assert!(made.status.success(), "{made:?}");
    assert_eq!(std::fs::metadata(&backup).unwrap().mode() & 0o777, 0o600);
    let restore = || {
        let out = store_command(&node, "restore", &["--from".as_ref(), backup.as_os_str()]);
        assert!(out.status.success(), "{out:?}");
    };
    // Restored, the whole store is in the database file (no log to replay), so a
    // damaged page of it is one the next call reads.
    restore();
    let database = node
        .data_dir()
        .join(wasm_ipam::store::sqlite::DATABASE_FILE);
    let pages = std::fs::metadata(&database).unwrap().len() / 4096;
    assert!(pages >= 3, "{pages} pages");
    for page in 0..pages {
        restore();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&database)
            .unwrap();
        file.write_all_at(&[0xa5; 4096], page * 4096).unwrap();
        drop(file);
        let reply = Call::new("ADD", "c9").run(&conf);
        assert!(!reply.success, "page {page}: a call ran on a damaged store");
        assert_eq!(reply.error_code(), 104, "page {page}");
        let checked = store_command(&node, "check", &[]);
        let stderr = String::from_utf8_lossy(&checked.stderr);
        assert!(
            !checked.status.success(),
            "page {page}: check found nothing"
        );
        assert!(!stderr.contains("panicked"), "{stderr}");
        let listed = std::process::Command::new(bin())
            .arg("list")
            .args(node.operator_flags())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&listed.stderr);
        assert!(!stderr.contains("panicked"), "page {page}: {stderr}");
    }
    // The documented recovery: put the backup back.
    restore();
    assert!(store_command(&node, "check", &[]).status.success());
    let kept: Vec<_> = std::fs::read_dir(node.data_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.contains(".replaced-"))
        .collect();
    assert!(!kept.is_empty(), "the replaced store was not kept");
    let held: Vec<String> = node
        .address_entries("testnet")
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert!(
        held.iter().any(|v| v.starts_with("c1")) && held.iter().any(|v| v.starts_with("c2")),
        "{held:?}"
    );
    Call::new("ADD", "c3").run(&conf).assert_ok();
}

#[test]
fn the_lock_is_released_before_the_commit_is_synced_and_the_answer_after() {
    let node = Node::new();
    let conf = conf(&node);
    Call::new("ADD", "c0").run(&conf).assert_ok();
    let (reply, lines) =
        Call::new("ADD", "c1").run_tracing(&conf, "unlink,unlinkat,close,fdatasync,write");
    reply.assert_ok();
    let position = |what: &str, pred: &dyn Fn(&str) -> bool| {
        lines
            .iter()
            .position(|l| pred(l))
            .unwrap_or_else(|| panic!("no {what} in {lines:#?}"))
    };
    let lock = node.lock_file().to_string_lossy().into_owned();
    // Uncontended, the call holds no queue ticket: the lock goes when its file closes.
    let lock_closed = position("close of the lock file", &|l| {
        l.contains("close(") && l.contains(&format!("<{lock}>"))
    });
    let synced = position("sync of the commit", &|l| {
        l.contains("fdatasync(") && l.contains("store.sqlite-wal")
    });
    let answered = position("the answer on stdout", &|l| {
        l.contains("write(1") && l.contains("cniVersion")
    });
    assert!(lock_closed < synced, "{lines:#?}");
    assert!(
        synced < answered,
        "answered before the commit was durable: {lines:#?}"
    );
}

/// What an operator command left in `dir`: nothing if it does not exist, else its
/// file names.
fn contents(dir: &std::path::Path) -> Option<Vec<String>> {
    let entries = std::fs::read_dir(dir).ok()?;
    Some(
        entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
    )
}

/// Commands that only read (or act on what is there), pointed where there is no
/// store (a typo in `--data-dir`, a node whose networks live in etcd), create none:
/// each is refused with code 7, naming the file it looked for and the flag to pass,
/// and leaves the place as it found it.
#[test]
fn reading_where_there_is_no_store_creates_none_and_names_the_path_and_the_flag() {
    let node = Node::new();
    let conf = conf(&node);
    let conf_file = node.dir.path().join("net.conf");
    std::fs::write(&conf_file, conf.to_string()).unwrap();
    let valid = node.dir.path().join("valid");
    std::fs::write(&valid, "").unwrap();
    let backup = node.dir.path().join("backup.sqlite");
    let made = node.dir.path().join("made");
    std::fs::create_dir(&made).unwrap();
    // The netconf's own dataDir, never called with, and a typo beside an empty one.
    for dir in [node.data_dir(), node.dir.path().join("typo"), made.clone()] {
        let before = contents(&dir);
        let lines: Vec<Vec<std::ffi::OsString>> = vec![
            vec!["store".into(), "check".into()],
            vec![
                "store".into(),
                "backup".into(),
                "--to".into(),
                backup.clone().into(),
            ],
            vec!["list".into()],
            vec!["list".into(), "--netconf".into(), conf_file.clone().into()],
            vec!["stats".into()],
            vec!["stats".into(), "--netconf".into(), conf_file.clone().into()],
            vec!["forget".into(), "testnet".into()],
            vec!["forget".into(), "testnet".into(), "--force".into()],
            vec![
                "gc".into(),
                "--all-networks".into(),
                "--valid-from".into(),
                valid.clone().into(),
                "--dry-run".into(),
            ],
        ];
        for line in lines {
            let mut args = line.clone();
            args.extend([
                "--data-dir".into(),
                dir.clone().into(),
                "--lock-file".into(),
                node.lock_file().into(),
            ]);
            let (ok, stdout, stderr) = operator_output(&args);
            let wanted = format!(
                "no store at {}",
                dir.join(wasm_ipam::store::sqlite::DATABASE_FILE).display()
            );
            assert!(
                !ok && stderr.contains("code 7")
                    && stderr.contains(&wanted)
                    && stderr.contains("pass --data-dir DIR"),
                "{line:?} in {}: {stdout}{stderr}",
                dir.display()
            );
            assert_eq!(contents(&dir), before, "{line:?} changed {}", dir.display());
        }
    }
    assert!(!backup.exists(), "no backup of a store that is not there");
}
