//! The minimal module's logic over an in-memory store, natively, the way any module's
//! tests can run: through the trait, with no host.

use minimal::Minimal;
use serde_json::{Value, json};
use wasm_ipam_guest::store::MemoryStore;
use wasm_ipam_guest::{Allocation, Attachment, Command, Context, IpamModule, Pool, Request, Store};

fn netconf() -> Value {
    json!({"cniVersion": "1.1.0", "name": "net", "ipam": {
        "type": "wasm-ipam", "module": "/opt/cni/wasm/minimal.wasm",
        "addresses": ["10.0.0.2/29", "10.0.0.3/29"]}})
}

fn call(command: Command, id: &str, ifname: &str) -> Request {
    Request::for_test(command, id, ifname, netconf())
}

fn add(store: &mut MemoryStore, id: &str) -> Result<String, wasm_ipam_guest::Error> {
    let result = Minimal::add(&call(Command::Add, id, "eth0"), store)?;
    Ok(result.ips[0].address.clone())
}

#[test]
fn hands_out_each_address_once_and_frees_it_on_del() {
    let mut store = MemoryStore::default();
    assert_eq!(add(&mut store, "c1").unwrap(), "10.0.0.2/29");
    assert_eq!(add(&mut store, "c2").unwrap(), "10.0.0.3/29");
    let err = add(&mut store, "c3").unwrap_err();
    assert_eq!((err.code, err.msg.as_str()), (140, "pool full"));

    Minimal::del(&call(Command::Del, "c1", "eth0"), &mut store).unwrap();
    // DEL is idempotent: again, and for an attachment that holds nothing.
    Minimal::del(&call(Command::Del, "c1", "eth0"), &mut store).unwrap();
    Minimal::del(&call(Command::Del, "never-added", "eth0"), &mut store).unwrap();
    assert_eq!(add(&mut store, "c3").unwrap(), "10.0.0.2/29");
}

#[test]
fn a_second_add_for_an_attachment_answers_its_address_again() {
    // A runtime retrying an ADD after a timeout gets what the first one handed out.
    let mut store = MemoryStore::default();
    add(&mut store, "c1").unwrap();
    assert_eq!(add(&mut store, "c1").unwrap(), "10.0.0.2/29");
    assert_eq!(store.list("a/").len(), 1);
    assert_eq!(add(&mut store, "c2").unwrap(), "10.0.0.3/29");
}

#[test]
fn operators_see_the_allocations_and_the_defaults_build_on_them() {
    let mut store = MemoryStore::default();
    add(&mut store, "c1").unwrap();
    Minimal::add(&call(Command::Add, "c2", "net1"), &mut store).unwrap();
    let context = Context::for_test("net", Some(netconf()));
    assert_eq!(
        Minimal::allocations(&context, &store).unwrap(),
        [
            Allocation::new("10.0.0.2", "c1", "eth0"),
            Allocation::new("10.0.0.3", "c2", "net1"),
        ]
    );
    assert_eq!(
        Minimal::pools(&context, &store).unwrap(),
        [Pool::new("net").in_use(2)]
    );

    Minimal::check(&call(Command::Check, "c2", "net1"), &store).unwrap();
    let err = Minimal::check(&call(Command::Check, "c2", "eth0"), &store).unwrap_err();
    assert_eq!(err.code, 3);

    let valid = [Attachment {
        container_id: "c2".into(),
        ifname: "net1".into(),
    }];
    Minimal::gc(&call(Command::Gc, "", ""), &valid, &mut store).unwrap();
    let left: Vec<&str> = store.entries.keys().map(String::as_str).collect();
    assert_eq!(left, ["a/c2/net1"]);
}
