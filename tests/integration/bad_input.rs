//! Bad input: each gives its documented CNI error code, a non-zero exit and an
//! unchanged store.

use crate::harness::*;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::Path;

fn expect_code(node: &Node, before: &[(String, String)], reply: Reply, code: u64) -> Reply {
    assert_eq!(reply.error_code(), code, "{reply:?}");
    assert_eq!(node.store_entries("testnet"), before, "store changed");
    reply
}

#[test]
fn missing_environment_variables_are_code_4() {
    let (node, before) = node_with_state();
    let conf = node.probe_netconf(json!({ "probe": json!({"write": ["x=1"]}) }));
    for var in [
        "CNI_COMMAND",
        "CNI_CONTAINERID",
        "CNI_NETNS",
        "CNI_IFNAME",
        "CNI_PATH",
    ] {
        let reply = Call::new("ADD", "c1").env(var, "").run(&conf);
        let reply = expect_code(&node, &before, reply, 4);
        assert!(reply.msg().contains(var), "{var}: {}", reply.msg());
    }
}

#[test]
fn invalid_container_id_and_ifname_are_code_4() {
    let (node, before) = node_with_state();
    let conf = node.probe_netconf(json!({ "probe": json!({"write": ["x=1"]}) }));
    for id in ["-leading-dash", "has/slash", "has space"] {
        let reply = expect_code(&node, &before, Call::new("ADD", id).run(&conf), 4);
        assert!(reply.msg().contains("containerID"), "{}", reply.msg());
    }
    for ifname in ["", "..", "a-very-long-interface", "eth/0", "eth:0"] {
        let mut call = Call::new("ADD", "c1");
        call.ifname = ifname;
        let reply = expect_code(&node, &before, call.run(&conf), 4);
        assert!(
            reply.msg().contains("interface name") || reply.msg().contains("CNI_IFNAME"),
            "{}",
            reply.msg()
        );
    }
}

#[test]
fn malformed_json_is_code_6() {
    let (node, before) = node_with_state();
    expect_code(
        &node,
        &before,
        Call::new("ADD", "c1").run_raw(b"{\"cniVersion\": \"1.0.0\", "),
        6,
    );
    expect_code(&node, &before, Call::new("DEL", "c1").run_raw(b""), 6);
}

#[test]
fn unsupported_version_is_code_1() {
    let (node, before) = node_with_state();
    let mut conf = node.probe_netconf(json!({ "probe": json!({"write": ["x=1"]}) }));
    conf["cniVersion"] = "0.2.0".into();
    let reply = expect_code(&node, &before, Call::new("ADD", "c1").run(&conf), 1);
    assert_eq!(reply.msg(), "incompatible CNI versions");
}

#[test]
fn missing_module_key_is_code_7() {
    let (node, before) = node_with_state();
    let mut conf = node.probe_netconf(json!({ "probe": json!({"write": ["x=1"]}) }));
    conf["ipam"].as_object_mut().unwrap().remove("module");
    let reply = expect_code(&node, &before, Call::new("ADD", "c1").run(&conf), 7);
    assert!(reply.msg().contains("ipam.module"));
}

fn conf_for_module(node: &Node, module: &Path) -> Value {
    node.netconf("1.0.0", module, json!({"probe": {"write": ["x=1"]}}))
}

#[test]
fn missing_wasm_file_is_code_5() {
    let (node, before) = node_with_state();
    let missing = node.dir.path().join("no-such-module.wasm");
    let reply = expect_code(
        &node,
        &before,
        Call::new("ADD", "c1").run(&conf_for_module(&node, &missing)),
        5,
    );
    assert!(reply.msg().contains("no-such-module.wasm"));
}

#[test]
fn corrupt_wasm_is_code_100() {
    let (node, before) = node_with_state();
    let mut bytes = std::fs::read(probe_module()).unwrap();
    bytes.truncate(bytes.len() / 2);
    let corrupt = node.dir.path().join("corrupt.wasm");
    std::fs::write(&corrupt, &bytes).unwrap();
    let reply = expect_code(
        &node,
        &before,
        Call::new("ADD", "c1").run(&conf_for_module(&node, &corrupt)),
        100,
    );
    assert!(
        reply.msg().contains("not a valid WebAssembly component"),
        "{}",
        reply.msg()
    );
}

#[test]
fn digest_mismatch_is_refused_before_anything_runs() {
    let (node, before) = node_with_state();
    let digest = format!(
        "{:x}",
        Sha256::digest(std::fs::read(probe_module()).unwrap())
    );
    let mut conf = conf_for_module(&node, &probe_module());
    conf["ipam"]["moduleSha256"] = "0".repeat(64).into();
    let reply = expect_code(&node, &before, Call::new("ADD", "c1").run(&conf), 101);
    assert!(
        reply.json.unwrap()["details"]
            .as_str()
            .unwrap()
            .contains(&digest)
    );
    // The right pin runs.
    conf["ipam"]["moduleSha256"] = digest.into();
    Call::new("ADD", "c1").run(&conf).assert_ok();
}

#[test]
fn module_with_an_unprovided_import_is_refused_listing_it() {
    let (node, before) = node_with_state();
    let component = wat::parse_str(
        r#"(component
             (import "evil:net/raw-socket@1.0.0" (instance))
             (import "wasi:http/outgoing-handler@0.2.0" (instance))
             (import "wasi:io/secrets@0.2.0" (instance)))"#,
    )
    .unwrap();
    let path = node.dir.path().join("imports.wasm");
    std::fs::write(&path, component).unwrap();
    let reply = expect_code(
        &node,
        &before,
        Call::new("ADD", "c1").run(&conf_for_module(&node, &path)),
        100,
    );
    assert!(
        reply.msg().contains("evil:net/raw-socket@1.0.0"),
        "{}",
        reply.msg()
    );
    assert!(
        reply.msg().contains("wasi:http/outgoing-handler@0.2.0"),
        "{}",
        reply.msg()
    );
    // WASI is provided interface by interface, not by package.
    assert!(
        reply.msg().contains("wasi:io/secrets@0.2.0"),
        "{}",
        reply.msg()
    );
}

#[test]
fn module_without_the_handler_export_is_refused() {
    let (node, before) = node_with_state();
    let path = node.dir.path().join("empty.wasm");
    std::fs::write(&path, wat::parse_str("(component)").unwrap()).unwrap();
    let reply = expect_code(
        &node,
        &before,
        Call::new("ADD", "c1").run(&conf_for_module(&node, &path)),
        100,
    );
    assert!(reply.msg().contains("cni:ipam/handler"), "{}", reply.msg());
}

/// The artifacts a vendor builds by mistake are each refused (100) with what they are
/// and the command that builds the module instead, before anything runs.
#[test]
fn a_misbuilt_artifact_is_refused_with_the_build_that_makes_the_module() {
    let (node, before) = node_with_state();
    let newer = wat::parse_str(
        r#"(component (instance $h) (export "cni:ipam/handler@0.3.0" (instance $h)))"#,
    )
    .unwrap();
    let command =
        wat::parse_str(r#"(component (instance $r) (export "wasi:cli/run@0.2.3" (instance $r)))"#)
            .unwrap();
    let cases: [(&str, Vec<u8>, &str); 4] = [
        (
            "native",
            std::fs::read("/bin/true").unwrap(),
            "it is a native ELF program or library, not WebAssembly: build a component: Rust `cargo build --target wasm32-wasip2 --release`",
        ),
        (
            "core",
            wat::parse_str("(module (func (export \"add\")))").unwrap(),
            "it is a core WebAssembly module (what wasm32-wasip1, wasm32-unknown-unknown or GOOS=wasip1 make), not a component",
        ),
        (
            "newer",
            newer,
            "it targets cni:ipam@0.3.0, which this host does not run (0.2.0 to 0.2.5, or 0.1.0): rebuild it on the SDK",
        ),
        (
            "command",
            command,
            "it is a WASI command (it exports wasi:cli/run: a program with a `main`)",
        ),
    ];
    for (name, bytes, says) in cases {
        let path = node.dir.path().join(format!("{name}.wasm"));
        std::fs::write(&path, bytes).unwrap();
        let reply = expect_code(
            &node,
            &before,
            Call::new("ADD", "c1").run(&conf_for_module(&node, &path)),
            100,
        );
        assert!(reply.msg().contains(says), "{name}: {}", reply.msg());
    }
}

#[test]
fn trapping_module_leaves_the_store_unchanged() {
    let (node, before) = node_with_state();
    let conf = node.probe_netconf(
        json!({ "probe": json!({"write": ["ip/10.0.0.10=c1\r\neth0"], "then": "trap"}) }),
    );
    let reply = expect_code(&node, &before, Call::new("ADD", "c1").run(&conf), 102);
    let details = reply.json.unwrap()["details"].as_str().unwrap().to_string();
    assert!(
        details.contains("probe asked to trap"),
        "the panic message is reported: {details}"
    );
}

#[test]
fn module_error_leaves_the_store_unchanged() {
    let (node, before) = node_with_state();
    let conf = node.probe_netconf(
        json!({ "probe": json!({"write": ["ip/10.0.0.10=c1\r\neth0"], "then": "error"}) }),
    );
    let reply = expect_code(&node, &before, Call::new("ADD", "c1").run(&conf), 142);
    assert_eq!(reply.msg(), "probe asked to fail");
}

#[test]
fn memory_limit_stops_the_module() {
    let (node, before) = node_with_state();
    let mut conf =
        node.probe_netconf(json!({ "probe": json!({"write": ["y=1"], "allocMib": 32}) }));
    conf["ipam"]["memoryLimitMiB"] = 16.into();
    let reply = expect_code(&node, &before, Call::new("ADD", "c1").run(&conf), 105);
    assert!(
        reply.msg().contains("ipam.memoryLimitMiB"),
        "{}",
        reply.msg()
    );
    // The same allocation fits the default 64 MiB.
    conf["ipam"]
        .as_object_mut()
        .unwrap()
        .remove("memoryLimitMiB");
    Call::new("ADD", "c1").run(&conf).assert_ok();
}

#[test]
fn lock_timeout_is_try_again_later() {
    let (node, before) = node_with_state();
    let _held = node.hold_lock();
    let mut conf = node.probe_netconf(json!({ "probe": json!({"write": ["x=1"]}) }));
    conf["ipam"]["lockTimeoutSeconds"] = 0.5.into();
    let reply = expect_code(&node, &before, Call::new("ADD", "c1").run(&conf), 11);
    assert!(reply.msg().contains("lock"), "{}", reply.msg());
}
