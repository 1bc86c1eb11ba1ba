//! `wasm-ipam stats`: per network and pool its use, as each network's module reports
//! it; from the log, the call timings; with the runtime, the leak candidates.

use crate::error::{CniError, code};
use crate::operator::args::{Output, StoreArgs};
use crate::operator::ask::{Note, StoreAccess, asked_all};
use crate::operator::repair::leaks as gc;
use crate::operator::repair::runtime::Runtime;
use crate::operator::view::{inventory, metrics};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Per network and pool capacity, in use, free, excluded and cooling down, as each
/// network's module reports them; and, from the log, lock wait / lock hold / budget
/// used per call.
#[derive(clap::Args, Debug, PartialEq)]
pub struct StatsCommand {
    #[command(flatten)]
    pub store: StoreArgs,
    /// Only this network.
    #[arg(long)]
    pub network: Option<String>,
    /// As for `list`.
    #[arg(long)]
    pub netconf: Option<PathBuf>,
    /// The netconf's `ipam.logFile`, for call timings (its renamed files `<log>.1`,
    /// `<log>.2`, … are read too, as far back as the window goes).
    #[arg(long)]
    pub log_file: Option<PathBuf>,
    /// Timings of at most this many calls, the most recent: the log is read from its
    /// end, in time that does not grow with its length.
    #[arg(long, default_value_t = 10_000)]
    pub last: usize,
    /// Only calls logged within this time before now (e.g. `1h`, `30m`).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub since: Option<Duration>,
    /// Show each pool's blocks (and their nodes) under it, when the module reports
    /// them.
    #[arg(long)]
    pub blocks: bool,
    /// Prometheus text format (for node_exporter's textfile collector).
    #[arg(long)]
    pub prometheus: bool,
    /// Each network's totals, pools (and with --blocks, blocks) as JSON, counts exact
    /// (IPv6 pools past 2^64 addresses too).
    #[arg(long, conflicts_with = "prometheus")]
    pub json: bool,
    /// Also count each network's leak candidates (what `wasm-ipam gc` would release
    /// now, with --grace), asking this CRI runtime.
    #[arg(long)]
    pub runtime_endpoint: Option<String>,
    /// As --runtime-endpoint, from a file of live container ids (podman).
    #[arg(long, conflicts_with = "runtime_endpoint")]
    pub valid_from: Option<PathBuf>,
    /// The leak candidates' grace period, as `gc --grace`.
    #[arg(long, default_value_t = gc::DEFAULT_GRACE.into())]
    pub grace: humantime::Duration,
}

impl StatsCommand {
    pub fn run(self) -> Result<Output, CniError> {
        let access = self.store.access_for(self.netconf.as_deref())?;
        let networks =
            inventory::networks(&access, self.network.as_deref(), self.netconf.as_deref())?;
        let mut notes = Vec::new();
        // Only when the runtime is named: stats asks no runtime by default.
        let leaks = match (self.valid_from.is_some() || self.runtime_endpoint.is_some())
            .then(|| Runtime::chosen(self.valid_from.as_deref(), self.runtime_endpoint.as_deref()))
        {
            Some(runtime) => Some(leak_candidates(
                &access,
                networks.clone(),
                runtime?,
                *self.grace,
            )?),
            None => None,
        };
        let mut stats = inventory::network_stats(&access, networks, &mut notes);
        if !self.blocks {
            stats.iter_mut().for_each(|n| n.blocks.clear());
        }
        if let Some((counts, leak_notes)) = leaks {
            for n in &mut stats {
                n.leak_candidates = counts.get(&n.network).copied();
            }
            notes.extend(leak_notes);
        }
        if self.json {
            return Ok(Output::json(&stats, notes));
        }
        let window = metrics::Window {
            last: self.last,
            since: self
                .since
                .map(|d| SystemTime::now().checked_sub(d).unwrap_or(UNIX_EPOCH)),
        };
        let timings = match &self.log_file {
            Some(path) => metrics::recent_call_timings(path, window).map_err(|e| {
                CniError::new(code::IO_FAILURE, format!("cannot read {}", path.display()))
                    .with_details(e)
            })?,
            None => Vec::new(),
        };
        let text = if self.prometheus {
            // What the node's calls recorded for STATUS: local, so it shows even when
            // the cluster store cannot be asked.
            let conditions: Vec<_> = crate::health::all(&access.data_dir)
                .into_iter()
                .filter(|(n, _)| self.network.as_deref().is_none_or(|wanted| wanted == n))
                .collect();
            crate::operator::view::prometheus::prometheus(&stats, &conditions, &timings)
        } else {
            metrics::table(&stats, &timings, self.log_file.as_deref())
        };
        Ok(Output::with_notes(text, notes))
    }
}

/// Per network, how many allocations `gc` would release now (its dry run), and what
/// it could not tell.
fn leak_candidates(
    access: &StoreAccess,
    networks: crate::store::Records,
    runtime: Runtime,
    grace: Duration,
) -> Result<(BTreeMap<String, u64>, Vec<Note>), CniError> {
    let (asked, mut notes) = asked_all(access, networks);
    let mut counts: BTreeMap<String, u64> = asked.iter().map(|a| (a.network.clone(), 0)).collect();
    let options = gc::Options {
        runtime,
        grace,
        timeout: gc::DEFAULT_TIMEOUT,
        dry_run: true,
        allow_empty: false,
    };
    let outcome = gc::gc(asked, &options)?;
    for leak in &outcome.leaks {
        *counts.entry(leak.network.clone()).or_default() += 1;
    }
    // A network gc could not reconcile has no count, rather than a wrong zero.
    counts.retain(|network, _| !outcome.unreconciled.contains(network));
    notes.extend(
        outcome
            .notes
            .into_iter()
            .map(|note| note.prefixed("leak candidates: ")),
    );
    Ok((counts, notes))
}

#[cfg(test)]
mod tests {
    use crate::operator::cli::{Cli, Operation};
    use clap::Parser;
    use std::time::Duration;

    #[test]
    fn its_arguments_parse_and_json_excludes_prometheus() {
        let cli = Cli::try_parse_from(["wasm-ipam", "stats", "--since", "1h", "--blocks"]).unwrap();
        let Operation::Stats(stats) = cli.command else {
            panic!("not stats")
        };
        assert_eq!(stats.since, Some(Duration::from_secs(3600)));
        assert_eq!(stats.last, 10_000);
        assert!(stats.blocks && !stats.json && !stats.prometheus);
        assert_eq!(*stats.grace, Duration::from_secs(15 * 60));
        assert!(Cli::try_parse_from(["wasm-ipam", "stats", "--json", "--prometheus"]).is_err());
        assert!(
            Cli::try_parse_from([
                "wasm-ipam",
                "stats",
                "--runtime-endpoint",
                "x",
                "--valid-from",
                "f"
            ])
            .is_err()
        );
    }
}
