//! A local etcd cluster for the scenarios on the etcd store: Debian's etcd-server with
//! its defaults (fsync included), one or more members on free loopback ports, their
//! data and logs in a [`TempDir`]. Dropping it kills every member and removes the
//! directory; a member also dies with the driver (`PR_SET_PDEATHSIG`), so an
//! interrupted run leaves no etcd listening behind it.

use crate::setup::TempDir;
use std::io;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

pub const ETCD: &str = "/usr/bin/etcd";
const ETCDCTL: &str = "/usr/bin/etcdctl";
/// How long a new cluster may take to elect a leader and answer.
const STARTUP: Duration = Duration::from_secs(60);

pub struct Etcd {
    members: Vec<Child>,
    endpoints: Vec<String>,
    dir: TempDir,
}

/// `count` distinct free loopback ports: all bound at once, so none is handed out twice.
fn free_ports(count: usize) -> io::Result<Vec<u16>> {
    let listeners: Vec<TcpListener> = (0..count)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<io::Result<_>>()?;
    listeners
        .iter()
        .map(|l| Ok(l.local_addr()?.port()))
        .collect()
}

impl Etcd {
    /// Starts a cluster of `members` and waits until every member answers.
    pub fn start(members: usize) -> io::Result<Etcd> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = TempDir::new("etcd")?;
        let ports = free_ports(2 * members)?;
        let (clients, peers) = ports.split_at(members);
        let peer_url = |i: usize| format!("http://127.0.0.1:{}", peers[i]);
        let initial_cluster: Vec<String> = (0..members)
            .map(|i| format!("m{i}={}", peer_url(i)))
            .collect();
        // A token of its own, so members of another run's cluster never join this one.
        let token = format!(
            "wasm-ipam-bench-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        // Built up member by member: if one fails to start, dropping `etcd` stops the
        // ones already running.
        let mut etcd = Etcd {
            members: Vec::with_capacity(members),
            endpoints: clients
                .iter()
                .map(|p| format!("http://127.0.0.1:{p}"))
                .collect(),
            dir,
        };
        for i in 0..members {
            let name = format!("m{i}");
            let log = std::fs::File::create(etcd.dir.join(&format!("{name}.log")))?;
            let mut cmd = Command::new(ETCD);
            cmd.arg("--name")
                .arg(&name)
                .arg("--data-dir")
                .arg(etcd.dir.join(&name))
                .args(["--listen-client-urls", &etcd.endpoints[i]])
                .args(["--advertise-client-urls", &etcd.endpoints[i]])
                .args(["--listen-peer-urls", &peer_url(i)])
                .args(["--initial-advertise-peer-urls", &peer_url(i)])
                .args(["--initial-cluster", &initial_cluster.join(",")])
                .args(["--initial-cluster-token", &token])
                .args(["--initial-cluster-state", "new"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log);
            // SAFETY: prctl(2) is async-signal-safe and touches no memory of ours. The
            // signal comes when the spawning thread ends: the scenarios start etcd on
            // the driver's main thread.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == 0 {
                        Ok(())
                    } else {
                        Err(io::Error::last_os_error())
                    }
                });
            }
            let child = cmd
                .spawn()
                .map_err(|e| io::Error::other(format!("{ETCD} (Debian's etcd-server): {e}")))?;
            etcd.members.push(child);
        }
        etcd.wait_healthy()?;
        Ok(etcd)
    }

    /// Freezes every member (SIGSTOP): connections are accepted and nothing answers,
    /// as with a partitioned or hung cluster. [`Etcd::thaw`] ends it.
    pub fn freeze(&self) {
        self.signal(libc::SIGSTOP);
    }

    pub fn thaw(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, signal: libc::c_int) {
        for child in &self.members {
            // SAFETY: kill(2) on a child of ours that has not been reaped.
            unsafe {
                libc::kill(child.id() as libc::pid_t, signal);
            }
        }
    }

    /// Every member's client URL.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    fn wait_healthy(&self) -> io::Result<()> {
        let until = Instant::now() + STARTUP;
        loop {
            let healthy = Command::new(ETCDCTL)
                .args([
                    "--endpoints",
                    &self.endpoints.join(","),
                    "endpoint",
                    "health",
                ])
                .env("ETCDCTL_API", "3")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()?
                .success();
            if healthy {
                return Ok(());
            }
            if Instant::now() > until {
                let log = std::fs::read_to_string(self.dir.join("m0.log")).unwrap_or_default();
                let start = (log.len().saturating_sub(2000)..log.len())
                    .find(|&i| log.is_char_boundary(i))
                    .unwrap_or(log.len());
                let tail = &log[start..];
                return Err(io::Error::other(format!(
                    "etcd never became healthy in {} s; m0's log ends:\n{tail}",
                    STARTUP.as_secs()
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        // Before `dir` goes (fields drop after this): no member writes into it then.
        self.thaw();
        for child in &mut self.members {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
