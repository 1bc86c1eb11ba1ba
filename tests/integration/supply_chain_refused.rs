//! Pulls the node refuses, against the real registry of [`crate::supply_chain`],
//! each writing nothing: unsigned or untrusted under a policy that requires a
//! signature, references the registry cannot answer or that are malformed, a tag
//! moved away from its digest, tampered bytes, layers and manifests over their
//! limits, a registry that is down.

use crate::harness::*;
use crate::supply_chain::{
    assert_refused, keypair, oci, policy, pull, push, registry, release, sign, unique_module,
};
use serde_json::json;
use std::path::Path;
use std::process::Command;

/// Unsigned, under a policy that requires a signature (`with_policy`): refused, and
/// so named when pushed; asked for by the module's own sha256 (what
/// ipam.moduleSha256 pins) instead of the manifest's: refused, naming the
/// difference; pulled by the manifest's digest: taken. Returns that digest.
fn check_unsigned_and_module_digest_refused(dir: &Path, with_policy: &[&str]) -> String {
    let unsigned = release(dir, "unsigned", None);
    assert_refused(
        dir,
        &oci("vendor/unsigned:1"),
        with_policy,
        "the registry holds no signature for manifest sha256:",
    );
    let pushed = push(&unsigned, &oci("vendor/unsigned:2"), None);
    assert!(
        pushed.contains("unsigned  nodes whose trust policy requires a signature refuse it"),
        "{pushed}"
    );

    let by_module_sha = format!(
        "{}@sha256:{}",
        oci("vendor/unsigned"),
        sha256_hex(&unsigned)
    );
    assert_refused(
        dir,
        &by_module_sha,
        &[],
        "is a blob in vendor/unsigned (a module's own sha256, as ipam.moduleSha256 pins it), not a manifest",
    );
    let manifest = pushed
        .lines()
        .find_map(|l| l.strip_prefix("pull      "))
        .and_then(|l| l.strip_suffix(" (the manifest's digest)"))
        .unwrap_or_else(|| panic!("no pull line: {pushed}"));
    let manifest_digest = manifest.rsplit_once('@').unwrap().1.to_string();
    let (ok, _, err) = pull(dir, manifest, &[]);
    assert!(ok, "pull by the manifest's digest: {err}");
    std::fs::remove_dir_all(dir.join("modules")).unwrap();
    manifest_digest
}

/// Signed by a key the policy does not trust (`key_b`, `id_b`), and a trusted key's
/// (`key_a`) signature of another module: both refused.
fn check_untrusted_signatures_refused(
    dir: &Path,
    with_policy: &[&str],
    key_a: &Path,
    (key_b, id_b): (&Path, &str),
) {
    release(dir, "other-key", Some(key_b));
    assert_refused(
        dir,
        &oci("vendor/other-key:1"),
        with_policy,
        &format!("signed by key {id_b}"),
    );

    // A trusted key's signature of another module.
    let module = unique_module(dir, "swapped", 0);
    let decoy = unique_module(dir, "decoy", 0);
    sign(key_a, &decoy, None);
    push(
        &module,
        &oci("vendor/swapped:1"),
        Some(&dir.join("decoy.wasm.minisig")),
    );
    assert_refused(
        dir,
        &oci("vendor/swapped:1"),
        with_policy,
        "does not verify",
    );
}

/// References the registry cannot answer, each refused naming what it holds: a
/// digest the repository does not have (7), a repository never pushed, malformed
/// digests (before the registry is asked), and TAG@DIGEST whose tag now names another
/// manifest (101). The manifest `manifest_digest` of vendor/unsigned:1 is still pulled
/// by a tag that names it.
fn check_wrong_references_refused(dir: &Path, manifest_digest: &str) {
    // A digest the repository does not have: refused as a wrong reference (7), with
    // what the repository holds.
    let absent = format!("{}@sha256:{}", oci("vendor/unsigned"), "0".repeat(64));
    assert_refused(
        dir,
        &absent,
        &[],
        &format!(
            "code 7: {absent}: the registry has no manifest sha256:{} in vendor/unsigned; it holds the tags ",
            "0".repeat(64)
        ),
    );
    for tag in ["1", "2"] {
        assert_refused(dir, &absent, &[], &format!("{tag} ({manifest_digest})"));
    }
    assert_refused(
        dir,
        &oci("vendor/never-pushed:1"),
        &[],
        "the registry has no tag 1 in vendor/never-pushed; there is no repository",
    );
    // A malformed digest: named, before the registry is asked.
    for digest in [
        "sha256:abc",
        "md5:0123",
        &format!("sha256:{}", "A".repeat(64)),
    ] {
        assert_refused(
            dir,
            &format!("{}@{digest}", oci("vendor/unsigned")),
            &[],
            &format!(
                "code 7: \"{}@{digest}\" is not a module reference: its digest \"{digest}\" is malformed: a module's digest is `sha256:` and 64 lower-case hex digits",
                oci("vendor/unsigned")
            ),
        );
    }
    // TAG@DIGEST whose tag now names another manifest: refused (101), both named, not
    // pulled by the digest in silence.
    push(
        &unique_module(dir, "moved", 0),
        &oci("vendor/unsigned:3"),
        None,
    );
    let moved = format!("{}:3@{manifest_digest}", oci("vendor/unsigned"));
    assert_refused(
        dir,
        &moved,
        &[],
        &format!("code 101: {moved}: the tag 3 names sha256:"),
    );
    assert_refused(
        dir,
        &moved,
        &[],
        &format!(
            "not {manifest_digest}: pull {}@{manifest_digest} for the module that digest pins, or {}:3 for what the tag names now",
            oci("vendor/unsigned"),
            oci("vendor/unsigned")
        ),
    );
    let (ok, _, err) = pull(
        dir,
        &format!("{}:1@{manifest_digest}", oci("vendor/unsigned")),
        &[],
    );
    assert!(ok, "a tag that names its digest is pulled: {err}");
    std::fs::remove_dir_all(dir.join("modules")).unwrap();
}

/// Bytes the registry serves that the manifest does not describe (its storage
/// tampered with), a layer over moduleMaxMiB (refused from its descriptor) and a
/// manifest over 1 MiB: each refused. `key_a` signs the release whose config blob the
/// large manifest names.
fn check_tampered_and_oversized_refused(dir: &Path, key_a: &Path) {
    // A layer whose bytes the registry serves changed (its storage tampered with).
    let tampered = release(dir, "tampered", None);
    let sha = sha256_hex(&tampered);
    let blob = registry().storage.join(format!(
        "docker/registry/v2/blobs/sha256/{}/{sha}/data",
        &sha[..2]
    ));
    let mut bytes = std::fs::read(&blob).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(&blob, bytes).unwrap();
    assert_refused(
        dir,
        &oci("vendor/tampered:1"),
        &[],
        "is not what its manifest describes",
    );

    // A layer over moduleMaxMiB: refused from its descriptor, before it is fetched.
    let large = unique_module(dir, "large", 3 << 19);
    push(&large, &oci("vendor/large:1"), None);
    assert_refused(
        dir,
        &oci("vendor/large:1"),
        &["--module-max-mib", "1"],
        "over moduleMaxMiB (1 MiB)",
    );

    // A manifest over 1 MiB (the registry takes up to 4).
    let big = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.wasm.config.v0+json",
                   "digest": "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a", "size": 2},
        "layers": [],
        "annotations": {"padding": "x".repeat(3 << 19)},
    });
    let path = dir.join("big.json");
    std::fs::write(&path, big.to_string()).unwrap();
    // The config blob it names (OCI's empty `{}`, which a signature artifact has)
    // must be in the repository for the registry to take it.
    release(dir, "config-holder", Some(key_a));
    let status = Command::new("python3")
        .arg("-c")
        .arg(
            "import sys, urllib.request as u; \
             r = u.Request(sys.argv[1], data=open(sys.argv[2], 'rb').read(), method='PUT', \
             headers={'Content-Type': 'application/vnd.oci.image.manifest.v1+json'}); \
             u.urlopen(r)",
        )
        .arg(format!(
            "http://{}/v2/vendor/config-holder/manifests/big",
            registry().address
        ))
        .arg(&path)
        .status()
        .unwrap();
    assert!(status.success(), "PUT the large manifest");
    assert_refused(dir, &oci("vendor/config-holder:big"), &[], "over 1 MiB");
}

#[test]
fn refused_pulls_write_nothing() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let (key_a, public_a, _) = keypair(dir, "a");
    let (key_b, _, id_b) = keypair(dir, "b");
    let strict = policy(dir, "trust.json", true, &[&public_a]);
    let with_policy = ["--trust-policy", strict.to_str().unwrap()];
    let manifest_digest = check_unsigned_and_module_digest_refused(dir, &with_policy);
    check_untrusted_signatures_refused(dir, &with_policy, &key_a, (&key_b, &id_b));
    check_wrong_references_refused(dir, &manifest_digest);
    check_tampered_and_oversized_refused(dir, &key_a);

    // A registry that is down.
    let down = format!("oci://127.0.0.1:{}/vendor/unsigned:1", free_port());
    assert_refused(dir, &down, &[], "cannot fetch the manifest");
}
