//! The node's trust policy (/etc/wasm-ipam, mounted for one command in a mount
//! namespace of its own) and a netconf's: the netconf adds to the node's policy and
//! never weakens it.

use crate::harness::*;
use crate::supply_chain::{MountPoints, keypair, policy, sign, unique_module};
use serde_json::json;
use std::path::Path;
use std::process::Command;

/// Runs `command` with `node_policy_dir` mounted on /etc/wasm-ipam, in a mount
/// namespace of its own: the node's policy for this command only.
fn with_node_policy(node_policy_dir: &Path, command: &Path) -> Command {
    let mut cmd = Command::new("/usr/bin/unshare");
    cmd.args(["--mount", "--propagation", "private", "--", "/bin/sh", "-c"])
        .arg(r#"/bin/mount --bind "$1" /etc/wasm-ipam && shift && exec "$@""#)
        .arg("sh")
        .arg(node_policy_dir)
        .arg(command);
    cmd
}

#[test]
fn a_netconf_adds_to_the_node_policy_and_never_weakens_it() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let _mount_points = MountPoints::new(&["/etc/wasm-ipam"]);
    let etc = dir.join("etc");
    std::fs::create_dir(&etc).unwrap();
    let (key, public, id) = keypair(dir, "vendor");
    let unsigned = unique_module(dir, "node-unsigned", 0);
    let signed = unique_module(dir, "node-signed", 0);
    sign(&key, &signed, None);
    let lenient = policy(dir, "lenient.json", false, &[]);
    let strict = policy(dir, "strict.json", true, &[&public]);
    let node = Node::new();
    let call = |module: &Path, netconf_policy: Option<&Path>, id: &str| {
        let mut ipam = json!({"cacheDir": dir.join("cache"), "addresses": ["10.73.0.5/24", "10.73.0.6/24", "10.73.0.7/24", "10.73.0.8/24"]});
        if let Some(p) = netconf_policy {
            ipam["trustPolicy"] = json!(p);
        }
        let conf = node.netconf("1.1.0", module, ipam);
        let child = Call::new("ADD", id)
            .spawn_command(with_node_policy(&etc, bin()), conf.to_string().as_bytes());
        reply(child.wait_with_output().unwrap())
    };

    // No node policy, a lenient netconf one: unsigned runs.
    call(&unsigned, Some(&lenient), "c1").assert_ok();
    // The node requires the vendor's key: the lenient netconf cannot undo it.
    std::fs::copy(&strict, etc.join("trust.json")).unwrap();
    let refused = call(&unsigned, Some(&lenient), "c2");
    assert_eq!(refused.error_code(), 110, "{}", refused.msg());
    assert!(
        refused
            .msg()
            .contains("/etc/wasm-ipam/trust.json requires one"),
        "{}",
        refused.msg()
    );
    let ran = call(&signed, Some(&lenient), "c3");
    ran.assert_ok();
    // A lenient node, a strict netconf: the netconf's requirement holds.
    std::fs::copy(&lenient, etc.join("trust.json")).unwrap();
    let refused = call(&unsigned, Some(&strict), "c4");
    assert_eq!(refused.error_code(), 110, "{}", refused.msg());
    call(&signed, Some(&strict), "c5").assert_ok();
    // inspect and pull read the node's policy too.
    std::fs::copy(&strict, etc.join("trust.json")).unwrap();
    let out = with_node_policy(&etc, bin())
        .args(["inspect", unsigned.to_str().unwrap(), "--no-cache"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success() && text.contains("trust     REFUSED"),
        "{text}"
    );
    let out = with_node_policy(&etc, bin())
        .args(["inspect", signed.to_str().unwrap(), "--no-cache"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("trusted: signed by key {id}")),
        "{text}"
    );
}
