//! `wasm-ipam stats --log-file` on a young node's log and on a long-running one's:
//! stats reads the log from its end, as far as its window (`--last`, default 10000
//! calls), so its time follows the window, not the log: a window both logs fill
//! (1000 calls) should take the same time on both. Reading the whole log (a window
//! larger than the log) is shown beside for scale.

use crate::report::{Section, table};
use crate::setup::TempDir;
use crate::stats::{Samples, ms};
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

pub struct Options {
    /// `stats` runs per log and window; the median is shown.
    pub runs: usize,
}

/// Log sizes, MiB.
const SIZES_MIB: [u64; 2] = [1, 200];

pub fn run(wasm_ipam: &Path, opts: &Options) -> io::Result<Section> {
    let mut rows = Vec::new();
    for size in SIZES_MIB {
        eprintln!("  stats-log: a {size} MiB log");
        let dir = TempDir::new("stats-log")?;
        let log = dir.join("ipam.log");
        let lines = write_log(&log, size << 20)?;
        let data_dir = dir.join("data");
        let time = |last: &str| -> io::Result<f64> {
            let runs = (0..opts.runs.max(1))
                .map(|_| stats_ms(wasm_ipam, &log, &data_dir, last))
                .collect::<io::Result<Samples>>()?;
            Ok(runs.median())
        };
        rows.push(vec![
            format!("{size} MiB"),
            lines.to_string(),
            ms(time("1000")?),
            ms(time("10000")?),
            ms(time(&u32::MAX.to_string())?),
        ]);
    }
    let body = format!(
        "`wasm-ipam stats --log-file F` (an empty store), median of {} runs each. A log \
         of realistic lines: per call an invocation line and a module message.\n\n{}",
        opts.runs,
        table(
            &[
                "log",
                "calls in it",
                "last 1000 calls",
                "default window (last 10000)",
                "whole log"
            ],
            &rows
        )
    );
    Ok(Section {
        title: "stats on a long log".into(),
        body,
        targets: Vec::new(),
    })
}

/// Writes calls' lines to `path` until it holds `bytes`; how many calls.
fn write_log(path: &Path, bytes: u64) -> io::Result<u64> {
    let mut out = BufWriter::new(std::fs::File::create(path)?);
    let (mut written, mut calls) = (0u64, 0u64);
    while written < bytes {
        let second = calls % 60;
        let guest = format!(
            r#"{{"timestamp":"2025-01-01T00:00:{second:02}.000000Z","level":"INFO","message":"allocated 10.22.{}.{} for container c-{calls}","stream":"log","target":"guest"}}"#,
            calls / 250 % 250,
            calls % 250
        );
        let invocation = format!(
            r#"{{"timestamp":"2025-01-01T00:00:{second:02}.000000Z","level":"INFO","command":"ADD","container_id":"c-{calls}","ifname":"eth0","network":"benchnet","lock_granted_unix_ms":1735689600000.0,"load_ms":0.7,"lock_wait_ms":{}.0,"lock_hold_ms":1.4,"store_open_ms":0.5,"budget_used_ms":0.6,"commit_ms":0.2,"sync_ms":0.7,"budget_ms":90000.0,"total_ms":5.1,"module_cached":true,"abandoned_at":"","guest_log_dropped":0,"store_retries":0,"etcd_requests":0,"etcd_conflicts":0,"etcd_ms":0.0,"etcd_rate_wait_ms":0.0,"outcome":"ok","error_code":0,"error":"","target":"invocation"}}"#,
            calls % 100
        );
        writeln!(out, "{guest}\n{invocation}")?;
        written += (guest.len() + invocation.len() + 2) as u64;
        calls += 1;
    }
    out.flush()?;
    Ok(calls)
}

/// One `stats` run's wall time, ms.
fn stats_ms(wasm_ipam: &Path, log: &Path, data_dir: &Path, last: &str) -> io::Result<f64> {
    let started = Instant::now();
    let out = Command::new(wasm_ipam)
        .arg("stats")
        .arg("--log-file")
        .arg(log)
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--last", last])
        .stdin(Stdio::null())
        .output()?;
    let took = started.elapsed().as_secs_f64() * 1000.0;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "wasm-ipam stats failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(took)
}
