//! What the log says of calls, read line by line as an operator filtering by level
//! does: a failed call's record is a WARN (an ERROR when the store or the sandbox
//! failed), so `logLevel: warn` shows every failure and no success; and a STATUS
//! condition is logged once when it begins and once when it ends, however often
//! kubelet and the runtime ask.

use crate::harness::*;
use serde_json::{Value, json};

/// The invocation records' (level, command, container, code).
fn records(node: &Node) -> Vec<(String, String, String, u64)> {
    node.log_lines("invocation")
        .iter()
        .map(|l| {
            (
                l["level"].as_str().unwrap().to_string(),
                l["command"].as_str().unwrap().to_string(),
                l["container_id"].as_str().unwrap().to_string(),
                l["error_code"].as_u64().unwrap(),
            )
        })
        .collect()
}

fn record(level: &str, command: &str, id: &str, code: u64) -> (String, String, String, u64) {
    (level.into(), command.into(), id.into(), code)
}

#[test]
fn at_log_level_warn_every_failed_call_is_logged_and_no_success() {
    let node = Node::new();
    let dir = node.data_dir().parent().unwrap().to_path_buf();
    let module = dir.join("pinned.wasm");
    std::fs::copy(host_local_module(), &module).unwrap();
    let ipam = |level: &str| json!({"subnet": "10.1.7.0/30", "logLevel": level, "moduleSha256": sha256_hex(&module)});
    let conf = node.netconf("1.1.0", &module, ipam("warn"));
    Call::new("ADD", "c1").run(&conf).assert_ok();
    // A /30 less its gateway holds one: the second ADD fails, the pool's doing (WARN).
    assert_eq!(Call::new("ADD", "c2").run(&conf).error_code(), 999);
    // The module replaced behind its pinned digest: a fault someone must repair (ERROR).
    std::fs::copy(minimal_module(), &module).unwrap();
    assert_eq!(Call::new("DEL", "c1").run(&conf).error_code(), 101);
    assert_eq!(
        records(&node),
        vec![
            record("WARN", "ADD", "c2", 999),
            record("ERROR", "DEL", "c1", 101)
        ]
    );

    // At `error`, only the fault.
    let node = Node::new();
    std::fs::copy(host_local_module(), &module).unwrap();
    let conf = node.netconf("1.1.0", &module, ipam("error"));
    Call::new("ADD", "c1").run(&conf).assert_ok();
    assert_eq!(Call::new("ADD", "c2").run(&conf).error_code(), 999);
    std::fs::copy(minimal_module(), &module).unwrap();
    assert_eq!(Call::new("DEL", "c1").run(&conf).error_code(), 101);
    assert_eq!(records(&node), vec![record("ERROR", "DEL", "c1", 101)]);
}

/// The STATUS lines of the log: (level, message).
fn status_lines(node: &Node) -> Vec<(String, String)> {
    node.log_lines("status")
        .iter()
        .map(|l: &Value| {
            (
                l["level"].as_str().unwrap().to_string(),
                l["message"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_status_condition_is_logged_when_it_begins_and_when_it_ends_not_at_every_poll() {
    let node = Node::new();
    let conf = node.netconf(
        "1.1.0",
        &host_local_module(),
        json!({"ranges": [[{"subnet": "10.1.8.0/29", "rangeStart": "10.1.8.2", "rangeEnd": "10.1.8.2"}]]}),
    );
    Call::new("ADD", "c1").run(&conf).assert_ok();
    assert_eq!(Call::new("ADD", "c2").run(&conf).error_code(), 999);
    for _ in 0..5 {
        Call::new("STATUS", "").run(&conf).assert_ok();
    }
    Call::new("DEL", "c1").run(&conf).assert_ok();
    for _ in 0..3 {
        Call::new("STATUS", "").run(&conf).assert_ok();
    }
    let lines = status_lines(&node);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0].0, "WARN");
    assert!(
        lines[0].1.starts_with("STATUS: the module reports: ") && lines[0].1.contains("10.1.8.2"),
        "{lines:?}"
    );
    assert_eq!(lines[1].0, "INFO");
    assert!(
        lines[1].1.starts_with("STATUS: over after ")
            && lines[1].1.ends_with(&lines[0].1["STATUS: ".len()..]),
        "{lines:?}"
    );

    // A fault of the node's own (STATUS fails): one ERROR when it begins, one line
    // when it is repaired.
    let mut missing = conf.clone();
    missing["ipam"]["module"] = node.data_dir().join("gone.wasm").to_string_lossy().into();
    for _ in 0..4 {
        assert_eq!(Call::new("STATUS", "").run(&missing).error_code(), 50);
    }
    Call::new("STATUS", "").run(&conf).assert_ok();
    let lines = status_lines(&node);
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_eq!(lines[2].0, "ERROR");
    assert!(
        lines[2].1.contains("this node cannot serve ADDs") && lines[2].1.contains("gone.wasm"),
        "{lines:?}"
    );
    assert_eq!(lines[3].0, "INFO");
    assert!(lines[3].1.starts_with("STATUS: over after "), "{lines:?}");
}
