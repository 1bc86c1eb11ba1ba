//! Counts the disk syncs (fsync/fdatasync) a plugin makes per call, and the threads
//! it starts, by running a few calls under strace. A durable commit waits on the
//! disk, which a CPU profile (perf) does not show, and on a shared virtual disk those
//! waits can dominate a call.

use super::Peer;
use crate::process::Runner;
use crate::setup::TempDir;
use crate::stats::Samples;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Runs one plugin's calls under `strace -f -T -e trace=fsync,fdatasync,clone,clone3`.
pub struct SyncTracer {
    /// Holds the wrapper script and the trace; removed on drop.
    dir: TempDir,
    peer: Peer,
    counts: Vec<f64>,
    times_ms: Vec<f64>,
    threads: Vec<usize>,
}

/// Per traced call, medians.
#[derive(Clone, Copy, Debug)]
pub struct Syncs {
    pub calls: f64,
    pub ms: f64,
    pub traced: usize,
    /// The most threads (clone/clone3) any traced call started.
    pub threads_max: usize,
}

impl SyncTracer {
    /// A tracer for `plugin` called with `netconf`; `None` when strace is not
    /// installed (./bench/run.sh installs it).
    pub fn new(plugin: &Path, netconf: &Path) -> io::Result<Option<Self>> {
        let Some(strace) = ["/usr/bin/strace", "/bin/strace"]
            .into_iter()
            .map(Path::new)
            .find(|p| p.exists())
        else {
            return Ok(None);
        };
        let dir = TempDir::new("strace")?;
        // The plugin is started with a cleared environment, so the wrapper names
        // everything by absolute path.
        let wrapper = dir.join("traced-plugin");
        std::fs::write(
            &wrapper,
            format!(
                "#!/bin/sh\nexec {} -f -T -e trace=fsync,fdatasync,clone,clone3 -o {} -- {} \"$@\"\n",
                strace.display(),
                dir.join("trace").display(),
                plugin.display()
            ),
        )?;
        std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))?;
        Ok(Some(SyncTracer {
            peer: Peer {
                name: "traced plugin",
                plugin: wrapper,
                netconf: netconf.to_path_buf(),
                log: None,
            },
            dir,
            counts: Vec::new(),
            times_ms: Vec::new(),
            threads: Vec::new(),
        }))
    }

    /// Runs one traced call and records its syncs.
    pub fn trace(&mut self, runner: &mut Runner, command: &str, id: &str) -> io::Result<()> {
        let trace: PathBuf = self.dir.join("trace");
        let _ = std::fs::remove_file(&trace);
        runner.run(&self.peer.call(command, id))?;
        let text = std::fs::read_to_string(&trace).unwrap_or_default();
        let syncs: Vec<&str> = text.lines().filter(|l| l.contains("sync")).collect();
        self.threads.push(threads_started(&text));
        // An interrupted syscall shows as "<unfinished ...>" then "<... resumed>":
        // count it once, and take its duration from the resumed line.
        self.counts
            .push(syncs.iter().filter(|l| !l.contains("resumed")).count() as f64);
        self.times_ms.push(
            syncs
                .iter()
                .filter_map(|l| trailing_seconds(l))
                .sum::<f64>()
                * 1000.0,
        );
        Ok(())
    }

    pub fn summary(&self) -> Syncs {
        Syncs {
            calls: Samples::new(self.counts.clone()).median(),
            ms: Samples::new(self.times_ms.clone()).median(),
            traced: self.counts.len(),
            threads_max: self.threads.iter().copied().max().unwrap_or(0),
        }
    }
}

/// The clone/clone3 calls in a trace (a call interrupted by a signal counts once).
fn threads_started(trace: &str) -> usize {
    trace
        .lines()
        .filter(|l| (l.contains(" clone(") || l.contains(" clone3(")) && !l.contains("resumed"))
        .count()
}

/// The `<0.001234>` duration strace -T puts at the end of a finished syscall's line.
fn trailing_seconds(line: &str) -> Option<f64> {
    let inner = line.trim_end().strip_suffix('>')?;
    inner[inner.rfind('<')? + 1..].parse().ok()
}

#[cfg(test)]
mod tests {
    use super::{threads_started, trailing_seconds};

    #[test]
    fn threads_are_the_clone_calls_counted_once() {
        let trace = "10 clone3({flags=CLONE_VM|CLONE_THREAD, ...}, 88) = 11 <0.000052>\n\
                     10 clone(child_stack=0x7f, flags=CLONE_VM <unfinished ...>\n\
                     11 fdatasync(5) = 0 <0.000400>\n\
                     10 <... clone resumed>) = 12 <0.000100>\n\
                     12 +++ exited with 0 +++\n";
        assert_eq!(threads_started(trace), 2);
        assert_eq!(threads_started("11 fdatasync(5) = 0 <0.000400>\n"), 0);
    }

    #[test]
    fn durations_come_from_finished_lines_only() {
        assert_eq!(
            trailing_seconds("12 fdatasync(5) = 0 <0.003819>"),
            Some(0.003819)
        );
        assert_eq!(trailing_seconds("12 fdatasync(5 <unfinished ...>"), None);
        assert_eq!(
            trailing_seconds("12 <... fdatasync resumed>) = 0 <0.000276>"),
            Some(0.000276)
        );
    }
}
