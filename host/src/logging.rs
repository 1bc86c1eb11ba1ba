//! The host's log file (`ipam.logFile`): JSON lines, one per event, appended with a
//! single write each so concurrent calls interleave whole lines. Guest `log` messages
//! and stdout/stderr land here too; stdout stays reserved for the CNI result. The
//! file is private (0600, see [`crate::files`]): guests' output may hold what only
//! root should read. It is bounded over time by rotation ([`crate::log_rotation`]),
//! checked before every line: a herd of calls that opened the file before it filled
//! would otherwise all append to it. The log is an aid, not part of the answer: a
//! log that cannot be opened or written (a full disk) costs the call one line on
//! stderr, never its result.
//!
//! Every line comes from wasm-ipam itself or from the module ([`OWN_TARGETS`]), at
//! `ipam.logLevel` and above: the libraries' own events (the etcd client's `h2`,
//! `tower`, `hyper_util`, about 130 lines a call at debug) would rotate the
//! invocation records `stats` reads out of the file. [`LOG_ENV`] turns them on for
//! debugging, in `RUST_LOG`'s `target=level` form, read by tracing-subscriber's
//! `Targets` (its `EnvFilter` would pull a regex engine into the per-call binary).

use crate::error::{CniError, code};
use crate::files;
use crate::limits::LogRotation;
use crate::log_rotation;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};
use tracing::level_filters::LevelFilter;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// The targets of wasm-ipam's own events, each a prefix (as `Targets` matches): its
/// crate's module paths (`wasm_ipam::…`, for events without a target) and the named
/// targets its events give, `guest` being the module's lines. A unit test finds
/// every `target:` in the sources here.
pub const OWN_TARGETS: &[&str] = &[
    "wasm_ipam",
    "invocation",
    "guest",
    "cache",
    "store",
    "gc",
    "reserve",
    "release-node",
    "status",
];

/// The environment variable that adds targets to the log, as `RUST_LOG` does
/// (`h2=debug,tower=trace`; a bare level applies to every other target).
pub const LOG_ENV: &str = "WASM_IPAM_LOG";

/// The log's filter: [`OWN_TARGETS`] at `level`, nothing else; then what `env` (the
/// value of [`LOG_ENV`]) names, at the level it gives. An `env` that does not parse
/// adds nothing, and the reason is returned.
pub fn filter(level: LevelFilter, env: Option<&str>) -> (Targets, Option<String>) {
    let own = Targets::new()
        .with_targets(OWN_TARGETS.iter().map(|target| (*target, level)))
        .with_default(LevelFilter::OFF);
    let Some(env) = env.filter(|e| !e.trim().is_empty()) else {
        return (own, None);
    };
    match env.parse::<Targets>() {
        Ok(asked) => {
            let default = asked.default_level().unwrap_or(LevelFilter::OFF);
            let targets = own.with_targets(asked).with_default(default);
            (targets, None)
        }
        Err(e) => (own, Some(format!("{LOG_ENV}={env:?} is ignored: {e}"))),
    }
}

/// Sends this process's log events to `path`, rotated as `rotation` says, filtered
/// as [`filter`] says for `level` and [`LOG_ENV`]; if it cannot be opened, says so
/// on stderr and the call goes on unlogged.
pub fn init(path: &Path, rotation: LogRotation, level: LevelFilter) {
    let file = files::parent_dir(path)
        .and_then(|()| files::open(path, OpenOptions::new().create(true).append(true)));
    let file = match file {
        Ok(file) => file,
        Err(e) => return unlogged(path, "cannot open", &e),
    };
    let (targets, ignored) = filter(level, std::env::var(LOG_ENV).ok().as_deref());
    // A second init in one process (as in unit tests) keeps the first subscriber.
    let initialised = tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_max_level(LevelFilter::TRACE)
        // A failed write is reported once, by the writer, not once per event.
        .log_internal_errors(false)
        .with_writer(RotatingLog {
            path: path.to_path_buf(),
            rotation,
            file: Mutex::new(file),
        })
        .finish()
        .with(targets)
        .try_init();
    if let (Ok(()), Some(ignored)) = (initialised, ignored) {
        tracing::warn!("{ignored}");
    }
}

/// The first failure to open, rotate or write the log, on stderr (which the runtime
/// keeps, unlike stdout's result); later ones are not repeated.
fn unlogged(path: &Path, what: &str, e: &io::Error) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if SAID.swap(true, Ordering::Relaxed) {
        return;
    }
    let error = CniError::new(
        code::IO_FAILURE,
        format!("{what} log file {}", path.display()),
    )
    .with_details(e);
    // Not eprintln!: a closed stderr must not panic the call either.
    let _ = writeln!(
        io::stderr(),
        "wasm-ipam: {error}; the call goes on without its log lines"
    );
}

struct RotatingLog {
    path: PathBuf,
    rotation: LogRotation,
    file: Mutex<File>,
}

/// One event's line: tracing formats the event whole, then writes it through this.
struct Line<'a> {
    path: &'a Path,
    file: MutexGuard<'a, File>,
}

impl<'a> MakeWriter<'a> for RotatingLog {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Line<'a> {
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let LogRotation { max_bytes, kept } = self.rotation;
        if let Err(e) = log_rotation::rotate_if_full(&mut file, &self.path, max_bytes, kept) {
            // The line goes to the file this call has, if it still can.
            unlogged(&self.path, "cannot rotate", &e);
        }
        Line {
            path: &self.path,
            file,
        }
    }
}

impl Write for Line<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file
            .write(buf)
            .inspect_err(|e| unlogged(self.path, "cannot write", e))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    #[test]
    fn only_our_lines_pass_unless_the_environment_asks_for_more() {
        let (own, ignored) = filter(LevelFilter::DEBUG, None);
        assert_eq!(ignored, None);
        for target in [
            "invocation",
            "guest",
            "release-node",
            "wasm_ipam::store::etcd",
        ] {
            assert!(own.would_enable(target, &Level::DEBUG), "{target}");
            assert!(!own.would_enable(target, &Level::TRACE), "{target}");
        }
        for target in [
            "h2::codec::framed_write",
            "tower::buffer::worker",
            "hyper_util",
            "tonic",
        ] {
            assert!(!own.would_enable(target, &Level::ERROR), "{target}");
        }

        let (info, _) = filter(LevelFilter::INFO, Some(""));
        assert!(info.would_enable("invocation", &Level::INFO));
        assert!(info.would_enable("cache", &Level::WARN));
        assert!(!info.would_enable("guest", &Level::DEBUG));

        let (asked, ignored) = filter(LevelFilter::INFO, Some("h2=debug,guest=trace"));
        assert_eq!(ignored, None);
        assert!(asked.would_enable("h2::proto::connection", &Level::DEBUG));
        assert!(!asked.would_enable("h2::proto::connection", &Level::TRACE));
        assert!(asked.would_enable("guest", &Level::TRACE));
        assert!(asked.would_enable("invocation", &Level::INFO));
        assert!(!asked.would_enable("tower::buffer", &Level::ERROR));

        // A bare level is every other target's.
        let (all, _) = filter(LevelFilter::INFO, Some("warn"));
        assert!(all.would_enable("tower::buffer", &Level::WARN));
        assert!(!all.would_enable("tower::buffer", &Level::INFO));
        assert!(all.would_enable("invocation", &Level::INFO));

        let (bad, ignored) = filter(LevelFilter::INFO, Some("h2=loud"));
        assert!(ignored.unwrap().contains(LOG_ENV));
        assert!(bad.would_enable("invocation", &Level::INFO));
        assert!(!bad.would_enable("h2", &Level::ERROR));
    }

    /// Every target named by an event in the host's sources is one of ours; events
    /// without a target have their module's path, `wasm_ipam::…`.
    #[test]
    fn every_target_in_the_sources_is_listed() {
        fn visit(dir: &Path, found: &mut Vec<(PathBuf, String)>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    visit(&path, found);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    for (at, _) in text.match_indices("target: \"") {
                        let rest = &text[at + "target: \"".len()..];
                        let name = &rest[..rest.find('"').unwrap()];
                        found.push((path.clone(), name.to_string()));
                    }
                }
            }
        }
        let mut found = Vec::new();
        visit(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
            &mut found,
        );
        assert!(found.len() >= 10, "{found:?}");
        let (own, _) = filter(LevelFilter::INFO, None);
        for (path, target) in found {
            assert!(
                OWN_TARGETS.contains(&target.as_str()) && own.would_enable(&target, &Level::INFO),
                "{}: target {target:?} is not in OWN_TARGETS",
                path.display()
            );
        }
        assert_eq!(env!("CARGO_CRATE_NAME"), OWN_TARGETS[0]);
    }
}
