//! The test helpers the host's unit tests share with the real-binary suites
//! (tests/shared), included here by `#[path]` so each exists once: waiting on a
//! condition, asking /proc/locks who holds a flock, components built from core WAT;
//! and reading a workspace file, which the unit tests that hold docs to the code do.

#[path = "../../tests/shared/flocks.rs"]
pub mod flocks;
#[path = "../../tests/shared/waiting.rs"]
pub mod waiting;
#[path = "../../tests/shared/wat_component.rs"]
pub mod wat_component;

/// The workspace's root: the host crate's parent.
pub fn workspace_root() -> &'static std::path::Path {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the host crate sits in the workspace")
}

/// The text of the workspace file `relative` (README.md, a WIT file, SECURITY.md).
pub fn workspace_file(relative: &str) -> String {
    std::fs::read_to_string(workspace_root().join(relative)).unwrap()
}
