//! Who made this call, and whether they are still there. A runtime that gives up on
//! a call (kubelet's timeout cancels RunPodSandbox; containerd kills the main plugin)
//! kills the main plugin, not the IPAM plugin it ran: wasm-ipam is reparented and
//! would go on waiting for the lock and commit an ADD nobody will use. So the parent
//! is recorded as the process starts, and a call whose parent has gone gives up its
//! place in the queue, or, granted after its parent went, runs nothing.

use std::sync::OnceLock;

static PARENT: OnceLock<libc::pid_t> = OnceLock::new();

/// Records the parent process; the binary calls it first thing, before it reads stdin
/// (a parent may die while its child still waits for its netconf).
pub fn record() {
    // SAFETY: getppid has no preconditions and cannot fail.
    let _ = PARENT.set(unsafe { libc::getppid() });
}

/// Whether the parent recorded at start has gone (this process was reparented). Never
/// true when no parent was recorded (the library in tests), nor for a process whose
/// parent was already init: it cannot be told apart.
pub fn gone() -> bool {
    match PARENT.get() {
        Some(&parent) if parent > 1 => {
            // SAFETY: as above.
            unsafe { libc::getppid() != parent }
        }
        _ => false,
    }
}

/// The parent recorded at start, for messages.
pub fn parent() -> Option<libc::pid_t> {
    PARENT.get().copied()
}
