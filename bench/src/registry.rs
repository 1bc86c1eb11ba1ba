//! An OCI registry on loopback for the scenarios that pull (Debian's docker-registry,
//! as the integration suite runs it): started in a directory of its own, stopped and
//! removed when dropped.

use crate::setup::TempDir;
use std::io;
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Debian's registry (package `docker-registry`; scripts/test.sh installs it).
pub const REGISTRY: &str = "/usr/bin/docker-registry";

pub struct Registry {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub address: String,
    _dir: TempDir,
}

impl Registry {
    pub fn start() -> io::Result<Self> {
        if !Path::new(REGISTRY).is_file() {
            return Err(io::Error::other(format!(
                "{REGISTRY} is needed (Debian's docker-registry: apt-get install docker-registry)"
            )));
        }
        let dir = TempDir::new("registry")?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let config = dir.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\nlog:\n  level: error\n",
                dir.join("storage").display()
            ),
        )?;
        let child = Command::new(REGISTRY)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let registry = Registry {
            child,
            address: format!("127.0.0.1:{port}"),
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(&registry.address).is_err() {
            if Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "the registry never listened on {}",
                    registry.address
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(registry)
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
