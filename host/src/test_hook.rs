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

/// What the test suite asks of a cluster store's `n`th write (counted from 1 in one
/// process): nothing, a `kill -9` of the process as soon as the write was answered
/// (`WASM_IPAM_TEST_KILL_AFTER_WRITE=n`), or its answer lost although the write
/// landed (`WASM_IPAM_TEST_LOSE_ANSWER_OF_WRITE=n`). Debug builds only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteHook {
    None,
    LoseAnswer,
}

/// Applies the hook for the `n`th write (killing the process for a kill).
pub fn after_write(n: u64) -> WriteHook {
    #[cfg(debug_assertions)]
    {
        let asks = |var: &str| std::env::var(var).is_ok_and(|v| v == n.to_string());
        if asks("WASM_IPAM_TEST_KILL_AFTER_WRITE") {
            // SAFETY: raising a signal on this process.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        }
        if asks("WASM_IPAM_TEST_LOSE_ANSWER_OF_WRITE") {
            return WriteHook::LoseAnswer;
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = n;
    WriteHook::None
}
