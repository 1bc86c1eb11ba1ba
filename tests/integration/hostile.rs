//! The hostile vendor's suite: modules built from source in this test build (the probe
//! module, configured per test, and components made from core WAT) try every way we
//! know to make the node spend more than a call's limits. Each test asserts the
//! documented code, that the store is unchanged, that the lock is free afterwards, and
//! the bound itself (peak RSS of the host process, bytes written, lock hold time), with
//! margins wide enough for a loaded 2-core CI machine.

use crate::harness::*;
use crate::wat_component::{HANDLER_EXPORTS, component_from_core_wat};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Runs `command` with `conf` and checks what every hostile call must leave: the
/// documented code, the store as it was, the lock free. Returns the reply and cost.
fn expect_refused(
    node: &Node,
    before: &[(String, String)],
    command: &str,
    conf: &Value,
    code: u64,
) -> (Reply, Measured) {
    let (reply, measured) = Call::new(command, "hostile").run_measured(conf);
    assert_eq!(reply.error_code(), code, "{reply:?}");
    assert_eq!(node.store_entries("testnet"), before, "store changed");
    assert!(node.lock_is_free(), "lock still held");
    (reply, measured)
}

fn assert_peak_below(measured: Measured, mib: f64, what: &str) {
    assert!(
        measured.peak_rss_mib < mib,
        "{what}: host peaked at {:.0} MiB, bound {mib} MiB",
        measured.peak_rss_mib
    );
}

fn details(reply: &Reply) -> String {
    reply.json.as_ref().unwrap()["details"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

// ---- memory: the guest's, summed over every memory and table ----

#[test]
fn memory_grow_past_the_limit_is_code_105() {
    let (node, before) = node_with_state();
    let conf = node.probe_netconf(json!({"probe": {"write": ["x=1"], "allocMib": 200}}));
    let (reply, measured) = expect_refused(&node, &before, "ADD", &conf, 105);
    assert!(
        reply.msg().contains("ipam.memoryLimitMiB"),
        "{}",
        reply.msg()
    );
    assert_peak_below(measured, 150.0, "memory.grow");
}

#[test]
fn memories_are_summed_across_the_component() {
    let (node, before) = node_with_state();
    // Three extra memories of 32 MiB: each is under the 64 MiB limit, the sum is not.
    let module = wat_module(
        &node,
        "three-memories",
        "(memory $a 512) (memory $b 512) (memory $c 512)",
        OK_BODY,
    );
    let conf = node.netconf("1.0.0", &module, json!({}));
    let (reply, measured) = expect_refused(&node, &before, "ADD", &conf, 105);
    assert!(
        reply.msg().contains("ipam.memoryLimitMiB"),
        "{}",
        reply.msg()
    );
    assert_peak_below(measured, 150.0, "many memories");
    // The same component with small memories runs: the limit is what refused it.
    let small = wat_module(
        &node,
        "small-memories",
        "(memory $a 1) (memory $b 1)",
        OK_BODY,
    );
    Call::new("ADD", "c1")
        .run(&node.netconf("1.0.0", &small, json!({})))
        .assert_ok();
}

#[test]
fn too_many_memories_or_large_tables_are_code_105() {
    let (node, before) = node_with_state();
    let memories: String = (0..16).map(|i| format!("(memory $m{i} 1) ")).collect();
    let module = wat_module(&node, "sixteen-memories", &memories, OK_BODY);
    let conf = node.netconf("1.0.0", &module, json!({}));
    let (reply, _) = expect_refused(&node, &before, "ADD", &conf, 105);
    assert!(reply.msg().contains("memories"), "{}", reply.msg());
    // 10M table elements are 80 MB of host memory: counted with the memories.
    let module = wat_module(&node, "big-table", "(table 10000000 funcref)", OK_BODY);
    let conf = node.netconf("1.0.0", &module, json!({}));
    let (reply, measured) = expect_refused(&node, &before, "ADD", &conf, 105);
    assert!(reply.msg().contains("table"), "{}", reply.msg());
    assert_peak_below(measured, 150.0, "table");
}

// ---- host memory spent on the module's behalf ----

#[test]
fn a_huge_result_is_refused_before_the_host_copies_it() {
    let (node, before) = node_with_state();
    // A million addresses: the guest needs room to build them, the host must not
    // copy them (the transfer is bounded by hostMemoryLimitMiB).
    let conf = node.probe_netconf(
        json!({"memoryLimitMiB": 512, "probe": {"write": ["x=1"], "resultIps": 1_000_000}}),
    );
    let (reply, measured) = expect_refused(&node, &before, "ADD", &conf, 105);
    assert!(
        reply.msg().contains("ipam.hostMemoryLimitMiB"),
        "{}",
        reply.msg()
    );
    assert!(
        reply.stdout.len() < 4096,
        "{} bytes on stdout",
        reply.stdout.len()
    );
    // The guest's own memory (up to 512 MiB here) plus the host's bounded share.
    assert_peak_below(measured, 600.0, "huge result");
    // A result within the transfer bound but past the result's own bounds is 106.
    let conf = node.probe_netconf(json!({"probe": {"write": ["x=1"], "resultIps": 65}}));
    let (reply, _) = expect_refused(&node, &before, "ADD", &conf, 106);
    assert!(reply.msg().contains("65 ips"), "{}", reply.msg());
}

#[test]
fn a_staging_flood_is_refused_at_the_host_memory_limit() {
    let (node, before) = node_with_state();
    // Tiny keys cost the host ~140 B each: the limit counts them as stored.
    let conf = node.probe_netconf(json!({"probe": {"write": ["x=1"], "floodEntries": 3_000_000}}));
    let (reply, measured) = expect_refused(&node, &before, "ADD", &conf, 120);
    assert!(
        details(&reply).contains("ipam.hostMemoryLimitMiB"),
        "{reply:?}"
    );
    assert_peak_below(measured, 200.0, "staging flood");
}

#[test]
fn a_list_prefix_flood_is_code_105_within_the_host_memory_limit() {
    let _serial = exclusive();
    let node = Node::new();
    // 10,000 entries of 10 kB (100 MB in the store), written 1,250 a call to stay
    // within one call's staging limit.
    for call in 0..8 {
        let fill = node.probe_netconf(json!({"probe": {"floodEntries": 1_250, "floodFrom": call * 1_250, "floodValueBytes": 10_000}}),
        );
        Call::new("ADD", "filler").run(&fill).assert_ok();
    }
    let stored = node.store_entries("testnet").len();
    assert_eq!(stored, 10_000);
    let conf = node.probe_netconf(
        json!({"hostMemoryLimitMiB": 4, "probe": {"listPrefix": "flood/", "listTimes": 50}}),
    );
    let (reply, measured) = Call::new("DEL", "lister").run_measured(&conf);
    assert_eq!(reply.error_code(), 105, "{reply:?}");
    assert!(reply.msg().contains("list-prefix"), "{}", reply.msg());
    assert!(node.lock_is_free());
    assert_eq!(node.store_entries("testnet").len(), stored);
    // Listing it all would hold 100 MB in the host alone.
    assert_peak_below(measured, 80.0, "list-prefix flood");
    // Within the limit a listing works.
    let conf = node.probe_netconf(json!({"probe": {"listPrefix": "flood/000001"}}));
    Call::new("DEL", "lister").run(&conf).assert_ok();
    assert!(
        node.log_lines("guest")
            .iter()
            .any(|l| l["message"] == "listed=1000")
    );
}

#[test]
fn oversized_keys_and_values_are_refused_by_the_store() {
    let (node, before) = node_with_state();
    let long_key = format!("{}=v", "k".repeat(1025));
    let conf = node.probe_netconf(json!({"probe": {"write": [long_key]}}));
    let (reply, _) = expect_refused(&node, &before, "ADD", &conf, 120);
    assert!(details(&reply).contains("key of 1025 bytes"), "{reply:?}");
    let conf = node.probe_netconf(json!({"probe": {"floodEntries": 1, "floodValueBytes": 65_537}}));
    let (reply, _) = expect_refused(&node, &before, "ADD", &conf, 120);
    assert!(
        details(&reply).contains("value of 65537 bytes"),
        "{reply:?}"
    );
}

// ---- lock time: the commit is bounded by the deadline ----

/// A module that stages as much as it may and answers ok just before its deadline:
/// the host commits only what fits before the deadline (or nothing), and holds the
/// lock no longer than the deadline plus a small slack.
#[test]
fn a_late_ok_with_a_huge_staged_set_does_not_hold_the_lock_past_the_deadline() {
    let _serial = exclusive();
    let (node, before) = node_with_state();
    // Long enough to stage every key the host accepts (v0.1 accepted a million) and
    // then answer ok 20 ms before the deadline.
    let deadline = Duration::from_secs(10);
    let conf = node.probe_netconf(json!({
        "deadlineSeconds": deadline.as_secs(),
        "probe": {"floodEntries": 3_000_000, "floodUntilRefused": true, "spinUntilRemainingMs": 20}
    }));
    let (reply, measured) = Call::new("ADD", "late").run_measured(&conf);
    let line = node.log_lines("invocation").pop().unwrap();
    let hold = Duration::from_secs_f64(line["lock_hold_ms"].as_f64().unwrap() / 1000.0);
    // Three seconds of slack: far more than the final sync, far less than the 9 s a
    // commit of a million keys held it past the deadline on v0.1.
    let bound = deadline + Duration::from_secs(3);
    assert!(hold < bound, "lock held {hold:?}: {reply:?}");
    assert!(
        measured.wall < bound + Duration::from_secs(5),
        "{measured:?}"
    );
    assert!(node.lock_is_free());
    if reply.success {
        assert!(node.store_entries("testnet").len() > before.len());
    } else {
        assert_eq!(reply.error_code(), 103, "{reply:?}");
        assert_eq!(node.store_entries("testnet"), before, "nothing committed");
    }
}

// ---- disk: log, error text, store quota ----

#[test]
fn a_log_flood_is_cut_at_the_log_budget_and_counted() {
    let (node, _) = node_with_state();
    let log_before = std::fs::metadata(node.log_file()).unwrap().len();
    let conf = node.probe_netconf(
        json!({"probe": {"logMessages": 100_000, "logBytes": 1000, "print": "p".repeat(60 << 10)}}),
    );
    Call::new("DEL", "chatty").run(&conf).assert_ok();
    let grown = std::fs::metadata(node.log_file()).unwrap().len() - log_before;
    // 256 KiB of budget (the printed 60 KiB goes to the log within the same budget),
    // plus the call's own lines.
    assert!(grown < 512 << 10, "log grew {grown} bytes");
    let line = node.log_lines("invocation").pop().unwrap();
    let dropped = line["guest_log_dropped"].as_u64().unwrap();
    assert!(dropped > 99_000, "{line}");
}

#[test]
fn a_huge_error_message_is_cut_on_stdout_and_in_the_log() {
    let (node, before) = node_with_state();
    let log_before = std::fs::metadata(node.log_file()).unwrap().len();
    let conf = node.probe_netconf(
        json!({"probe": {"write": ["x=1"], "then": "error", "errorBytes": 30_000_000}}),
    );
    let (reply, _) = expect_refused(&node, &before, "ADD", &conf, 142);
    assert!(
        reply.stdout.len() < 8192,
        "{} bytes on stdout",
        reply.stdout.len()
    );
    assert!(reply.msg().ends_with("bytes cut]"), "says it was cut");
    let grown = std::fs::metadata(node.log_file()).unwrap().len() - log_before;
    assert!(grown < 64 << 10, "log grew {grown} bytes");
}

#[test]
fn the_store_quota_refuses_growth_before_anything_is_committed() {
    let (node, before) = node_with_state();
    let writes: Vec<String> = (0..10).map(|i| format!("k{i}=v")).collect();
    let conf = node.probe_netconf(json!({"storeQuotaEntries": 10, "probe": {"write": writes}}));
    let (reply, _) = expect_refused(&node, &before, "ADD", &conf, 108);
    assert!(reply.msg().contains("storeQuotaEntries"), "{}", reply.msg());
    // Within the quota the same writes commit.
    let conf = node.probe_netconf(json!({"storeQuotaEntries": 11, "probe": {"write": writes}}));
    Call::new("ADD", "c1").run(&conf).assert_ok();
    assert_eq!(node.store_entries("testnet").len(), 11);
}

// ---- what a module answers ----

#[test]
fn a_module_cannot_pose_as_the_host() {
    let (node, before) = node_with_state();
    for forged in [0, 103, 104, 42] {
        let conf = node.probe_netconf(
            json!({"probe": {"write": ["x=1"], "then": "error", "errorCode": forged}}),
        );
        let (reply, _) = expect_refused(&node, &before, "ADD", &conf, 107);
        assert!(
            details(&reply).starts_with(&format!("code {forged}: probe asked to fail")),
            "{reply:?}"
        );
    }
}

#[test]
fn dns_fields_of_a_result_are_validated() {
    let (node, before) = node_with_state();
    for dns in [
        json!({"nameservers": ["not-an-ip"]}),
        json!({"search": ["has space.example"]}),
        json!({"options": ["ndots:5\nnameserver 6.6.6.6"]}),
    ] {
        let mut probe = dns.clone();
        probe["write"] = json!(["x=1"]);
        let conf = node.probe_netconf(json!({ "probe": probe }));
        expect_refused(&node, &before, "ADD", &conf, 106);
    }
    let conf = node.probe_netconf(json!({"probe": {"nameservers": ["10.96.0.10"], "search": ["svc.cluster.local"], "options": ["ndots:5"]}}),
    );
    let reply = Call::new("ADD", "c1").run(&conf);
    assert_eq!(
        reply.assert_ok().json.as_ref().unwrap()["dns"]["nameservers"][0],
        "10.96.0.10"
    );
}

// ---- kept behaviour: traps, exits, escapes, loops ----

#[test]
fn deep_recursion_is_a_trap() {
    let (node, before) = node_with_state();
    let conf = node.probe_netconf(json!({"probe": {"write": ["x=1"], "recurse": true}}));
    let (reply, _) = expect_refused(&node, &before, "ADD", &conf, 102);
    assert!(details(&reply).contains("stack"), "{reply:?}");
}

#[test]
fn exit_is_a_trap() {
    let (node, before) = node_with_state();
    let conf = node.probe_netconf(json!({"probe": {"write": ["x=1"], "then": "exit"}}));
    expect_refused(&node, &before, "ADD", &conf, 102);
}

#[test]
fn wasi_reaches_nothing_outside_the_sandbox() {
    let (node, _) = node_with_state();
    let conf = node.probe_netconf(json!({"probe": {"escape": true}}));
    let reply = Call::new("DEL", "c1").run(&conf);
    assert!(reply.success, "the probe escaped: {:?}", reply.json);
    assert!(!Path::new("/tmp/wasm-ipam-probe-escape").exists());
}

#[test]
fn loops_in_del_in_host_calls_and_in_instantiation_stop_at_the_deadline() {
    let _serial = exclusive();
    let (node, before) = node_with_state();
    for (command, then) in [("DEL", "loop"), ("ADD", "host-call-loop")] {
        let conf = node.probe_netconf(
            json!({"deadlineSeconds": 1, "probe": {"write": ["x=1"], "then": then}}),
        );
        assert_stopped_at_deadline(&node, &before, &Call::new(command, "hostile"), &conf);
    }
    let module = wat_module(
        &node,
        "start-loop",
        "(func $spin (loop $l (br $l))) (start $spin)",
        OK_BODY,
    );
    let conf = node.netconf("1.0.0", &module, json!({"deadlineSeconds": 1}));
    assert_stopped_at_deadline(&node, &before, &Call::new("ADD", "hostile"), &conf);
}

// ---- loading: bounded and done once ----

#[test]
fn module_paths_that_are_not_regular_files_are_refused_at_once() {
    let (node, before) = node_with_state();
    let fifo = node.dir.path().join("module.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let zero_link = node.dir.path().join("zero.wasm");
    std::os::unix::fs::symlink("/dev/zero", &zero_link).unwrap();
    for (path, kind) in [
        (fifo, "a FIFO"),
        (zero_link, "a device"),
        (node.dir.path().to_path_buf(), "a directory"),
    ] {
        let conf = node.netconf("1.0.0", &path, json!({}));
        let (reply, measured) = expect_refused(&node, &before, "ADD", &conf, 100);
        assert!(reply.msg().contains(kind), "{}", reply.msg());
        assert!(measured.wall < Duration::from_secs(20), "{measured:?}");
    }
    // Past the size cap.
    let conf = node.probe_netconf(json!({"moduleMaxMiB": 1}));
    let big = node.dir.path().join("big.wasm");
    let mut bytes = std::fs::read(probe_module()).unwrap();
    bytes.resize(2 << 20, 0);
    std::fs::write(&big, bytes).unwrap();
    let mut conf = conf;
    conf["ipam"]["module"] = big.to_string_lossy().into();
    let (reply, _) = expect_refused(&node, &before, "ADD", &conf, 100);
    assert!(reply.msg().contains("ipam.moduleMaxMiB"), "{}", reply.msg());
}

/// A small module whose compile Cranelift cannot finish in seconds or in little
/// memory: one function with thousands of 64-bit locals all live across thousands of
/// back-edges (0.6 MB; about a minute and 1.7 GB to compile on a dev machine).
fn compile_bomb(node: &Node) -> PathBuf {
    let locals = 2000;
    let mut body = String::from("(loop $l\n");
    let mut seed: u64 = 1;
    let mut next = |n: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % n
    };
    for k in 0..60_000 {
        let (a, b, c) = (next(locals), next(locals), next(locals));
        body.push_str(&format!(
            "(local.set {c} (i64.add (local.get {a}) (local.get {b})))\n"
        ));
        if k % 10 == 0 {
            body.push_str(&format!(
                "(br_if $l (i32.wrap_i64 (local.get {})))\n",
                next(locals)
            ));
        }
    }
    body.push(')');
    let wat = format!(
        "(component (core module (func (local {}) {body})))",
        "i64 ".repeat(locals as usize)
    );
    let path = node.dir.path().join("bomb.wasm");
    std::fs::write(&path, wat::parse_str(&wat).unwrap()).unwrap();
    path
}

#[test]
fn a_compile_bomb_is_refused_at_its_time_and_memory_limits() {
    let _serial = exclusive();
    let (node, before) = node_with_state();
    let bomb = compile_bomb(&node);
    let cache = node.dir.path().join("bomb-cache");
    let mut conf = node.netconf("1.0.0", &bomb, json!({"compileTimeoutSeconds": 2}));
    conf["ipam"]["cacheDir"] = cache.to_string_lossy().into();
    let (reply, measured) = expect_refused(&node, &before, "ADD", &conf, 100);
    assert!(
        reply.msg().contains("ipam.compileTimeoutSeconds"),
        "{}",
        reply.msg()
    );
    assert!(measured.wall < Duration::from_secs(15), "{measured:?}");
    // Remembered: the next call under the same limits is refused without compiling.
    let (reply, measured) = expect_refused(&node, &before, "ADD", &conf, 100);
    assert!(details(&reply).contains("earlier compile"), "{reply:?}");
    assert!(measured.wall < Duration::from_secs(2), "{measured:?}");
    // Under a memory limit instead (and a fresh cache), the compiler is stopped there.
    let mut conf = node.netconf(
        "1.0.0",
        &bomb,
        json!({"compileTimeoutSeconds": 300, "compileMemoryMiB": 256}),
    );
    conf["ipam"]["cacheDir"] = node
        .dir
        .path()
        .join("bomb-cache-2")
        .to_string_lossy()
        .into();
    let (reply, measured) = expect_refused(&node, &before, "ADD", &conf, 100);
    assert!(
        reply.msg().contains("ipam.compileMemoryMiB"),
        "{}",
        reply.msg()
    );
    // The compiler's data is capped at 256 MiB; its binary and stacks come on top.
    assert_peak_below(measured, 450.0, "compile bomb");
    assert!(measured.wall < Duration::from_secs(60), "{measured:?}");
}

// ---- components from core WAT ----

/// Handler code answering ok with an empty result (all-zero memory at 512 reads as
/// `ok` with no ips, routes or DNS).
const OK_BODY: &str = "(i32.const 512)";

/// A component exporting `cni:ipam/handler` from a core module written in WAT: every
/// handler runs `body` (its parameter is a pointer to the request, its result a
/// pointer to the answer); `extra` adds module fields (memories, tables, a start
/// function).
fn wat_module(node: &Node, name: &str, extra: &str, body: &str) -> PathBuf {
    let core = format!(
        r#"(module
          (memory (export "memory") 1)
          (global $heap (mut i32) (i32.const 1024))
          (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
            (local $at i32)
            (local.set $at
              (i32.and
                (i32.add (global.get $heap) (i32.sub (local.get 2) (i32.const 1)))
                (i32.sub (i32.const 0) (local.get 2))))
            (global.set $heap (i32.add (local.get $at) (local.get 3)))
            (if (i32.gt_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536)))
              (then (drop (memory.grow
                (i32.add (i32.shr_u (global.get $heap) (i32.const 16)) (i32.const 1))))))
            (local.get $at))
          (func $handler (param i32) (result i32) {body})
          {HANDLER_EXPORTS}
          {extra})"#
    );
    let component = component_from_core_wat(&core);
    let path = node.dir.path().join(format!("{name}.wasm"));
    std::fs::write(&path, component).unwrap();
    path
}

// ---- the same cases for a module in Go ----

/// A Go module (`tests/modules/probe-go`, on the Go SDK) that loops, allocates
/// without bound or panics is stopped with the codes a Rust one gets: 103 at the
/// deadline, 105 at the memory limit, 102 for the runtime's exit on an unrecovered
/// panic, with its message. The store is left as it was and the lock free.
#[test]
fn a_go_module_that_loops_allocates_without_bound_or_panics_is_stopped_alike() {
    let go = crate::go_sdk::probe_go_module();
    let _serial = exclusive();
    let (node, before) = node_with_state();
    let conf = |probe: Value, ipam: Value| {
        let mut conf = node.netconf("1.0.0", &go, json!({ "probe": probe }));
        for (key, value) in ipam.as_object().unwrap() {
            conf["ipam"][key] = value.clone();
        }
        conf
    };
    let write = json!([{"op": "put", "key": "x", "value": [1]}]);
    let looping = conf(
        json!({"store": write, "then": "loop"}),
        json!({"deadlineSeconds": 1}),
    );
    assert_stopped_at_deadline(&node, &before, &Call::new("ADD", "hostile"), &looping);

    let allocating = conf(json!({"store": write, "then": "alloc"}), json!({}));
    let (reply, measured) = Call::new("ADD", "hostile").run_measured(&allocating);
    assert_eq!(reply.error_code(), 105, "{reply:?}");
    assert_eq!(node.store_entries("testnet"), before, "store changed");
    assert!(node.lock_is_free(), "lock still held");
    assert_peak_below(measured, 150.0, "a Go module's unbounded allocation");

    let panicking = conf(json!({"store": write, "then": "panic"}), json!({}));
    let (reply, _) = expect_refused(&node, &before, "DEL", &panicking, 102);
    let details = reply.json.as_ref().unwrap()["details"].as_str().unwrap();
    assert!(
        details.starts_with("panic: probe asked to panic"),
        "{details}"
    );
}
