//! The compiled-module cache's safety rules, through the real binary: a cache dir
//! others could write to is refused (the call compiles instead), a corrupt or
//! mismatched artifact is never loaded and is replaced, and concurrent first calls
//! leave exactly one sound artifact.

use crate::harness::*;
use serde_json::{Value, json};
use sha2::Digest;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

fn conf_with_cache(node: &Node, cache: &Path) -> Value {
    let mut conf = node.probe_netconf(json!({}));
    conf["ipam"]["cacheDir"] = cache.to_string_lossy().into();
    conf
}

/// The cache's files but each artifact's `.sum` and its compile lock (which stays, by
/// design: an unlinked lock file would let two calls compile at once).
fn artifacts(cache: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(cache)
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    files.retain(|f| f.extension().is_none_or(|e| e != "lock" && e != "sum"));
    files.sort();
    files
}

/// Whether the last call's log line says the module came from the cache.
fn last_call_cached(node: &Node) -> bool {
    let lines = node.log_lines("invocation");
    lines.last().expect("a logged call")["module_cached"]
        .as_bool()
        .unwrap()
}

/// Asserts one of the node's cache warnings says `text`.
fn assert_cache_warning(node: &Node, text: &str) {
    let warnings = cache_warnings(node);
    assert!(warnings.iter().any(|w| w.contains(text)), "{warnings:?}");
}

fn cache_warnings(node: &Node) -> Vec<String> {
    node.log_lines("cache")
        .iter()
        .map(|l| l["message"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn first_call_compiles_then_calls_load_the_artifact() {
    let node = Node::new();
    let cache = node.dir.path().join("cache");
    let conf = conf_with_cache(&node, &cache);
    Call::new("ADD", "c1").run(&conf).assert_ok();
    assert!(!last_call_cached(&node));
    let files = artifacts(&cache);
    assert_eq!(files.len(), 1, "{files:?}");
    assert_eq!(
        std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777,
        0o700
    );
    Call::new("ADD", "c2").run(&conf).assert_ok();
    assert!(last_call_cached(&node));
}

#[test]
fn cache_dir_writable_by_others_is_refused() {
    let node = Node::new();
    let cache = node.dir.path().join("open-cache");
    std::fs::create_dir(&cache).unwrap();
    std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
    let conf = conf_with_cache(&node, &cache);
    Call::new("ADD", "c1").run(&conf).assert_ok();
    Call::new("ADD", "c2").run(&conf).assert_ok();
    assert!(!last_call_cached(&node), "compiled, not loaded");
    assert!(
        artifacts(&cache).is_empty(),
        "nothing written to a refused cache"
    );
    assert_cache_warning(&node, "writable by group or others");
}

#[test]
fn cache_dir_owned_by_another_user_is_refused() {
    let node = Node::new();
    let cache = node.dir.path().join("foreign-cache");
    std::fs::create_dir(&cache).unwrap();
    std::os::unix::fs::chown(&cache, Some(65534), Some(65534)).expect("chown (tests run as root)");
    let conf = conf_with_cache(&node, &cache);
    Call::new("ADD", "c1").run(&conf).assert_ok();
    assert!(artifacts(&cache).is_empty());
    assert_cache_warning(&node, "not by this user");
}

/// A node whose cache holds the probe module's artifact, compiled by one ADD: the
/// node, the netconf using it, and the artifact's path.
fn compiled_once() -> (Node, Value, PathBuf) {
    let node = Node::new();
    let cache = node.dir.path().join("cache");
    let conf = conf_with_cache(&node, &cache);
    Call::new("ADD", "c1").run(&conf).assert_ok();
    let artifact = artifacts(&cache).pop().unwrap();
    (node, conf, artifact)
}

/// Damages the one artifact in `cache` with `damage`, then checks the next call
/// refuses it, compiles instead, succeeds, and leaves a sound artifact behind.
fn damaged_artifact_is_replaced(damage: impl Fn(&[u8]) -> Vec<u8>, expect_warning: &str) {
    let (node, conf, artifact) = compiled_once();
    std::fs::write(&artifact, damage(&std::fs::read(&artifact).unwrap())).unwrap();

    Call::new("ADD", "c2").run(&conf).assert_ok();
    assert!(
        !last_call_cached(&node),
        "the damaged artifact was not loaded"
    );
    assert_cache_warning(&node, expect_warning);
    Call::new("ADD", "c3").run(&conf).assert_ok();
    assert!(last_call_cached(&node), "a sound artifact replaced it");
}

#[test]
fn corrupt_artifact_is_never_loaded() {
    // A byte flipped in the code, in place: the file's identity changes, so its
    // digest is checked again, and no longer matches.
    damaged_artifact_is_replaced(
        |bytes| {
            let mut bytes = bytes.to_vec();
            let mid = bytes.len() / 2;
            bytes[mid] ^= 0xff;
            bytes
        },
        "its recorded digest is",
    );
}

#[test]
fn truncated_artifact_is_never_loaded() {
    damaged_artifact_is_replaced(
        |bytes| bytes[..bytes.len() / 3].to_vec(),
        "its recorded digest is",
    );
}

/// Replaces the digest recorded in `artifact`'s `.sum`, keeping the rest.
fn record_digest(artifact: &Path, digest: &str) {
    let sum = artifact.with_extension("sum");
    let text = std::fs::read_to_string(&sum).unwrap();
    let rest: Vec<&str> = text.split_whitespace().skip(1).collect();
    std::fs::write(&sum, format!("{digest} {}", rest.join(" "))).unwrap();
}

/// The artifact is left alone but its recorded digest is damaged. Just written, its
/// identity cannot vouch for it yet (the racy window), so the digest is checked, and
/// does not match. (Once old enough, an intact artifact is trusted by its identity
/// whatever the record's digest says, which is right: it is intact.)
#[test]
fn damaged_recorded_digest_is_never_trusted() {
    let (node, conf, artifact) = compiled_once();
    record_digest(&artifact, &"0".repeat(64));
    Call::new("ADD", "c2").run(&conf).assert_ok();
    assert!(!last_call_cached(&node), "the artifact was not trusted");
    assert_cache_warning(&node, "its recorded digest is 0000");
}

#[test]
fn artifact_with_a_matching_digest_but_bad_contents_is_refused_by_wasmtime() {
    let (node, conf, artifact) = compiled_once();
    // Bad contents whose digest is recorded, as if the cache itself had been filled
    // with garbage: the digest check passes, wasmtime's own check does not.
    let payload = b"not an ELF artifact at all";
    std::fs::write(&artifact, payload).unwrap();
    record_digest(&artifact, &format!("{:x}", sha2::Sha256::digest(payload)));
    Call::new("ADD", "c2").run(&conf).assert_ok();
    assert!(!last_call_cached(&node));
    assert_cache_warning(&node, "wasmtime refused");
    Call::new("ADD", "c3").run(&conf).assert_ok();
    assert!(last_call_cached(&node), "a sound artifact replaced it");
}

/// An artifact planted in the cache by another user, or writable by others, is not
/// loaded even though the directory is sound.
#[test]
fn an_artifact_not_owned_by_this_user_is_never_loaded() {
    let (node, conf, artifact) = compiled_once();
    std::fs::set_permissions(&artifact, std::fs::Permissions::from_mode(0o666)).unwrap();
    Call::new("ADD", "c2").run(&conf).assert_ok();
    assert!(!last_call_cached(&node));
    assert_cache_warning(&node, "writable by group or others");
    // The call replaced it with a sound artifact, at the same path.
    std::os::unix::fs::chown(&artifact, Some(65534), Some(65534))
        .expect("chown (tests run as root)");
    Call::new("ADD", "c3").run(&conf).assert_ok();
    assert!(!last_call_cached(&node));
    assert_cache_warning(&node, "owned by uid 65534");
}

/// 16 calls of a module nobody compiled yet: one compiles (single flight, outside the
/// IPAM lock), the others wait for its artifact and load it.
#[test]
fn concurrent_first_use_compiles_once_and_leaves_one_sound_artifact() {
    let _serial = exclusive();
    let node = Node::new();
    let cache = node.dir.path().join("cache");
    let conf = conf_with_cache(&node, &cache);
    let ids: Vec<String> = (0..16).map(|i| format!("ctr{i}")).collect();
    let children: Vec<_> = ids
        .iter()
        .map(|id| Call::new("DEL", id).spawn(&conf))
        .collect();
    for child in children {
        reply(child.wait_with_output().unwrap()).assert_ok();
    }
    let files = artifacts(&cache);
    assert_eq!(
        files.len(),
        1,
        "one artifact, no temporary files left: {files:?}"
    );
    assert!(files[0].extension().unwrap() == "cwasm");
    let compiled = node
        .log_lines("invocation")
        .iter()
        .filter(|l| l["module_cached"] == false)
        .count();
    assert_eq!(
        compiled, 1,
        "exactly one of the 16 calls compiled the module"
    );
    Call::new("DEL", "after").run(&conf).assert_ok();
    assert!(last_call_cached(&node));
    assert!(
        cache_warnings(&node).is_empty(),
        "{:?}",
        cache_warnings(&node)
    );
}

/// A call waiting for another call's compile of the same module gives up after twice
/// the compile time plus 5 s, with "try again later".
#[test]
fn waiting_on_another_calls_compile_is_bounded() {
    let node = Node::new();
    // Learn the compile lock's name from one cache...
    let first = node.dir.path().join("first");
    Call::new("DEL", "c0")
        .run(&conf_with_cache(&node, &first))
        .assert_ok();
    let lock_name = std::fs::read_dir(&first)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .find(|n| n.to_string_lossy().ends_with(".lock"))
        .expect("a compile lock file");
    // ...and hold it in a fresh one, as a call that is compiling there would.
    let second = node.dir.path().join("second");
    std::fs::create_dir(&second).unwrap();
    std::fs::set_permissions(&second, std::fs::Permissions::from_mode(0o700)).unwrap();
    let _held = hold_flock(&second.join(lock_name));
    let mut conf = conf_with_cache(&node, &second);
    conf["ipam"]["compileTimeoutSeconds"] = 0.5.into();
    let (reply, measured) = Call::new("DEL", "c1").run_measured(&conf);
    assert_eq!(reply.error_code(), 11, "{reply:?}");
    assert!(
        reply.msg().contains("waiting to compile"),
        "{}",
        reply.msg()
    );
    assert!(
        measured.wall >= std::time::Duration::from_secs(6),
        "{measured:?}"
    );
    assert!(
        measured.wall < std::time::Duration::from_secs(60),
        "{measured:?}"
    );
}

#[test]
fn precompile_fills_the_cache_ahead_of_time() {
    let node = Node::new();
    let cache = node.dir.path().join("cache");
    let module = probe_module();
    let out = operator_command([
        "precompile".as_ref(),
        module.as_os_str(),
        "--cache-dir".as_ref(),
        cache.as_os_str(),
    ]);
    assert!(out.contains("compiled into"), "{out}");
    Call::new("ADD", "c1")
        .run(&conf_with_cache(&node, &cache))
        .assert_ok();
    assert!(
        last_call_cached(&node),
        "the first CNI call already loads it"
    );
}
