//! Waiting on a condition, never on a bare sleep (STYLE lesson 6): the one poll loop
//! of the host's unit tests and of the real-binary suites (tests/integration,
//! tests/cri, tests/kube), included in each by `#[path]`, so each wait panics the same
//! way, naming what never happened.

use std::time::{Duration, Instant};

/// The shortest pause between two looks: often enough that a test hardly waits past
/// the moment its condition holds, rarely enough not to spin a shared core.
const POLL: Duration = Duration::from_millis(20);

/// Polls `probe` until it gives a value; panics naming `what` if `limit` passes first.
pub fn wait_for<T>(what: &str, limit: Duration, probe: impl FnMut() -> Option<T>) -> T {
    wait_for_explained(what, limit, probe, String::new)
}

/// [`wait_for`], whose panic adds what `explain` finds then (the state the wait saw
/// last, the logs' reasons): a CI run's failure must say why without a rerun.
///
/// Between looks it pauses at least [`POLL`], and as long as the last look took: a
/// probe that runs a tool (kubectl, etcdctl) then costs at most half the time waited.
pub fn wait_for_explained<T>(
    what: &str,
    limit: Duration,
    mut probe: impl FnMut() -> Option<T>,
    explain: impl FnOnce() -> String,
) -> T {
    let started = Instant::now();
    loop {
        let looked = Instant::now();
        if let Some(value) = probe() {
            return value;
        }
        if started.elapsed() >= limit {
            panic!("waited {limit:?}, and never: {what}\n{}", explain());
        }
        std::thread::sleep(POLL.max(looked.elapsed()));
    }
}

/// [`wait_for`] a condition that gives no value.
pub fn wait_until(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    wait_for(what, limit, || ready().then_some(()))
}
