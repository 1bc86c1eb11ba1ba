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
#[path = "../../../shared/plugin_binary.rs"]
mod plugin_binary;
#[allow(dead_code, reason = "shared by several suites, each using part of it")]
#[path = "../../../shared/waiting.rs"]
mod waiting;

pub use plugin_binary::{wasm_ipam_bin, workspace};
pub use waiting::wait_for;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

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
