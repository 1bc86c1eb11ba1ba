//! The point of wasm-ipam: the deadline starts when the lock is granted, a guest is
//! stopped at it with nothing changed, and a herd queued on the lock all succeed.

use crate::harness::*;
use serde_json::json;
use std::time::Duration;

fn remaining_at_start(node: &Node) -> Vec<(f64, f64)> {
    node.log_lines("guest")
        .iter()
        .filter_map(|l| {
            let msg = l["message"].as_str()?;
            let mut nums = msg
                .split_whitespace()
                .filter_map(|kv| kv.split_once('=')?.1.parse::<f64>().ok());
            Some((nums.next()?, nums.next()?))
        })
        .collect()
}

/// The lock is held for 3 s by someone else; the deadline is 2 s. With the timer
/// started before the lock (Calico's old DEL) this call would fail; here it succeeds
/// and the guest starts with (nearly) its whole budget.
#[test]
fn lock_wait_does_not_eat_the_budget() {
    let _serial = exclusive();
    let node = Node::new();
    let conf = node.probe_netconf(json!({"deadlineSeconds": 2, "probe": {"reportBudget": true}}));
    let holder = node.hold_lock();
    let child = Call::new("DEL", "c1").spawn(&conf);
    wait_until_blocked_on_lock(child.id());
    std::thread::sleep(Duration::from_secs(3));
    drop(holder);
    let reply = reply(child.wait_with_output().unwrap());
    reply.assert_ok();
    let reports = remaining_at_start(&node);
    assert_eq!(reports.len(), 1, "{reports:?}");
    let (remaining, budget) = reports[0];
    assert_eq!(budget, 2e9);
    assert!(
        remaining >= 0.9 * budget,
        "guest started with {remaining} ns of {budget}"
    );
    let line = &node.log_lines("invocation")[0];
    assert!(line["lock_wait_ms"].as_f64().unwrap() >= 2500.0, "{line}");
}

/// An ADD whose probe writes an entry, then does what `probe` says, is stopped at its
/// 1 s deadline with nothing committed; the details say what the call was doing.
fn assert_probe_stopped_at_deadline(probe: serde_json::Value) {
    let _serial = exclusive();
    let node = Node::new();
    let mut probe = probe;
    probe["write"] = json!(["ip/10.0.0.3=c1\r\neth0"]);
    let conf = node.probe_netconf(json!({"deadlineSeconds": 1, "probe": probe}));
    let reply = assert_stopped_at_deadline(&node, &[], &Call::new("ADD", "c1"), &conf);
    let details = reply.json.as_ref().unwrap()["details"].as_str().unwrap();
    assert!(details.contains("waiting for the lock"), "{details}");
}

#[test]
fn guest_looping_forever_is_stopped_at_the_deadline() {
    assert_probe_stopped_at_deadline(json!({"then": "loop"}));
}

#[test]
fn guest_blocked_in_a_host_call_is_stopped_at_the_deadline() {
    assert_probe_stopped_at_deadline(json!({"sleepMs": 3_600_000}));
}

/// 50 DELs arrive at once; each holds the lock ~100 ms, so the last waits ~5 s, far
/// beyond its 2 s budget. All succeed, because each budget starts at its own grant.
#[test]
fn herd_of_dels_all_succeed() {
    let _serial = exclusive();
    let node = Node::new();
    let conf = node.probe_netconf(json!({"deadlineSeconds": 2, "probe": {"spinMs": 100}}));
    let ids: Vec<String> = (0..50).map(|i| format!("ctr{i}")).collect();
    let children: Vec<_> = ids
        .iter()
        .map(|id| Call::new("DEL", id).spawn(&conf))
        .collect();
    let failures: Vec<_> = children
        .into_iter()
        .map(|c| reply(c.wait_with_output().unwrap()))
        .filter(|r| !r.success)
        .collect();
    assert!(
        failures.is_empty(),
        "{} of 50 DELs failed: {:?}",
        failures.len(),
        failures.first()
    );
    let lines = node.log_lines("invocation");
    assert_eq!(lines.len(), 50);
    let max_wait = lines
        .iter()
        .map(|l| l["lock_wait_ms"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!(
        max_wait > 2000.0,
        "the herd queued past one budget (max lock wait {max_wait} ms)"
    );
}
