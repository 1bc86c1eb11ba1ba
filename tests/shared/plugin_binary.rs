//! Where the suites outside the host package (tests/cri, tests/kube, each a crate two
//! levels under the workspace) find the workspace and the plugin binary under test,
//! written once and included in each by `#[path]`; the host's own integration suite
//! has cargo's `CARGO_BIN_EXE_wasm-ipam` instead.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The workspace's root: the including suite's crate sits two levels under it.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("a suite's crate sits two levels under the workspace (tests/<suite>)")
        .to_path_buf()
}

/// The `wasm-ipam` binary of this build: `<target>/<profile>/wasm-ipam`, beside this
/// test's own `deps/` directory. `cargo test --workspace` (scripts/test.sh) builds it,
/// and `wasm-ipam-compile` beside it, in the same run as this test (the host's own
/// integration test needs them); run alone (`cargo test -p cri-e2e`), this test builds
/// whichever is missing, and otherwise takes them as last built.
pub fn wasm_ipam_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let exe = std::env::current_exe().expect("this test's own path");
        let profile_dir = exe
            .parent()
            .and_then(Path::parent)
            .expect("a test binary lives in <target>/<profile>/deps");
        let release = profile_dir.file_name().is_some_and(|p| p == "release");
        for (file, package) in [
            ("wasm-ipam", "wasm-ipam"),
            ("wasm-ipam-compile", "wasm-ipam-compiler"),
        ] {
            if profile_dir.join(file).is_file() {
                continue;
            }
            // One package a build: built together, cargo would unify their wasmtime
            // features (see the root Cargo.toml).
            let mut cargo = Command::new(env!("CARGO"));
            cargo
                .current_dir(workspace())
                .args(["build", "-p", package]);
            if release {
                cargo.arg("--release");
            }
            let status = cargo.status().expect("run cargo to build wasm-ipam");
            assert!(status.success(), "cargo build -p {package} failed");
            assert!(
                profile_dir.join(file).is_file(),
                "cargo build -p {package} made no {}",
                profile_dir.join(file).display()
            );
        }
        profile_dir.join("wasm-ipam")
    })
}
