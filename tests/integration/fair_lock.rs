//! The lock is granted first come, first served, and a call that dies while queued or
//! while holding the lock never blocks the ones behind it.

use crate::harness::*;
use serde_json::{Value, json};
use std::process::Child;
use std::time::Duration;

pub fn queue_dir(node: &Node) -> std::path::PathBuf {
    wasm_ipam::lock::queue_dir(&node.lock_file())
}

/// Nodes (tickets) currently in the queue.
fn queued(node: &Node) -> usize {
    std::fs::read_dir(queue_dir(node))
        .map(|d| {
            d.filter(|e| e.as_ref().unwrap().file_name() != "tail")
                .count()
        })
        .unwrap_or(0)
}

pub fn wait_until_queued(node: &Node, count: usize) {
    let what = format!("{count} calls queued");
    wait_until(&what, Duration::from_secs(120), || queued(node) >= count);
}

/// Calls are served in the order they queued, and a newcomer never barges ahead of a
/// queued call, even at an instant when the flock itself is free (flock would let it).
#[test]
fn lock_is_granted_in_arrival_order_without_barging() {
    let _serial = exclusive();
    let node = Node::new();
    let conf = node.probe_netconf(json!({"probe": {"spinMs": 5}}));
    // The test takes the first place in the queue but not the flock.
    let first = wasm_ipam::lock::queue::Ticket::take(&queue_dir(&node)).unwrap();
    let ids: Vec<String> = (0..6).map(|i| format!("ctr{i}")).collect();
    let mut children = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        children.push(Call::new("DEL", id).spawn(&conf));
        wait_until_queued(&node, i + 2);
    }
    std::thread::sleep(Duration::from_millis(500));
    for child in &mut children {
        assert!(
            child.try_wait().unwrap().is_none(),
            "a call passed the queue while the flock was free"
        );
    }
    drop(first);
    for child in children {
        reply(child.wait_with_output().unwrap()).assert_ok();
    }
    let mut lines = node.log_lines("invocation");
    lines.sort_by(|a, b| {
        let at = |l: &Value| l["lock_granted_unix_ms"].as_f64().unwrap();
        at(a).total_cmp(&at(b))
    });
    let granted: Vec<&str> = lines
        .iter()
        .map(|l| l["container_id"].as_str().unwrap())
        .collect();
    assert_eq!(granted, ids, "granted in the order they queued");
    assert_eq!(queued(&node), 0, "finished calls leave no queue nodes");
}

fn del_succeeds_soon(child: Child) {
    let reply = reply(child.wait_with_output().unwrap());
    reply.assert_ok();
}

#[test]
fn a_call_killed_while_queued_does_not_block_the_queue() {
    let _serial = exclusive();
    let node = Node::new();
    let conf = node.probe_netconf(json!({}));
    let holder = node.hold_lock();
    let mut doomed = Call::new("DEL", "doomed").spawn(&conf);
    wait_until_queued(&node, 1);
    let behind = Call::new("DEL", "behind").spawn(&conf);
    wait_until_queued(&node, 2);
    kill_and_reap(&mut doomed);
    drop(holder);
    del_succeeds_soon(behind);
    assert_eq!(queued(&node), 0);
}

#[test]
fn a_holder_killed_under_the_lock_does_not_block_the_queue() {
    let _serial = exclusive();
    let node = Node::new();
    let looping: Value = node.probe_netconf(
        json!({"deadlineSeconds": 600, "probe": {"write": ["x=1"], "then": "loop"}}),
    );
    let mut holder = Call::new("ADD", "holder").spawn(&looping);
    // Uncontended, it holds the lock without a ticket; the call behind queues.
    wait_until_holding(holder.id(), &node.lock_file());
    let conf = node.probe_netconf(json!({}));
    let behind = Call::new("DEL", "behind").spawn(&conf);
    wait_until_blocked_on_lock(behind.id());
    assert_eq!(queued(&node), 1);
    kill_and_reap(&mut holder);
    del_succeeds_soon(behind);
    assert!(
        node.store_entries("testnet").is_empty(),
        "the killed holder committed nothing"
    );
}

/// Bursts of calls that all time out on the lock (code 11) leave nothing behind that
/// later calls must pass: the next call that queues clears every ticket they left.
#[test]
fn timed_out_bursts_leave_no_tickets_behind() {
    let _heavy = exclusive();
    let node = Node::new();
    let conf = node.probe_netconf(json!({"lockTimeoutSeconds": 1}));
    Call::new("DEL", "warm").run(&conf).assert_ok();
    for burst in 0..3 {
        let held = node.hold_lock();
        let children: Vec<Child> = (0..8)
            .map(|i| Call::new("DEL", &format!("b{burst}c{i}")).spawn(&conf))
            .collect();
        for child in children {
            let reply = reply(child.wait_with_output().unwrap());
            assert_eq!(reply.error_code(), 11, "burst {burst}");
        }
        let after = Call::new("DEL", "after").spawn(&conf);
        wait_until_blocked_on_lock(after.id());
        drop(held);
        del_succeeds_soon(after);
        assert_eq!(queued(&node), 0, "burst {burst}: tickets were stranded");
    }
}

/// A call that dies while clearing the dead tickets it passed (its lock timeout ends
/// the process at any instant) strands none of them: the next call that queues
/// still passes and clears every one.
#[test]
fn a_call_killed_while_clearing_dead_tickets_strands_none() {
    let _serial = exclusive();
    let node = Node::new();
    let conf = node.probe_netconf(json!({}));
    Call::new("DEL", "warm").run(&conf).assert_ok();
    let held = node.hold_lock();
    // Three calls queued one behind the other, killed last first so that none of
    // them passes another: three dead tickets in a row.
    let mut doomed: Vec<Child> = (0..3)
        .map(|i| {
            let child = Call::new("DEL", &format!("doomed{i}")).spawn(&conf);
            wait_until_blocked_on_lock(child.id());
            child
        })
        .collect();
    for child in doomed.iter_mut().rev() {
        kill_and_reap(child);
    }
    assert_eq!(queued(&node), 3);
    // The next passes all three and is killed at its second unlink: one cleared.
    let clearing = Call::new("DEL", "clearing").run_killed_at(&conf, "unlink,unlinkat", "2");
    assert!(!clearing.success, "the clearing call was not killed");
    assert_eq!(
        queued(&node),
        3,
        "two dead tickets and the killed call's own"
    );
    let after = Call::new("DEL", "after").spawn(&conf);
    wait_until_blocked_on_lock(after.id());
    drop(held);
    del_succeeds_soon(after);
    assert_eq!(queued(&node), 0, "dead tickets were stranded");
}
