//! The module author's commands beside the tutorial (which needs root and
//! componentize-py): `wasm-ipam try` makes calls as a runtime does, on a private
//! state directory it removes or on `--state`'s, and `wasm-ipam new` refuses what it
//! cannot make cleanly.

use crate::harness::*;
use std::path::Path;
use std::process::Command;

const ADDRESSES: &str = r#"addresses=["10.74.0.2/24","10.74.0.3/24"]"#;

/// `wasm-ipam ARGS` in `dir`, with `tmp` as its temporary directory: (exit ok, stdout,
/// stderr).
fn run(dir: &Path, tmp: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(bin())
        .args(args)
        .current_dir(dir)
        .env("TMPDIR", tmp)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn try_makes_calls_as_a_runtime_does_and_keeps_state_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let module = minimal_module();
    let module = module.to_str().unwrap();
    let try_call = |extra: &[&str]| {
        let mut args = vec!["try", module];
        args.extend(extra);
        run(dir.path(), tmp.path(), &args)
    };

    // Private: the call answers, and its directory is gone after it.
    let (ok, stdout, stderr) = try_call(&["ADD", "--set", ADDRESSES]);
    assert!(ok, "{stdout} {stderr}");
    let result: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(result["ips"][0]["address"], "10.74.0.2/24");
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "private state left behind: {left:?}");

    // --state (relative to where it runs): calls share one store.
    let state = ["--state", "st", "--set", ADDRESSES];
    fn with<'a>(args: &[&'a str], state: &[&'a str]) -> Vec<&'a str> {
        [args, state].concat()
    }
    for id in ["a", "b"] {
        let (ok, stdout, stderr) = try_call(&with(&["ADD", "--id", id], &state));
        assert!(ok, "{stdout} {stderr}");
    }
    let (ok, stdout, _) = try_call(&with(&["ADD", "--id", "c"], &state));
    assert!(!ok, "the pool is full");
    let error: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(error["msg"], "pool full");
    let (ok, stdout, stderr) = try_call(&with(&["STATUS"], &state));
    assert!(ok, "{stdout} {stderr}");
    assert_eq!(stdout, "STATUS ok (the plugin prints nothing)\n");

    // GC with one attachment still valid releases the other; --list shows what is left.
    let (ok, stdout, stderr) = try_call(&with(&["GC", "--valid", "b/eth0", "--list"], &state));
    assert!(ok, "{stdout} {stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines[0], "GC ok (the plugin prints nothing)", "{stdout}");
    assert!(lines[1].starts_with("NETWORK"), "{stdout}");
    assert_eq!(lines.len(), 3, "one allocation left: {stdout}");
    assert!(
        lines[2].contains("10.74.0.3") && lines[2].contains(" b "),
        "{stdout}"
    );

    // The state is a node's: the netconf the calls were given, the store, the log.
    let state = dir.path().join("st");
    let netconf: serde_json::Value =
        serde_json::from_slice(&std::fs::read(state.join("net.json")).unwrap()).unwrap();
    assert_eq!(netconf["ipam"]["module"], module);
    assert_eq!(
        netconf["ipam"]["dataDir"],
        state.join("data").to_str().unwrap()
    );
    let log = std::fs::read_to_string(state.join("ipam.log")).unwrap();
    assert_eq!(log.matches(r#""command":"ADD""#).count(), 3, "{log}");
}

#[test]
fn new_refuses_a_bad_name_and_an_existing_directory() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, _, stderr) = run(dir.path(), dir.path(), &["new", "../escape"]);
    assert!(!ok);
    assert!(stderr.contains("cannot name a module"), "{stderr}");

    std::fs::create_dir(dir.path().join("taken")).unwrap();
    std::fs::write(dir.path().join("taken/keep"), "mine").unwrap();
    let (ok, _, stderr) = run(dir.path(), dir.path(), &["new", "taken"]);
    assert!(!ok);
    assert!(stderr.contains("taken already exists"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("taken/keep")).unwrap(),
        "mine"
    );

    let (ok, stdout, stderr) = run(
        dir.path(),
        dir.path(),
        &["new", "py-mod", "--lang", "python"],
    );
    assert!(ok, "{stdout} {stderr}");
    let build = dir.path().join("py-mod/build.sh");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&build).unwrap().permissions());
    assert_eq!(mode & 0o111, 0o111, "build.sh is runnable");
    let script = std::fs::read_to_string(build).unwrap();
    assert!(script.contains("-o \"$here/py_mod.wasm\""), "{script}");
}

/// A Rust module made by `new`, with one line removed, built as the tutorial builds
/// (its target dir shared with the tutorial's): what the author reads must name the fix.
fn build_without(dir: &Path, name: &str, line: &str) -> (bool, String) {
    build_variant(dir, name, line, "")
}

/// The Rust template as `wasm-ipam new` writes it, with `from` replaced by `to`, built.
fn build_variant(dir: &Path, name: &str, from: &str, to: &str) -> (bool, String) {
    let (ok, stdout, stderr) = run(dir, dir, &["new", name]);
    assert!(ok, "{stdout} {stderr}");
    let lib = dir.join(name).join("src/lib.rs");
    let text = std::fs::read_to_string(&lib).unwrap();
    assert!(text.contains(from), "the template no longer has {from:?}");
    std::fs::write(&lib, text.replace(from, to)).unwrap();
    let out = Command::new("cargo")
        .args(["build", "--target", "wasm32-wasip2", "--release", "--quiet"])
        .current_dir(dir.join(name))
        .env("CARGO_TARGET_DIR", workspace().join("target/tutorial"))
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_module_without_the_sdk_attribute_or_export_macro_is_told_the_fix() {
    let _serial = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let (ok, stderr) = build_without(dir.path(), "no-attribute", "#[ipam_module]\n");
    assert!(!ok, "built without #[ipam_module]");
    assert!(
        stderr.contains("`impl IpamModule for Module` needs #[ipam_module] on it"),
        "{stderr}"
    );
    assert!(!stderr.contains("IMPLEMENTED_BY_MODULE"), "{stderr}");

    // Without export_module! the component would export nothing and every call would
    // be refused: the SDK makes it a build error naming the macro.
    let (ok, stderr) = build_without(dir.path(), "no-export", "export_module!(Module);\n");
    assert!(!ok, "built without export_module!");
    assert!(
        stderr
            .contains("`Module` is never exported: the crate must call `export_module!(Module);`"),
        "{stderr}"
    );
}

/// `inspect` by a user who is not root: the default cache is root's, and the refusal
/// names the flags that let the user go on.
#[test]
fn inspect_by_a_user_without_the_cache_names_the_flags() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let module = dir.path().join("minimal.wasm");
    std::fs::copy(minimal_module(), &module).unwrap();
    std::fs::set_permissions(&module, std::fs::Permissions::from_mode(0o644)).unwrap();
    let roots = dir.path().join("roots-cache");
    std::fs::create_dir(&roots).unwrap();
    std::fs::set_permissions(&roots, std::fs::Permissions::from_mode(0o700)).unwrap();
    let as_nobody = |extra: &[&str]| {
        Command::new("runuser")
            .args(["-u", "nobody", "--"])
            .arg(bin())
            .args(["inspect", module.to_str().unwrap()])
            .args(extra)
            .current_dir(dir.path())
            .output()
            .unwrap()
    };
    let refused = as_nobody(&["--cache-dir", roots.to_str().unwrap()]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(
        stderr.contains("pass --cache-dir DIR (one of your own) or --no-cache"),
        "{stderr}"
    );
    let uncached = as_nobody(&["--no-cache"]);
    assert!(
        uncached.status.success(),
        "{}",
        String::from_utf8_lossy(&uncached.stderr)
    );
}

/// The Rust template with one promise broken on purpose (a DEL of an attachment it
/// does not hold answers 3 instead of succeeding): `conform` fails exactly the checks
/// that DEL behind them, and passes the rest.
#[test]
fn conform_fails_exactly_the_checks_a_broken_module_breaks() {
    let _serial = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let (ok, stderr) = build_variant(
        dir.path(),
        "strict-del",
        "        let owner = owner(request);\n        for (key, held) in store.list(\"ip/\") {",
        "        let owner = owner(request);\n        if store.list(\"ip/\").iter().all(|(_, held)| held != owner.as_bytes()) {\n            return Err(Error::new(code::UNKNOWN_CONTAINER, \"no such attachment\"));\n        }\n        for (key, held) in store.list(\"ip/\") {",
    );
    assert!(ok, "{stderr}");
    let module = workspace().join("target/tutorial/wasm32-wasip2/release/strict_del.wasm");
    let (ok, checks, out) = crate::conform::conform(
        &module,
        serde_json::json!({"start": "10.90.0.10", "end": "10.90.0.13", "prefixLen": 24}),
    );
    assert!(!ok, "{out}");
    assert_eq!(
        crate::conform::not_passed(&checks),
        ["add-check-del-del", "del-never-added"],
        "{out}"
    );
    assert!(
        out.contains("FAILED   add-check-del-del: asked DEL c1/eth0 a second time; got {\"cniVersion\":\"1.1.0\",\"code\":3,\"msg\":\"no such attachment\"}; the CNI spec: a plugin should complete a DEL without error"),
        "{out}"
    );
    assert!(out.ends_with("2 of 11 checks failed\n"), "{out}");
}

/// A Python module that does not define its handler's class (the equivalent of a Go
/// module without `ipam.Export`) is refused by the template's build.sh, naming the
/// class, and nothing is built.
#[test]
fn a_python_module_without_its_handler_class_is_refused_at_build() {
    let _serial = exclusive();
    let dir = tempfile::tempdir().unwrap();
    let (ok, stdout, stderr) = run(
        dir.path(),
        dir.path(),
        &["new", "no-handler", "--lang", "python"],
    );
    assert!(ok, "{stdout} {stderr}");
    let project = dir.path().join("no-handler");
    let app = std::fs::read_to_string(project.join("app.py")).unwrap();
    let class = "class Handler(exports.Handler):";
    assert!(app.contains(class), "the template no longer has {class:?}");
    std::fs::write(
        project.join("app.py"),
        app.replace(class, "class Handlr(exports.Handler):"),
    )
    .unwrap();
    let out = Command::new("./build.sh")
        .current_dir(&project)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "built without a Handler class");
    assert!(
        stderr.starts_with("build.sh: app.py does not define 'Handler': each interface the module exports is a class of that name"),
        "{stderr}"
    );
    assert!(
        !project.join("no_handler.wasm").exists(),
        "nothing was built"
    );
}
