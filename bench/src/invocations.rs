//! Reads the `"target":"invocation"` lines of a wasm-ipam log file (`ipam.logFile`):
//! the host's own account of each call's lock wait, time under the lock and budget
//! used. The DEL models write the same fields, so their logs read the same way.

use serde_json::Value;
use std::collections::HashMap;
use std::path::Path;

/// One call's log line (the fields the suite uses).
#[derive(Clone, Debug)]
pub struct Invocation {
    pub command: String,
    pub container_id: String,
    pub load_ms: f64,
    pub lock_wait_ms: f64,
    pub lock_hold_ms: f64,
    pub store_open_ms: f64,
    pub budget_used_ms: f64,
    pub commit_ms: f64,
    /// Making the commit durable, after the lock is released (0 in older logs).
    pub sync_ms: f64,
    pub total_ms: f64,
    pub ok: bool,
    pub module_cached: bool,
    /// On the etcd store: requests sent, commits that lost to another writer, handler
    /// runs after the first, and time spent in etcd requests (NaN on other stores).
    pub etcd_requests: f64,
    pub etcd_conflicts: f64,
    pub store_retries: f64,
    pub etcd_ms: f64,
    /// Time waiting for the node's etcd rate limiter (0 on other stores).
    pub etcd_rate_wait_ms: f64,
    /// On the Kubernetes store: API requests sent, writes that lost to another writer,
    /// time spent in requests and waiting for the node's rate limiter (0 on other
    /// stores, NaN in a log older than the store).
    pub kube_requests: f64,
    pub kube_conflicts: f64,
    pub kube_ms: f64,
    pub kube_rate_wait_ms: f64,
    /// When the line was written (just after the lock was released), ms since the
    /// Unix epoch; wasm-ipam's lines have it, the DEL models' do not.
    pub logged_at_ms: Option<f64>,
}

impl Invocation {
    /// When the lock was granted, ms since the Unix epoch.
    pub fn granted_at_ms(&self) -> Option<f64> {
        Some(self.logged_at_ms? - self.lock_hold_ms)
    }

    /// When the call asked for the lock, ms since the Unix epoch.
    pub fn requested_at_ms(&self) -> Option<f64> {
        Some(self.granted_at_ms()? - self.lock_wait_ms)
    }
}

/// An RFC 3339 UTC timestamp as tracing writes it ("2026-11-30T06:55:10.500275Z") in
/// ms since the Unix epoch.
fn parse_timestamp(s: &str) -> Option<f64> {
    let (date, time) = s.strip_suffix('Z')?.split_once('T')?;
    let mut ymd = date.splitn(3, '-').map(|p| p.parse::<i64>().ok());
    let (y, m, d) = (ymd.next()??, ymd.next()??, ymd.next()??);
    let mut hms = time.splitn(3, ':');
    let h: i64 = hms.next()?.parse().ok()?;
    let min: i64 = hms.next()?.parse().ok()?;
    let sec: f64 = hms.next()?.parse().ok()?;
    // Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let days = era * 146_097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719_468;
    Some(((days * 86_400 + h * 3600 + min * 60) as f64 + sec) * 1000.0)
}

/// Every invocation line of the log at `path` (none if it does not exist); other
/// lines (guest output, warnings) are skipped.
pub fn read(path: &Path) -> Vec<Invocation> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|v| v["target"] == "invocation")
        .map(|v| {
            let num = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
            Invocation {
                command: v["command"].as_str().unwrap_or_default().to_string(),
                container_id: v["container_id"].as_str().unwrap_or_default().to_string(),
                lock_wait_ms: num("lock_wait_ms"),
                lock_hold_ms: num("lock_hold_ms"),
                load_ms: num("load_ms"),
                store_open_ms: num("store_open_ms"),
                budget_used_ms: num("budget_used_ms"),
                commit_ms: num("commit_ms"),
                sync_ms: num("sync_ms"),
                total_ms: num("total_ms"),
                ok: v["outcome"] == "ok",
                etcd_requests: num("etcd_requests"),
                etcd_conflicts: num("etcd_conflicts"),
                store_retries: num("store_retries"),
                etcd_ms: num("etcd_ms"),
                etcd_rate_wait_ms: num("etcd_rate_wait_ms"),
                kube_requests: num("kube_requests"),
                kube_conflicts: num("kube_conflicts"),
                kube_ms: num("kube_ms"),
                kube_rate_wait_ms: num("kube_rate_wait_ms"),
                module_cached: v["module_cached"].as_bool().unwrap_or(false),
                logged_at_ms: v["timestamp"].as_str().and_then(parse_timestamp),
            }
        })
        .collect()
}

/// The lines of one command, keyed by container id.
pub fn by_container(lines: &[Invocation], command: &str) -> HashMap<String, Invocation> {
    lines
        .iter()
        .filter(|i| i.command == command)
        .map(|i| (i.container_id.clone(), i.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::parse_timestamp;

    #[test]
    fn timestamps_are_ms_since_the_epoch() {
        assert_eq!(parse_timestamp("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(
            parse_timestamp("2000-03-01T00:00:01.5Z"),
            Some(951_868_801_500.0)
        );
        assert_eq!(
            parse_timestamp("2026-11-30T06:55:10Z"),
            Some(1_796_021_710_000.0)
        );
        assert_eq!(parse_timestamp("yesterday"), None);
    }
}
