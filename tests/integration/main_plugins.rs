//! Through real main plugins: Debian's `bridge` and `ptp` find `wasm-ipam` in
//! CNI_PATH by `ipam.type` and pass it their stdin and environment, as on a node.
//! Two network namespaces get addresses on eth0 and ping each other; DELs empty the
//! store. Needs root (network namespaces); every namespace and link is removed, also
//! when the test fails.

use crate::harness::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

/// Network namespaces and host links made by one test, removed on drop; the host's
/// IPv4 forwarding setting (which bridge and ptp turn on) is restored.
struct Sandbox {
    namespaces: Vec<String>,
    links: Vec<String>,
    ip_forward: String,
}

impl Sandbox {
    fn new() -> Self {
        Sandbox {
            namespaces: Vec::new(),
            links: Vec::new(),
            ip_forward: std::fs::read_to_string(IP_FORWARD).unwrap(),
        }
    }

    fn namespace(&mut self, name: String) -> String {
        ip(&["netns", "add", &name]);
        self.namespaces.push(name.clone());
        name
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        for ns in &self.namespaces {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
        for link in &self.links {
            let _ = Command::new("ip").args(["link", "del", link]).status();
        }
        let _ = std::fs::write(IP_FORWARD, &self.ip_forward);
    }
}

fn ip(args: &[&str]) -> String {
    let out = Command::new("ip")
        .args(args)
        .output()
        .expect("run ip (iproute2)");
    assert!(
        out.status.success(),
        "ip {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A CNI_PATH holding the main plugin and wasm-ipam, as /opt/cni/bin does on a node.
fn cni_path(node: &Node, main_plugin: &str) -> PathBuf {
    let dir = node.dir.path().join("cni-bin");
    std::fs::create_dir_all(&dir).unwrap();
    let source = Path::new("/usr/lib/cni").join(main_plugin);
    assert!(
        source.exists(),
        "{} is missing: install containernetworking-plugins",
        source.display()
    );
    std::os::unix::fs::symlink(&source, dir.join(main_plugin)).unwrap();
    std::os::unix::fs::symlink(bin(), dir.join("wasm-ipam")).unwrap();
    dir
}

fn run_main_plugin(path: &Path, plugin: &str, command: &str, ns: &str, conf: &Value) -> Reply {
    Call::new(command, ns)
        .env("CNI_PATH", path.to_string_lossy())
        .run_plugin(&path.join(plugin), conf)
}

fn address_of(reply: &Reply) -> String {
    let address = reply.json.as_ref().unwrap()["ips"][0]["address"]
        .as_str()
        .unwrap();
    address.split('/').next().unwrap().to_string()
}

fn two_namespaces_ping(plugin: &str, extra: Value, subnet: &str) {
    let _serial = exclusive();
    let node = Node::new();
    let tag = std::process::id() % 100_000;
    let mut sandbox = Sandbox::new();
    let a = sandbox.namespace(format!("wipam-{plugin}-a-{tag}"));
    let b = sandbox.namespace(format!("wipam-{plugin}-b-{tag}"));
    let path = cni_path(&node, plugin);
    let mut conf = json!({
        "cniVersion": "1.0.0",
        "name": "testnet",
        "type": plugin,
        "ipam": node.netconf("1.0.0", &host_local_module(), json!({"subnet": subnet}))["ipam"].clone(),
    });
    for (k, v) in extra.as_object().unwrap() {
        conf[k] = v.clone();
        if k == "bridge" {
            sandbox.links.push(v.as_str().unwrap().to_string());
        }
    }

    let add_a = run_main_plugin(&path, plugin, "ADD", &a, &conf);
    add_a.assert_ok();
    let add_b = run_main_plugin(&path, plugin, "ADD", &b, &conf);
    add_b.assert_ok();
    let (addr_a, addr_b) = (address_of(&add_a), address_of(&add_b));
    assert_ne!(addr_a, addr_b);
    assert!(ip(&["-n", &a, "addr", "show", "eth0"]).contains(&format!("inet {addr_a}/")));
    assert!(ip(&["-n", &b, "addr", "show", "eth0"]).contains(&format!("inet {addr_b}/")));
    let ping = Command::new("ip")
        .args(["netns", "exec", &a, "ping", "-c", "2", "-W", "5", &addr_b])
        .output()
        .expect("run ping (iputils-ping)");
    assert!(
        ping.status.success(),
        "ping {addr_b} from {a}: {}",
        String::from_utf8_lossy(&ping.stdout)
    );
    assert_eq!(node.address_entries("testnet").len(), 2);

    run_main_plugin(&path, plugin, "DEL", &a, &conf).assert_ok();
    run_main_plugin(&path, plugin, "DEL", &b, &conf).assert_ok();
    let left = node.address_entries("testnet");
    assert!(left.is_empty(), "DEL emptied the store: {left:?}");
}

#[test]
fn bridge_plugin_runs_wasm_ipam() {
    let tag = std::process::id() % 100_000;
    two_namespaces_ping(
        "bridge",
        json!({"bridge": format!("wipbr{tag}"), "isGateway": true}),
        "10.200.7.0/24",
    );
}

#[test]
fn ptp_plugin_runs_wasm_ipam() {
    two_namespaces_ping("ptp", json!({"ipMasq": false}), "10.200.8.0/24");
}
