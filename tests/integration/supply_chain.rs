//! Vendors ship modules, against real peers: Debian's `docker-registry` (distribution
//! 2.8, which has no referrers API, so signatures go through the referrers tag
//! schema) on loopback, Debian's `minisign` CLI for keys and signatures, and the ORAS
//! Python SDK from PyPI as a second, independent OCI client.
//!
//! One registry serves the whole test binary (started on first use, stopped and its
//! storage removed when the binary exits); each test pushes modules of its own, made
//! distinct by a custom section, so no test sees another's blobs. This file holds the
//! registry, the vendor's and the node's steps the `supply_chain_*` tests share, and
//! the tests of a release's way from vendor to node.

use crate::doc_blocks;
use crate::harness::*;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

const REGISTRY: &str = "/usr/bin/docker-registry";
const MINISIGN: &str = "/usr/bin/minisign";

pub(crate) struct Registry {
    /// `127.0.0.1:PORT`.
    pub(crate) address: String,
    /// The registry's filesystem storage, to tamper with a blob.
    pub(crate) storage: PathBuf,
}

/// The running registry and its storage, stopped and removed at exit.
static RUNNING: Mutex<Option<(Child, tempfile::TempDir)>> = Mutex::new(None);

extern "C" fn stop_registry() {
    let taken = RUNNING
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .take();
    if let Some((mut child, dir)) = taken {
        let _ = child.kill();
        let _ = child.wait();
        drop(dir);
    }
}

pub(crate) fn registry() -> &'static Registry {
    static REG: OnceLock<Registry> = OnceLock::new();
    REG.get_or_init(|| {
        assert!(
            Path::new(REGISTRY).is_file() && Path::new(MINISIGN).is_file(),
            "{REGISTRY} and {MINISIGN} are needed (Debian's docker-registry and minisign; scripts/test.sh installs them)"
        );
        let dir = tempfile::tempdir().unwrap();
        let storage = dir.path().join("storage");
        let port = free_port();
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\nlog:\n  level: error\n",
                storage.display()
            ),
        )
        .unwrap();
        let child = Command::new(REGISTRY)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        *RUNNING.lock().unwrap() = Some((child, dir));
        // SAFETY: registers a plain function with no preconditions.
        unsafe { libc::atexit(stop_registry) };
        let address = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(&address).is_err() {
            assert!(Instant::now() < deadline, "the registry never listened on {address}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Registry { address, storage }
    })
}

pub fn oci(repo_tag: &str) -> String {
    format!("oci://{}/{repo_tag}", registry().address)
}

/// A minisign key pair made by the minisign CLI: (secret key path, public key line,
/// key id as minisign prints it).
pub fn keypair(dir: &Path, name: &str) -> (PathBuf, String, String) {
    let (secret, public) = (
        dir.join(format!("{name}.key")),
        dir.join(format!("{name}.pub")),
    );
    let status = Command::new(MINISIGN)
        .args(["-G", "-W", "-f", "-p"])
        .arg(&public)
        .arg("-s")
        .arg(&secret)
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "minisign -G");
    let text = std::fs::read_to_string(&public).unwrap();
    let id = text
        .lines()
        .next()
        .unwrap()
        .rsplit(' ')
        .next()
        .unwrap()
        .to_string();
    (secret, text.lines().nth(1).unwrap().to_string(), id)
}

/// `minisign -S`: writes `file.minisig` (or `to`).
pub fn sign(secret: &Path, file: &Path, to: Option<&Path>) {
    let mut cmd = Command::new(MINISIGN);
    cmd.arg("-S").arg("-s").arg(secret).arg("-m").arg(file);
    if let Some(to) = to {
        cmd.arg("-x").arg(to);
    }
    let status = cmd.stdout(Stdio::null()).status().unwrap();
    assert!(status.success(), "minisign -S");
}

/// The minimal module with a custom section `tag` (and `padding` more bytes), so each
/// test's module has a digest of its own; still a valid component.
pub fn unique_module(dir: &Path, tag: &str, padding: usize) -> PathBuf {
    unique_module_of(&minimal_module(), dir, tag, padding)
}

/// [`unique_module`] of the module `base`.
fn unique_module_of(base: &Path, dir: &Path, tag: &str, padding: usize) -> PathBuf {
    let mut bytes = std::fs::read(base).unwrap();
    let leb = |mut n: usize, out: &mut Vec<u8>| loop {
        let byte = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(byte);
            break;
        }
        out.push(byte | 0x80);
    };
    let name = format!("wasm-ipam-test-{tag}");
    let mut payload = Vec::new();
    leb(name.len(), &mut payload);
    payload.extend_from_slice(name.as_bytes());
    payload.extend(std::iter::repeat_n(b'x', padding));
    bytes.push(0);
    leb(payload.len(), &mut bytes);
    bytes.extend_from_slice(&payload);
    let path = dir.join(format!("{tag}.wasm"));
    std::fs::write(&path, bytes).unwrap();
    path
}

pub fn policy(dir: &Path, name: &str, require: bool, keys: &[&str]) -> PathBuf {
    let path = dir.join(name);
    let json = json!({"requireSignature": require, "keys": keys});
    std::fs::write(&path, json.to_string()).unwrap();
    path
}

pub fn push(module: &Path, to: &str, signature: Option<&Path>) -> String {
    let mut args = vec![
        "push".to_string(),
        module.display().to_string(),
        to.to_string(),
    ];
    if let Some(signature) = signature {
        args.extend(["--signature".into(), signature.display().to_string()]);
    }
    operator_command(args)
}

/// A vendor's release: a module of its own (`tag`) signed with `secret`, if given,
/// pushed to `vendor/TAG:1` with its signature; the module's path.
pub fn release(dir: &Path, tag: &str, secret: Option<&Path>) -> PathBuf {
    let module = unique_module(dir, tag, 0);
    let signature = secret.map(|secret| {
        sign(secret, &module, None);
        dir.join(format!("{tag}.wasm.minisig"))
    });
    push(
        &module,
        &oci(&format!("vendor/{tag}:1")),
        signature.as_deref(),
    );
    module
}

/// `wasm-ipam pull` into `dir/modules` with a cache in `dir/cache`.
pub fn pull(dir: &Path, reference: &str, extra: &[&str]) -> (bool, String, String) {
    let mut args: Vec<String> = vec![
        "pull".into(),
        reference.into(),
        "--module-dir".into(),
        dir.join("modules").display().to_string(),
        "--cache-dir".into(),
        dir.join("cache").display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    operator_output(args)
}

/// What the module dir holds (nothing if it was never made).
fn module_dir_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("modules"))
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// A refused pull: non-zero, the message has `says`, and nothing was written.
pub fn assert_refused(dir: &Path, reference: &str, extra: &[&str], says: &str) {
    let (ok, stdout, stderr) = pull(dir, reference, extra);
    assert!(!ok, "pull {reference} should be refused: {stdout}");
    assert!(
        stderr.contains(says),
        "pull {reference}: expected {says:?} in {stderr}"
    );
    assert_eq!(module_dir_entries(dir), Vec::<String>::new(), "{reference}");
}

#[test]
fn a_vendor_signs_and_pushes_and_a_node_pulls_verifies_and_runs_it() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let (key_a, public_a, id_a) = keypair(dir, "a");
    let (key_b, public_b, id_b) = keypair(dir, "b");
    let module = unique_module(dir, "signed", 0);
    sign(&key_a, &module, None);
    let pushed = push(
        &module,
        &oci("vendor/signed:1.0"),
        Some(&dir.join("signed.wasm.minisig")),
    );
    assert!(pushed.contains(&format!("(key {id_a})")), "{pushed}");

    let strict = policy(dir, "trust.json", true, &[&public_a]);
    let (ok, out, err) = pull(
        dir,
        &oci("vendor/signed:1.0"),
        &["--trust-policy", strict.to_str().unwrap()],
    );
    assert!(ok, "{err}");
    let sha = sha256_hex(&module);
    let name = format!("signed-{sha}.wasm");
    assert_eq!(
        module_dir_entries(dir),
        vec![name.clone(), format!("{name}.minisig")]
    );
    let pulled = dir.join("modules").join(&name);
    assert_eq!(
        std::fs::read(&pulled).unwrap(),
        std::fs::read(&module).unwrap()
    );
    assert!(
        out.contains(&format!("trusted: signed by key {id_a}")),
        "{out}"
    );
    assert!(
        out.contains(&format!("\"moduleSha256\": \"{sha}\"")),
        "{out}"
    );
    let inspect = operator_command([
        "inspect",
        pulled.to_str().unwrap(),
        "--cache-dir",
        dir.join("cache").to_str().unwrap(),
        "--trust-policy",
        strict.to_str().unwrap(),
    ]);
    assert!(
        inspect.contains(&format!("signed    by key {id_a}")),
        "{inspect}"
    );
    assert!(
        inspect.contains(&format!("trust     trusted: signed by key {id_a}")),
        "{inspect}"
    );

    // The node runs it as the netconf names it, pinned and under the policy.
    let node = Node::new();
    let conf = node.netconf(
        "1.1.0",
        &pulled,
        json!({"moduleSha256": sha, "trustPolicy": strict, "cacheDir": dir.join("cache"),
               "addresses": ["10.71.0.5/24", "10.71.0.6/24", "10.71.0.7/24", "10.71.0.8/24"]}),
    );
    Call::new("ADD", "c1").run(&conf).assert_ok();
    let held = node.store_entries("testnet");
    assert!(!held.is_empty());

    // Another key's signature in place of the vendor's: refused on the next call,
    // though the verdict for the old one is cached.
    let signature = dir.join("modules").join(format!("{name}.minisig"));
    let vendors = std::fs::read(&signature).unwrap();
    sign(&key_b, &pulled, Some(&signature));
    let refused = Call::new("ADD", "c2").run(&conf);
    assert_eq!(refused.error_code(), 110, "{}", refused.msg());
    assert!(refused.msg().contains(&id_b), "{}", refused.msg());
    std::fs::write(&signature, &vendors).unwrap();
    Call::new("ADD", "c2").run(&conf).assert_ok();

    // The vendor's key removed from the policy: refused on the next call.
    policy(dir, "trust.json", true, &[&public_b]);
    let refused = Call::new("ADD", "c3").run(&conf);
    assert_eq!(refused.error_code(), 110, "{}", refused.msg());
    assert!(
        refused.msg().contains("does not trust"),
        "{}",
        refused.msg()
    );
    policy(dir, "trust.json", true, &[&public_a]);

    // The module changed after the pull: refused, unpinned too, and nothing ran.
    let before = node.store_entries("testnet");
    let mut bytes = std::fs::read(&pulled).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(&pulled, bytes).unwrap();
    let mut unpinned = conf.clone();
    unpinned["ipam"]
        .as_object_mut()
        .unwrap()
        .remove("moduleSha256");
    let refused = Call::new("ADD", "c4").run(&unpinned);
    assert_eq!(refused.error_code(), 110, "{}", refused.msg());
    assert!(
        refused.msg().contains("does not verify"),
        "{}",
        refused.msg()
    );
    let refused = Call::new("ADD", "c4").run(&conf);
    assert_eq!(refused.error_code(), 101, "pinned: {}", refused.msg());
    assert_eq!(node.store_entries("testnet"), before);
}

/// The ORAS Python SDK, installed by scripts/test.sh into a virtualenv under target/.
fn oras_python() -> PathBuf {
    let python = workspace().join("target/oras-py/bin/python");
    assert!(
        python.is_file(),
        "{} is missing: scripts/test.sh installs the ORAS Python SDK there",
        python.display()
    );
    python
}

/// Runs the ORAS Python SDK: `push TARGET FILE CONFIG` or `pull TARGET OUTDIR`.
fn oras(args: &[&str]) -> String {
    const SCRIPT: &str = r#"
import sys, oras.client
c = oras.client.OrasClient(hostname=sys.argv[2].split("/")[0], insecure=True)
if sys.argv[1] == "push":
    target, path, config = sys.argv[2:5]
    c.push(target=target, files=[path + ":application/wasm"],
           manifest_config=config + ":application/vnd.wasm.config.v0+json",
           disable_path_validation=True)
else:
    print("\n".join(c.pull(target=sys.argv[2], outdir=sys.argv[3])))
"#;
    let out = Command::new(oras_python())
        .arg("-c")
        .arg(SCRIPT)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "oras {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn oras_and_wasm_ipam_pull_what_the_other_pushed() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    // ORAS pushes, wasm-ipam pulls and runs it.
    let theirs = unique_module(dir, "from-oras", 0);
    let config = dir.join("config.json");
    std::fs::write(
        &config,
        json!({"architecture": "wasm", "os": "wasip2", "layerDigests": [format!("sha256:{}", sha256_hex(&theirs))]}).to_string(),
    )
    .unwrap();
    let target = format!("{}/vendor/from-oras:1", registry().address);
    oras(&[
        "push",
        &target,
        theirs.to_str().unwrap(),
        config.to_str().unwrap(),
    ]);
    let (ok, _, err) = pull(dir, &format!("oci://{target}"), &[]);
    assert!(ok, "{err}");
    let pulled = dir
        .join("modules")
        .join(format!("from-oras-{}.wasm", sha256_hex(&theirs)));
    assert_eq!(
        std::fs::read(&pulled).unwrap(),
        std::fs::read(&theirs).unwrap()
    );
    let node = Node::new();
    let conf = node.netconf(
        "1.1.0",
        &pulled,
        json!({"cacheDir": dir.join("cache"), "addresses": ["10.72.0.5/24"]}),
    );
    Call::new("ADD", "c1").run(&conf).assert_ok();

    // wasm-ipam pushes (with a signature, a referrer ORAS ignores), ORAS pulls the
    // module byte for byte.
    let (key, _, _) = keypair(dir, "k");
    let ours = release(dir, "from-wasm-ipam", Some(&key));
    let out = dir.join("oras-out");
    let files = oras(&[
        "pull",
        &format!("{}/vendor/from-wasm-ipam:1", registry().address),
        out.to_str().unwrap(),
    ]);
    assert!(files.contains("from-wasm-ipam.wasm"), "{files}");
    assert_eq!(
        std::fs::read(out.join("from-wasm-ipam.wasm")).unwrap(),
        std::fs::read(&ours).unwrap()
    );
}

#[test]
fn install_pulls_a_module_from_a_registry_and_pins_it() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let (key, public, id) = keypair(dir, "vendor");
    // host-local's keys are what --subnet writes.
    let module = unique_module_of(&host_local_module(), dir, "installed", 0);
    sign(&key, &module, None);
    push(
        &module,
        &oci("vendor/installed:2.0"),
        Some(&dir.join("installed.wasm.minisig")),
    );
    let strict = policy(dir, "trust.json", true, &[&public]);
    let path = |name: &str| dir.join(name).display().to_string();
    let out = operator_command([
        "install".to_string(),
        "--module".into(),
        oci("vendor/installed:2.0"),
        "--trust-policy".into(),
        strict.display().to_string(),
        "--subnet".into(),
        "10.78.0.0/24".into(),
        "--bin-dir".into(),
        path("bin"),
        "--module-dir".into(),
        path("wasm"),
        "--conf-dir".into(),
        path("net.d"),
        "--cache-dir".into(),
        path("cache"),
        "--data-dir".into(),
        path("data"),
        "--lock-file".into(),
        path("ipam.lock"),
    ]);
    assert!(out.contains(&format!("signed by key {id}")), "{out}");
    assert!(out.contains("checked an ADD and a DEL"), "{out}");
    let sha = sha256_hex(&module);
    let installed = dir.join("wasm").join(format!("installed-{sha}.wasm"));
    assert!(
        installed.is_file()
            && dir
                .join("wasm")
                .join(format!("installed-{sha}.wasm.minisig"))
                .is_file()
    );
    let conflist: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("net.d/00-wasm-ipam.conflist")).unwrap(),
    )
    .unwrap();
    let ipam = &conflist["plugins"][0]["ipam"];
    assert_eq!(ipam["module"], json!(installed));
    assert_eq!(ipam["moduleSha256"], json!(sha));
    assert_eq!(ipam["trustPolicy"], json!(strict));
    // The runtime's view: an ADD and a DEL through the conflist pass.
    let mut plugin = conflist["plugins"][0].clone();
    plugin["name"] = conflist["name"].clone();
    plugin["cniVersion"] = conflist["cniVersion"].clone();
    let wasm_ipam = dir.join("bin/wasm-ipam");
    let added = Call::new("ADD", "pod1").run_plugin(&wasm_ipam, &plugin);
    assert_eq!(added.address(), "10.78.0.2/24");
    Call::new("DEL", "pod1")
        .run_plugin(&wasm_ipam, &plugin)
        .assert_ok();
}

#[test]
fn the_supply_chain_guide_runs_as_written() {
    let doc = std::fs::read_to_string(workspace().join("docs/supply-chain.md")).unwrap();
    let steps = doc_blocks::runs(&doc_blocks::blocks(&doc));
    assert!(steps.len() >= 6, "{steps:?}");
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    // The node's directories, private to the guide: bound over the real ones in a
    // mount namespace of each step's own.
    let binds = [
        ("etc-wasm-ipam", "/etc/wasm-ipam"),
        ("etc-cni-net.d", "/etc/cni/net.d"),
        ("opt", "/opt"),
        ("var-cache", "/var/cache"),
    ];
    let _mount_points = MountPoints::new(&binds.map(|(_, to)| to));
    let mut mounts = String::new();
    for (from, to) in binds {
        std::fs::create_dir(dir.join(from)).unwrap();
        mounts += &format!("/bin/mount --bind {} {to} && ", dir.join(from).display());
    }
    let home = dir.join("home");
    std::fs::create_dir(&home).unwrap();
    // The guide installs it with --subnet: a module of host-local's keys.
    std::fs::copy(
        unique_module_of(&host_local_module(), dir, "guide", 0),
        home.join("my_ipam.wasm"),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        bin().parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (script, expect) in steps {
        let out = Command::new("/usr/bin/unshare")
            .args([
                "--mount",
                "--propagation",
                "private",
                "--",
                "/bin/bash",
                "-c",
            ])
            .arg(format!(r#"{mounts} exec /bin/bash -euo pipefail -c "$0""#))
            .arg(&script)
            .current_dir(&home)
            .env("PATH", &path)
            .env("HOME", &home)
            .env("REGISTRY", &registry().address)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{script}failed: {stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        if let Err(why) = doc_blocks::check(&stdout, &expect) {
            panic!("{script}{why}");
        }
    }
}

/// A module in Go travels as any module does: signed with minisign, pushed, pulled
/// under a policy that requires the signature, and run by a node pinned to it.
#[test]
fn a_go_module_is_signed_pushed_pulled_and_run_like_any_other() {
    let work = tempfile::tempdir().unwrap();
    let dir = work.path();
    let (key, public, id) = keypair(dir, "go-vendor");
    let module = dir.join("static_go.wasm");
    std::fs::copy(crate::static_go::go_static().module, &module).unwrap();
    sign(&key, &module, None);
    let pushed = push(
        &module,
        &oci("vendor/static-go:1.0"),
        Some(&dir.join("static_go.wasm.minisig")),
    );
    assert!(pushed.contains(&format!("(key {id})")), "{pushed}");

    let strict = policy(dir, "trust.json", true, &[&public]);
    let (ok, out, err) = pull(
        dir,
        &oci("vendor/static-go:1.0"),
        &["--trust-policy", strict.to_str().unwrap()],
    );
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("trusted: signed by key {id}")),
        "{out}"
    );
    let sha = sha256_hex(&module);
    let pulled = dir.join("modules").join(format!("static-go-{sha}.wasm"));
    assert_eq!(
        std::fs::read(&pulled).unwrap(),
        std::fs::read(&module).unwrap()
    );

    let node = Node::new();
    let conf = node.netconf(
        "1.1.0",
        &pulled,
        json!({"moduleSha256": sha, "trustPolicy": strict, "cacheDir": dir.join("cache"),
               "addresses": [{"address": "10.72.0.5/24", "gateway": "10.72.0.1"}]}),
    );
    let reply = Call::new("ADD", "c1").run(&conf);
    reply.assert_ok();
    assert_eq!(reply.address(), "10.72.0.5/24");
}

/// Directories that exist for the duration (to mount on), removed after if this
/// test made them; a node whose /etc/wasm-ipam is empty has no policy.
pub struct MountPoints(Vec<PathBuf>);

impl MountPoints {
    pub fn new(paths: &[&str]) -> Self {
        let mut made = Vec::new();
        for path in paths {
            // The missing ancestors too, outermost first, so they are removed last.
            let missing: Vec<&Path> = Path::new(path)
                .ancestors()
                .take_while(|p| !p.exists())
                .collect();
            for dir in missing.into_iter().rev() {
                std::fs::create_dir(dir).unwrap();
                made.push(dir.to_path_buf());
            }
        }
        MountPoints(made)
    }
}

impl Drop for MountPoints {
    fn drop(&mut self) {
        for dir in self.0.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}
