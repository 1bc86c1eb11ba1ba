//! Store engine: v0.1's redb against the SQLite store that replaced it, one process
//! per call (`store_call`, next to this driver), in the same run on the same disk.
//! Times are spawn to exit; syncs are counted under strace.

use crate::report::{Section, table};
use crate::setup::TempDir;
use crate::stats::{Samples, ms, ratio};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

pub struct Options {
    /// Measured ADD+DEL cycles per engine.
    pub cycles: usize,
}

/// Unmeasured cycles per engine before the measured ones (the first creates the store).
const WARM_CYCLES: usize = 5;
/// ADDs and DELs per engine run under strace.
const TRACED_CALLS: usize = 10;
const ENGINES: [&str; 2] = ["redb", "sqlite"];

struct Engine {
    name: &'static str,
    dir: TempDir,
    add: Vec<f64>,
    del: Vec<f64>,
    cycle: Vec<f64>,
    add_syncs: Vec<f64>,
    del_syncs: Vec<f64>,
    next_id: usize,
}

impl Engine {
    fn new(name: &'static str) -> io::Result<Self> {
        Ok(Engine {
            name,
            dir: TempDir::new(&format!("engine-{name}"))?,
            add: Vec::new(),
            del: Vec::new(),
            cycle: Vec::new(),
            add_syncs: Vec::new(),
            del_syncs: Vec::new(),
            next_id: 0,
        })
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn id(&mut self) -> String {
        self.next_id += 1;
        format!("c{}", self.next_id)
    }

    /// One ADD and its DEL; with `record`, their times are kept.
    fn cycle(&mut self, store_call: &Path, record: bool) -> io::Result<()> {
        let id = self.id();
        let add = call(store_call, &[], self.name, &self.data(), "add", &id)?;
        let del = call(store_call, &[], self.name, &self.data(), "del", &id)?;
        if record {
            self.add.push(add);
            self.del.push(del);
            self.cycle.push(add + del);
        }
        Ok(())
    }

    /// One ADD and its DEL under strace, counting each call's syncs.
    fn traced_cycle(&mut self, store_call: &Path, strace: &Path) -> io::Result<()> {
        let id = self.id();
        let trace = self.dir.join("trace");
        let trace_arg = trace.display().to_string();
        let prefix = [
            strace.to_str().unwrap_or("strace"),
            "-f",
            "-e",
            "trace=fsync,fdatasync",
            "-o",
            &trace_arg,
            "--",
        ];
        let data = self.data();
        let traced = |command: &str| -> io::Result<f64> {
            let _ = std::fs::remove_file(&trace);
            call(store_call, &prefix, self.name, &data, command, &id)?;
            Ok(syncs(&std::fs::read_to_string(&trace).unwrap_or_default()) as f64)
        };
        let (add, del) = (traced("add")?, traced("del")?);
        self.add_syncs.push(add);
        self.del_syncs.push(del);
        Ok(())
    }
}

/// Runs `store_call engine data command id` (behind `prefix`, if any) to exit; its
/// spawn-to-exit time in ms.
fn call(
    store_call: &Path,
    prefix: &[&str],
    engine: &str,
    data: &Path,
    command: &str,
    id: &str,
) -> io::Result<f64> {
    let mut cmd = match prefix.split_first() {
        Some((program, args)) => {
            let mut cmd = Command::new(program);
            cmd.args(args).arg(store_call);
            cmd
        }
        None => Command::new(store_call),
    };
    cmd.arg(engine)
        .arg(data)
        .arg(command)
        .arg(id)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let started = Instant::now();
    let status = cmd.status()?;
    let took = started.elapsed().as_secs_f64() * 1000.0;
    if !status.success() {
        return Err(io::Error::other(format!(
            "store_call {engine} {command} {id} failed ({status})"
        )));
    }
    Ok(took)
}

/// Sync calls in an strace log; an interrupted one ("<unfinished ...>" then
/// "<... resumed>") counts once.
fn syncs(trace: &str) -> usize {
    trace
        .lines()
        .filter(|l| l.contains("sync") && !l.contains("resumed"))
        .count()
}

/// The file system the temp dir (where both stores live) is on, by statfs magic.
fn temp_fs() -> String {
    let dir = std::env::temp_dir();
    let unknown = || format!("{} (file system unknown)", dir.display());
    let Ok(c_dir) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return unknown();
    };
    // SAFETY: statfs is plain data that statfs(2) fills in.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a pointer to a local.
    if unsafe { libc::statfs(c_dir.as_ptr(), &mut st) } != 0 {
        return unknown();
    }
    let name = match st.f_type as u64 {
        0xEF53 => "ext4".to_string(),
        0x5846_5342 => "xfs".into(),
        0x9123_683E => "btrfs".into(),
        0x0102_1994 => "tmpfs, where a sync costs nothing".into(),
        0x794C_7630 => "overlayfs".into(),
        other => format!("a file system with magic {other:#x}"),
    };
    format!("{} ({name})", dir.display())
}

fn median_max(values: &[f64]) -> String {
    let s = Samples::new(values.to_vec());
    if s.is_empty() {
        "n/a".into()
    } else {
        format!("{} (max {})", s.median(), s.max())
    }
}

pub fn run(opts: &Options) -> io::Result<Section> {
    let store_call = store_call_binary()?;
    let mut engines = ENGINES
        .iter()
        .map(|name| Engine::new(name))
        .collect::<io::Result<Vec<_>>>()?;
    for engine in &mut engines {
        for _ in 0..WARM_CYCLES {
            engine.cycle(&store_call, false)?;
        }
    }
    for _ in 0..opts.cycles {
        for engine in &mut engines {
            engine.cycle(&store_call, true)?;
        }
    }
    let strace = Path::new("/usr/bin/strace");
    let traced = strace.exists();
    if traced {
        for _ in 0..TRACED_CALLS {
            for engine in &mut engines {
                engine.traced_cycle(&store_call, strace)?;
            }
        }
    }
    let body = format!(
        "The store work of one CNI call and nothing else (no module, no lock), as a \
         process that opens the store, does it and exits, since every CNI call is its \
         own process: an ADD reads the network's usage and its `last` key, then commits \
         three puts (`ip/<addr>`, `meta/<addr>`, `last`) and the usage; a DEL reads, then \
         commits two deletes and the usage. `redb` is v0.1's store (redb 4, 4 MiB cache, \
         one write transaction with its default, immediate durability); `sqlite` is the \
         host's own store (`wasm_ipam::store`) with its per-call tuning (WAL, `synchronous=NORMAL` \
         with one sync per commit after it, exclusive locking, no checkpoint on close, \
         the log folded past {fold_kib} KiB). Both \
         ran on this machine in this run, each on a fresh store in {fs}, after \
         {WARM_CYCLES} unmeasured cycles each, then {cycles} ADD+DEL cycles per engine \
         alternating engines cycle by cycle; times are spawn to exit, medians (ADD+DEL \
         is the median of each cycle's sum). {sync_note}\n\n{table}",
        fs = temp_fs(),
        fold_kib = wasm_ipam::store::sqlite::CHECKPOINT_BYTES >> 10,
        cycles = opts.cycles,
        sync_note = sync_note(traced),
        table = table(
            &[
                "engine",
                "ADD p50",
                "DEL p50",
                "ADD+DEL p50",
                "syncs per ADD (median, max)",
                "syncs per DEL (median, max)",
            ],
            &rows(&engines),
        ),
    );
    Ok(Section {
        title: "Store engine: redb vs SQLite".into(),
        body,
        targets: vec![],
    })
}

/// `store_call`, built beside this binary; refused, saying how to build it, when
/// it is not there.
fn store_call_binary() -> io::Result<PathBuf> {
    let here = std::env::current_exe()?
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let store_call = here.join("store_call");
    if !store_call.exists() {
        return Err(io::Error::other(format!(
            "{} does not exist (cargo build --release --manifest-path bench/Cargo.toml)",
            store_call.display()
        )));
    }
    Ok(store_call)
}

/// Each engine's row, then SQLite's figures to redb's.
fn rows(engines: &[Engine]) -> Vec<Vec<String>> {
    let p50 = |v: &[f64]| Samples::new(v.to_vec()).median();
    let mut rows: Vec<Vec<String>> = engines
        .iter()
        .map(|e| {
            vec![
                e.name.to_string(),
                ms(p50(&e.add)),
                ms(p50(&e.del)),
                ms(p50(&e.cycle)),
                median_max(&e.add_syncs),
                median_max(&e.del_syncs),
            ]
        })
        .collect();
    let (redb, sqlite) = (&engines[0], &engines[1]);
    rows.push(vec![
        "SQLite / redb".into(),
        ratio(p50(&sqlite.add), p50(&redb.add)),
        ratio(p50(&sqlite.del), p50(&redb.del)),
        ratio(p50(&sqlite.cycle), p50(&redb.cycle)),
        "—".into(),
        "—".into(),
    ]);
    rows
}

/// How the syncs were counted (`traced`: under strace), or that they were not.
fn sync_note(traced: bool) -> String {
    if traced {
        format!(
            "Syncs are the `fsync`/`fdatasync` calls of {TRACED_CALLS} further ADDs and \
             {TRACED_CALLS} further DELs per engine under `strace -f`, after the timed \
             cycles (not timed themselves). A SQLite call above one sync is the log fold: \
             the commit that takes the log past {fold_kib} KiB also checkpoints it (two \
             more syncs), and the next commit syncs the restarted log's header (one more).",
            fold_kib = wasm_ipam::store::sqlite::CHECKPOINT_BYTES >> 10,
        )
    } else {
        "Syncs were not counted: /usr/bin/strace is not installed.".into()
    }
}

#[cfg(test)]
mod tests {
    use super::syncs;

    #[test]
    fn an_interrupted_sync_counts_once() {
        let trace = "12 fdatasync(5) = 0\n\
                     12 fsync(6 <unfinished ...>\n\
                     13 +++ exited with 0 +++\n\
                     12 <... fsync resumed>) = 0\n";
        assert_eq!(syncs(trace), 2);
    }
}
