//! `wasm-ipam conform`: our own allocating modules keep every promise it checks (the
//! tutorials run it on the Rust, Python and Go templates), and a module that breaks
//! one fails exactly the checks that promise stands behind.

use crate::harness::*;
use serde_json::{Value, json};
use std::path::Path;

/// `conform MODULE --netconf` of `ipam`: (exit ok, the check lines by name).
pub fn conform(module: &Path, ipam: Value) -> (bool, Vec<(String, String)>, String) {
    let dir = tempfile::tempdir().unwrap();
    let netconf = dir.path().join("net.json");
    let conf = json!({"cniVersion": "1.1.0", "name": "conform-test", "ipam": ipam});
    std::fs::write(&netconf, conf.to_string()).unwrap();
    let (ok, stdout, stderr) = operator_output([
        "conform".as_ref(),
        module.as_os_str(),
        "--netconf".as_ref(),
        netconf.as_os_str(),
    ]);
    let checks = stdout
        .lines()
        .filter_map(|line| {
            let (verdict, rest) = line.split_once(' ')?;
            let (name, _) = rest.trim_start().split_once(':')?;
            Some((name.to_string(), verdict.to_string()))
        })
        .collect();
    (ok, checks, format!("{stdout}{stderr}"))
}

/// The names of the checks that did not pass.
pub fn not_passed(checks: &[(String, String)]) -> Vec<&str> {
    checks
        .iter()
        .filter(|(_, verdict)| verdict != "passed")
        .map(|(name, _)| name.as_str())
        .collect()
}

const ALL: [&str; 11] = [
    "add-check-del-del",
    "del-never-added",
    "add-repeated",
    "two-interfaces",
    "exhaustion",
    "state-across-processes",
    "cni-versions",
    "status",
    "gc",
    "list-agrees",
    "within-budget",
];

#[test]
fn cluster_pool_and_minimal_pass_every_check() {
    for (module, ipam) in [
        (
            cluster_pool_module(),
            json!({"cidr": "10.86.0.0/28", "blockSize": 29, "nodeName": "n1"}),
        ),
        (
            minimal_module(),
            json!({"addresses": ["10.87.0.2/24", "10.87.0.3/24", "10.87.0.4/24", "10.87.0.5/24"]}),
        ),
    ] {
        let (ok, checks, out) = conform(&module, ipam);
        let names: Vec<&str> = checks.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ALL, "{out}");
        assert!(ok && not_passed(&checks).is_empty(), "{out}");
        assert!(out.ends_with("0 of 11 checks failed\n"), "{out}");
    }
}

/// host-local answers a second ADD of one attachment with an error (a duplicate
/// allocation), and the host-local module keeps its semantics: that check alone
/// fails, with what was asked, what came back and the rule.
#[test]
fn host_local_fails_only_the_repeated_add_as_host_local_does() {
    let (ok, checks, out) = conform(
        &host_local_module(),
        json!({"ranges": [[{"subnet": "10.88.0.0/29"}]]}),
    );
    assert!(!ok, "{out}");
    assert_eq!(not_passed(&checks), ["add-repeated"], "{out}");
    assert!(
        out.contains("FAILED   add-repeated: asked ADD c1/eth0 again; got {\"cniVersion\":\"1.1.0\",\"code\":999,\"msg\":\"failed to allocate for range 0: 10.88.0.2 has been allocated to c1, duplicate allocation is not allowed\"}; the module contract: an ADD repeated"),
        "{out}"
    );
    assert!(out.ends_with("1 of 11 checks failed\n"), "{out}");
}

/// A range too large to exhaust within --max-adds is said, not passed.
#[test]
fn exhaustion_beyond_max_adds_is_not_run_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let netconf = dir.path().join("net.json");
    std::fs::write(
        &netconf,
        json!({"cniVersion": "1.1.0", "name": "big", "ipam": {"ranges": [[{"subnet": "10.89.0.0/24"}]]}})
            .to_string(),
    )
    .unwrap();
    let module = host_local_module();
    let (_, stdout, _) = operator_output([
        "conform".as_ref(),
        module.as_os_str(),
        "--netconf".as_ref(),
        netconf.as_os_str(),
        "--max-adds".as_ref(),
        "3".as_ref(),
    ]);
    assert!(
        stdout.contains("not run  exhaustion: 3 ADDs all succeeded: give --netconf a smaller range (or raise --max-adds)"),
        "{stdout}"
    );
}
