//! Runs plugin binaries as a container runtime does (CNI_* environment, netconf on
//! stdin, one process per call) and reaps them with wait4(2), which gives each call's
//! exit instant and peak memory (ru_maxrss) without threads or pipes per child.
//!
//! Stdin is the netconf file and stdout a file, so a herd of a thousand children holds
//! no pipes open in the driver. A watchdog kills any child still running after
//! [`CALL_LIMIT`], so no wait can hang the suite.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// No single call may run longer than this; the watchdog kills it (it then counts as
/// failed).
pub const CALL_LIMIT: Duration = Duration::from_secs(300);

/// One CNI call to make.
pub struct Call<'a> {
    pub plugin: &'a Path,
    pub command: &'a str,
    pub container_id: &'a str,
    /// The netconf file, given to the plugin as stdin.
    pub netconf: &'a Path,
    /// Where stdout goes (`None`: discarded).
    pub stdout: Option<PathBuf>,
    /// `CNI_ARGS` (`None`: unset), e.g. the pod's `K8S_POD_NAMESPACE`.
    pub cni_args: Option<&'a str>,
}

/// A reaped call.
#[derive(Clone, Copy, Debug)]
pub struct Finished {
    /// What the caller tagged the call with at spawn (e.g. its index).
    pub tag: usize,
    /// Just before the spawn: the call's arrival.
    pub spawned: Instant,
    /// When wait4 returned it.
    pub ended: Instant,
    /// Exited with status 0.
    pub success: bool,
    /// Peak resident memory of the child, KiB.
    pub max_rss_kib: u64,
    /// CPU time the child (and any descendants it reaped) ran, user + system, ms.
    pub cpu_ms: f64,
    /// Minor page faults (pages the kernel mapped or zeroed without I/O).
    pub minor_faults: u64,
}

impl Finished {
    /// Spawn to reap, in ms.
    pub fn ms(&self) -> f64 {
        (self.ended - self.spawned).as_secs_f64() * 1000.0
    }
}

fn timeval_ms(t: libc::timeval) -> f64 {
    t.tv_sec as f64 * 1000.0 + t.tv_usec as f64 / 1000.0
}

struct Running {
    tag: usize,
    spawned: Instant,
}

/// Spawns calls and reaps them, keeping every child bounded by the watchdog. Dropping
/// it kills and reaps whatever is still running.
pub struct Runner {
    running: HashMap<libc::pid_t, Running>,
    deadlines: Arc<Mutex<HashMap<libc::pid_t, Instant>>>,
    stop: Arc<AtomicBool>,
    watchdog: Option<JoinHandle<()>>,
}

impl Default for Runner {
    fn default() -> Self {
        Self::new()
    }
}

impl Runner {
    pub fn new() -> Self {
        let deadlines: Arc<Mutex<HashMap<libc::pid_t, Instant>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let watchdog = {
            let (deadlines, stop) = (deadlines.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(100));
                    let now = Instant::now();
                    for (&pid, &deadline) in deadlines.lock().unwrap().iter() {
                        if now > deadline {
                            // SAFETY: kill(2) on a child we spawned and have not reaped.
                            unsafe { libc::kill(pid, libc::SIGKILL) };
                        }
                    }
                }
            })
        };
        Runner {
            running: HashMap::new(),
            deadlines,
            stop,
            watchdog: Some(watchdog),
        }
    }

    /// How many spawned calls are not reaped yet.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Starts `call`, tagged `tag`; the spawn instant is its arrival.
    pub fn spawn(&mut self, tag: usize, call: &Call) -> io::Result<()> {
        let mut cmd = Command::new(call.plugin);
        cmd.env_clear()
            .env("CNI_COMMAND", call.command)
            .env("CNI_CONTAINERID", call.container_id)
            .env("CNI_NETNS", format!("/var/run/netns/{}", call.container_id))
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", "/opt/cni/bin")
            .stdin(File::open(call.netconf)?)
            .stderr(Stdio::null());
        if let Some(args) = call.cni_args {
            cmd.env("CNI_ARGS", args);
        }
        match &call.stdout {
            Some(path) => cmd.stdout(File::create(path)?),
            None => cmd.stdout(Stdio::null()),
        };
        let spawned = Instant::now();
        let child = cmd.spawn()?;
        let pid = child.id() as libc::pid_t;
        // The Child handle is dropped without waiting: wait4 below reaps the pid.
        drop(child);
        self.deadlines
            .lock()
            .unwrap()
            .insert(pid, spawned + CALL_LIMIT);
        self.running.insert(pid, Running { tag, spawned });
        Ok(())
    }

    /// Reaps one finished call; with `block`, waits for one (bounded by the watchdog).
    /// `None` when nothing is running, or nothing has finished and `!block`.
    pub fn reap(&mut self, block: bool) -> Option<Finished> {
        while !self.running.is_empty() {
            let mut status = 0;
            // SAFETY: rusage is plain data that wait4 fills in.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            let flags = if block { 0 } else { libc::WNOHANG };
            // SAFETY: wait4 with valid pointers to locals.
            let pid = unsafe { libc::wait4(-1, &mut status, flags, &mut usage) };
            let ended = Instant::now();
            if pid == 0 {
                return None;
            }
            if pid < 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return None;
            }
            self.deadlines.lock().unwrap().remove(&pid);
            // A pid we did not spawn through this runner is not ours to report.
            let Some(running) = self.running.remove(&pid) else {
                continue;
            };
            return Some(Finished {
                tag: running.tag,
                spawned: running.spawned,
                ended,
                success: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                max_rss_kib: u64::try_from(usage.ru_maxrss).unwrap_or(0),
                cpu_ms: timeval_ms(usage.ru_utime) + timeval_ms(usage.ru_stime),
                minor_faults: u64::try_from(usage.ru_minflt).unwrap_or(0),
            });
        }
        None
    }

    /// Reaps every running call (each bounded by the watchdog).
    pub fn reap_all(&mut self) -> Vec<Finished> {
        let mut done = Vec::with_capacity(self.running.len());
        while let Some(f) = self.reap(true) {
            done.push(f);
        }
        done
    }

    /// Runs one call to completion; nothing else may be running.
    pub fn run(&mut self, call: &Call) -> io::Result<Finished> {
        assert_eq!(self.running(), 0, "run() needs an idle runner");
        self.spawn(0, call)?;
        self.reap(true)
            .ok_or_else(|| io::Error::other("the call was spawned but could not be reaped"))
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        for &pid in self.running.keys() {
            // SAFETY: kill(2) on our own unreaped child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        self.reap_all();
        self.stop.store(true, Ordering::Relaxed);
        if let Some(watchdog) = self.watchdog.take() {
            let _ = watchdog.join();
        }
    }
}
