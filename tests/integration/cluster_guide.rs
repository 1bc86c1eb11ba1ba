//! docs/cluster.md as an operator follows it, on a real etcd: its netconf and pools
//! (with this node's etcd, module and paths), its reservation commands run as written
//! (only the netconf's path differs), and the outputs it shows.

use crate::doc_blocks::{Block, Expect, blocks, check, runs};
use crate::etcd::Etcd;
use crate::harness::*;
use serde_json::{Value, json};
use std::path::Path;

const GUIDE: &str = "docs/cluster.md";

/// The text of the block that contains `marker`.
fn block<'a>(blocks: &'a [Block], marker: &str) -> &'a str {
    &blocks
        .iter()
        .find(|block| block.text.contains(marker))
        .unwrap_or_else(|| panic!("{GUIDE} has no block with {marker:?}"))
        .text
}

/// Runs one line of a `sh` block as written, `wasm-ipam` being the binary under test
/// and `/etc/cni/net.d/10-pods.conflist` the test's netconf.
fn sh(line: &str, netconf: &Path) -> String {
    let line = line.replace(
        "/etc/cni/net.d/10-pods.conflist",
        &netconf.to_string_lossy(),
    );
    let path = format!(
        "{}:{}",
        bin().parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new("sh")
        .args(["-c", &line])
        .env("PATH", path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{line}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_cluster_guide_runs_as_written() {
    let doc = std::fs::read_to_string(workspace().join(GUIDE)).unwrap();
    let blocks = blocks(&doc);
    let etcd = Etcd::start(1);
    let node = Node::new();

    // "Running with etcd": the netconf, with this test's etcd, module and paths.
    let mut conf: Value = serde_json::from_str(block(&blocks, "\"store\": {")).unwrap();
    let ipam = conf["ipam"].as_object_mut().unwrap();
    ipam.insert("module".into(), json!(cluster_pool_module()));
    ipam.insert("lockFile".into(), json!(node.lock_file()));
    ipam.insert("dataDir".into(), json!(node.data_dir()));
    ipam.insert("logFile".into(), json!(node.log_file()));
    ipam.insert("cacheDir".into(), json!(shared_cache_dir()));
    ipam["store"]["endpoints"] = json!(etcd.store("/guide/")["endpoints"]);
    ipam["store"].as_object_mut().unwrap().remove("tls");
    // "Pools per namespace or pod": its pools, in place of the single cidr.
    let pools: Value =
        serde_json::from_str(&format!("{{{}}}", block(&blocks, "\"pools\": ["))).unwrap();
    ipam.remove("cidr");
    ipam.insert("pools".into(), pools["pools"].clone());
    let netconf = node.dir.path().join("10-pods.conflist");
    std::fs::write(&netconf, conf.to_string()).unwrap();

    for i in 0..3 {
        Call::new("ADD", &format!("web-{i}"))
            .env(
                "CNI_ARGS",
                format!("K8S_POD_NAMESPACE=web;K8S_POD_NAME=web-{i}"),
            )
            .run(&conf)
            .assert_ok();
    }

    // Every `sh` block, in order, each line as written, printing what its output
    // block says (a reservation's start time being the run's, not the guide's).
    let runs = runs(&blocks);
    for (commands, expect) in &runs {
        let printed: String = commands
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|line| sh(line, &netconf))
            .collect();
        let expect = match expect {
            Expect::Exactly(lines) => Expect::Exactly(lines.iter().map(|l| any_time(l)).collect()),
            Expect::Excerpt(lines) => Expect::Excerpt(lines.iter().map(|l| any_time(l)).collect()),
            other => other.clone(),
        };
        if let Err(why) = check(&any_time(&printed), &expect) {
            panic!("{commands}{why}");
        }
    }
    let ran = runs.len();
    assert!(ran >= 2, "{GUIDE} has {ran} sh blocks");
}

/// `text` with every RFC 3339 second (`2026-12-03T17:36:06Z`) as `<time>`: when a
/// reservation began is the run's, not the guide's.
fn any_time(text: &str) -> String {
    const SHAPE: &[u8] = b"dddd-dd-ddTdd:dd:ddZ";
    let bytes = text.as_bytes();
    let fits = |at: usize| {
        bytes.len() >= at + SHAPE.len()
            && SHAPE
                .iter()
                .zip(&bytes[at..])
                .all(|(want, got)| match want {
                    b'd' => got.is_ascii_digit(),
                    other => other == got,
                })
    };
    let mut out = String::new();
    let mut at = 0;
    while at < bytes.len() {
        if fits(at) {
            out.push_str("<time>");
            at += SHAPE.len();
        } else {
            let c = text[at..].chars().next().unwrap();
            out.push(c);
            at += c.len_utf8();
        }
    }
    out
}
