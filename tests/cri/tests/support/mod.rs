//! What the CRI tests share: the binary under test and the host-local module (built
//! as the integration suite builds them), waiting on a condition with a time limit,
//! and skipping where containerd cannot run, visibly.

#[path = "../../../shared/builds.rs"]
mod builds;
pub mod containerd;
pub mod cri;
#[allow(dead_code, reason = "shared by several suites, each using part of it")]
#[path = "../../../shared/flocks.rs"]
pub mod flocks;
pub mod image;
pub mod ipam;
#[allow(dead_code, reason = "shared by several suites, each using part of it")]
#[path = "../../../shared/waiting.rs"]
mod waiting;

pub use waiting::wait_for;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard, OnceLock};

pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("tests/cri sits two levels under the workspace")
        .to_path_buf()
}

/// The `wasm-ipam` binary of this build: `<target>/debug/wasm-ipam`, beside this
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

/// `examples/host-local`, built for wasm32-wasip2 with the other modules as the
/// integration suite builds them ([`builds`]): one build for both suites.
pub fn host_local_module() -> &'static Path {
    static MODULE: OnceLock<PathBuf> = OnceLock::new();
    MODULE.get_or_init(|| builds::modules_dir(&workspace()).join("host_local.wasm"))
}

/// The tests each start a containerd and many processes: one at a time, so they
/// neither load the machine under each other nor share a bridge's name or subnet.
pub fn serial() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Says that `test` was skipped and why, on the real stderr: the test harness captures
/// `eprintln!` of a passing test, and a skip must show in the run's output.
pub fn report_skip(test: &str, reason: &str) {
    let _ = writeln!(
        std::io::stderr(),
        "\n=== SKIPPED {test}: this machine cannot run containerd here: {reason}\n"
    );
}
