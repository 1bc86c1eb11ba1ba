//! CNI STATUS: whether this node can serve ADDs for the network, answered without the
//! host-wide lock and without the store, so it answers in milliseconds while a herd
//! of calls waits for the lock (CRI-O asks every 5 s, containerd at every sync).
//!
//! kubelet turns a failing STATUS into node Ready=False: the node's pods leave their
//! Services and are evicted after 300 s. So STATUS fails (code 50) only for a fault of
//! this node that no ADD gets past until someone acts, each checked here: the data
//! directory or the lock file unusable, the module missing, untrusted or refused, the
//! embedded store damaged, the cluster store's TLS files unreadable. What fails only
//! some ADDs, or every node at once, answers ready, and is logged and exported by
//! `stats --prometheus`: what the node's last calls recorded ([`crate::health`]): the
//! cluster store not reached (an outage every node shares; TLS and authentication
//! refusals included, since one node cannot tell its own stale credentials from a
//! change on the servers), and what the module reported degraded (a pool exhausted,
//! which a DEL clears). `strictStatus` fails STATUS for those too.

use super::status_log::{self, Seen, Severity};
use crate::config::{HostIpamConfig, StoreConfig};
use crate::error::{CniError, code};
use crate::health::{self, Condition};
use crate::{files, lock, pipeline, store};

/// The answer to STATUS for `network` with `ipam`: `Ok` when the node can serve ADDs.
/// Each condition is logged when it begins and when it ends ([`status_log`]).
pub fn answer(network: &str, ipam: &HostIpamConfig) -> Result<(), CniError> {
    let now = health::unix_now();
    let seen = |what: &str, condition: &Condition, severity, since: Option<u64>| Seen {
        what: what.to_string(),
        condition: condition.clone(),
        severity,
        since: since.unwrap_or(now),
    };
    if let Err(fault) = own_faults(ipam) {
        let fault = not_available(network, &fault);
        let fault_seen = seen(
            "this node cannot serve ADDs",
            &Condition::of(&fault),
            Severity::Fault,
            None,
        );
        status_log::log_changes(&ipam.data_dir, network, vec![fault_seen], now);
        return Err(fault);
    }
    let recorded = health::read(&ipam.data_dir, network);
    let mut conditions: Vec<(&str, &Condition)> = Vec::new();
    let mut logged = Vec::new();
    if let Some((c, since)) = &recorded.store_unreachable {
        let what = "the cluster store was not reached by the last call";
        logged.push(seen(what, c, Severity::Warning, Some(*since)));
        conditions.push((what, c));
    }
    for c in &recorded.degraded {
        let what = "the module reports";
        logged.push(seen(what, c, Severity::Warning, recorded.degraded_since));
        conditions.push((what, c));
    }
    status_log::log_changes(&ipam.data_dir, network, logged, now);
    match conditions.first() {
        Some((what, first)) if ipam.strict_status => Err(CniError::new(
            code::PLUGIN_NOT_AVAILABLE,
            format!(
                "network {network}: {what}: code {}: {} (ipam.strictStatus fails STATUS for it)",
                first.code, first.msg
            ),
        )
        .with_details(
            conditions
                .iter()
                .map(|(what, c)| format!("{what}: code {}: {}", c.code, c.msg))
                .collect::<Vec<_>>()
                .join("; "),
        )),
        _ => Ok(()),
    }
}

/// The first fault of this node that stops every ADD until someone acts.
fn own_faults(ipam: &HostIpamConfig) -> Result<(), CniError> {
    files::private_dir(&ipam.data_dir).map_err(|e| {
        CniError::new(
            code::IO_FAILURE,
            format!(
                "the data directory {} cannot be used",
                ipam.data_dir.display()
            ),
        )
        .with_details(e)
    })?;
    lock::check_usable(&ipam.lock_file)?;
    pipeline::check_module(ipam)?;
    match &ipam.store {
        StoreConfig::Embedded => store::sqlite::check_header(&ipam.data_dir),
        StoreConfig::Etcd(etcd) => {
            let tls = etcd.tls.iter().flat_map(|t| {
                std::iter::once(&t.ca)
                    .chain(t.cert.as_ref())
                    .chain(t.key.as_ref())
            });
            for path in tls {
                let pem = store::etcd::read_tls_file(path)?;
                if !pem.windows(11).any(|w| w == b"-----BEGIN ") {
                    return Err(CniError::config(format!(
                        "ipam.store.tls: {} holds no PEM block",
                        path.display()
                    )));
                }
            }
            Ok(())
        }
        // Only the file: STATUS contacts no remote store.
        StoreConfig::Kubernetes(kube) => {
            std::fs::metadata(&kube.kubeconfig).map(drop).map_err(|e| {
                CniError::config(format!(
                    "ipam.store.kubeconfig: cannot read {}",
                    kube.kubeconfig.display()
                ))
                .with_details(e)
            })
        }
    }
}

fn not_available(network: &str, cause: &CniError) -> CniError {
    CniError::new(
        code::PLUGIN_NOT_AVAILABLE,
        format!(
            "network {network}: this node cannot serve ADDs: {}",
            cause.msg
        ),
    )
    .with_details(match cause.details.is_empty() {
        true => format!("code {}", cause.code),
        false => format!("code {}: {}", cause.code, cause.details),
    })
}
