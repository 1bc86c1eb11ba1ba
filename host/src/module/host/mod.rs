//! What a guest can reach: the WIT interfaces (`store`, `deadline`, `log`, one file
//! each) and a WASI context that grants nothing, all held in one [`GuestState`].

mod deadline;
mod log;
mod readiness;
mod store;
mod v0_1;

pub use log::{GuestLine, GuestLog};
pub use readiness::GuestReadiness;
pub use store::GuestStore;

use crate::limits::{Limits, MAX_INSTANCES, MAX_MEMORIES, MAX_TABLES, TABLE_ELEMENT_BYTES};
use crate::lock::deadline::Deadline;
use crate::module::bindings::log::Level;
use std::fmt;
use std::time::Duration;
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{HostMonotonicClock, HostWallClock, WasiCtx, WasiCtxView, WasiView};

/// How much of a guest's stdout/stderr is kept for the log.
const OUTPUT_CAPTURE_BYTES: usize = 64 * 1024;

/// Trap payload for a host call made after the deadline.
#[derive(Debug)]
pub struct DeadlineExceeded;

impl fmt::Display for DeadlineExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("deadline exceeded")
    }
}
impl std::error::Error for DeadlineExceeded {}

/// Trap payload for a call that went past one of its resource limits (code 105).
#[derive(Debug)]
pub struct LimitExceeded(pub String);

impl fmt::Display for LimitExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for LimitExceeded {}

/// Everything one guest instance owns.
pub struct GuestState {
    wasi: WasiCtx,
    table: ResourceTable,
    memory: GuestMemory,
    /// The most one transfer from the guest may make the host copy.
    pub transfer_limit: usize,
    pub store: GuestStore,
    pub deadline: Deadline,
    pub log: GuestLog,
    pub readiness: GuestReadiness,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
}

impl GuestState {
    /// A guest with no WASI capabilities: no preopened directories, no environment,
    /// no arguments, no network, no stdin; stdout and stderr captured for the log;
    /// clocks that start at the lock grant; memory bounded by `memoryLimitMiB` summed
    /// over every memory and table, and each transfer by `hostMemoryLimitMiB`.
    pub fn new(store: GuestStore, deadline: Deadline, log: GuestLog, limits: &Limits) -> Self {
        let stdout = MemoryOutputPipe::new(OUTPUT_CAPTURE_BYTES);
        let stderr = MemoryOutputPipe::new(OUTPUT_CAPTURE_BYTES);
        let wasi = WasiCtx::builder()
            .stdout(stdout.clone())
            .stderr(stderr.clone())
            .monotonic_clock(SinceGrant(deadline))
            .wall_clock(SinceGrant(deadline))
            .build();
        GuestState {
            wasi,
            table: ResourceTable::new(),
            memory: GuestMemory {
                limit: limits.guest_memory,
                used: 0,
            },
            transfer_limit: limits.host_memory,
            store,
            deadline,
            log,
            readiness: GuestReadiness::default(),
            stdout,
            stderr,
        }
    }

    pub fn limiter(&mut self) -> &mut dyn ResourceLimiter {
        &mut self.memory
    }

    /// What the guest wrote to stdout and stderr (truncated at the capture size).
    pub fn output(&self) -> (String, String) {
        let text = |pipe: &MemoryOutputPipe| String::from_utf8_lossy(&pipe.contents()).into_owned();
        (text(&self.stdout), text(&self.stderr))
    }

    /// Sends what the guest wrote to stdout and stderr to the log, within the call's
    /// log budget.
    pub fn log_output(&mut self) {
        let (stdout, stderr) = self.output();
        for line in stdout.lines().filter(|l| !l.is_empty()) {
            self.log.write(Level::Info, "stdout", line);
        }
        for line in stderr.lines().filter(|l| !l.is_empty()) {
            self.log.write(Level::Warn, "stderr", line);
        }
    }
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// WASI clocks for the guest: monotonic time is zero at the lock grant; wall time is
/// the grant instant plus monotonic time since. Neither can see the lock wait.
struct SinceGrant(Deadline);

impl HostMonotonicClock for SinceGrant {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

impl HostWallClock for SinceGrant {
    fn resolution(&self) -> Duration {
        Duration::from_nanos(1)
    }
    fn now(&self) -> Duration {
        self.0
            .wall_now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
    }
}

/// The guest side of the call's budget: every linear memory and table of every core
/// instance, summed (a component may hold several), and how many of each it creates.
struct GuestMemory {
    limit: usize,
    used: usize,
}

impl GuestMemory {
    fn grow(&mut self, what: &str, current: usize, desired: usize) -> wasmtime::Result<bool> {
        let used = (self.used + desired).saturating_sub(current);
        if used > self.limit {
            return Err(wasmtime::Error::new(LimitExceeded(format!(
                "module exceeded its memory limit: growing a {what} would bring its memories and tables to {used} bytes, over ipam.memoryLimitMiB ({} MiB)",
                self.limit >> 20
            ))));
        }
        self.used = used;
        Ok(true)
    }
}

impl ResourceLimiter for GuestMemory {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.grow("memory", current, desired)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        self.grow(
            "table",
            current.saturating_mul(TABLE_ELEMENT_BYTES),
            desired.saturating_mul(TABLE_ELEMENT_BYTES),
        )
    }

    fn instances(&self) -> usize {
        MAX_INSTANCES
    }
    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
    fn tables(&self) -> usize {
        MAX_TABLES
    }
}
