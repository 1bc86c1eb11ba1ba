//! The warm ADD+DEL cycle again, with another process's fsync-heavy writer on the
//! same disk: a durable commit waits behind the other writer's flushes, which an idle
//! machine hides. host-local never syncs, so it barely notices; the ratio says what a
//! busy node costs wasm-ipam's one sync per commit.

use super::{Peer, warm_cache};
use crate::process::{Finished, Runner};
use crate::report::{Section, table};
use crate::setup::{Node, Paths, TempDir};
use crate::stats::{Samples, ms, ratio};
use serde_json::json;
use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

pub struct Options {
    /// Measured ADD+DEL cycles per plugin.
    pub cycles: usize,
}

const WARMUP_CYCLES: usize = 5;
/// What the other writer writes before each sync: a database's small commit.
const WRITE_BYTES: usize = 16 << 10;
/// The writer cycles over this much of its file, so the file stays small.
const FILE_BYTES: u64 = 64 << 20;

/// A thread that writes and fdatasyncs a file in a loop until dropped.
struct BusyWriter {
    stop: Arc<AtomicBool>,
    syncs: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<io::Result<()>>>,
    started: Instant,
    _dir: TempDir,
}

impl BusyWriter {
    fn start() -> io::Result<Self> {
        let dir = TempDir::new("busy-writer")?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .open(dir.join("busy"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let syncs = Arc::new(AtomicU64::new(0));
        let (s, n) = (stop.clone(), syncs.clone());
        let thread = std::thread::spawn(move || {
            let block = vec![0x5a_u8; WRITE_BYTES];
            let mut offset = 0;
            while !s.load(Ordering::Relaxed) {
                file.write_all_at(&block, offset)?;
                file.sync_data()?;
                n.fetch_add(1, Ordering::Relaxed);
                offset = (offset + WRITE_BYTES as u64) % FILE_BYTES;
            }
            Ok(())
        });
        Ok(BusyWriter {
            stop,
            syncs,
            thread: Some(thread),
            started: Instant::now(),
            _dir: dir,
        })
    }

    /// Stops the writer; its syncs per second.
    fn finish(mut self) -> io::Result<f64> {
        self.stop.store(true, Ordering::Relaxed);
        let result = self.thread.take().map(|t| t.join());
        if let Some(Ok(Err(e))) = result {
            return Err(e);
        }
        Ok(self.syncs.load(Ordering::Relaxed) as f64 / self.started.elapsed().as_secs_f64())
    }
}

fn cycle(runner: &mut Runner, peer: &Peer, id: &str) -> io::Result<(Finished, Finished)> {
    let add = runner.run(&peer.call("ADD", id))?;
    let del = runner.run(&peer.call("DEL", id))?;
    Ok((add, del))
}

pub fn run(paths: &Paths, opts: &Options) -> io::Result<Section> {
    let cache = warm_cache(&paths.wasm_ipam, &paths.host_local_module, json!({}))?;
    let node = Node::new("busy")?;
    let peers = [
        Peer {
            name: "wasm-ipam",
            plugin: paths.wasm_ipam.clone(),
            netconf: node.wasm_ipam_netconf(&paths.host_local_module, cache.path(), json!({})),
            log: Some(node.log_file()),
        },
        Peer {
            name: "host-local",
            plugin: paths.host_local.clone(),
            netconf: node.host_local_netconf(),
            log: None,
        },
    ];
    let mut runner = Runner::new();
    let writer = BusyWriter::start()?;
    for i in 0..WARMUP_CYCLES {
        for peer in &peers {
            cycle(&mut runner, peer, &format!("warmup-{i}"))?;
        }
    }
    let mut cycles: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut failures = [0usize; 2];
    for i in 0..opts.cycles {
        // Alternate who goes first, so neither always follows the other's exit.
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for p in order {
            let (add, del) = cycle(&mut runner, &peers[p], &format!("cycle-{i}"))?;
            failures[p] += usize::from(!add.success) + usize::from(!del.success);
            cycles[p].push(add.ms() + del.ms());
        }
    }
    let syncs_per_second = writer.finish()?;
    let [w, h] = cycles.map(Samples::new);
    let row = |name: &str, s: &Samples, failed: usize| {
        vec![
            name.to_string(),
            ms(s.median()),
            ms(s.percentile(0.9)),
            format!("{failed} / {}", 2 * opts.cycles),
        ]
    };
    let mut body = format!(
        "{} ADD+DEL cycles per plugin, alternating as in the idle cycle above, while a \
         thread of the driver writes {} KiB and fdatasyncs it in a loop in the same \
         temporary file system ({syncs_per_second:.0} syncs/s over the run). host-local \
         never syncs its files, so it is hardly slowed; wasm-ipam's one fdatasync per \
         committing call queues behind the other writer's.\n\n",
        opts.cycles,
        WRITE_BYTES >> 10
    );
    body += &table(
        &["plugin", "ADD+DEL p50", "ADD+DEL p90", "failed calls"],
        &[
            row("wasm-ipam", &w, failures[0]),
            row("host-local", &h, failures[1]),
            vec![
                "ratio".into(),
                ratio(w.median(), h.median()),
                ratio(w.percentile(0.9), h.percentile(0.9)),
                String::new(),
            ],
        ],
    );
    Ok(Section {
        title: "Warm cycle on a busy disk".into(),
        body,
        targets: vec![],
    })
}
