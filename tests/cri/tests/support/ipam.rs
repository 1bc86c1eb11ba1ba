//! The IPAM side, seen from outside as an operator sees it: what `wasm-ipam list`
//! shows, the wasm-ipam calls the runtime has running and whether they wait on the
//! lock, the call log, and holding the host-wide lock as any process may.

use serde_json::Value;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where one node's wasm-ipam keeps its state (the conflist's `ipam` keys).
pub struct IpamPaths {
    pub lock_file: PathBuf,
    pub data_dir: PathBuf,
    pub cache_dir: PathBuf,
    pub log_file: PathBuf,
}

/// One allocation as `wasm-ipam list --json` shows it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Allocation {
    pub container_id: String,
    pub ifname: String,
    pub address: String,
}

impl IpamPaths {
    /// Every allocation in the store, through `wasm-ipam list --json`.
    pub fn list(&self, bin: &Path) -> Vec<Allocation> {
        let out = Command::new(bin)
            .args(["list", "--json", "--data-dir"])
            .arg(&self.data_dir)
            .arg("--lock-file")
            .arg(&self.lock_file)
            .output()
            .expect("run wasm-ipam list");
        assert!(
            out.status.success(),
            "wasm-ipam list: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let list: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "wasm-ipam list --json printed no JSON ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        let field = |entry: &Value, key: &str| {
            entry[key]
                .as_str()
                .unwrap_or_else(|| panic!("a listed allocation has {key}: {entry}"))
                .to_string()
        };
        list.as_array()
            .expect("wasm-ipam list --json prints an array")
            .iter()
            .map(|entry| Allocation {
                container_id: field(entry, "containerID"),
                ifname: field(entry, "ifname"),
                address: field(entry, "address"),
            })
            .collect()
    }

    /// Runs `wasm-ipam gc ARGS` on this node's store and lock for the conflist's
    /// network; its exit status, stdout and stderr.
    pub fn gc(&self, bin: &Path, args: &[&str]) -> (bool, String, String) {
        let out = Command::new(bin)
            .args(["gc", "--network", "wasm-ipam-cri", "--data-dir"])
            .arg(&self.data_dir)
            .arg("--lock-file")
            .arg(&self.lock_file)
            .args(args)
            .output()
            .expect("run wasm-ipam gc");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// Takes the host-wide lock with flock(2), as any process may: every call waits
    /// until the returned file is dropped.
    pub fn hold_lock(&self) -> File {
        super::flocks::hold_flock(&self.lock_file)
    }

    /// The call log's `invocation` lines (one per call).
    pub fn invocations(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log_file)
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).expect("log lines are JSON"))
            .filter(|line| line["target"] == "invocation")
            .collect()
    }
}

/// A wasm-ipam process the runtime started (through a main plugin).
#[derive(Debug)]
pub struct RunningCall {
    pub pid: u32,
    pub command: String,
    pub container_id: String,
}

/// The wasm-ipam calls running now whose CNI_PATH is `cni_bin_dir`, i.e. that a
/// runtime configured with that dir made (others' test runs share the binary).
pub fn running_calls(bin: &Path, cni_bin_dir: &Path) -> Vec<RunningCall> {
    let bin = std::fs::canonicalize(bin).unwrap();
    let cni_path = format!("CNI_PATH={}", cni_bin_dir.display());
    let mut calls = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if std::fs::read_link(entry.path().join("exe")).ok().as_ref() != Some(&bin) {
            continue;
        }
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let environ: Vec<String> = environ
            .split(|&b| b == 0)
            .map(|v| String::from_utf8_lossy(v).into_owned())
            .collect();
        if !environ.contains(&cni_path) {
            continue;
        }
        let var = |name: &str| {
            environ
                .iter()
                .find_map(|v| v.strip_prefix(&format!("{name}=")).map(str::to_string))
                .unwrap_or_default()
        };
        calls.push(RunningCall {
            pid,
            command: var("CNI_COMMAND"),
            container_id: var("CNI_CONTAINERID"),
        });
    }
    calls
}

/// A process's parent pid, or None once it has gone.
pub fn parent_of(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(1)?.parse().ok()
}

/// Whether process `pid` has ended: gone, or a zombie nobody reaped (an orphan in
/// containerd's PID namespace is adopted by containerd, its first process, which
/// reaps only its own children).
pub fn has_exited(pid: u32) -> bool {
    stat_fields(pid).is_none_or(|fields| fields.first().is_some_and(|state| state == "Z"))
}

/// The fields of /proc/<pid>/stat after `pid (comm)`: state, ppid, ...
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(") ")?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}
