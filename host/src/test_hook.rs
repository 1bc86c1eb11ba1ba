//! A panic at a named point, for the test suite's binary only: it stands in for a bug
//! there, so tests can see what a panic leaves behind (the store untouched, an answer
//! the runtime can read). A leaf: the store and the call path both use it.

/// Debug builds only: panics at `point` when `WASM_IPAM_TEST_PANIC` names it.
/// Compiled out of release builds.
#[track_caller]
pub fn test_panic(point: &str) {
    #[cfg(debug_assertions)]
    if std::env::var("WASM_IPAM_TEST_PANIC").is_ok_and(|p| p == point) {
        panic!("WASM_IPAM_TEST_PANIC at {point}");
    }
    #[cfg(not(debug_assertions))]
    let _ = point;
}
