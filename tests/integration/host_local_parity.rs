//! Side by side with the real host-local (Debian's containernetworking-plugins): the
//! same calls through `/usr/lib/cni/host-local` and through wasm-ipam running
//! `examples/host-local` give identical addresses, gateways, routes and DNS at every
//! step, and fail exactly where host-local fails, with the same message.

use crate::harness::*;
use serde_json::{Value, json};
use std::path::Path;

const REFERENCE: &str = "/usr/lib/cni/host-local";

/// One call of a scenario: command, container id, ifname, CNI_ARGS.
struct Step(&'static str, &'static str, &'static str, &'static str);

fn reference() -> &'static Path {
    let path = Path::new(REFERENCE);
    assert!(
        path.exists(),
        "{REFERENCE} is missing: install Debian's containernetworking-plugins (scripts/test.sh does)"
    );
    path
}

/// Runs `steps` through both plugins with the same module keys (`ipam`), returning
/// each step's (wasm-ipam, host-local) replies.
fn run_both(version: &str, ipam: Value, steps: &[Step]) -> Vec<(Reply, Reply)> {
    let node = Node::new();
    let ours = node.netconf(version, &host_local_module(), ipam.clone());
    let mut theirs =
        json!({"cniVersion": version, "name": "testnet", "type": "host-local", "ipam": ipam});
    theirs["ipam"]["type"] = "host-local".into();
    theirs["ipam"]["dataDir"] = node.dir.path().join("host-local").to_string_lossy().into();
    steps
        .iter()
        .map(|Step(command, container, ifname, args)| {
            let mut call = Call::new(command, container);
            call.ifname = ifname;
            if !args.is_empty() {
                call = call.env("CNI_ARGS", *args);
            }
            (call.run(&ours), call.run_plugin(reference(), &theirs))
        })
        .collect()
}

/// Asserts every step has the same outcome in both: the same result JSON, or a
/// failure with the same message.
fn side_by_side(version: &str, ipam: Value, steps: &[Step]) {
    for (i, (a, b)) in run_both(version, ipam, steps).iter().enumerate() {
        let Step(command, container, ifname, args) = &steps[i];
        let step = format!("step {i} ({command} {container} {ifname} {args}) under {version}");
        assert_eq!(
            a.success, b.success,
            "{step}: wasm-ipam {a:?} vs host-local {b:?}"
        );
        if b.success {
            assert_eq!(a.json, b.json, "{step}");
        } else {
            assert_eq!(a.msg(), b.msg(), "{step}: error messages differ");
        }
    }
}

fn adds(containers: &[&'static str]) -> Vec<Step> {
    containers
        .iter()
        .map(|c| Step("ADD", c, "eth0", ""))
        .collect()
}

#[test]
fn single_range_round_robin_with_routes() {
    for version in ["0.3.1", "0.4.0", "1.0.0"] {
        let mut steps = adds(&["c1", "c2", "c3"]);
        steps.extend([
            Step("CHECK", "c2", "eth0", ""),
            Step("DEL", "c1", "eth0", ""),
            Step("ADD", "c4", "eth0", ""),
            Step("ADD", "c1", "eth1", ""),
            Step("DEL", "c2", "eth0", ""),
            Step("DEL", "c2", "eth0", ""),
            Step("ADD", "c2", "eth0", ""),
        ]);
        if version == "0.3.1" {
            steps.retain(|s| s.0 != "CHECK");
        }
        side_by_side(
            version,
            json!({"subnet": "10.30.0.0/24", "gateway": "10.30.0.254", "routes": [{"dst": "0.0.0.0/0"}, {"dst": "192.168.0.0/16", "gw": "10.30.0.1"}]}),
            &steps,
        );
    }
}

#[test]
fn dual_stack_gets_one_address_per_range_set() {
    side_by_side(
        "1.0.0",
        json!({"ranges": [
            [{"subnet": "10.31.0.0/24"}, {"subnet": "10.31.1.0/24"}],
            [{"subnet": "fd31::/64", "rangeStart": "fd31::10", "rangeEnd": "fd31::20"}]
        ], "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0"}]}),
        &[
            Step("ADD", "c1", "eth0", ""),
            Step("ADD", "c2", "eth0", ""),
            Step("CHECK", "c1", "eth0", ""),
            Step("DEL", "c1", "eth0", ""),
            Step("ADD", "c3", "eth0", ""),
        ],
    );
}

#[test]
fn requested_addresses_and_their_errors() {
    side_by_side(
        "1.0.0",
        json!({"subnet": "10.32.0.0/24"}),
        &[
            Step("ADD", "c1", "eth0", "IP=10.32.0.50"),
            Step(
                "ADD",
                "c2",
                "eth0",
                "IgnoreUnknown=1;K8S_POD_NAME=p;IP=10.32.0.51/24",
            ),
            Step("ADD", "c3", "eth0", "IP=10.32.0.50"),
            Step("ADD", "c4", "eth0", "IP=10.32.0.1"),
            Step("ADD", "c6", "eth0", "K8S_POD_NAME=p"),
            Step("ADD", "c7", "eth0", ""),
            Step("DEL", "c1", "eth0", ""),
            Step("ADD", "c8", "eth0", "IP=10.32.0.50"),
        ],
    );
}

/// The one deliberate difference: host-local's failed ADD keeps the advanced
/// `last_reserved_ip` of the address it took and gave back; wasm-ipam commits nothing
/// from a failed call, so its next ADD gets the address host-local skipped.
#[test]
fn failed_add_leaves_no_trace_unlike_host_local() {
    let replies = run_both(
        "1.0.0",
        json!({"subnet": "10.38.0.0/24"}),
        &[
            Step("ADD", "c1", "eth0", ""),
            Step("ADD", "c2", "eth0", "IP=10.99.0.5"),
            Step("ADD", "c3", "eth0", ""),
        ],
    );
    assert_eq!(replies[0].0.address(), "10.38.0.2/24");
    assert_eq!(
        replies[1].0.msg(),
        replies[1].1.msg(),
        "both refuse the leftover IP"
    );
    assert_eq!(
        replies[2].0.address(),
        "10.38.0.3/24",
        "wasm-ipam: nothing kept"
    );
    assert_eq!(
        replies[2].1.address(),
        "10.38.0.4/24",
        "host-local: cursor kept"
    );
}

#[test]
fn exhaustion_then_wrap_around_after_dels() {
    side_by_side(
        "1.0.0",
        json!({"subnet": "10.33.0.0/29", "rangeStart": "10.33.0.2", "rangeEnd": "10.33.0.4"}),
        &[
            Step("ADD", "c1", "eth0", ""),
            Step("ADD", "c2", "eth0", ""),
            Step("ADD", "c3", "eth0", ""),
            Step("ADD", "c4", "eth0", ""),
            Step("DEL", "c2", "eth0", ""),
            Step("ADD", "c5", "eth0", ""),
            Step("ADD", "c6", "eth0", ""),
            Step("DEL", "c1", "eth0", ""),
            Step("DEL", "c3", "eth0", ""),
            Step("ADD", "c7", "eth0", ""),
            Step("ADD", "c8", "eth0", ""),
        ],
    );
}

#[test]
fn duplicate_add_and_unknown_check_fail_alike() {
    side_by_side(
        "1.0.0",
        json!({"subnet": "10.34.0.0/24"}),
        &[
            Step("ADD", "c1", "eth0", ""),
            Step("ADD", "c1", "eth0", ""),
            Step("CHECK", "c9", "eth0", ""),
            Step("DEL", "c9", "eth0", ""),
        ],
    );
}

#[test]
fn dns_from_resolv_conf() {
    let dir = tempfile::tempdir().unwrap();
    let resolv = dir.path().join("resolv.conf");
    std::fs::write(
        &resolv,
        "# generated\nnameserver 10.35.0.53\nnameserver fd35::53\ndomain example.test\nsearch a.test b.test\noptions ndots:2 edns0\n",
    )
    .unwrap();
    side_by_side(
        "1.0.0",
        json!({"subnet": "10.35.0.0/24", "resolvConf": resolv}),
        &[Step("ADD", "c1", "eth0", "")],
    );
}

#[test]
fn invalid_configs_fail_alike() {
    for ipam in [
        json!({}),
        json!({"subnet": "10.36.0.1/24"}),
        json!({"subnet": "10.36.0.0/31"}),
        json!({"subnet": "10.36.0.0/24", "rangeStart": "10.37.0.5"}),
        json!({"ranges": [[{"subnet": "10.36.0.0/24"}, {"subnet": "10.36.0.0/25"}]]}),
        json!({"ranges": [[{"subnet": "10.36.0.0/24"}, {"subnet": "fd36::/64"}]]}),
    ] {
        side_by_side("1.0.0", ipam, &[Step("ADD", "c1", "eth0", "")]);
    }
}
