//! Store open: what opening the embedded store costs as its write-ahead log grows,
//! and what the fold that bounds the log costs. Every call is its own process, and
//! SQLite keeps the log's index in the process (exclusive locking, no `-shm` file), so
//! each open reads and checksums every frame of the log: the open grows with the log
//! until the commit that passes the fold size checkpoints it. Measured in this
//! process on the host's store itself (`wasm_ipam::store`): a fresh connection
//! rebuilds the index exactly as a new process does.

use crate::report::{Section, table};
use crate::setup::TempDir;
use crate::stats::Samples;
use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::time::{Duration, Instant};
use wasm_ipam::store::{self, Changes, Quota, sqlite};

pub struct Options {
    /// Opens timed before each commit.
    pub opens: usize,
    /// Folds to go through (the log grows from empty to the fold size once per fold).
    pub folds: usize,
}

const NETWORK: &str = "benchnet";
/// Rows of the table: an empty log, then log sizes grouped by this many bytes.
const BUCKET: u64 = 32 << 10;
/// A log frame: a 4 KiB page and its 24-byte header.
const FRAME: u64 = 4096 + 24;
/// A bound on commits, should the store never fold.
const MAX_COMMITS: usize = 2000;

/// Commit `commit`'s changes: even ones are ADDs, each odd one the previous ADD's DEL.
fn changes(commit: usize) -> Changes {
    let id = commit / 2;
    let addr = format!("10.22.{}.{}", (id >> 8) & 0xff, (id & 0xff).max(2));
    crate::cycle::changes(commit.is_multiple_of(2), &format!("c{id}"), &addr)
}

/// ms as µs: an open's parts differ by tens of µs, below `stats::ms`'s precision.
fn us(ms: f64) -> String {
    format!("{:.0} µs", ms * 1000.0)
}

fn log_len(data: &Path) -> io::Result<u64> {
    let mut name = store::sqlite::DATABASE_FILE.to_string();
    name.push_str("-wal");
    Ok(std::fs::metadata(data.join(name))?.len())
}

/// Opens the store (and closes it) `times` times; each open's ms.
fn opens(data: &Path, times: usize) -> io::Result<Vec<f64>> {
    (0..times)
        .map(|_| {
            let started = Instant::now();
            let store =
                store::select::open_embedded(data, Duration::ZERO).map_err(io::Error::other)?;
            let took = started.elapsed();
            drop(store);
            Ok(took.as_secs_f64() * 1000.0)
        })
        .collect()
}

/// One commit as a call makes it: written under the lock (its ms), then synced after
/// the release (its ms).
fn commit(data: &Path, commit: usize) -> io::Result<(f64, f64)> {
    let mut store = store::select::open_embedded(data, Duration::ZERO).map_err(io::Error::other)?;
    let started = Instant::now();
    let written = store
        .commit_written(NETWORK, &changes(commit), Quota::UNLIMITED, &|| false)
        .map_err(io::Error::other)?;
    let under_lock = started.elapsed();
    let started = Instant::now();
    written.sync().map_err(io::Error::other)?;
    let after = started.elapsed();
    Ok((
        under_lock.as_secs_f64() * 1000.0,
        after.as_secs_f64() * 1000.0,
    ))
}

pub fn run(opts: &Options) -> io::Result<Section> {
    // The empty log's row, which the others are measured against, comes after a fold.
    if opts.folds < 2 {
        return Err(io::Error::other(
            "--store-folds must be 2 or more: the empty log is opened only after a fold",
        ));
    }
    let dir = TempDir::new("store-open")?;
    let data = dir.join("data");
    // The first commit creates the store; it is not one a warm call makes.
    commit(&data, 0)?;
    let grown = grow_the_log(&data, opts)?;
    let median = |v: Vec<f64>| Samples::new(v).median();
    let empty = grown.by_bucket.get(&0).cloned().map_or(f64::NAN, median);
    let body = format!(
        "Opening the embedded store (`wasm_ipam::store::open`: its lock, the file checks, \
         SQLite's connection, the log's index and the schema) as a warm cycle grows its \
         write-ahead log: ADD and DEL commits alternate (three puts, two deletes), and \
         before each one the store is opened and closed {opens} times, timed in this \
         process (a new connection rebuilds the log's index from the file as a new \
         process does: the index is never kept on disk). The log is folded into the \
         database by the commit that takes it past {fold_kib} KiB; {folds} folds, \
         {commits} commits. Opens are grouped by the log's size before them; medians, \
         and \"over an empty log\" subtracts the first row's (the log a fold leaves).\n\n{open_table}\n\
         What bounds the log costs: the fold (a checkpoint that syncs the log, copies it \
         into the database, syncs that and truncates the log) runs in the commit that \
         passes the fold size, under the lock; medians of the same commits, except the \
         last row: the mean, over the commits, of each one's median open less the \
         empty log's.\n\n{fold_table}",
        opens = opts.opens,
        fold_kib = sqlite::CHECKPOINT_BYTES >> 10,
        folds = grown.folds.len(),
        commits = grown.commits,
        open_table = table(
            &[
                "log before the open",
                "frames",
                "open p50",
                "over an empty log",
                "opens"
            ],
            &open_rows(&grown.by_bucket, empty)
        ),
        fold_table = table(&["", "p50"], &fold_rows(&grown, empty)),
    );
    Ok(Section {
        title: "Store open vs the write-ahead log's size".into(),
        body,
        targets: vec![],
    })
}

/// What growing the log until it was folded `opts.folds` times measured.
struct Grown {
    /// Each open's time, ms, by the log's size before it in [`BUCKET`]s.
    by_bucket: BTreeMap<u64, Vec<f64>>,
    /// Each commit's median open before it, ms.
    per_commit: Vec<f64>,
    /// Each commit that did not fold: its write under the lock and its sync, ms.
    appends: Vec<(f64, f64)>,
    /// Each folding commit's time, ms.
    folds: Vec<f64>,
    commits: usize,
}

/// Commits to the store in `data` until the log was folded `opts.folds` times,
/// opening the store `opts.opens` times before each commit.
fn grow_the_log(data: &Path, opts: &Options) -> io::Result<Grown> {
    let mut by_bucket: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    let mut per_commit = Vec::new();
    let (mut appends, mut folds) = (Vec::new(), Vec::new());
    let mut n = 1;
    while folds.len() < opts.folds {
        if n >= MAX_COMMITS {
            return Err(io::Error::other(format!(
                "the log was folded {} times in {MAX_COMMITS} commits",
                folds.len()
            )));
        }
        let before = log_len(data)?;
        let times = opens(data, opts.opens)?;
        per_commit.push(Samples::new(times.clone()).median());
        by_bucket
            .entry(before.div_ceil(BUCKET))
            .or_default()
            .extend(times);
        let (under_lock, after) = commit(data, n)?;
        // The fold truncates the log; the commit that passed the fold size is durable
        // with it, so a fold's cost is all under the lock.
        if log_len(data)? < before {
            folds.push(under_lock + after);
        } else {
            appends.push((under_lock, after));
        }
        n += 1;
    }
    Ok(Grown {
        by_bucket,
        per_commit,
        appends,
        folds,
        commits: n - 1,
    })
}

/// The opens table's rows: per size of the log, its opens' median, and that over
/// the `empty` log's.
fn open_rows(by_bucket: &BTreeMap<u64, Vec<f64>>, empty: f64) -> Vec<Vec<String>> {
    let median = |v: Vec<f64>| Samples::new(v).median();
    by_bucket
        .iter()
        .map(|(bucket, times)| {
            let p50 = median(times.clone());
            let (size, frames) = match bucket {
                0 => ("empty".to_string(), "0".to_string()),
                _ => {
                    let (from, to) = ((bucket - 1) * BUCKET, bucket * BUCKET);
                    (
                        format!("{}–{} KiB", from >> 10, to >> 10),
                        format!("{}–{}", from / FRAME, to / FRAME),
                    )
                }
            };
            vec![
                size,
                frames,
                us(p50),
                us(p50 - empty),
                times.len().to_string(),
            ]
        })
        .collect()
}

/// The fold table's rows: what a commit, a fold and the log's length at open cost.
fn fold_rows(grown: &Grown, empty: f64) -> Vec<Vec<String>> {
    let median = |v: Vec<f64>| Samples::new(v).median();
    let Grown {
        per_commit,
        appends,
        folds,
        commits,
        ..
    } = grown;
    let mean_open = per_commit.iter().sum::<f64>() / per_commit.len() as f64;
    let append_lock = median(appends.iter().map(|a| a.0).collect());
    let append_sync = median(appends.iter().map(|a| a.1).collect());
    let fold = median(folds.clone());
    let per_fold = *commits as f64 / folds.len() as f64;
    let extra = (fold - append_lock - append_sync) / per_fold;
    vec![
        vec!["a commit's write, under the lock".into(), us(append_lock)],
        vec!["its sync, after the release".into(), us(append_sync)],
        vec![
            "a folding commit (write, fold, all under the lock)".into(),
            us(fold),
        ],
        vec!["commits per fold".into(), format!("{per_fold:.1}")],
        vec![
            "the fold's extra, spread over those commits".into(),
            us(extra),
        ],
        vec![
            "the log's extra at open, averaged over the commits".into(),
            us(mean_open - empty),
        ],
    ]
}
