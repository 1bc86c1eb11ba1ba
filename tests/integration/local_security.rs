//! Local security: the host's files are private whatever the umask, another local
//! user can neither read nor lock them, nothing is followed through a symlink, paths
//! that are not ours or not absolute are refused, and one dataDir shared by two lock
//! files still hands out each address once.

use crate::harness::*;
use serde_json::{Value, json};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every path below `root`.
fn walk(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(root).unwrap() {
        let path = entry.unwrap().path();
        if std::fs::symlink_metadata(&path).unwrap().is_dir() {
            found.extend(walk(&path));
        }
        found.push(path);
    }
    found
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap().mode() & 0o7777
}

/// host-local on `node`, with a compiled-module cache of its own inside it.
fn conf(node: &Node) -> Value {
    node.netconf(
        "1.0.0",
        &host_local_module(),
        json!({"subnet": "10.1.0.0/24", "cacheDir": node.dir.path().join("cache")}),
    )
}

/// Starts `call` under `sh -c "$script"` with the plugin as `$0`.
fn spawn_under(call: &Call, script: &str, conf: &Value) -> std::process::Child {
    let mut sh = Command::new("sh");
    sh.arg("-c").arg(script).arg(bin());
    call.spawn_command(sh, conf.to_string().as_bytes())
}

/// Runs `call` under `sh -c "$script"` with the plugin as `$0`.
fn run_under(call: &Call, script: &str, conf: &Value) -> Reply {
    reply(spawn_under(call, script, conf).wait_with_output().unwrap())
}

#[test]
fn files_and_directories_are_private_whatever_the_umask() {
    let node = Node::new();
    let conf = conf(&node);
    let umask_000 = "umask 000 && exec \"$0\"";
    for (command, id) in [("ADD", "c1"), ("ADD", "c2"), ("DEL", "c1")] {
        run_under(&Call::new(command, id), umask_000, &conf).assert_ok();
    }
    let held = node.hold_lock();
    let queued = spawn_under(&Call::new("ADD", "c3"), umask_000, &conf);
    wait_until_blocked_on_lock(queued.id());
    drop(held);
    reply(queued.wait_with_output().unwrap()).assert_ok();
    let paths = walk(node.dir.path());
    for expected in [
        "run/ipam.lock",
        "run/ipam.lock.queue/tail",
        "data/store.sqlite",
        "data/store.lock",
        "log/wasm-ipam.log",
    ] {
        assert!(
            paths.contains(&node.dir.path().join(expected)),
            "{expected} was not made: {paths:?}"
        );
    }
    for path in paths {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let want = if meta.is_dir() { 0o700 } else { 0o600 };
        assert_eq!(
            mode(&path),
            want,
            "{} has mode {:o}",
            path.display(),
            mode(&path)
        );
    }
}

/// Runs `args` as the unprivileged user nobody (uid 65534).
fn as_nobody(args: &[&str]) -> std::process::Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn another_local_user_can_neither_read_nor_lock_any_of_them() {
    let node = Node::new();
    let mut conf = conf(&node);
    // The lock file straight in a directory everyone may enter (as /run is), so its
    // own mode is what keeps others out.
    conf["ipam"]["lockFile"] = node.dir.path().join("ipam.lock").to_str().unwrap().into();
    Call::new("ADD", "c1").run(&conf).assert_ok();
    std::fs::set_permissions(node.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // The check is live: a file of the default mode (0644 under umask 022) can be
    // flocked by nobody, stalling every call that needs it.
    let control = node.dir.path().join("control.lock");
    std::fs::write(&control, "").unwrap();
    std::fs::set_permissions(&control, std::fs::Permissions::from_mode(0o644)).unwrap();
    let flocked = as_nobody(&["flock", "-n", control.to_str().unwrap(), "true"]);
    assert!(flocked.status.success(), "{flocked:?}");
    std::fs::remove_file(&control).unwrap();

    let paths = walk(node.dir.path());
    assert!(paths.contains(&node.dir.path().join("ipam.lock")));
    for path in paths {
        let p = path.to_str().unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let denied = if meta.is_dir() {
            as_nobody(&["ls", p])
        } else {
            as_nobody(&["flock", "-n", "-s", p, "true"])
        };
        assert!(
            !denied.status.success(),
            "nobody could use {}: {denied:?}",
            path.display()
        );
    }
}

/// Asserts `reply` failed with `code`; its error JSON as text, to look for words in.
fn refusal(reply: &Reply, code: u64) -> String {
    assert_eq!(reply.error_code(), code, "{reply:?}");
    reply.json.as_ref().unwrap().to_string()
}

/// An empty file at `node`'s lockFile, made by the test before any call.
fn plant_lock_file(node: &Node) -> PathBuf {
    std::fs::create_dir_all(node.lock_file().parent().unwrap()).unwrap();
    std::fs::write(node.lock_file(), "").unwrap();
    node.lock_file()
}

#[test]
fn paths_owned_by_another_user_or_writable_by_others_are_refused() {
    let chown_nobody =
        |path: &Path| std::os::unix::fs::lchown(path, Some(65534), Some(65534)).unwrap();

    let node = Node::new();
    std::fs::create_dir(node.data_dir()).unwrap();
    chown_nobody(&node.data_dir());
    let text = refusal(&Call::new("ADD", "c1").run(&conf(&node)), 104);
    assert!(text.contains("owned by uid 65534"), "{text}");
    assert!(text.contains(node.data_dir().to_str().unwrap()), "{text}");

    let node = Node::new();
    std::fs::create_dir(node.data_dir()).unwrap();
    std::fs::set_permissions(node.data_dir(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let text = refusal(&Call::new("ADD", "c1").run(&conf(&node)), 104);
    assert!(text.contains("writable by its group or others"), "{text}");

    let node = Node::new();
    chown_nobody(&plant_lock_file(&node));
    let text = refusal(&Call::new("ADD", "c1").run(&conf(&node)), 5);
    assert!(text.contains("owned by uid 65534"), "{text}");

    let node = Node::new();
    std::fs::create_dir_all(node.log_file().parent().unwrap()).unwrap();
    std::fs::write(node.log_file(), "").unwrap();
    std::fs::set_permissions(node.log_file(), std::fs::Permissions::from_mode(0o666)).unwrap();
    // A log is an aid, never a reason to fail a call: this one is not written, and
    // the call says why on stderr.
    let reply = Call::new("ADD", "c1").run(&conf(&node));
    assert!(
        reply
            .assert_ok()
            .stderr
            .contains("writable by its group or others"),
        "{}",
        reply.stderr
    );
    assert_eq!(std::fs::read_to_string(node.log_file()).unwrap(), "");

    // One of ours that others could only read is made private and used.
    let node = Node::new();
    std::fs::set_permissions(
        plant_lock_file(&node),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    Call::new("ADD", "c1").run(&conf(&node)).assert_ok();
    assert_eq!(mode(&node.lock_file()), 0o600);
}

#[test]
fn symlinks_are_never_followed() {
    // A dangling lockFile link: its target is not created.
    let node = Node::new();
    std::fs::create_dir_all(node.lock_file().parent().unwrap()).unwrap();
    let target = node.dir.path().join("target-of-lock");
    std::os::unix::fs::symlink(&target, node.lock_file()).unwrap();
    let text = refusal(&Call::new("ADD", "c1").run(&conf(&node)), 5);
    assert!(text.contains("symbolic link"), "{text}");
    assert!(!target.exists());

    // A queue `tail` replaced by a link to another file: that file is left alone by
    // a call that queues (the lock held).
    let node = Node::new();
    let conf = conf(&node);
    Call::new("ADD", "c1").run(&conf).assert_ok();
    let queue = wasm_ipam::lock::queue_dir(&node.lock_file());
    drop(wasm_ipam::lock::queue::Ticket::take(&queue).unwrap());
    let tail = queue.join("tail");
    let victim = node.dir.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    std::fs::remove_file(&tail).unwrap();
    std::os::unix::fs::symlink(&victim, &tail).unwrap();
    let held = node.hold_lock();
    let reply = Call::new("ADD", "c2").run(&conf);
    drop(held);
    assert_eq!(reply.error_code(), 5);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");

    // The store's database and the log, each a link.
    let node = Node::new();
    let conf_ = self::conf(&node);
    Call::new("ADD", "c1").run(&conf_).assert_ok();
    let store = node
        .data_dir()
        .join(wasm_ipam::store::sqlite::DATABASE_FILE);
    let moved = node.dir.path().join("moved.sqlite");
    std::fs::rename(&store, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &store).unwrap();
    assert_eq!(Call::new("ADD", "c2").run(&conf_).error_code(), 104);
    std::fs::remove_file(&store).unwrap();
    std::fs::rename(&moved, &store).unwrap();
    let log_target = node.dir.path().join("log-target");
    std::fs::remove_file(node.log_file()).unwrap();
    std::os::unix::fs::symlink(&log_target, node.log_file()).unwrap();
    // The call goes on unlogged (the log never fails a call), saying why on stderr.
    let reply = Call::new("ADD", "c3").run(&conf_);
    assert!(
        reply.assert_ok().stderr.contains("symbolic link"),
        "{}",
        reply.stderr
    );
    assert!(!log_target.exists());
}

#[test]
fn relative_or_empty_paths_are_refused() {
    let node = Node::new();
    for key in ["lockFile", "dataDir", "cacheDir", "logFile"] {
        for value in ["", "relative/path"] {
            let mut conf = conf(&node);
            conf["ipam"][key] = value.into();
            let reply = Call::new("ADD", "c1").run(&conf);
            assert_eq!(reply.error_code(), 7, "{key}={value:?}");
            assert!(
                reply.msg().contains(&format!("ipam.{key}")),
                "{}",
                reply.msg()
            );
        }
    }
    assert!(!node.data_dir().exists() && !node.lock_file().exists());
}

#[test]
fn one_data_dir_under_two_lock_files_hands_out_each_address_once() {
    let _heavy = exclusive();
    let node = Node::new();
    let confs: Vec<Value> = ["a.lock", "b.lock"]
        .iter()
        .map(|lock| {
            let mut conf = conf(&node);
            conf["ipam"]["lockFile"] = node.dir.path().join(lock).to_str().unwrap().into();
            conf
        })
        .collect();
    Call::new("ADD", "warm").run(&confs[0]).assert_ok(); // the cache, and the store
    let ids: Vec<String> = (0..16).map(|i| format!("c{i}")).collect();
    let children: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| Call::new("ADD", id).spawn(&confs[i % 2]))
        .collect();
    let addresses = distinct_addresses(children);
    assert_eq!(addresses.len(), 16, "an address was handed out twice");
}
