//! A model of an IPAM DEL, for comparing where a call's timer starts. Like wasm-ipam it
//! reads the netconf on stdin, takes a flock(2) on `ipam.lockFile`, does its per-call
//! work under the lock (a busy-wait of `ipam.probe.spinMs`, as the probe module does)
//! and fails if it has used more than `ipam.deadlineSeconds` at any point after the
//! grant. The one difference between the two binaries is where the timer starts:
//!
//! - `prefix_del`: when the process starts, before the lock, as Calico's DEL once did,
//!   so time queued on the lock is charged to the budget;
//! - `postfix_del`: at the grant, as wasm-ipam does, to show the model itself is fair
//!   (it fails no more than wasm-ipam under the same herd).
//!
//! It appends an invocation line with wasm-ipam's field names to `ipam.logFile`, so the
//! suite reads its lock waits the same way.

use serde_json::{Value, json};
use std::fs::OpenOptions;
use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Where the call's budget starts counting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimerStart {
    /// At process start (the pre-fix ordering).
    BeforeLock,
    /// At the lock grant (the fixed ordering).
    AfterLock,
}

/// The model's CNI error code for a spent budget (wasm-ipam's code for a deadline).
const DEADLINE_EXCEEDED: u32 = 103;

/// Runs one call; the process's exit code is 0 on success, 1 with a CNI error JSON on
/// stdout otherwise.
pub fn main(timer: TimerStart) -> ExitCode {
    let started = Instant::now();
    match call(timer, started) {
        Ok(()) => ExitCode::SUCCESS,
        Err((code, msg)) => {
            println!(
                "{}",
                json!({"cniVersion": "1.0.0", "code": code, "msg": msg})
            );
            ExitCode::FAILURE
        }
    }
}

fn call(timer: TimerStart, started: Instant) -> Result<(), (u32, String)> {
    let bad_input = |msg: String| (7, msg);
    let mut stdin = String::new();
    std::io::stdin()
        .read_to_string(&mut stdin)
        .map_err(|e| bad_input(format!("read stdin: {e}")))?;
    let conf: Value =
        serde_json::from_str(&stdin).map_err(|e| bad_input(format!("netconf: {e}")))?;
    let ipam = &conf["ipam"];
    let lock_file = ipam["lockFile"]
        .as_str()
        .ok_or_else(|| bad_input("ipam.lockFile is required".into()))?;
    let budget = Duration::from_secs_f64(ipam["deadlineSeconds"].as_f64().unwrap_or(90.0));
    let spin = Duration::from_millis(ipam["probe"]["spinMs"].as_u64().unwrap_or(0));

    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(lock_file)
        .map_err(|e| (5, format!("open {lock_file}: {e}")))?;
    let asked = Instant::now();
    file.lock()
        .map_err(|e| (5, format!("flock {lock_file}: {e}")))?;
    let granted = Instant::now();
    let timer_started = match timer {
        TimerStart::BeforeLock => started,
        TimerStart::AfterLock => granted,
    };
    let expired = || timer_started.elapsed() > budget;

    let mut outcome = Ok(());
    let work_until = granted + spin;
    loop {
        if expired() {
            outcome = Err((DEADLINE_EXCEEDED, "context deadline exceeded".to_string()));
            break;
        }
        if Instant::now() >= work_until {
            break;
        }
        std::hint::spin_loop();
    }
    let hold = granted.elapsed();
    drop(file);

    if let Some(log_file) = ipam["logFile"].as_str() {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let line = json!({
            "target": "invocation",
            "command": std::env::var("CNI_COMMAND").unwrap_or_default(),
            "container_id": std::env::var("CNI_CONTAINERID").unwrap_or_default(),
            "lock_wait_ms": ms(granted - asked),
            "lock_hold_ms": ms(hold),
            "budget_used_ms": ms(timer_started.elapsed()),
            "budget_ms": ms(budget),
            "total_ms": ms(started.elapsed()),
            "module_cached": false,
            "outcome": if outcome.is_ok() { "ok" } else { "error" },
            "error_code": outcome.as_ref().err().map_or(0, |e| e.0),
        });
        // One write of the whole line, so concurrent calls interleave whole lines.
        if let Ok(mut log) = OpenOptions::new().create(true).append(true).open(log_file) {
            let _ = log.write_all(format!("{line}\n").as_bytes());
        }
    }
    outcome
}
