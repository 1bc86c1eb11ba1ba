//! host-local's own acceptance behaviours (host_local_test.go) through the binary and
//! the `examples/host-local` module, under every supported cniVersion, plus GC and
//! STATUS, which host-local v1.1.1 lacks (STATUS's conditions: `status.rs`).

use crate::harness::*;
use serde_json::{Value, json};

fn dual_stack(node: &Node, version: &str) -> Value {
    let resolv = node.dir.path().join("resolv.conf");
    std::fs::write(
        &resolv,
        "nameserver 192.0.2.53\nsearch example.test\noptions ndots:3\n",
    )
    .unwrap();
    node.netconf(
        version,
        &host_local_module(),
        json!({
            "ranges": [[{"subnet": "10.1.2.0/24", "gateway": "10.1.2.1"}], [{"subnet": "2001:db8:1::/64"}]],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}, {"dst": "192.168.0.0/16", "gw": "1.1.1.1"}],
            "resolvConf": resolv,
        }),
    )
}

#[test]
fn dual_stack_add_del_under_every_version() {
    for version in VERSIONS {
        let node = Node::new();
        let conf = dual_stack(&node, version);
        let add = Call::new("ADD", "dummy").run(&conf);
        add.assert_ok();
        let result = add.json.unwrap();
        assert_eq!(result["ips"][0]["address"], "10.1.2.2/24", "{version}");
        assert_eq!(result["ips"][0]["gateway"], "10.1.2.1");
        assert_eq!(result["ips"][1]["address"], "2001:db8:1::2/64");
        assert_eq!(result["ips"][1]["gateway"], "2001:db8:1::1");
        assert_eq!(
            result["routes"],
            json!([{"dst": "0.0.0.0/0"}, {"dst": "::/0"}, {"dst": "192.168.0.0/16", "gw": "1.1.1.1"}])
        );
        assert_eq!(
            result["dns"],
            json!({"nameservers": ["192.0.2.53"], "search": ["example.test"], "options": ["ndots:3"]})
        );
        let entries = node.store_entries("testnet");
        for key in ["ip/10.1.2.2", "ip/2001:db8:1::2"] {
            assert!(
                entries
                    .iter()
                    .any(|(k, v)| k == key && v == "dummy\r\neth0"),
                "{key}: {entries:?}"
            );
        }
        if !version.starts_with("0.3") {
            Call::new("CHECK", "dummy").run(&conf).assert_ok();
        }
        Call::new("DEL", "dummy").run(&conf).assert_ok();
        let left = node.address_entries("testnet");
        assert!(left.is_empty(), "{version}: {left:?}");
    }
}

#[test]
fn requested_address_and_duplicate_add_under_every_version() {
    for version in VERSIONS {
        let node = Node::new();
        let mut conf = node.netconf(
            version,
            &host_local_module(),
            json!({"subnet": "10.1.3.0/24"}),
        );
        conf["args"] = json!({"cni": {"ips": ["10.1.3.77"]}});
        let add = Call::new("ADD", "c1").run(&conf);
        assert_eq!(
            add.assert_ok().json.as_ref().unwrap()["ips"][0]["address"],
            "10.1.3.77/24",
            "{version}"
        );
        // As in host-local, a requested address already held is "not available",
        // whoever asks again.
        for container in ["c1", "c2"] {
            let taken = Call::new("ADD", container).run(&conf);
            taken.error_code();
            assert!(
                taken
                    .msg()
                    .contains("requested IP address 10.1.3.77 is not available"),
                "{version}: {}",
                taken.msg()
            );
        }
        // Without a requested address, a second ADD for the same attachment is refused.
        conf.as_object_mut().unwrap().remove("args");
        Call::new("ADD", "c3").run(&conf).assert_ok();
        let again = Call::new("ADD", "c3").run(&conf);
        again.error_code();
        assert!(
            again.msg().contains("duplicate allocation is not allowed"),
            "{version}: {}",
            again.msg()
        );
    }
}

#[test]
fn gc_releases_what_no_valid_attachment_holds() {
    let node = Node::new();
    let conf = node.netconf(
        "1.1.0",
        &host_local_module(),
        json!({"subnet": "10.1.4.0/24"}),
    );
    for (c, ifname) in [("c1", "eth0"), ("c2", "eth0"), ("c3", "net1")] {
        let mut call = Call::new("ADD", c);
        call.ifname = ifname;
        call.run(&conf).assert_ok();
    }
    let mut gc = conf.clone();
    gc["cni.dev/valid-attachments"] =
        json!([{"containerID": "c2", "ifname": "eth0"}, {"containerID": "c3", "ifname": "eth0"}]);
    Call::new("GC", "").run(&gc).assert_ok();
    let held: Vec<String> = node
        .address_entries("testnet")
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    assert_eq!(
        held,
        ["c2\r\neth0"],
        "only the valid attachment keeps its address"
    );
}
