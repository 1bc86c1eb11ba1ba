//! The fuzz targets' corpus (`fuzz/corpus/`), replayed on stable through the same
//! entry points cargo-fuzz drives (`wasm_ipam::fuzz`), then mutated by a seeded
//! generator so the replay explores past the checked-in inputs; and the property that
//! a call that fails leaves the store byte for byte as it was.

use crate::harness::*;
use serde_json::Value;
use std::path::PathBuf;

/// A fuzz target: runs one input, panicking on a finding.
type Target = fn(&[u8]);

const TARGETS: &[(&str, Target)] = &[
    ("netconf", wasm_ipam::fuzz::netconf),
    ("environment", wasm_ipam::fuzz::environment),
    ("cni_args", wasm_ipam::fuzz::cni_args),
];

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = workspace().join("fuzz/corpus").join(target);
    let mut inputs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let path = e.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            (path, bytes)
        })
        .collect();
    inputs.sort();
    inputs
}

/// Tokens worth splicing into CNI inputs.
const TOKENS: &[&[u8]] = &[
    b"\"",
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b",",
    b"\\u0000",
    b"\\ud800",
    b"1e999",
    b"-1",
    b"null",
    b"\"ipam\"",
    b"\"module\"",
    b"\"lockFile\"",
    b"\"dataDir\"",
    b"\"deadlineSeconds\"",
    b"=",
    b";",
    b"\0",
    b"CNI_COMMAND=",
    b"CNI_IFNAME=",
    b"..",
    b"/",
    b"\xff\xfe",
];

fn mutate(rng: &mut Lcg, input: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..1 + rng.next(4) {
        let at = rng.next(out.len() + 1);
        match rng.next(5) {
            0 if !out.is_empty() => {
                let i = rng.next(out.len());
                out[i] ^= 1 << rng.next(8);
            }
            1 => out.truncate(at),
            2 => {
                let token = TOKENS[rng.next(TOKENS.len())];
                out.splice(at..at, token.iter().copied());
            }
            3 if at < out.len() => {
                let end = (at + rng.next(16)).min(out.len());
                out.drain(at..end);
            }
            _ => {
                let end = (at + rng.next(32)).min(out.len());
                let chunk = out[at..end].to_vec();
                out.splice(at..at, chunk);
            }
        }
    }
    out
}

#[test]
fn the_corpus_and_its_mutations_never_panic_and_are_refused_with_named_codes() {
    let mut rng = Lcg(0xf022);
    for (target, run) in TARGETS {
        let inputs = corpus(target);
        assert!(inputs.len() >= 5, "{target}: corpus too small");
        for (path, bytes) in &inputs {
            let replayed = std::panic::catch_unwind(|| run(bytes));
            assert!(replayed.is_ok(), "{target}: {} panicked", path.display());
        }
        for round in 0..2000 {
            let (_, seed) = &inputs[rng.next(inputs.len())];
            let input = mutate(&mut rng, seed);
            let replayed = std::panic::catch_unwind(|| run(&input));
            assert!(
                replayed.is_ok(),
                "{target}: mutation {round} panicked on {:?}",
                String::from_utf8_lossy(&input)
            );
        }
    }
}

/// The store's files, byte for byte.
fn snapshot(node: &Node) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(node.data_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&p).unwrap())
        })
        .collect();
    files.sort();
    files
}

#[test]
fn every_failed_call_leaves_the_store_byte_for_byte_unchanged() {
    let _heavy = exclusive();
    let (node, _) = node_with_state();
    let good = node.netconf(
        "1.0.0",
        &host_local_module(),
        serde_json::json!({"subnet": "10.6.0.0/24"}),
    );
    Call::new("ADD", "held").run(&good).assert_ok();
    let mut before = snapshot(&node);
    let mut rng = Lcg(0xb17e);
    let seed = good.to_string().into_bytes();
    let (mut failed, mut succeeded) = (0, 0);
    let mut codes = Vec::new();
    for round in 0..120 {
        // Mutated netconfs (most fail to parse or validate; some reach the module and
        // fail there), and a fixed set of failures past the lock.
        let input = match round % 4 {
            0 => {
                let mut conf: Value = good.clone();
                conf["ipam"]["subnet"] = "not-a-subnet".into();
                conf.to_string().into_bytes()
            }
            1 => {
                let mut conf: Value = good.clone();
                conf["ipam"]["rangeStart"] = "10.9.9.9".into();
                conf.to_string().into_bytes()
            }
            _ => {
                // Whatever the mutation did, the paths stay this node's: a flipped
                // byte in a path must not make the call write outside the test.
                let mutated = mutate(&mut rng, &seed);
                match serde_json::from_slice::<Value>(&mutated) {
                    Ok(mut conf) if conf.get("ipam").is_some_and(Value::is_object) => {
                        for key in ["module", "lockFile", "dataDir", "cacheDir", "logFile"] {
                            conf["ipam"][key] = good["ipam"][key].clone();
                        }
                        conf.to_string().into_bytes()
                    }
                    _ => mutated,
                }
            }
        };
        let command = ["ADD", "DEL", "CHECK"][rng.next(3)];
        let reply = Call::new(command, &format!("m{round}")).run_raw(&input);
        if reply.success {
            // A mutation that is still a valid call may change the store; start over
            // from what it left.
            succeeded += 1;
            let _ = Call::new("DEL", &format!("m{round}")).run_raw(&input);
            before = snapshot(&node);
            continue;
        }
        failed += 1;
        codes.push(
            reply
                .json
                .as_ref()
                .map_or(0, |j| j["code"].as_u64().unwrap_or(0)),
        );
        assert!(
            reply.json.is_some(),
            "round {round}: no CNI error JSON: {reply:?}"
        );
        let after = snapshot(&node);
        if after != before {
            let changed: Vec<_> = after
                .iter()
                .zip(&before)
                .filter(|(a, b)| a != b)
                .map(|(a, _)| a.0.clone())
                .collect();
            panic!(
                "round {round}: a failed {command} changed {changed:?}: {:?}",
                reply.json
            );
        }
    }
    codes.sort();
    codes.dedup();
    eprintln!("{failed} failed ({codes:?}), {succeeded} succeeded");
    // Failures past the lock (the module's own codes) are among them.
    assert!(codes.iter().any(|c| *c >= 100), "{codes:?}");
    assert!(
        failed >= 60,
        "only {failed} calls failed ({succeeded} succeeded)"
    );
}
