//! Why a guest stopped, as a CNI error: its deadline, a host limit, the store, a
//! wasmtime limit, or a trap (with the panic message a Rust guest wrote to stderr).

use crate::error::{CniError, code};
use crate::limits::{MAX_ERROR_DETAILS_BYTES, MAX_INSTANCES, MAX_MEMORIES, MAX_TABLES, truncated};
use crate::lock::deadline::Deadline;
use crate::module::host::{DeadlineExceeded, GuestState, LimitExceeded};

/// How much of a trap's backtrace goes to the log (deep recursion makes long ones).
const TRAP_LOG_BYTES: usize = 16 << 10;

pub fn deadline_error(deadline: Deadline) -> CniError {
    CniError::new(
        code::DEADLINE_EXCEEDED,
        format!(
            "module stopped at its deadline: {:?} budget used up {:?} after the lock was granted",
            deadline.budget(),
            deadline.elapsed()
        ),
    )
    .with_details("the deadline counts from the lock grant; time spent waiting for the lock is not part of it")
}

/// Names why the guest stopped: the deadline, a resource limit, the store, or a trap
/// (with the last line the guest wrote to stderr, which holds a Rust panic message).
pub fn trap_error(
    trap: &wasmtime::Error,
    state: &GuestState,
    deadline: Deadline,
    transfer_limit: usize,
) -> CniError {
    if trap.downcast_ref::<DeadlineExceeded>().is_some() {
        return deadline_error(deadline);
    }
    if let Some(limit) = trap.downcast_ref::<LimitExceeded>() {
        return CniError::new(code::LIMIT_EXCEEDED, limit.to_string());
    }
    if let Some(err) = trap.downcast_ref::<CniError>() {
        return err.clone();
    }
    if let Some(limit) = wasmtime_limit(trap, transfer_limit) {
        return CniError::new(code::LIMIT_EXCEEDED, limit).with_details(trap.root_cause());
    }
    // A Rust guest's panic message is on its stderr; the trap itself only says
    // "unreachable". The full backtrace goes to the log with the guest's output.
    let (_, stderr) = state.output();
    let panic_message: Vec<&str> = stderr
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("note: run with `RUST_BACKTRACE"))
        .collect();
    tracing::warn!(target: "guest", "trap: {}", truncated(&format!("{trap:?}"), TRAP_LOG_BYTES));
    let trap = trap.root_cause();
    let details = if panic_message.is_empty() {
        trap.to_string()
    } else {
        format!("{}; {trap}", panic_message.join(" "))
    };
    CniError::new(code::MODULE_TRAPPED, "module trapped")
        .with_details(truncated(&details, MAX_ERROR_DETAILS_BYTES))
}

/// wasmtime's own limit errors carry no type to match, only their text (the
/// hostile-module suite triggers both, so an upgrade that rewords them fails there).
fn wasmtime_limit(trap: &wasmtime::Error, transfer_limit: usize) -> Option<String> {
    let text = trap.root_cause().to_string();
    if text.contains("fuel allocated for hostcalls has been exhausted") {
        return Some(format!(
            "module passed the host more than ipam.hostMemoryLimitMiB ({} MiB) in one transfer (a host call's arguments, or its result or error)",
            transfer_limit >> 20
        ));
    }
    if text.starts_with("resource limit exceeded:") {
        return Some(format!(
            "module created more instances, memories or tables than the host allows ({MAX_INSTANCES} instances, {MAX_MEMORIES} memories, {MAX_TABLES} tables)"
        ));
    }
    None
}
