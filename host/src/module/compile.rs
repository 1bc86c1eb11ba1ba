//! Compiling a module that is not cached: in a child process with a wall-clock and a
//! memory bound, and once per module digest however many calls need it at once.
//!
//! Cranelift's time and memory grow with the shape of a module's code, not its size
//! (a crafted 0.6 MB module took 14 s and 857 MB), so a compile is bounded like the
//! module itself: the child (`wasm-ipam-compile`, installed next to `wasm-ipam`, which
//! itself carries no compiler) runs under
//! `RLIMIT_DATA` = `compileMemoryMiB` and is killed at `compileTimeoutSeconds`.
//! Compiling happens before the IPAM lock is taken, so it never holds the lock; a herd
//! of calls for a new module waits on one per-digest lock in the cache directory while
//! the first compiles, then loads its artifact. A module refused for its limits is
//! remembered there too, so the herd does not compile it again one by one.

use crate::error::{CniError, code};
use crate::limits::Limits;
use crate::module::cache::{ModuleCache, Refusal};
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use wasmtime::Engine;
use wasmtime::component::Component;

/// The compiler's file name, looked up next to this binary.
pub const COMPILER: &str = "wasm-ipam-compile";
/// Exit code of a compiler whose input is not a valid component.
pub const INVALID_COMPONENT: u8 = 2;
/// How much of the worker's stderr is kept for the error's details.
const STDERR_BYTES: u64 = 16 << 10;

/// The compiled component of the module whose bytes `module` reads (only if it must
/// be compiled): from the cache if it is there, else compiled once (in a bounded
/// child) and cached. Returns whether it came from the cache.
pub fn compiled(
    engine: &Engine,
    module: impl FnOnce() -> Result<Vec<u8>, CniError>,
    sha256: &str,
    path: &Path,
    cache: Option<&ModuleCache>,
    limits: &Limits,
) -> Result<(Component, bool), CniError> {
    let Some(cache) = cache else {
        let artifact = compile_in_child(&module()?, path, limits)?;
        return Ok((deserialize(engine, &artifact)?, false));
    };
    if let Some(component) = cached(cache, engine, sha256) {
        return Ok((component, true));
    }
    // Wait for whoever compiles this digest now; its compile is bounded, so the wait
    // is too.
    let _compiling = cache
        .lock_for_compile(sha256, limits.compile_time * 2 + Duration::from_secs(5))
        .map_err(|e| {
            CniError::new(
                code::TRY_AGAIN_LATER,
                format!("waiting to compile {}: {e}", path.display()),
            )
        })?;
    if let Some(component) = cached(cache, engine, sha256) {
        return Ok((component, true));
    }
    if let Some(refusal) = cache.refusal(sha256)
        && refusal.covers(limits)
    {
        let details = format!(
            "{} (refused by an earlier compile under the same or larger limits; raise them, or run `wasm-ipam precompile` with larger ones, to try again)",
            refusal.error.details
        );
        return Err(refusal.error.with_details(details));
    }
    match compile_in_child(&module()?, path, limits) {
        Ok(artifact) => {
            if let Err(e) = cache.store_artifact(sha256, &artifact) {
                tracing::warn!(target: "cache", "{e}");
            }
            Ok((deserialize(engine, &artifact)?, false))
        }
        Err(Compile::Refused(error)) => {
            let refusal = Refusal::new(limits, error);
            if let Err(e) = cache.record_refusal(sha256, &refusal) {
                tracing::warn!(target: "cache", "{e}");
            }
            Err(refusal.error)
        }
        Err(Compile::Failed(error)) => Err(error),
    }
}

fn cached(cache: &ModuleCache, engine: &Engine, sha256: &str) -> Option<Component> {
    cache.load(engine, sha256).unwrap_or_else(|e| {
        tracing::warn!(target: "cache", "{e}; compiling instead");
        None
    })
}

fn deserialize(engine: &Engine, artifact: &[u8]) -> Result<Component, CniError> {
    // SAFETY: the artifact was just produced by this binary's own compiler child, with
    // an engine of the same configuration, and has not been on disk in between.
    unsafe { Component::deserialize(engine, artifact) }.map_err(|e| {
        CniError::new(code::MODULE_REJECTED, "cannot load the compiled module")
            .with_details(format!("{e:#}"))
    })
}

/// Why a compile gave nothing.
enum Compile {
    /// Past a limit (time, memory) or not a component: the same input fails the same way.
    Refused(CniError),
    /// Could not run the compiler at all (a transient host failure).
    Failed(CniError),
}

impl From<Compile> for CniError {
    fn from(c: Compile) -> Self {
        match c {
            Compile::Refused(e) | Compile::Failed(e) => e,
        }
    }
}

/// Runs the compiler child on `module` and returns the serialised artifact.
fn compile_in_child(module: &[u8], path: &Path, limits: &Limits) -> Result<Vec<u8>, Compile> {
    let exe = compiler().map_err(|e| cannot("find", e))?;
    let memory = limits.compile_memory;
    let mut child = bounded_command(exe, limits)
        .spawn()
        .map_err(|e| cannot("start", e))?;
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        unreachable!("all three streams are piped");
    };
    // Feed the module on its own thread, so a worker that never reads cannot hold this
    // call past the compile time; one that dies early fails the write, which is fine.
    let input = module.to_vec();
    std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let mut artifact = Vec::new();
        let read = stdout.take(memory).read_to_end(&mut artifact);
        let _ = done.send(read.map(|_| artifact));
    });
    let read = finished.recv_timeout(limits.compile_time);
    if read.is_err() {
        let _ = child.kill();
    }
    let status = child.wait().map_err(|e| cannot("wait for", e))?;
    let mut errors = String::new();
    let _ = stderr.take(STDERR_BYTES).read_to_string(&mut errors);
    judged(module, path, limits, read.ok(), status, &errors)
}

/// A compile that could not `what` the compiler (find, start, wait for): a host
/// failure, not the module's.
fn cannot(what: &str, e: std::io::Error) -> Compile {
    Compile::Failed(
        CniError::new(
            code::IO_FAILURE,
            format!("cannot {what} the module compiler"),
        )
        .with_details(e),
    )
}

/// The compiler `exe` as a child under `limits`: memory, CPU time, no core dump, an
/// empty environment, its three streams piped.
fn bounded_command(exe: std::path::PathBuf, limits: &Limits) -> Command {
    let memory = limits.compile_memory;
    // CPU time is a backstop for the wall-clock kill: parallel compilation may use
    // every core, so allow it a multiple of the wall time.
    let cpu_seconds = limits.compile_time.as_secs() * 4 + 2;
    let mut command = Command::new(exe);
    command
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        command.pre_exec(move || {
            set_limit(libc::RLIMIT_DATA, memory)?;
            set_limit(libc::RLIMIT_CPU, cpu_seconds)?;
            set_limit(libc::RLIMIT_CORE, 0)
        });
    }
    command
}

/// What the compiler's run on `module` (at `path`) gave: the artifact it wrote
/// (`read`, none when it ran past the compile time), its exit `status` and its
/// stderr `errors`, judged against `limits`.
fn judged(
    module: &[u8],
    path: &Path,
    limits: &Limits,
    read: Option<std::io::Result<Vec<u8>>>,
    status: std::process::ExitStatus,
    errors: &str,
) -> Result<Vec<u8>, Compile> {
    let refused = |msg: String| Compile::Refused(CniError::new(code::MODULE_REJECTED, msg));
    let name = path.display();
    let out_of_memory = || {
        refused(format!(
            "compiling module {name} needed more than ipam.compileMemoryMiB ({} MiB); refused",
            limits.compile_memory >> 20
        ))
        .with_details(errors.trim())
    };
    let too_slow = || {
        refused(format!(
            "compiling module {name} took longer than ipam.compileTimeoutSeconds ({:?}); refused",
            limits.compile_time
        ))
    };
    let timed_out = read.is_none() || status.signal() == Some(libc::SIGXCPU);
    let crashed = matches!(
        status.signal(),
        Some(libc::SIGABRT | libc::SIGSEGV | libc::SIGBUS | libc::SIGKILL)
    );
    if timed_out {
        Err(too_slow())
    } else if crashed || mentions_out_of_memory(errors) {
        Err(out_of_memory())
    } else if let (Some(Ok(artifact)), true) = (read, status.success()) {
        Ok(artifact)
    } else if status.code() == Some(i32::from(INVALID_COMPONENT)) {
        let message = match super::artifact::misbuilt(module) {
            Some(what) => format!("{name} is not a valid WebAssembly component: {what}"),
            None => format!("{name} is not a valid WebAssembly component"),
        };
        Err(refused(message).with_details(errors.trim()))
    } else {
        Err(Compile::Failed(
            CniError::new(
                code::MODULE_REJECTED,
                format!("the compiler failed on module {name} ({status})"),
            )
            .with_details(errors.trim()),
        ))
    }
}

impl Compile {
    fn with_details(self, details: &str) -> Self {
        match self {
            Compile::Refused(e) => Compile::Refused(e.with_details(details)),
            Compile::Failed(e) => Compile::Failed(e.with_details(details)),
        }
    }
}

/// `wasm-ipam-compile` in this binary's directory: where the runtime found us is where
/// the operator installed both, and nothing else is searched.
fn compiler() -> std::io::Result<std::path::PathBuf> {
    let exe = std::env::current_exe()?;
    let path = exe.with_file_name(COMPILER);
    if !path.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "{} is not installed: install it next to {} to compile modules on first use, or fill the cache with `wasm-ipam precompile` where it is",
                path.display(),
                exe.display()
            ),
        ));
    }
    Ok(path)
}

fn mentions_out_of_memory(stderr: &str) -> bool {
    stderr.contains("memory allocation of") || stderr.contains("Cannot allocate memory")
}

fn set_limit(resource: libc::__rlimit_resource_t, value: u64) -> std::io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    // SAFETY: a plain system call on a valid struct.
    if unsafe { libc::setrlimit(resource, &limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
