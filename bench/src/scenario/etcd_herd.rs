//! The herd against the etcd store: N concurrent ADDs then N DELs of
//! `examples/cluster-pool` on one etcd (Debian's etcd-server, started here on loopback
//! with its defaults, fsync included), from 1 and from 3 simulated nodes (each its own
//! lock file, data dir and node name; the N calls split evenly among them), next to
//! Debian's host-local's herd of the same N on one node in the same run. From
//! wasm-ipam's logs: the datastore's requests, conflicts and retries per call, and the
//! time calls spent waiting for etcd.

use super::{Peer, addresses, herd_on, wall_ms, warm_cache};
use crate::etcd::Etcd;
use crate::invocations::{self, Invocation};
use crate::process::Finished;
use crate::report::{Section, table};
use crate::setup::{Node, Paths, TempDir};
use crate::stats::{Samples, ms, ratio};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::io;
use std::path::PathBuf;

pub struct Options {
    /// Calls per herd phase.
    pub size: usize,
    /// Herds per configuration.
    pub repeats: usize,
}

const NODE_COUNTS: [usize; 2] = [1, 3];

struct Herd {
    add_ms: f64,
    del_ms: f64,
    adds: Vec<Finished>,
    failures: usize,
    distinct: usize,
    /// From the log lines of every node: per call.
    requests: Samples,
    etcd_ms: Samples,
    retries: u64,
    conflicts: u64,
}

fn one_herd(
    paths: &Paths,
    cache: &TempDir,
    etcd: Option<&Etcd>,
    nodes: usize,
    n: usize,
    rep: usize,
) -> io::Result<Herd> {
    let prefix = format!("/bench-{nodes}-{rep}/");
    let cluster: Vec<Node> = (0..nodes)
        .map(|_| Node::new("etcd-herd"))
        .collect::<io::Result<_>>()?;
    let peers: Vec<Peer> = cluster
        .iter()
        .enumerate()
        .map(|(i, node)| match etcd {
            Some(etcd) => Peer {
                name: "wasm-ipam",
                plugin: paths.wasm_ipam.clone(),
                netconf: node.wasm_ipam_netconf(
                    &paths.cluster_pool_module,
                    cache.path(),
                    cluster_pool(etcd, &prefix, &format!("bench-node-{i}")),
                ),
                log: Some(node.log_file()),
            },
            None => Peer {
                name: "host-local",
                plugin: paths.host_local.clone(),
                netconf: node.host_local_netconf(),
                log: None,
            },
        })
        .collect();
    let ids: Vec<String> = (0..n)
        .map(|i| format!("etcd-herd-{nodes}-{rep}-{i}"))
        .collect();
    let outs: Vec<PathBuf> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| cluster[i % nodes].out(id))
        .collect();
    let adds = herd_on(&peers, "ADD", &ids, |i, _| Some(outs[i].clone()))?;
    let distinct = addresses(
        outs.iter()
            .zip(&adds)
            .filter(|(_, f)| f.success)
            .map(|(o, _)| o.clone()),
    )
    .into_iter()
    .collect::<HashSet<_>>()
    .len();
    let dels = herd_on(&peers, "DEL", &ids, |_, _| None)?;
    let failures = adds.iter().chain(&dels).filter(|f| !f.success).count();
    let lines: Vec<Invocation> = peers
        .iter()
        .filter_map(|p| p.log.as_deref())
        .flat_map(invocations::read)
        .collect();
    Ok(Herd {
        add_ms: wall_ms(&adds),
        del_ms: wall_ms(&dels),
        adds,
        failures,
        distinct,
        requests: lines.iter().map(|l| l.etcd_requests).collect(),
        etcd_ms: lines.iter().map(|l| l.etcd_ms).collect(),
        retries: lines.iter().map(|l| l.store_retries as u64).sum(),
        conflicts: lines.iter().map(|l| l.etcd_conflicts as u64).sum(),
    })
}

/// The cluster-pool module's `ipam` keys on the etcd store under `prefix`.
fn cluster_pool(etcd: &Etcd, prefix: &str, node: &str) -> Value {
    json!({
        "cidr": "10.30.0.0/16",
        "blockSize": 26,
        "nodeName": node,
        // The node's rate limiter opened wide: this measures the store, not the
        // limiter (at the default 50 requests a second a node's herd is paced by it).
        "store": {"type": "etcd", "endpoints": etcd.endpoints(), "prefix": prefix, "qps": 100000, "burst": 100000},
    })
}

pub fn run(paths: &Paths, opts: &Options) -> io::Result<Section> {
    let etcd = Etcd::start(1)?;
    let cache = warm_cache(
        &paths.wasm_ipam,
        &paths.cluster_pool_module,
        cluster_pool(&etcd, "/bench-warm/", "warm"),
    )?;
    let configs: Vec<(String, Option<&Etcd>, usize)> =
        std::iter::once(("host-local (Debian), 1 node".to_string(), None, 1))
            .chain(NODE_COUNTS.iter().map(|&k| {
                (
                    format!(
                        "wasm-ipam + cluster-pool on etcd, {k} node{}",
                        if k > 1 { "s" } else { "" }
                    ),
                    Some(&etcd),
                    k,
                )
            }))
            .collect();
    let mut results: Vec<Vec<Herd>> = configs.iter().map(|_| Vec::new()).collect();
    for rep in 0..opts.repeats {
        for (c, (name, etcd, nodes)) in configs.iter().enumerate() {
            eprintln!(
                "  etcd herd: {name} N={} ({}/{})",
                opts.size,
                rep + 1,
                opts.repeats
            );
            results[c].push(one_herd(paths, &cache, *etcd, *nodes, opts.size, rep)?);
        }
    }
    let peer_total = median(&results[0], &|h| h.add_ms + h.del_ms);
    let rows: Vec<Vec<String>> = configs
        .iter()
        .zip(&results)
        .map(|((name, etcd, _), herds)| row(opts, name, etcd.is_some(), herds, peer_total))
        .collect();
    let mut body = format!(
        "N = {} ADDs spawned at once, reaped, then N DELs, {} herds per configuration \
         (interleaved; wall times are medians over them, latencies pooled). wasm-ipam runs \
         `examples/cluster-pool` (10.30.0.0/16 in /26 blocks) from a warm cache on one \
         etcd member on loopback (Debian's etcd-server 3.4, default settings, so every \
         commit waits for etcd's own fsync); with 3 nodes the N calls are split evenly \
         among 3 simulated nodes, each with its own lock, so up to 3 calls run in etcd at \
         once. The node's rate limiter is opened wide (`qps`, `burst` 100000): at the \
         default 50 requests a second a node's herd would be paced by it, not by etcd. \
         The peer is Debian's host-local on one node, same N, same run. Datastore \
         figures are per call, from wasm-ipam's log (`etcd_requests`, `etcd_ms`, \
         `etcd_conflicts`, `store_retries`).\n\n",
        opts.size, opts.repeats
    );
    body += &table(
        &[
            "configuration",
            "ADD wall",
            "DEL wall",
            "ADD+DEL wall",
            "vs host-local",
            "failed calls",
            "distinct addresses (worst herd)",
            "ADD p50 / p99",
            "etcd requests p50",
            "etcd time p50",
            "conflicts / retries (all herds)",
        ],
        &rows,
    );
    Ok(Section {
        title: "Herds on the etcd store".into(),
        body,
        targets: Vec::new(),
    })
}

/// The median over `herds` of a per-herd figure.
fn median(herds: &[Herd], f: &dyn Fn(&Herd) -> f64) -> f64 {
    herds.iter().map(f).collect::<Samples>().median()
}

/// One configuration's row (`name`; on the etcd store when `datastore`): its
/// `herds`' wall times, against host-local's `peer_total`, failures, addresses,
/// latency and datastore figures.
fn row(
    opts: &Options,
    name: &str,
    datastore: bool,
    herds: &[Herd],
    peer_total: f64,
) -> Vec<String> {
    let total = median(herds, &|h| h.add_ms + h.del_ms);
    let latency: Samples = herds
        .iter()
        .flat_map(|h| h.adds.iter().map(Finished::ms))
        .collect();
    let pooled = |f: fn(&Herd) -> &Samples| -> Samples {
        herds
            .iter()
            .fold(Samples::new(Vec::new()), |all, h| all.pooled(f(h)))
    };
    vec![
        name.to_string(),
        ms(median(herds, &|h| h.add_ms)),
        ms(median(herds, &|h| h.del_ms)),
        ms(total),
        ratio(total, peer_total),
        herds.iter().map(|h| h.failures).sum::<usize>().to_string(),
        format!(
            "{} of {}",
            herds.iter().map(|h| h.distinct).min().unwrap_or(0),
            opts.size
        ),
        format!(
            "{} / {}",
            ms(latency.median()),
            ms(latency.percentile(0.99))
        ),
        if datastore {
            format!("{:.0}", pooled(|h| &h.requests).median())
        } else {
            "-".into()
        },
        if datastore {
            ms(pooled(|h| &h.etcd_ms).median())
        } else {
            "-".into()
        },
        if datastore {
            format!(
                "{} / {}",
                herds.iter().map(|h| h.conflicts).sum::<u64>(),
                herds.iter().map(|h| h.retries).sum::<u64>()
            )
        } else {
            "-".into()
        },
    ]
}
