//! What the two real-binary suites (tests/integration and tests/cri, separate crates)
//! build the same way, written once and included in each by `#[path]`: the example
//! and test modules for wasm32-wasip2, in one target dir of their own, so the suites
//! share one build and never undo each other's.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The workspace's packages built for wasm32-wasip2.
const MODULE_PACKAGES: &[&str] = &[
    "probe",
    "host-local",
    "minimal",
    "legacy-v0-1",
    "legacy-v0-2",
    "cluster-pool",
];

/// Builds the modules once per test binary (in `target/modules`, so the outer cargo's
/// lock is never contended) and returns the directory holding the `.wasm` files.
pub fn modules_dir(workspace: &Path) -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let target = workspace.join("target/modules");
        let mut cargo = Command::new(env!("CARGO"));
        cargo
            .current_dir(workspace)
            .args(["build", "--release", "--target", "wasm32-wasip2"]);
        for package in MODULE_PACKAGES {
            cargo.args(["-p", package]);
        }
        let status = cargo
            .arg("--target-dir")
            .arg(&target)
            .status()
            .expect("run cargo to build the modules");
        assert!(status.success(), "building the wasm modules failed");
        target.join("wasm32-wasip2/release")
    })
}
