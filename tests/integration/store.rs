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
    Call::new("ADD", "c1").run(&conf).ok();
    let added = Call::new("ADD", "c2").run(&conf).ok().json.clone();

    let (reply, syncs) = Call::new("ADD", "c3").run_counting_syncs(&conf);
    reply.ok();
    assert_eq!(syncs.len(), 1, "an ADD: {syncs:#?}");
    assert!(
        syncs[0].contains(" fdatasync(") && syncs[0].contains("store.sqlite-wal>"),
        "the one sync is the log's: {syncs:#?}"
    );
    let (reply, syncs) = Call::new("DEL", "c3").run_counting_syncs(&conf);
    reply.ok();
    assert_eq!(syncs.len(), 1, "a DEL that frees an address: {syncs:#?}");

    for (command, id) in [("DEL", "never-added"), ("CHECK", "c2")] {
        let mut conf = conf.clone();
        if command == "CHECK" {
            conf["prevResult"] = added.clone().expect("ADD's result");
        }
        let (reply, syncs) = Call::new(command, id).run_counting_syncs(&conf);
        reply.ok();
        assert!(syncs.is_empty(), "{command} changes nothing: {syncs:#?}");
    }
}

#[test]
fn an_emptied_store_is_refused_with_cni_error_json_and_left_as_it_is() {
    let node = Node::new();
    let conf = conf(&node);
    Call::new("ADD", "c1").run(&conf).ok();
    let store = node.data_dir().join(wasm_ipam::store::DATABASE_FILE);
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
