//! Abandoned calls: a runtime that gives up on a call kills the main plugin, not the
//! IPAM plugin it ran (kubelet cancels RunPodSandbox, containerd kills `bridge`). The
//! orphaned wasm-ipam must not go on to run the module and commit an ADD nobody will
//! use: it gives up its place in the queue, or, granted after its parent went, runs
//! nothing. Here a bash stands in for the main plugin and is killed.

use crate::harness::*;
use serde_json::{Value, json};
use std::io::Write;
use std::process::{Child, Command};
use std::time::Duration;

/// A main plugin: bash running wasm-ipam as its child, on bash's own stdin, and
/// waiting for it (so bash is its parent until killed).
fn main_plugin(call: &Call) -> Child {
    let mut bash = Command::new("/bin/bash");
    bash.args(["-c", r#""$0" <&0 & wait"#]).arg(bin());
    call.start_command(bash)
}

/// The pid of `parent`'s child running wasm-ipam, once it has exec'd.
fn wasm_ipam_child(parent: u32) -> u32 {
    let what = format!("bash {parent} ran wasm-ipam");
    wait_for(&what, Duration::from_secs(60), || {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|entry| entry.file_name().to_string_lossy().parse::<u32>().ok())
            .find(|&pid| {
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                // pid (comm) state ppid ...
                let Some((comm, rest)) = stat.split_once(") ") else {
                    return false;
                };
                let ppid = rest
                    .split_whitespace()
                    .nth(1)
                    .and_then(|p| p.parse::<u32>().ok());
                ppid == Some(parent) && comm.ends_with("(wasm-ipam")
            })
    })
}

/// Waits until `pid` is blocked reading its stdin (its first act after recording its
/// parent): /proc/<pid>/syscall names read(2) on fd 0.
fn wait_until_reading_stdin(pid: u32) {
    let read = match std::env::consts::ARCH {
        "x86_64" => "0",
        "aarch64" => "63",
        other => panic!("read(2)'s number on {other} is not known here"),
    };
    let syscall = || std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap_or_default();
    wait_for_explained(
        &format!("wasm-ipam {pid} read its stdin"),
        Duration::from_secs(60),
        || {
            let syscall = syscall();
            let mut fields = syscall.split_whitespace();
            (fields.next() == Some(read) && fields.next() == Some("0x0")).then_some(())
        },
        || format!("its syscall: {}", syscall()),
    );
}

/// The state letter of `pid` (`S` sleeping, `Z` exited but not reaped), or `None`
/// once it is gone.
fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.split_once(") ")?.1.chars().next()
}

fn wait_until_exited(pid: u32) {
    let what = format!("wasm-ipam {pid} stopped running after its caller died");
    wait_until(&what, Duration::from_secs(30), || {
        matches!(state(pid), None | Some('Z'))
    });
}

/// Waits for the invocation line of the abandoned call (the process is reparented,
/// so its exit cannot be waited on; its log line is the sign).
fn abandoned_line(node: &Node, container: &str) -> Value {
    let what = format!("an invocation line for {container}");
    wait_for(&what, Duration::from_secs(30), || {
        node.log_lines("invocation")
            .into_iter()
            .find(|l| l["container_id"] == container)
    })
}

/// The probe logs a line whenever it runs, and an orphan's run would stage a write.
fn conf(node: &Node) -> Value {
    let mut conf = node.netconf(
        "1.1.0",
        &probe_module(),
        json!({"probe": {"reportNode": true}}),
    );
    // Compiled and cached first, so the calls below wait only for the lock.
    Call::new("ADD", "warm").run(&conf).assert_ok();
    conf["ipam"]["probe"]["write"] = json!(["ip/10.99.0.2=orphan"]);
    conf
}

fn guest_lines(node: &Node) -> usize {
    node.log_lines("guest").len()
}

#[test]
fn a_call_whose_caller_dies_in_the_queue_gives_up_its_place() {
    let node = Node::new();
    let conf = conf(&node);
    let ran_before = guest_lines(&node);
    let before = node.store_entries("testnet");
    let holder = node.hold_lock();

    let call = Call::new("ADD", "orphan");
    let mut bash = main_plugin(&call);
    let mut stdin = bash.stdin.take().unwrap();
    stdin.write_all(conf.to_string().as_bytes()).unwrap();
    drop(stdin);
    let pid = wasm_ipam_child(bash.id());
    wait_until_blocked_on_lock(pid);
    kill_and_reap(&mut bash);

    // It leaves while the lock is still held: it was never granted.
    wait_until_exited(pid);
    let line = abandoned_line(&node, "orphan");
    assert_eq!(line["outcome"], "abandoned", "{line}");
    assert_eq!(line["abandoned_at"], "queue", "{line}");
    assert_eq!(guest_lines(&node), ran_before, "the module never ran");
    drop(holder);
    assert_eq!(node.store_entries("testnet"), before, "nothing committed");
    // Its place is free: the next call is granted at once (and its write is what a
    // run of the orphan would have committed).
    Call::new("ADD", "next").run(&conf).assert_ok();
    assert_ne!(node.store_entries("testnet"), before);
    let next = node.log_lines("invocation").pop().unwrap();
    assert!(next["lock_wait_ms"].as_f64().unwrap() < 5000.0, "{next}");
}

#[test]
fn a_call_granted_after_its_caller_died_runs_nothing() {
    let node = Node::new();
    let conf = conf(&node);
    let ran_before = guest_lines(&node);
    let before = node.store_entries("testnet");

    // wasm-ipam starts and waits for its netconf; its caller dies; then the netconf
    // comes, the lock is free, and the grant finds the caller gone.
    let call = Call::new("ADD", "orphan");
    let mut bash = main_plugin(&call);
    let mut stdin = bash.stdin.take().unwrap();
    let pid = wasm_ipam_child(bash.id());
    wait_until_reading_stdin(pid);
    kill_and_reap(&mut bash);
    stdin.write_all(conf.to_string().as_bytes()).unwrap();
    drop(stdin);

    wait_until_exited(pid);
    let line = abandoned_line(&node, "orphan");
    assert_eq!(line["outcome"], "abandoned", "{line}");
    assert_eq!(line["abandoned_at"], "grant", "{line}");
    assert_eq!(guest_lines(&node), ran_before, "the module never ran");
    assert_eq!(node.store_entries("testnet"), before, "nothing committed");
    assert!(node.lock_is_free());
}
