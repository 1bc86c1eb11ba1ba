//! The test helpers the host's unit tests share with the real-binary suites
//! (tests/shared), included here by `#[path]` so each exists once: waiting on a
//! condition, asking /proc/locks who holds a flock, components built from core WAT.

#[path = "../../tests/shared/flocks.rs"]
pub mod flocks;
#[path = "../../tests/shared/waiting.rs"]
pub mod waiting;
#[path = "../../tests/shared/wat_component.rs"]
pub mod wat_component;
