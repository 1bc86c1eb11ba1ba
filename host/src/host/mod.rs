//! What a guest can reach: the WIT interfaces (`store`, `deadline`, `log`, one file
//! each) and a WASI context that grants nothing, all held in one [`GuestState`].

mod deadline;
mod log;
mod store;

pub use log::GuestLog;
pub use store::GuestStore;

use crate::deadline::Deadline;
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

/// Trap payload for a memory grow past the configured limit.
#[derive(Debug)]
pub struct MemoryLimitExceeded {
    pub limit: usize,
    pub desired: usize,
}

impl fmt::Display for MemoryLimitExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "module tried to grow its memory to {} bytes, over its limit of {} MiB",
            self.desired,
            self.limit >> 20
        )
    }
}
impl std::error::Error for MemoryLimitExceeded {}

/// Everything one guest instance owns.
pub struct GuestState {
    wasi: WasiCtx,
    table: ResourceTable,
    memory: MemoryLimit,
    pub store: GuestStore,
    pub deadline: Deadline,
    pub log: GuestLog,
    stdout: MemoryOutputPipe,
    stderr: MemoryOutputPipe,
}

impl GuestState {
    /// A guest with no WASI capabilities: no preopened directories, no environment,
    /// no arguments, no network, no stdin; stdout and stderr captured for the log;
    /// clocks that start at the lock grant.
    pub fn new(store: GuestStore, deadline: Deadline, log: GuestLog, memory_limit: usize) -> Self {
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
            memory: MemoryLimit {
                limit: memory_limit,
            },
            store,
            deadline,
            log,
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

/// Refuses memory growth past the limit with a typed trap, so the error can say so.
struct MemoryLimit {
    limit: usize,
}

impl ResourceLimiter for MemoryLimit {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.limit {
            return Err(wasmtime::Error::new(MemoryLimitExceeded {
                limit: self.limit,
                desired,
            }));
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        // Tables hold function references; a million is far beyond any allocator.
        Ok(desired <= 1_000_000)
    }
}
