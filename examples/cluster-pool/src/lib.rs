//! Cluster-wide IPAM: one pool (`ipam.cidr`, one CIDR per family) shared by every
//! node through a shared store (wasm-ipam's etcd store), cut into blocks of prefix
//! length `ipam.blockSize` (IPv4, default 26) and `ipam.blockSizeV6` (default 122).
//!
//! - A node claims free blocks (affinity recorded in the store), allocates from its own
//!   blocks first, and claims another only when they are full; where it starts looking
//!   is spread by its name, so nodes claiming at once seldom want the same block.
//! - A block's usable addresses are all but its first, its second (the gateway a
//!   bridge puts on the node) and its last; an ADD answers `address/blockSize` with
//!   that gateway.
//! - DEL releases (idempotent). A block left empty is freed by its node's next DEL or
//!   GC once it has been empty `ipam.blockGraceSeconds` (default 600): a node keeps a
//!   block it just emptied for its next pods rather than churning claims.
//! - Requested addresses (CNI_ARGS `IP`, or `runtimeConfig.ips`) are honoured if free,
//!   claiming their block if nobody has it, or borrowing from the node that has it.
//! - Sticky addresses (`ipam.stickySeconds` > 0): a pod with a stable identity
//!   (CNI_ARGS K8S_POD_NAMESPACE and K8S_POD_NAME, as a StatefulSet's pod has) keeps
//!   its addresses for that long after its DEL, and gets them back on its next ADD on
//!   any node; nobody else gets them meanwhile.
//!
//! - Releasing a node that is gone (`wasm-ipam release-node`, the `nodes` export):
//!   its attachments are released as their DELs would be, and its blocks freed at
//!   once; a block still holding another node's pod's address (or one kept for a
//!   sticky pod) is handed to the live node the operator runs on instead.
//!
//! Every decision is made from what the handler reads and committed by the host in
//! one transaction, so two nodes racing for one block or address cannot both win:
//! the loser's commit conflicts and its handler runs again on what the winner wrote.
//!
//! Keys: `pool/<cidr>` (the claimed blocks), `blk/<block>` (its node and holders),
//! `aff/<node>/<block>` (a node's blocks), `own/<node>/<container>/<ifname>` (an
//! attachment's addresses), `sticky/<namespace>/<pod>` (addresses kept for a pod).

mod blocks;

use blocks::Pool;
use ipnet::IpNet;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use wasm_ipam_guest::error::code;
use wasm_ipam_guest::store::Staged;
use wasm_ipam_guest::*;

const DEFAULT_BLOCK_V4: u8 = 26;
const DEFAULT_BLOCK_V6: u8 = 122;
const DEFAULT_GRACE_SECONDS: u64 = 600;

#[derive(Deserialize)]
#[serde(untagged)]
enum OneOrMany {
    One(IpNet),
    Many(Vec<IpNet>),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Ipam {
    cidr: OneOrMany,
    block_size: Option<u8>,
    block_size_v6: Option<u8>,
    block_grace_seconds: Option<u64>,
    #[serde(default)]
    sticky_seconds: u64,
}

struct Conf {
    pools: Vec<Pool>,
    grace: u64,
    sticky: u64,
}

impl Conf {
    fn from_ipam(ipam: Ipam) -> Result<Self, Error> {
        let cidrs = match ipam.cidr {
            OneOrMany::One(cidr) => vec![cidr],
            OneOrMany::Many(cidrs) => cidrs,
        };
        if cidrs.is_empty()
            || cidrs.iter().filter(|c| matches!(c, IpNet::V4(_))).count() > 1
            || cidrs.iter().filter(|c| matches!(c, IpNet::V6(_))).count() > 1
        {
            return Err(Error::invalid_config(
                "ipam.cidr must be one CIDR, or one per family",
            ));
        }
        let pools = cidrs
            .into_iter()
            .map(|cidr| {
                let len = match cidr {
                    IpNet::V4(_) => ipam.block_size.unwrap_or(DEFAULT_BLOCK_V4),
                    IpNet::V6(_) => ipam.block_size_v6.unwrap_or(DEFAULT_BLOCK_V6),
                };
                Pool::new(cidr, len)
                    .map_err(|e| Error::invalid_config(format!("ipam.cidr {cidr}: {e}")))
            })
            .collect::<Result<_, _>>()?;
        Ok(Conf {
            pools,
            grace: ipam.block_grace_seconds.unwrap_or(DEFAULT_GRACE_SECONDS),
            sticky: ipam.sticky_seconds,
        })
    }

    fn of(request: &Request) -> Result<Self, Error> {
        Self::from_ipam(request.ipam()?)
    }

    fn pool_of(&self, ip: IpAddr) -> Option<&Pool> {
        self.pools.iter().find(|p| p.cidr.contains(&ip))
    }
}

/// A block: the node that claimed it and who holds which of its addresses.
#[derive(Serialize, Deserialize, Default)]
struct Block {
    node: String,
    ips: BTreeMap<IpAddr, Holder>,
    /// Since when it has held nothing, for the grace rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    empty_since: Option<u64>,
}

#[derive(Serialize, Deserialize, Clone)]
struct Holder {
    id: String,
    ifname: String,
    node: String,
    since: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    identity: Option<String>,
    /// Released, but kept for `identity` until then (sticky addresses).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    held_until: Option<u64>,
}

/// An attachment's addresses.
#[derive(Serialize, Deserialize)]
struct Own {
    ips: Vec<IpAddr>,
    since: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    identity: Option<String>,
}

/// Addresses kept for a pod identity until `until`.
#[derive(Serialize, Deserialize)]
struct Sticky {
    ips: Vec<IpAddr>,
    until: u64,
}

fn read<T: DeserializeOwned>(store: &impl Store, key: &str) -> Result<Option<T>, Error> {
    store
        .get(key)
        .map(|bytes| {
            serde_json::from_slice(&bytes).map_err(|e| {
                Error::new(code::MODULE_SPECIFIC, format!("damaged record {key}"))
                    .with_details(e.to_string())
            })
        })
        .transpose()
}

fn write(store: &mut impl Store, key: &str, value: &impl Serialize) -> Result<(), Error> {
    store.put(key, &serde_json::to_vec(value).expect("serialisable"))
}

fn block_key(block: IpNet) -> String {
    format!("blk/{block}")
}
fn pool_key(pool: &Pool) -> String {
    format!("pool/{}", pool.cidr)
}
fn aff_prefix(node: &str) -> String {
    format!("aff/{node}/")
}
fn own_key(node: &str, id: &str, ifname: &str) -> String {
    format!("own/{node}/{id}/{ifname}")
}
fn sticky_key(identity: &str) -> String {
    format!("sticky/{identity}")
}

/// A pod's stable identity, when CNI_ARGS carry one.
fn identity(request: &Request) -> Option<String> {
    let namespace = request.arg("K8S_POD_NAMESPACE").filter(|s| !s.is_empty())?;
    let name = request.arg("K8S_POD_NAME").filter(|s| !s.is_empty())?;
    Some(format!("{namespace}/{name}"))
}

/// Addresses asked for: CNI_ARGS `IP` (comma-separated) and `runtimeConfig.ips`.
fn requested(request: &Request) -> Result<Vec<IpAddr>, Error> {
    let mut texts: Vec<String> = request
        .arg("IP")
        .map(|v| v.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    if let Some(ips) = request.config()["runtimeConfig"]["ips"].as_array() {
        texts.extend(ips.iter().filter_map(|v| v.as_str().map(str::to_string)));
    }
    texts
        .iter()
        .map(|t| {
            let bare = t.split('/').next().unwrap_or_default().trim();
            bare.parse()
                .map_err(|_| Error::invalid_config(format!("requested address {t:?} is not an IP")))
        })
        .collect()
}

/// One ADD's view of the store, for the handler and its helpers.
struct Call<'a, S: Store> {
    store: &'a mut S,
    conf: &'a Conf,
    node: &'a str,
    now: u64,
}

impl<S: Store> Call<'_, S> {
    /// Drops a block's expired sticky holds (and their pods' records).
    fn sweep(&mut self, block: &mut Block) -> Result<(), Error> {
        let now = self.now;
        let expired: Vec<(IpAddr, Option<String>)> = block
            .ips
            .iter()
            .filter(|(_, h)| h.held_until.is_some_and(|t| t < now))
            .map(|(ip, h)| (*ip, h.identity.clone()))
            .collect();
        for (ip, identity) in expired {
            block.ips.remove(&ip);
            if let Some(identity) = identity {
                let key = sticky_key(&identity);
                if read::<Sticky>(self.store, &key)?.is_some_and(|s| s.until < now) {
                    self.store.delete(&key)?;
                }
            }
        }
        if block.ips.is_empty() && block.empty_since.is_none() {
            block.empty_since = Some(now);
        }
        Ok(())
    }

    fn my_blocks(&self, pool: &Pool) -> Vec<IpNet> {
        let prefix = aff_prefix(self.node);
        self.store
            .list(&prefix)
            .into_iter()
            .filter_map(|(key, _)| key[prefix.len()..].parse::<IpNet>().ok())
            .filter(|b| pool.cidr.contains(b) && b.prefix_len() == pool.block_len)
            .collect()
    }

    /// The next free address in this node's blocks, else in a block it claims now.
    fn next(&mut self, pool: &Pool, holder: &Holder) -> Result<IpAddr, Error> {
        for block_net in self.my_blocks(pool) {
            let key = block_key(block_net);
            let Some(mut block) = read::<Block>(self.store, &key)? else {
                continue;
            };
            self.sweep(&mut block)?;
            if let Some(ip) = pool
                .addresses(block_net)
                .find(|a| !block.ips.contains_key(a))
            {
                block.ips.insert(ip, holder.clone());
                block.empty_since = None;
                write(self.store, &key, &block)?;
                return Ok(ip);
            }
        }
        let block_net = self.claim(pool, None)?;
        let ip = pool
            .addresses(block_net)
            .next()
            .expect("a block has usable addresses");
        let mut block = Block {
            node: self.node.to_string(),
            ..Block::default()
        };
        block.ips.insert(ip, holder.clone());
        write(self.store, &block_key(block_net), &block)?;
        Ok(ip)
    }

    /// Claims a free block for this node (`wanted`, or the first free one from
    /// where this node starts looking), recording it in the pool and the node's list.
    fn claim(&mut self, pool: &Pool, wanted: Option<IpNet>) -> Result<IpNet, Error> {
        let key = pool_key(pool);
        let mut claimed: BTreeSet<IpNet> = read(self.store, &key)?.unwrap_or_default();
        let block = match wanted {
            Some(block) => block,
            None => {
                // Past claimed.len() + 1 candidates one is certainly free.
                let tries = (claimed.len() as u128 + 1).min(pool.blocks());
                let start = pool.start_for(self.node);
                (0..tries)
                    .map(|i| pool.block((start + i) % pool.blocks()))
                    .find(|b| !claimed.contains(b))
                    .ok_or_else(|| {
                        Error::new(
                            code::MODULE_SPECIFIC,
                            format!("pool {} has no free block left", pool.cidr),
                        )
                    })?
            }
        };
        claimed.insert(block);
        write(self.store, &key, &claimed)?;
        self.store
            .put(&format!("{}{block}", aff_prefix(self.node)), b"")?;
        Ok(block)
    }

    /// A requested address: taken if free, in whichever node's block holds it.
    fn take(&mut self, pool: &Pool, ip: IpAddr, holder: &Holder) -> Result<(), Error> {
        let block_net = pool.block_of(ip).expect("the pool holds it");
        if !pool.addresses(block_net).any(|a| a == ip) {
            return Err(Error::invalid_config(format!(
                "requested address {ip} is a block's network, gateway or last address"
            )));
        }
        let key = block_key(block_net);
        let mut block = match read::<Block>(self.store, &key)? {
            Some(block) => block,
            None => {
                self.claim(pool, Some(block_net))?;
                Block {
                    node: self.node.to_string(),
                    ..Block::default()
                }
            }
        };
        self.sweep(&mut block)?;
        if let Some(other) = block.ips.get(&ip) {
            return Err(Error::new(
                code::MODULE_SPECIFIC,
                format!("requested address {ip} is held by container {:?}", other.id),
            ));
        }
        block.ips.insert(ip, holder.clone());
        block.empty_since = None;
        write(self.store, &key, &block)
    }

    /// The pod's kept addresses, if its retention has not run out: taken back.
    fn reclaim(&mut self, identity: &str, holder: &Holder) -> Result<Vec<IpAddr>, Error> {
        let key = sticky_key(identity);
        let Some(sticky) = read::<Sticky>(self.store, &key)? else {
            return Ok(Vec::new());
        };
        self.store.delete(&key)?;
        if sticky.until < self.now {
            return Ok(Vec::new());
        }
        let mut back = Vec::new();
        for ip in sticky.ips {
            let Some(block_net) = self.conf.pool_of(ip).and_then(|p| p.block_of(ip)) else {
                continue;
            };
            let block_key = block_key(block_net);
            let Some(mut block) = read::<Block>(self.store, &block_key)? else {
                continue;
            };
            let kept = block
                .ips
                .get(&ip)
                .is_some_and(|h| h.held_until.is_some() && h.identity.as_deref() == Some(identity));
            if kept {
                block.ips.insert(ip, holder.clone());
                block.empty_since = None;
                write(self.store, &block_key, &block)?;
                back.push(ip);
            }
        }
        Ok(back)
    }

    /// Releases one attachment's addresses (kept for its pod when sticky), then frees
    /// this node's blocks that have been empty past the grace period.
    fn release(&mut self, id: &str, ifname: &str) -> Result<(), Error> {
        self.release_attachment(id, ifname)?;
        self.free_idle_blocks()
    }

    /// Releases one attachment's addresses (kept for its pod when sticky); answers
    /// the addresses it held.
    fn release_attachment(&mut self, id: &str, ifname: &str) -> Result<Vec<IpAddr>, Error> {
        let key = own_key(self.node, id, ifname);
        let mut released = Vec::new();
        if let Some(own) = read::<Own>(self.store, &key)? {
            released.clone_from(&own.ips);
            let keep = own.identity.clone().filter(|_| self.conf.sticky > 0);
            let until = self.now + self.conf.sticky;
            for ip in &own.ips {
                let Some(block_net) = self.conf.pool_of(*ip).and_then(|p| p.block_of(*ip)) else {
                    continue;
                };
                let block_key = block_key(block_net);
                let Some(mut block) = read::<Block>(self.store, &block_key)? else {
                    continue;
                };
                let ours = block
                    .ips
                    .get(ip)
                    .is_some_and(|h| h.id == id && h.ifname == ifname);
                if !ours {
                    continue;
                }
                match &keep {
                    Some(identity) => {
                        let held = block.ips.get_mut(ip).expect("checked above");
                        held.id.clear();
                        held.held_until = Some(until);
                        held.identity = Some(identity.clone());
                    }
                    None => {
                        block.ips.remove(ip);
                    }
                }
                self.sweep(&mut block)?;
                write(self.store, &block_key, &block)?;
            }
            if let Some(identity) = &keep {
                let sticky = Sticky {
                    ips: own.ips.clone(),
                    until,
                };
                write(self.store, &sticky_key(identity), &sticky)?;
            }
            self.store.delete(&key)?;
        }
        Ok(released)
    }

    /// Frees this node's blocks that hold nothing and have held nothing for the grace.
    fn free_idle_blocks(&mut self) -> Result<(), Error> {
        for pool in &self.conf.pools {
            for block_net in self.my_blocks(pool) {
                let key = block_key(block_net);
                let Some(mut block) = read::<Block>(self.store, &key)? else {
                    continue;
                };
                let (held, empty_since) = (block.ips.len(), block.empty_since);
                self.sweep(&mut block)?;
                let idle = block.ips.is_empty()
                    && block
                        .empty_since
                        .is_some_and(|t| self.now >= t.saturating_add(self.conf.grace));
                if idle {
                    self.free_block(pool, block_net)?;
                } else if (held, empty_since) != (block.ips.len(), block.empty_since) {
                    // Expired sticky holds went: the block's grace starts now, not at
                    // each later look.
                    write(self.store, &key, &block)?;
                }
            }
        }
        Ok(())
    }

    /// Frees one of this node's blocks: its record, its affinity, its place in the pool.
    fn free_block(&mut self, pool: &Pool, block_net: IpNet) -> Result<(), Error> {
        self.store.delete(&block_key(block_net))?;
        self.store
            .delete(&format!("{}{block_net}", aff_prefix(self.node)))?;
        let pool_key = pool_key(pool);
        let mut claimed: BTreeSet<IpNet> = read(self.store, &pool_key)?.unwrap_or_default();
        claimed.remove(&block_net);
        write(self.store, &pool_key, &claimed)
    }

    /// Releases everything of this call's node, a node that is gone: each attachment as
    /// its DEL would (sticky addresses kept for their pods), then each of its blocks at
    /// once, without the grace. A block that still holds addresses (another node's pod
    /// borrowed one, or one is kept for a sticky pod) cannot be freed; it is handed to
    /// `heir`, the live node the operator runs on, whose own grace rule frees it once
    /// it is empty.
    fn release_node(&mut self, heir: &str) -> Result<ReleaseReport, Error> {
        let mut report = ReleaseReport::default();
        let prefix = format!("own/{}/", self.node);
        let attachments: Vec<(String, String)> = self
            .store
            .list(&prefix)
            .into_iter()
            .filter_map(|(key, _)| {
                let (id, ifname) = key[prefix.len()..].split_once('/')?;
                Some((id.to_string(), ifname.to_string()))
            })
            .collect();
        for (id, ifname) in attachments {
            for ip in self.release_attachment(&id, &ifname)? {
                report.addresses.push(ReleasedAddress {
                    address: ip.to_string(),
                    container_id: id.clone(),
                    ifname: ifname.clone(),
                });
            }
        }
        for pool in &self.conf.pools {
            for block_net in self.my_blocks(pool) {
                let key = block_key(block_net);
                let Some(mut block) = read::<Block>(self.store, &key)? else {
                    continue;
                };
                self.sweep(&mut block)?;
                if block.ips.is_empty() {
                    self.free_block(pool, block_net)?;
                    report.blocks.push(block_net.to_string());
                    continue;
                }
                let kept = block
                    .ips
                    .values()
                    .filter(|h| h.held_until.is_some())
                    .count();
                report.notes.push(format!(
                    "block {block_net} is handed to node {heir}, not freed: it holds {} address(es) of other nodes' pods and {kept} kept for sticky pods; {heir} frees it once it is empty",
                    block.ips.len() - kept,
                ));
                block.node = heir.to_string();
                write(self.store, &key, &block)?;
                self.store
                    .delete(&format!("{}{block_net}", aff_prefix(self.node)))?;
                self.store
                    .put(&format!("{}{block_net}", aff_prefix(heir)), b"")?;
            }
        }
        Ok(report)
    }
}

fn result(conf: &Conf, ips: &[IpAddr]) -> IpamResult {
    let mut result = IpamResult::default();
    for ip in ips {
        let pool = conf.pool_of(*ip).expect("allocated from a pool");
        let block = pool.block_of(*ip).expect("in its pool");
        result = result
            .ip(IpConfig::new(format!("{ip}/{}", pool.block_len)).gateway(pool.gateway(block)));
    }
    result
}

pub struct ClusterPool;

#[wasm_ipam_guest::ipam_module]
impl IpamModule for ClusterPool {
    fn add(request: &Request, store: &mut impl Store) -> Result<IpamResult, Error> {
        let conf = Conf::of(request)?;
        let node = request.node_name();
        let now = request.lock_granted_at().seconds;
        let (id, ifname) = (request.container_id(), request.ifname());
        let key = own_key(node, id, ifname);
        if let Some(own) = read::<Own>(store, &key)? {
            return Ok(result(&conf, &own.ips));
        }
        let identity = identity(request);
        let holder = Holder {
            id: id.to_string(),
            ifname: ifname.to_string(),
            node: node.to_string(),
            since: now,
            identity: None,
            held_until: None,
        };
        let requested = requested(request)?;
        let mut call = Call {
            store,
            conf: &conf,
            node,
            now,
        };
        let mut ips = Vec::new();
        if conf.sticky > 0
            && let Some(identity) = &identity
        {
            ips = call.reclaim(identity, &holder)?;
        }
        for ip in requested {
            if ips.contains(&ip) {
                continue;
            }
            let pool = conf.pool_of(ip).ok_or_else(|| {
                Error::invalid_config(format!("requested address {ip} is in no pool of ipam.cidr"))
            })?;
            call.take(pool, ip, &holder)?;
            ips.push(ip);
        }
        for pool in &conf.pools {
            if !ips.iter().any(|ip| pool.cidr.contains(ip)) {
                ips.push(call.next(pool, &holder)?);
            }
        }
        let own = Own {
            ips: ips.clone(),
            since: now,
            identity,
        };
        write(call.store, &key, &own)?;
        Ok(result(&conf, &ips))
    }

    fn del(request: &Request, store: &mut impl Store) -> Result<(), Error> {
        let conf = Conf::of(request)?;
        let mut call = Call {
            store,
            conf: &conf,
            node: request.node_name(),
            now: request.lock_granted_at().seconds,
        };
        call.release(request.container_id(), request.ifname())
    }

    fn check(request: &Request, store: &impl Store) -> Result<(), Error> {
        let key = own_key(
            request.node_name(),
            request.container_id(),
            request.ifname(),
        );
        match read::<Own>(store, &key)? {
            Some(_) => Ok(()),
            None => Err(Error::new(
                code::MODULE_SPECIFIC,
                format!(
                    "no address is allocated to container {} interface {}",
                    request.container_id(),
                    request.ifname()
                ),
            )),
        }
    }

    /// Releases this node's attachments that are not valid (other nodes' are theirs).
    fn gc(request: &Request, valid: &[Attachment], store: &mut impl Store) -> Result<(), Error> {
        let conf = Conf::of(request)?;
        let node = request.node_name();
        let prefix = format!("own/{node}/");
        let stale: Vec<(String, String)> = store
            .list(&prefix)
            .into_iter()
            .filter_map(|(key, _)| {
                let (id, ifname) = key[prefix.len()..].split_once('/')?;
                let valid = valid
                    .iter()
                    .any(|a| a.container_id == id && a.ifname == ifname);
                (!valid).then(|| (id.to_string(), ifname.to_string()))
            })
            .collect();
        let mut call = Call {
            store,
            conf: &conf,
            node,
            now: request.lock_granted_at().seconds,
        };
        for (id, ifname) in stale {
            call.release(&id, &ifname)?;
        }
        call.free_idle_blocks()
    }

    /// Releases everything of `node`, a node removed from the cluster: its attachments
    /// and its blocks (see `Call::release_node`). A dry run runs the same code over a
    /// [`Staged`] store and keeps nothing it wrote.
    fn release_node(
        context: &Context,
        node: &str,
        dry_run: bool,
        store: &mut impl Store,
    ) -> Result<ReleaseReport, Error> {
        let conf = context
            .ipam::<Ipam>()?
            .ok_or_else(|| {
                Error::invalid_config(
                    "no configuration is recorded for the network: pass the operator its netconf",
                )
            })
            .and_then(Conf::from_ipam)?;
        if node == context.node_name() {
            return Err(Error::invalid_config(format!(
                "node {node} cannot release itself: run release-node on a live node"
            )));
        }
        let now = context.now().seconds;
        let heir = context.node_name();
        if dry_run {
            let mut staged = Staged::over(&*store);
            return Call {
                store: &mut staged,
                conf: &conf,
                node,
                now,
            }
            .release_node(heir);
        }
        Call {
            store,
            conf: &conf,
            node,
            now,
        }
        .release_node(heir)
    }

    /// Every attachment in the cluster, with the node it runs on.
    fn allocations(_: &Context, store: &impl Store) -> Result<Vec<Allocation>, Error> {
        let mut out = Vec::new();
        for (key, _) in store.list("own/") {
            let mut parts = key["own/".len()..].splitn(3, '/');
            let (Some(node), Some(id), Some(ifname)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let Some(own) = read::<Own>(store, &key)? else {
                continue;
            };
            for ip in own.ips {
                out.push(
                    Allocation::new(ip, id, ifname)
                        .since(own.since)
                        .attribute("node", node),
                );
            }
        }
        Ok(out)
    }

    /// One row per claimed block (named with its node), and per pool one for the
    /// blocks nobody has claimed yet.
    fn pools(context: &Context, store: &impl Store) -> Result<Vec<wasm_ipam_guest::Pool>, Error> {
        let conf = context.ipam::<Ipam>()?.map(Conf::from_ipam).transpose()?;
        let mut rows = Vec::new();
        for (key, _) in store.list("blk/") {
            let Ok(block_net) = key["blk/".len()..].parse::<IpNet>() else {
                continue;
            };
            let Some(block) = read::<Block>(store, &key)? else {
                continue;
            };
            let usable = conf
                .as_ref()
                .and_then(|c| c.pools.iter().find(|p| p.cidr.contains(&block_net)))
                .map(|p| p.usable() as u64);
            let held = block
                .ips
                .values()
                .filter(|h| h.held_until.is_some())
                .count() as u64;
            let mut row = wasm_ipam_guest::Pool::new(format!("{block_net} ({})", block.node))
                .in_use(block.ips.len() as u64 - held)
                .cooling_down(held);
            if let Some(usable) = usable {
                row = row.capacity(usable).free_from_capacity();
            }
            rows.push(row);
        }
        for pool in conf.iter().flat_map(|c| &c.pools) {
            let claimed: BTreeSet<IpNet> = read(store, &pool_key(pool))?.unwrap_or_default();
            let unclaimed = pool.blocks().saturating_sub(claimed.len() as u128);
            let capacity =
                u64::try_from(unclaimed.saturating_mul(pool.usable())).unwrap_or(u64::MAX);
            rows.push(
                wasm_ipam_guest::Pool::new(format!("{} unclaimed blocks", pool.cidr))
                    .capacity(capacity)
                    .free_from_capacity(),
            );
        }
        Ok(rows)
    }
}

export_module!(ClusterPool);

#[cfg(test)]
mod tests;
