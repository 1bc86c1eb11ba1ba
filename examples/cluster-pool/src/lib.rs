//! Cluster-wide IPAM: pools (`ipam.pools`, or one default pool `ipam.cidr`; each one
//! CIDR per family) shared by every node through a shared store (wasm-ipam's etcd
//! store), cut into blocks of prefix length `ipam.blockSize` (IPv4, default 26) and
//! `ipam.blockSizeV6` (default 122).
//!
//! - An ADD draws from the pool the pod names (annotation `wasm-ipam.io/pool`, else
//!   CNI_ARGS `IPAM_POOL`), else its namespace's, else the default (`select.rs`).
//! - A node claims free blocks (affinity recorded in the store), allocates from its own
//!   blocks first, and claims another only when they are full; where it starts looking
//!   is spread by its name, so nodes claiming at once seldom want the same block.
//! - A node at `ipam.maxBlocksPerNode` blocks of a range, or finding no free block,
//!   borrows a free address from another node's block (answered as a /32 or /128),
//!   unless `ipam.strictAffinity` makes that an error.
//! - A block's usable addresses are all but its first, its second (the gateway a
//!   bridge puts on the node) and its last; an ADD answers `address/blockSize` with
//!   that gateway.
//! - DEL releases (idempotent). A block left empty is freed by its node's next DEL or
//!   GC once it has been empty `ipam.blockGraceSeconds` (default 600): a node keeps a
//!   block it just emptied for its next pods rather than churning claims.
//! - Requested addresses (CNI_ARGS `IP`, or `runtimeConfig.ips`) are honoured if free,
//!   claiming their block if nobody has it, or borrowing from the node that has it.
//! - Reservations (`wasm-ipam reserve`, the `reservations` export) keep addresses out
//!   of every ADD's hands; `usage` tells `stats` each pool's and block's use, reserved
//!   and borrowed addresses; a call that brings a range to its pool's `warnPercent` logs one warning.
//! - Sticky addresses (a pool's `stickySeconds` > 0): a sticky pod keeps its
//!   addresses for that long after its DEL, and gets them back on its next ADD on any
//!   node; nobody else gets them meanwhile. Which pods are sticky: the pod annotation
//!   `wasm-ipam.io/sticky`, else the pool's `stickyPods` (by default a StatefulSet's,
//!   whose name ends in its ordinal, from CNI_ARGS K8S_POD_NAME).
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
//! Keys: `pool/<cidr>` (a range's claimed blocks), `blk/<block>` (its node and holders),
//! `aff/<node>/<block>` (a node's blocks), `own/<node>/<container>/<ifname>` (an
//! attachment's addresses), `sticky/<namespace>/<pod>` (addresses kept for a pod),
//! `rsv/<cidr>` (a range's reservations, `reserve.rs`), `use/<cidr>/<node>` and
//! `warn/<cidr>` (a range's use for `warnPercent`, `usage.rs`).

mod blocks;
mod codes;
mod conf;
mod reserve;
mod select;
mod upkeep;
mod usage;

use blocks::Range;
use conf::{Conf, Ipam, NamedPool, StickyPods};
use ipnet::IpNet;
use reserve::Kept;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use wasm_ipam_guest::error::code;
use wasm_ipam_guest::store::Staged;
use wasm_ipam_guest::*;

/// The most other nodes' blocks one borrow reads (those a peek showed with an
/// address to take): each read is a compare in the commit, which etcd caps
/// (`maxTxnOps`, 128 by default).
const MAX_BORROW_READS: usize = 32;
/// What an ADD still writes once it has borrowed: its attachment and its use rows.
const OWN_WRITES_AFTER_BORROW: usize = 8;
/// A route's scope as `ip route` numbers "link".
const LINK_SCOPE: u8 = 253;

impl Conf {
    fn of(request: &Request) -> Result<Self, Error> {
        let mut conf = Self::from_ipam(request.ipam()?)?;
        conf.routed_per_pod = request.config().get("type").and_then(|t| t.as_str()) == Some("ptp");
        Ok(conf)
    }
}

/// A block: the node that claimed it and who holds which of its addresses.
#[derive(Serialize, Deserialize, Default)]
struct Block {
    node: String,
    ips: BTreeMap<IpAddr, AddressHolder>,
    /// Since when it has held nothing, for the grace rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    empty_since: Option<u64>,
}

/// Who holds an address of a block: the attachment, its node, since when, and for a
/// sticky pod its identity and how long the address stays kept after its DEL.
#[derive(Serialize, Deserialize, Clone)]
struct AddressHolder {
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

impl Block {
    /// Records when it became empty, for the grace rule, if it just did.
    fn note_if_empty(&mut self, now: u64) {
        if self.ips.is_empty() && self.empty_since.is_none() {
            self.empty_since = Some(now);
        }
    }
}

/// An attachment's addresses (its record under the attachment's key).
#[derive(Serialize, Deserialize)]
struct AttachmentAddresses {
    ips: Vec<IpAddr>,
    since: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    identity: Option<String>,
    /// Those of `ips` in another node's block when handed out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    borrowed: Vec<IpAddr>,
}

/// An address handed to an attachment, and whether it lies in another node's block.
#[derive(Clone, Copy)]
struct Handed {
    ip: IpAddr,
    borrowed: bool,
}

/// Addresses kept for a pod identity until `until`.
#[derive(Serialize, Deserialize)]
struct Sticky {
    ips: Vec<IpAddr>,
    until: u64,
}

fn read<T: DeserializeOwned>(store: &impl Store, key: &str) -> Result<Option<T>, Error> {
    store.get(key).map(|bytes| decode(key, &bytes)).transpose()
}

fn decode<T: DeserializeOwned>(key: &str, bytes: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(bytes).map_err(|e| {
        Error::new(code::MODULE_SPECIFIC, format!("damaged record {key}"))
            .with_details(e.to_string())
    })
}

fn write(store: &mut impl Store, key: &str, value: &impl Serialize) -> Result<(), Error> {
    store.put(key, &serde_json::to_vec(value).expect("serialisable"))
}

fn block_key(block: IpNet) -> String {
    format!("blk/{block}")
}
fn pool_key(pool: &Range) -> String {
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

/// The pod annotation that makes a pod sticky or not: `true` (under its name),
/// `false`, or a stable name to keep its addresses under (a VM's, whose launcher
/// pod's name changes with every start).
pub const STICKY_ANNOTATION: &str = "wasm-ipam.io/sticky";

/// The identity a pod's addresses are kept under after its DEL, if its pool keeps
/// them (`stickySeconds`) for pods like it (the annotation, else `stickyPods`).
fn identity(request: &Request, pool: &NamedPool) -> Result<Option<String>, Error> {
    if pool.sticky.seconds == 0 {
        return Ok(None);
    }
    let (Some(namespace), Some(name)) = (
        request.arg("K8S_POD_NAMESPACE").filter(|s| !s.is_empty()),
        request.arg("K8S_POD_NAME").filter(|s| !s.is_empty()),
    ) else {
        return Ok(None);
    };
    let annotated = request.config()["runtimeConfig"][select::ANNOTATIONS_CAPABILITY]
        [STICKY_ANNOTATION]
        .as_str()
        .filter(|s| !s.is_empty());
    let kept_as = match annotated {
        Some("false") => None,
        Some("true") => Some(name),
        Some(other) if other.contains('/') || other.chars().any(char::is_control) => {
            return Err(Error::invalid_config(format!(
                "pod annotation {STICKY_ANNOTATION} is {other:?}: it must be true, false or a name without '/'"
            )));
        }
        Some(other) => Some(other),
        None => match pool.sticky.pods {
            StickyPods::All => Some(name),
            StickyPods::Ordinal => has_ordinal(name).then_some(name),
            StickyPods::Annotated => None,
        },
    };
    Ok(kept_as.map(|kept_as| format!("{namespace}/{kept_as}")))
}

/// Whether a pod's name ends in a StatefulSet's ordinal: `-N`, N decimal without a
/// leading zero.
fn has_ordinal(name: &str) -> bool {
    name.rsplit_once('-').is_some_and(|(base, n)| {
        !base.is_empty()
            && !n.is_empty()
            && n.bytes().all(|b| b.is_ascii_digit())
            && (n == "0" || !n.starts_with('0'))
    })
}

/// Addresses asked for: the pod annotation `wasm-ipam.io/ip-addrs`, CNI_ARGS `IP`
/// (comma-separated) and `runtimeConfig.ips`.
fn requested(request: &Request) -> Result<Vec<IpAddr>, Error> {
    let mut ips = request.annotated_ips()?;
    for ip in asked_otherwise(request)? {
        if !ips.contains(&ip) {
            ips.push(ip);
        }
    }
    Ok(ips)
}

/// Addresses asked for by CNI_ARGS `IP` and `runtimeConfig.ips`.
fn asked_otherwise(request: &Request) -> Result<Vec<IpAddr>, Error> {
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
    /// Each range's reservations, read once per call.
    kept: BTreeMap<IpNet, Kept>,
    /// This node's blocks, all ranges ([`Call::my_blocks`]); `None` until read, and
    /// after the call changes them.
    mine: Option<Vec<IpNet>>,
}

impl<'a, S: Store> Call<'a, S> {
    fn new(store: &'a mut S, conf: &'a Conf, node: &'a str, now: u64) -> Self {
        Call {
            store,
            conf,
            node,
            now,
            kept: BTreeMap::new(),
            mine: None,
        }
    }
}

impl<S: Store> Call<'_, S> {
    /// The reservations of `range` (a tracked read: a reservation committed meanwhile
    /// makes this call run again).
    fn kept(&mut self, range: &Range) -> Result<Kept, Error> {
        if let Some(kept) = self.kept.get(&range.cidr) {
            return Ok(kept.clone());
        }
        let all = reserve::of(self.store, range)?;
        let kept = Kept::of(&all);
        self.kept.insert(range.cidr, kept.clone());
        Ok(kept)
    }

    /// Takes the first free address of `block_net` for `holder` (else one kept for a
    /// sticky pod past its time); `None` when the block is full or no longer there.
    /// Shared by a node's own blocks and the blocks it borrows from. `owner`, when given, must be the block's node (a block listed as this node's
    /// may have been handed to another by `release-node`).
    fn take_free(
        &mut self,
        range: &Range,
        block_net: IpNet,
        holder: &AddressHolder,
        owner: Option<&str>,
    ) -> Result<Option<IpAddr>, Error> {
        let key = block_key(block_net);
        let Some(mut block) = read::<Block>(self.store, &key)? else {
            return Ok(None);
        };
        if owner.is_some_and(|node| node != block.node) {
            return Ok(None);
        }
        let kept = self.kept(range)?;
        let free = range
            .addresses(block_net)
            .find(|a| !block.ips.contains_key(a) && !kept.contains(*a));
        let ip = match free {
            Some(ip) => ip,
            // An address kept for a sticky pod past its time: taking it back is this
            // call's own work; sweeping the others is upkeep's.
            None => {
                let now = self.now;
                let Some(ip) = range.addresses(block_net).find(|a| {
                    !kept.contains(*a) && block.ips.get(a).is_some_and(|h| h.expired(now))
                }) else {
                    return Ok(None);
                };
                self.drop_hold(&mut block, ip)?;
                ip
            }
        };
        block.ips.insert(ip, holder.clone());
        block.empty_since = None;
        write(self.store, &key, &block)?;
        Ok(Some(ip))
    }

    /// Drops the hold on `ip` of `block`, kept for a sticky pod, and, if the pod's
    /// record has run out too, the record and the pod's holds on its other addresses
    /// (its other family's block): one pod's record and one more block in the commit.
    /// The caller writes `block`.
    fn drop_hold(&mut self, block: &mut Block, ip: IpAddr) -> Result<(), Error> {
        let Some(holder) = block.ips.remove(&ip) else {
            return Ok(());
        };
        block.note_if_empty(self.now);
        let Some(identity) = holder.identity else {
            return Ok(());
        };
        let key = sticky_key(&identity);
        let Some(sticky) = read::<Sticky>(self.store, &key)?.filter(|s| s.until < self.now) else {
            return Ok(());
        };
        self.store.delete(&key)?;
        for other in sticky.ips.into_iter().filter(|other| *other != ip) {
            let Some(other_net) = self.conf.range_of(other).and_then(|r| r.block_of(other)) else {
                continue;
            };
            let other_key = block_key(other_net);
            let Some(mut other_block) = read::<Block>(self.store, &other_key)? else {
                continue;
            };
            let kept_for_pod = other_block.ips.get(&other).is_some_and(|h| {
                h.expired(self.now) && h.identity.as_deref() == Some(identity.as_str())
            });
            if kept_for_pod {
                other_block.ips.remove(&other);
                other_block.note_if_empty(self.now);
                write(self.store, &other_key, &other_block)?;
            }
        }
        Ok(())
    }

    /// This node's blocks of `pool`. Its blocks of every range are one listing, read
    /// once per call until the call claims or frees one.
    ///
    /// The listing is a peek: it is not checked at the commit, so a node with many
    /// blocks does not spend a compare on each. It only says where to look: every
    /// block used is read (and checked) itself, and its record's `node` decides
    /// whose it is. Only this node's calls, under its lock, add to its list.
    fn my_blocks(&mut self, pool: &Range) -> Vec<IpNet> {
        let mine = self.mine.get_or_insert_with(|| {
            let prefix = aff_prefix(self.node);
            self.store
                .peek(&prefix)
                .into_iter()
                .filter_map(|(key, _)| key[prefix.len()..].parse::<IpNet>().ok())
                .collect()
        });
        mine.iter()
            .copied()
            .filter(|b| pool.cidr.contains(b) && b.prefix_len() == pool.block_len)
            .collect()
    }

    /// The next free address for this node in `range` of pool `pool`: in its own
    /// blocks, else in a block it claims now, else (unless `strictAffinity`) borrowed
    /// from another node's block.
    fn next_address(
        &mut self,
        pool: &str,
        range: &Range,
        holder: &AddressHolder,
    ) -> Result<Handed, Error> {
        let mine = self.my_blocks(range);
        for &block_net in &mine {
            if let Some(ip) = self.take_free(range, block_net, holder, Some(self.node))? {
                return Ok(Handed {
                    ip,
                    borrowed: false,
                });
            }
        }
        let at_limit = self.conf.max_blocks.is_some_and(|max| mine.len() >= max);
        let free = if at_limit {
            None
        } else {
            self.unclaimed_block(range)?
        };
        if let Some(block_net) = free {
            self.claim(range, block_net)?;
            let kept = self.kept(range)?;
            let ip = range
                .addresses(block_net)
                .find(|a| !kept.contains(*a))
                .expect("a block chosen for a free address has one");
            let mut block = Block {
                node: self.node.to_string(),
                ..Block::default()
            };
            block.ips.insert(ip, holder.clone());
            write(self.store, &block_key(block_net), &block)?;
            return Ok(Handed {
                ip,
                borrowed: false,
            });
        }
        let why = if at_limit {
            format!(
                "node {} has its {} block(s) of pool {pool:?} ({}) full (maxBlocksPerNode)",
                self.node,
                mine.len(),
                range.cidr
            )
        } else {
            format!("pool {pool:?} ({}) has no free block left", range.cidr)
        };
        if self.conf.strict_affinity {
            return Err(Error::new(
                codes::BLOCK_LIMIT,
                format!("{why}, and strictAffinity forbids borrowing from other nodes' blocks"),
            ));
        }
        if let Some(ip) = self.borrow(range, &mine, holder)? {
            return Ok(Handed { ip, borrowed: true });
        }
        // At its limit the node looked at no unclaimed block: if one has a free
        // address, the pool is not exhausted, this node's limit is what refuses it.
        if at_limit && self.unclaimed_block(range)?.is_some() {
            return Err(Error::new(
                codes::BLOCK_LIMIT,
                format!(
                    "{why}, and no other node's block has a free address; the pool's free addresses lie in blocks no node has claimed, which this node may not claim past maxBlocksPerNode: raise maxBlocksPerNode, or free addresses on this node"
                ),
            ));
        }
        Err(Error::new(
            codes::EXHAUSTED,
            format!("{why}, and no other node's block has a free address: the pool is exhausted"),
        ))
    }

    /// A free address of another node's block in `range`, taken for `holder`. Reads at
    /// most [`MAX_BORROW_READS`] blocks, starting where this node starts looking.
    fn borrow(
        &mut self,
        range: &Range,
        mine: &[IpNet],
        holder: &AddressHolder,
    ) -> Result<Option<IpAddr>, Error> {
        let claimed: Vec<IpNet> = read::<BTreeSet<IpNet>>(self.store, &pool_key(range))?
            .unwrap_or_default()
            .into_iter()
            .filter(|b| !mine.contains(b))
            .collect();
        if claimed.is_empty() {
            return Ok(None);
        }
        // Which of them have an address to take, from one peek of every block (a
        // request, not a key of the commit): only those are read, so a free address
        // in any claimed block is found however many blocks are full.
        let kept = self.kept(range)?;
        let now = self.now;
        let others: BTreeSet<IpNet> = claimed.iter().copied().collect();
        let open: BTreeSet<IpNet> = self
            .store
            .peek("blk/")
            .into_iter()
            .filter_map(|(key, value)| {
                let net: IpNet = key.strip_prefix("blk/")?.parse().ok()?;
                let block: Block = serde_json::from_slice(&value).ok()?;
                let takable = range
                    .addresses(net)
                    .any(|a| !kept.contains(a) && block.ips.get(&a).is_none_or(|h| h.expired(now)));
                (others.contains(&net) && takable).then_some(net)
            })
            .collect();
        let open: Vec<IpNet> = claimed.into_iter().filter(|b| open.contains(b)).collect();
        if open.is_empty() {
            return Ok(None);
        }
        let start = (range.start_for(self.node) % open.len() as u128) as usize;
        // Each block read is a key of the commit: leave room for the call's writes.
        // A peeked block taken meanwhile by its node is passed over for the next.
        let room = self.room().saturating_sub(OWN_WRITES_AFTER_BORROW);
        let tries = open.len().min(MAX_BORROW_READS).min(room);
        for block_net in (0..tries).map(|i| open[(start + i) % open.len()]) {
            if let Some(ip) = self.take_free(range, block_net, holder, None)? {
                return Ok(Some(ip));
            }
        }
        Ok(None)
    }

    /// The first unclaimed block of `range` with an address not reserved, from where
    /// this node starts looking, if any.
    fn unclaimed_block(&mut self, range: &Range) -> Result<Option<IpNet>, Error> {
        let claimed: BTreeSet<IpNet> = read(self.store, &pool_key(range))?.unwrap_or_default();
        let kept = self.kept(range)?;
        // Every candidate looked at is claimed, inside a reserved CIDR (skipped whole,
        // once per CIDR), or reserved address by address (a reserved CIDR inside it):
        // past that many, one is free, if the range has one.
        let budget = claimed.len() as u128 + 2 * kept.len() as u128 + 1;
        let (blocks, start) = (range.blocks(), range.start_for(self.node));
        let (mut offset, mut looked) = (0u128, 0u128);
        while offset < blocks && looked < budget {
            looked += 1;
            let index = (start + offset) % blocks;
            let block = range.block(index);
            if let Some(net) = kept.covering(block) {
                // Past the reserved CIDR's last block (it does not wrap: it lies in
                // the range, and `index` is at or after its first block).
                offset += range.index_of(net.broadcast()) - index + 1;
                continue;
            }
            if !claimed.contains(&block) && kept.in_block(range, block) < range.usable() {
                return Ok(Some(block));
            }
            offset += 1;
        }
        Ok(None)
    }

    /// Claims `block` for this node, recording it in the range and the node's list.
    fn claim(&mut self, range: &Range, block: IpNet) -> Result<(), Error> {
        let key = pool_key(range);
        let mut claimed: BTreeSet<IpNet> = read(self.store, &key)?.unwrap_or_default();
        claimed.insert(block);
        write(self.store, &key, &claimed)?;
        self.mine = None;
        self.store
            .put(&format!("{}{block}", aff_prefix(self.node)), b"")
    }

    /// A requested address: taken if free, in whichever node's block holds it (then
    /// borrowed). Its unclaimed block is claimed, within `maxBlocksPerNode`.
    fn take(&mut self, range: &Range, ip: IpAddr, holder: &AddressHolder) -> Result<bool, Error> {
        let block_net = range.block_of(ip).expect("the range holds it");
        if !range.addresses(block_net).any(|a| a == ip) {
            return Err(Error::invalid_config(format!(
                "requested address {ip} is a block's network, gateway or last address"
            )));
        }
        if self.kept(range)?.contains(ip) {
            return Err(Error::new(
                codes::RESERVED,
                format!("requested address {ip} is reserved (wasm-ipam list --reservations)"),
            ));
        }
        let key = block_key(block_net);
        let mut block = match read::<Block>(self.store, &key)? {
            Some(block) => block,
            None => {
                let mine = self.my_blocks(range).len();
                if self.conf.max_blocks.is_some_and(|max| mine >= max) {
                    return Err(Error::new(
                        codes::BLOCK_LIMIT,
                        format!(
                            "requested address {ip} is in unclaimed block {block_net}, and node {} has its {mine} block(s) of {} (maxBlocksPerNode)",
                            self.node, range.cidr
                        ),
                    ));
                }
                self.claim(range, block_net)?;
                Block {
                    node: self.node.to_string(),
                    ..Block::default()
                }
            }
        };
        if self.conf.strict_affinity && block.node != self.node {
            return Err(Error::new(
                codes::BLOCK_LIMIT,
                format!(
                    "requested address {ip} is in block {block_net} of node {}, and strictAffinity forbids borrowing from other nodes' blocks",
                    block.node
                ),
            ));
        }
        if block.ips.get(&ip).is_some_and(|h| h.expired(self.now)) {
            self.drop_hold(&mut block, ip)?;
        }
        if let Some(other) = block.ips.get(&ip) {
            return Err(Error::new(
                codes::ADDRESS_HELD,
                format!(
                    "requested address {ip} is held by container {:?} (interface {}) on node {}{}",
                    other.id,
                    other.ifname,
                    other.node,
                    match other.held_until {
                        Some(until) => format!(
                            ", kept for sticky pod {} for {} s more",
                            other.identity.as_deref().unwrap_or("?"),
                            until.saturating_sub(self.now)
                        ),
                        None => String::new(),
                    }
                ),
            ));
        }
        block.ips.insert(ip, holder.clone());
        block.empty_since = None;
        write(self.store, &key, &block)?;
        Ok(block.node != self.node)
    }

    /// The pod's kept addresses, if its retention has not run out: taken back.
    fn reclaim(&mut self, identity: &str, holder: &AddressHolder) -> Result<Vec<Handed>, Error> {
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
            let Some(range) = self.conf.range_of(ip).cloned() else {
                continue;
            };
            // Reserved since its DEL: the pod gets another address.
            let Some(block_net) = range.block_of(ip) else {
                continue;
            };
            if self.kept(&range)?.contains(ip) {
                continue;
            }
            let block_key = block_key(block_net);
            let Some(mut block) = read::<Block>(self.store, &block_key)? else {
                continue;
            };
            let kept = block
                .ips
                .get(&ip)
                .is_some_and(|h| h.held_until.is_some() && h.identity.as_deref() == Some(identity));
            if kept && self.conf.strict_affinity && block.node != self.node {
                // Rescheduled to another node under strictAffinity: the pod gets an
                // address of this node's block, and its hold is dropped.
                block.ips.remove(&ip);
                block.note_if_empty(self.now);
                write(self.store, &block_key, &block)?;
            } else if kept {
                block.ips.insert(ip, holder.clone());
                block.empty_since = None;
                write(self.store, &block_key, &block)?;
                back.push(Handed {
                    ip,
                    borrowed: block.node != self.node,
                });
            }
        }
        Ok(back)
    }

    /// What [`Call::account`] may write: each watched range's use row and warning.
    fn account_keys(&self) -> usize {
        2 * self
            .conf
            .pools
            .iter()
            .filter(|p| p.warn_percent.is_some())
            .map(|p| p.ranges.len())
            .sum::<usize>()
    }

    /// Publishes this node's use of the ranges `ips` fall in and logs the warnings it
    /// crosses (`usage::account`).
    fn account(&mut self, ips: &[IpAddr]) -> Result<(), Error> {
        let ranges: Vec<IpNet> = ips
            .iter()
            .filter_map(|ip| self.conf.range_of(*ip).map(|r| r.cidr))
            .collect();
        for line in usage::account(self.store, self.conf, self.node, &ranges)? {
            log_warning(&line);
        }
        Ok(())
    }

    /// Releases one attachment's addresses (kept for its pod when sticky); answers
    /// the addresses it held.
    fn release_attachment(&mut self, id: &str, ifname: &str) -> Result<Vec<IpAddr>, Error> {
        let key = own_key(self.node, id, ifname);
        let mut released = Vec::new();
        if let Some(own) = read::<AttachmentAddresses>(self.store, &key)? {
            released.clone_from(&own.ips);
            // The pool's stickiness now (an operator may have turned it off since).
            let seconds = own
                .ips
                .first()
                .map_or(0, |ip| self.conf.sticky_seconds_of(*ip));
            let keep = own.identity.clone().filter(|_| seconds > 0);
            let until = self.now + seconds;
            for ip in &own.ips {
                let Some(block_net) = self.conf.range_of(*ip).and_then(|p| p.block_of(*ip)) else {
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
                block.note_if_empty(self.now);
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

    /// Frees one of this node's blocks: its record, its affinity, its place in the pool.
    fn free_block(&mut self, pool: &Range, block_net: IpNet) -> Result<(), Error> {
        self.mine = None;
        self.store.delete(&block_key(block_net))?;
        self.store
            .delete(&format!("{}{block_net}", aff_prefix(self.node)))?;
        let pool_key = pool_key(pool);
        let mut claimed: BTreeSet<IpNet> = read(self.store, &pool_key)?.unwrap_or_default();
        claimed.remove(&block_net);
        write(self.store, &pool_key, &claimed)
    }

    /// Releases what one transaction holds of this call's node, a node that is gone:
    /// each attachment as its DEL would (sticky addresses kept for their pods), then
    /// each of its blocks at once, without the grace. A block that still holds
    /// addresses (another node's pod borrowed one, or one is kept for a sticky pod)
    /// cannot be freed; it is handed to `heir`, the live node the operator runs on,
    /// whose own upkeep frees it once it is empty. What does not fit the transaction
    /// (`commit-room`) is left for the host's next batch; the node's published use
    /// goes with its last.
    fn release_node(&mut self, heir: &str) -> Result<ReleaseReport, Error> {
        let mut report = ReleaseReport::default();
        let prefix = format!("own/{}/", self.node);
        // A peek: each attachment released is read (and checked) by its release.
        let attachments: Vec<(String, String)> = self
            .store
            .peek(&prefix)
            .into_iter()
            .filter_map(|(key, _)| {
                let (id, ifname) = key[prefix.len()..].split_once('/')?;
                Some((id.to_string(), ifname.to_string()))
            })
            .collect();
        let mut left = false;
        for (id, ifname) in attachments {
            if self.room() < upkeep::ATTACHMENT_KEYS {
                left = true;
                break;
            }
            for ip in self.release_attachment(&id, &ifname)? {
                report.addresses.push(ReleasedAddress {
                    address: ip.to_string(),
                    container_id: id.clone(),
                    ifname: ifname.clone(),
                });
            }
        }
        let ranges: Vec<Range> = self.conf.ranges().cloned().collect();
        let mut blocks: Vec<(Range, IpNet)> = Vec::new();
        for range in ranges {
            for block in self.my_blocks(&range) {
                blocks.push((range.clone(), block));
            }
        }
        // A block no node may take within its limits stays the gone node's.
        let mut stays = false;
        for (pool, block_net) in blocks {
            if left || self.room() < upkeep::BLOCK_KEYS {
                left = true;
                break;
            }
            let key = block_key(block_net);
            let Some(mut block) = read::<Block>(self.store, &key)? else {
                continue;
            };
            if block.node != self.node {
                continue;
            }
            let swept = self.sweep(&mut block)?;
            if swept.unfinished {
                if swept.changed {
                    write(self.store, &key, &block)?;
                }
                left = true;
                break;
            }
            if block.ips.is_empty() {
                self.free_block(&pool, block_net)?;
                report.blocks.push(block_net.to_string());
                continue;
            }
            // Live pods of other nodes hold addresses here, or sticky pods' are kept:
            // the block goes to a node that may take it (maxBlocksPerNode).
            let live: BTreeSet<String> = block
                .ips
                .values()
                .filter(|h| h.held_until.is_none())
                .map(|h| h.node.clone())
                .collect();
            // Its write and affinities, and a key per address the taker's pods or
            // sticky pods hold in it (an own record made unborrowed, a hold's record).
            let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
            for h in block.ips.values() {
                *per_node.entry(h.node.as_str()).or_default() += 1;
            }
            let most = per_node.values().max().copied().unwrap_or(0);
            if self.room() < upkeep::BLOCK_KEYS + most {
                left = true;
                break;
            }
            let takers = live.iter().map(String::as_str).chain([heir]);
            let taker = takers
                .filter(|node| *node != self.node)
                .find(|node| self.may_claim(node, &pool))
                .map(str::to_string);
            match taker {
                Some(taker) => {
                    self.hand_block(&key, &mut block, block_net, &taker, &mut report)?;
                }
                None => {
                    self.drop_sticky_holds(&mut block, block_net, &mut report)?;
                    if block.ips.is_empty() {
                        self.free_block(&pool, block_net)?;
                        report.blocks.push(block_net.to_string());
                        continue;
                    }
                    write(self.store, &key, &block)?;
                    stays = true;
                    report.notes.push(format!(
                        "block {block_net} stays node {}'s: {} address(es) of live pods of node(s) {} keep it, and each of those nodes and {heir} holds its maxBlocksPerNode blocks; run release-node again once they are deleted",
                        self.node,
                        block.ips.len(),
                        live.iter().cloned().collect::<Vec<_>>().join(", ")
                    ));
                }
            }
        }
        if !left && !stays {
            usage::forget(self.store, self.conf, self.node)?;
        }
        Ok(report)
    }

    /// Whether `node` may claim one more block of `range` (`maxBlocksPerNode`).
    fn may_claim(&self, node: &str, range: &Range) -> bool {
        let Some(max) = self.conf.max_blocks else {
            return true;
        };
        let prefix = aff_prefix(node);
        let held = self
            .store
            .peek(&prefix)
            .into_iter()
            .filter_map(|(key, _)| key[prefix.len()..].parse::<IpNet>().ok())
            .filter(|b| range.cidr.contains(b) && b.prefix_len() == range.block_len)
            .count();
        held < max
    }

    /// Hands a gone node's block to `taker`: its pods' addresses there are its own
    /// now, no longer borrowed; sticky holds stay, each said.
    fn hand_block(
        &mut self,
        key: &str,
        block: &mut Block,
        block_net: IpNet,
        taker: &str,
        report: &mut ReleaseReport,
    ) -> Result<(), Error> {
        let mut live = 0;
        for (ip, h) in &block.ips {
            if let Some(until) = h.held_until {
                report.notes.push(format!(
                    "address {ip} stays kept for pod {} until {until} (Unix seconds), in block {block_net}, now node {taker}'s",
                    h.identity.as_deref().unwrap_or("?")
                ));
                continue;
            }
            live += 1;
            if h.node != taker {
                continue;
            }
            let own_key = own_key(taker, &h.id, &h.ifname);
            if let Some(mut own) = read::<AttachmentAddresses>(self.store, &own_key)?
                && own.borrowed.contains(ip)
            {
                own.borrowed.retain(|b| b != ip);
                write(self.store, &own_key, &own)?;
            }
        }
        report.notes.push(format!(
            "block {block_net} is handed to node {taker}, not freed: it holds {live} address(es) of live pods; {taker} frees it once it is empty"
        ));
        block.node = taker.to_string();
        write(self.store, key, block)?;
        self.mine = None;
        self.store
            .delete(&format!("{}{block_net}", aff_prefix(self.node)))?;
        self.store
            .put(&format!("{}{block_net}", aff_prefix(taker)), b"")
    }

    /// Releases the addresses kept for sticky pods in `block` (no node may take the
    /// block), each said: their pods get new addresses.
    fn drop_sticky_holds(
        &mut self,
        block: &mut Block,
        block_net: IpNet,
        report: &mut ReleaseReport,
    ) -> Result<(), Error> {
        let kept: Vec<(IpAddr, Option<String>)> = block
            .ips
            .iter()
            .filter(|(_, h)| h.held_until.is_some())
            .map(|(ip, h)| (*ip, h.identity.clone()))
            .collect();
        for (ip, identity) in kept {
            block.ips.remove(&ip);
            if let Some(identity) = &identity {
                let key = sticky_key(identity);
                if let Some(mut sticky) = read::<Sticky>(self.store, &key)? {
                    sticky.ips.retain(|k| *k != ip);
                    match sticky.ips.is_empty() {
                        true => self.store.delete(&key).map(drop)?,
                        false => write(self.store, &key, &sticky)?,
                    }
                }
            }
            report.notes.push(format!(
                "address {ip}, kept for pod {}, is released: no node may take block {block_net} within maxBlocksPerNode, so the pod gets a new address at its next ADD",
                identity.as_deref().unwrap_or("?")
            ));
        }
        block.note_if_empty(self.now);
        Ok(())
    }
}

/// The ADD result. An address of this node's block answers `address/blockSize` with
/// the block's gateway. A borrowed one (another node's block) answers a host prefix
/// (/32, /128) and a link route to the same gateway: the pod must not take the
/// lender's block for on-link, as its other addresses live on the lender's node.
/// Under `ptp` nothing is on-link (it routes the block through the gateway it puts
/// on the pod's own host veth), so a borrowed address is answered as an own one is:
/// ptp refuses a host prefix, whose on-link route it expects to delete.
fn result(conf: &Conf, ips: &[IpAddr], borrowed: &[IpAddr]) -> IpamResult {
    let mut result = IpamResult::default();
    for ip in ips {
        let range = conf.range_of(*ip).expect("allocated from a pool");
        let gateway = range.gateway(range.block_of(*ip).expect("in its range"));
        if borrowed.contains(ip) && !conf.routed_per_pod {
            let host = if ip.is_ipv4() { 32 } else { 128 };
            result = result
                .ip(IpConfig::new(format!("{ip}/{host}")).gateway(gateway))
                .route(Route::new(format!("{gateway}/{host}")).scope(LINK_SCOPE));
        } else {
            result = result.ip(IpConfig::new(format!("{ip}/{}", range.block_len)).gateway(gateway));
        }
    }
    result
}

pub struct ClusterPool;

/// ADD: the attachment's addresses (again, if it has them), one per range of its pool.
fn add_attachment(request: &Request, store: &mut impl Store) -> Result<IpamResult, Error> {
    let conf = Conf::of(request)?;
    let node = request.node_name();
    let now = request.lock_granted_at().seconds;
    let (id, ifname) = (request.container_id(), request.ifname());
    let key = own_key(node, id, ifname);
    if let Some(own) = read::<AttachmentAddresses>(store, &key)? {
        return Ok(result(&conf, &own.ips, &own.borrowed));
    }
    let pool = select::pool_for(&conf, request)?;
    let identity = identity(request, pool)?;
    let holder = AddressHolder {
        id: id.to_string(),
        ifname: ifname.to_string(),
        node: node.to_string(),
        since: now,
        identity: None,
        held_until: None,
    };
    let requested = requested(request)?;
    if let Some(ip) = requested.first()
        && !pool.allow_requested
    {
        return Err(Error::new(
            codes::REQUESTS_REFUSED,
            format!(
                "requested address {ip}: pool {:?} refuses requested addresses (allowRequested: false)",
                pool.name
            ),
        ));
    }
    let mut call = Call::new(store, &conf, node, now);
    // Each address and whether it is borrowed from another node's block.
    let mut got: Vec<Handed> = Vec::new();
    if let Some(identity) = &identity {
        got = call.reclaim(identity, &holder)?;
    }
    for ip in requested {
        if got.iter().any(|h| h.ip == ip) {
            continue;
        }
        let range = pool
            .ranges
            .iter()
            .find(|r| r.cidr.contains(&ip))
            .ok_or_else(|| {
                Error::invalid_config(format!(
                    "requested address {ip} is not in pool {:?}, the pod's",
                    pool.name
                ))
            })?;
        got.push(Handed {
            ip,
            borrowed: call.take(range, ip, &holder)?,
        });
    }
    for range in &pool.ranges {
        if !got
            .iter()
            .any(|h| h.ip.is_ipv4() == range.cidr.addr().is_ipv4())
        {
            got.push(call.next_address(&pool.name, range, &holder)?);
        }
    }
    let ips: Vec<IpAddr> = got.iter().map(|h| h.ip).collect();
    let borrowed: Vec<IpAddr> = got.iter().filter(|h| h.borrowed).map(|h| h.ip).collect();
    let own = AttachmentAddresses {
        ips: ips.clone(),
        since: now,
        identity,
        borrowed: borrowed.clone(),
    };
    write(call.store, &key, &own)?;
    call.account(&ips)?;
    Ok(result(&conf, &ips, &borrowed))
}

#[wasm_ipam_guest::ipam_module]
impl IpamModule for ClusterPool {
    /// ADD, and what it learned for CNI STATUS (`readiness`): a pool this node found
    /// exhausted (or could only borrow from under `strictAffinity`) is reported degraded,
    /// the node staying ready; the next ADD that gets an address, or a DEL that frees
    /// one, clears it.
    fn add(request: &Request, store: &mut impl Store) -> Result<IpamResult, Error> {
        let added = add_attachment(request, store);
        match &added {
            Ok(_) => readiness::degraded(&[]),
            Err(e) if [codes::EXHAUSTED, codes::BLOCK_LIMIT].contains(&e.code) => {
                readiness::degraded(std::slice::from_ref(e))
            }
            Err(_) => {}
        }
        added
    }

    fn del(request: &Request, store: &mut impl Store) -> Result<(), Error> {
        let conf = Conf::of(request)?;
        let now = request.lock_granted_at().seconds;
        let mut call = Call::new(store, &conf, request.node_name(), now);
        let released = call.release_attachment(request.container_id(), request.ifname())?;
        call.account(&released)?;
        if !released.is_empty() {
            readiness::degraded(&[]);
        }
        call.upkeep(upkeep::start_for(request.container_id(), now))
    }

    fn check(request: &Request, store: &impl Store) -> Result<(), Error> {
        let key = own_key(
            request.node_name(),
            request.container_id(),
            request.ifname(),
        );
        match read::<AttachmentAddresses>(store, &key)? {
            Some(_) => Ok(()),
            // The spec's code for a container the plugin does not know (not "exhausted").
            None => Err(Error::new(
                code::UNKNOWN_CONTAINER,
                format!(
                    "no address is allocated to container {} interface {}",
                    request.container_id(),
                    request.ifname()
                ),
            )),
        }
    }

    /// Releases this node's attachments that are not valid (other nodes' are theirs),
    /// as many as one transaction holds (`commit-room`): the host runs GC again while
    /// a run fills its transaction.
    fn gc(request: &Request, valid: &[Attachment], store: &mut impl Store) -> Result<(), Error> {
        let conf = Conf::of(request)?;
        let node = request.node_name();
        let now = request.lock_granted_at().seconds;
        let prefix = format!("own/{node}/");
        // A peek: each attachment released is read (and checked) by its release.
        let stale: Vec<(String, String)> = store
            .peek(&prefix)
            .into_iter()
            .filter_map(|(key, _)| {
                let (id, ifname) = key[prefix.len()..].split_once('/')?;
                let valid = valid
                    .iter()
                    .any(|a| a.container_id == id && a.ifname == ifname);
                (!valid).then(|| (id.to_string(), ifname.to_string()))
            })
            .collect();
        let mut call = Call::new(store, &conf, node, now);
        let keep = call.account_keys();
        let mut released = Vec::new();
        for (id, ifname) in stale {
            if call.room() < upkeep::ATTACHMENT_KEYS + keep {
                break;
            }
            released.extend(call.release_attachment(&id, &ifname)?);
        }
        call.account(&released)?;
        call.upkeep(upkeep::start_for("", now))
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
        let conf = operator_conf(context)?;
        if node == context.node_name() {
            return Err(Error::invalid_config(format!(
                "node {node} cannot release itself: run release-node on a live node"
            )));
        }
        let now = context.now().seconds;
        let heir = context.node_name();
        if dry_run {
            let mut staged = Staged::over(&*store);
            return Call::new(&mut staged, &conf, node, now).release_node(heir);
        }
        Call::new(store, &conf, node, now).release_node(heir)
    }

    /// Every attachment in the cluster, with the node it runs on.
    fn allocations(context: &Context, store: &impl Store) -> Result<Vec<Allocation>, Error> {
        let conf = context.ipam::<Ipam>()?.map(Conf::from_ipam).transpose()?;
        let mut out = Vec::new();
        // One listing with the values: a read per attachment would be a request
        // each, paced by the node's etcd rate (`qps`).
        for (key, value) in store.list("own/") {
            let mut parts = key["own/".len()..].splitn(3, '/');
            let (Some(node), Some(id), Some(ifname)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            let own: AttachmentAddresses = decode(&key, &value)?;
            for ip in own.ips {
                let mut row = Allocation::new(ip, id, ifname)
                    .since(own.since)
                    .attribute("node", node);
                if let Some(pool) = conf.as_ref().and_then(|c| c.pool_of(ip)) {
                    row = row.attribute("pool", &pool.name);
                }
                if own.borrowed.contains(&ip) {
                    row = row.attribute("borrowed", "yes");
                }
                out.push(row);
            }
        }
        Ok(out)
    }

    /// One row per range of each pool (`pool NAME CIDR`), for hosts before 0.2.3
    /// (`usage` says more): reserved addresses count as excluded.
    fn pools(context: &Context, store: &impl Store) -> Result<Vec<wasm_ipam_guest::Pool>, Error> {
        Ok(Self::usage(context, store)?
            .into_iter()
            .filter(|row| row.kind == UsageKind::Pool)
            .map(|row| {
                // inspect's counts saturate at 2^64-1 (`wide-usage` is exact).
                let narrow = |n: u128| u64::try_from(n).unwrap_or(u64::MAX);
                let pool = wasm_ipam_guest::Pool::new(row.name)
                    .in_use(narrow(row.in_use))
                    .cooling_down(narrow(row.cooling_down))
                    .excluded(narrow(row.reserved));
                match row.capacity {
                    Some(capacity) => pool.capacity(narrow(capacity)).free_from_capacity(),
                    None => pool,
                }
            })
            .collect())
    }

    /// One row per range of each pool (`pool NAME CIDR`): its capacity, its addresses
    /// in use (borrowed ones included, in the lender's pool), kept for sticky pods,
    /// reserved and borrowed; pool rows partition the network. Then a row per claimed
    /// block, with its node.
    fn usage(context: &Context, store: &impl Store) -> Result<Vec<PoolUsage>, Error> {
        match context.ipam::<Ipam>()?.map(Conf::from_ipam).transpose()? {
            Some(conf) => usage::rows(store, &conf, context.now().seconds),
            None => Ok(Vec::new()),
        }
    }

    /// Keeps `cidr` out of use on every node (see `reserve.rs`).
    fn reserve(
        context: &Context,
        cidr: &str,
        note: &str,
        force: bool,
        store: &mut impl Store,
    ) -> Result<Reservation, Error> {
        let conf = operator_conf(context)?;
        let (range, net) = reserved_range(&conf, cidr)?;
        let now = context.now().seconds;
        let held = usage::held_in(&*store, range, net, now, usage::Read::Checked)?;
        if !held.is_empty() && !force {
            let shown: Vec<String> = held.iter().take(8).map(IpAddr::to_string).collect();
            return Err(Error::new(
                codes::IN_USE,
                format!(
                    "{} address(es) of {net} are held ({}{}): nothing was reserved; pass --force to reserve it anyway (they stay out of use once their pods are deleted)",
                    held.len(),
                    shown.join(", "),
                    if held.len() > shown.len() {
                        ", ..."
                    } else {
                        ""
                    }
                ),
            ));
        }
        let key = reserve::key(range);
        let mut all = reserve::of(store, range)?;
        if !all.contains_key(&net) && all.len() >= reserve::MAX_PER_RANGE {
            return Err(Error::invalid_config(format!(
                "{} already has {} reservations, the most one range keeps: merge some into a wider CIDR",
                range.cidr,
                all.len()
            )));
        }
        let since = all.get(&net).map_or(now, |r| r.since);
        all.insert(
            net,
            reserve::Reserved {
                note: note.to_string(),
                since,
            },
        );
        write(store, &key, &all)?;
        Ok(Reservation::new(net, note, since).held(held))
    }

    /// Ends the reservation of exactly `cidr`.
    fn unreserve(
        context: &Context,
        cidr: &str,
        store: &mut impl Store,
    ) -> Result<Reservation, Error> {
        let conf = operator_conf(context)?;
        let (range, net) = reserved_range(&conf, cidr)?;
        let key = reserve::key(range);
        let mut all = reserve::of(store, range)?;
        let Some(ended) = all.remove(&net) else {
            return Err(Error::new(
                codes::NOT_RESERVED,
                format!("{net} is not reserved (wasm-ipam list --reservations lists what is)"),
            ));
        };
        match all.is_empty() {
            true => store.delete(&key).map(drop)?,
            false => write(store, &key, &all)?,
        }
        let held = usage::held_in(
            &*store,
            range,
            net,
            context.now().seconds,
            usage::Read::Peeked,
        )?;
        Ok(Reservation::new(net, ended.note, ended.since).held(held))
    }

    /// Every reservation of every pool, with its addresses held now.
    fn reservations(context: &Context, store: &impl Store) -> Result<Vec<Reservation>, Error> {
        let conf = operator_conf(context)?;
        let mut out = Vec::new();
        for range in conf.ranges() {
            let all = reserve::of(store, range)?;
            for (net, r) in all {
                let held = usage::held_in(
                    store,
                    range,
                    net,
                    context.now().seconds,
                    usage::Read::Peeked,
                )?;
                out.push(Reservation::new(net, r.note, r.since).held(held));
            }
        }
        Ok(out)
    }
}

/// The network's configuration an operator command runs on.
fn operator_conf(context: &Context) -> Result<Conf, Error> {
    context
        .ipam::<Ipam>()?
        .ok_or_else(|| {
            Error::invalid_config(
                "no configuration is recorded for the network: pass the operator its netconf",
            )
        })
        .and_then(Conf::from_ipam)
}

/// `cidr` (an address or CIDR) and the range of a pool that holds it whole.
fn reserved_range<'a>(conf: &'a Conf, cidr: &str) -> Result<(&'a Range, IpNet), Error> {
    let net = match cidr.parse::<IpNet>() {
        Ok(net) => net.trunc(),
        Err(_) => cidr.parse::<IpAddr>().map(IpNet::from).map_err(|_| {
            Error::invalid_config(format!("{cidr:?} is neither an address nor a CIDR"))
        })?,
    };
    let range = conf
        .ranges()
        .find(|r| r.cidr.contains(&net))
        .ok_or_else(|| {
            Error::invalid_config(format!(
                "{net} is not within one range of the network's pools"
            ))
        })?;
    Ok((range, net))
}

/// A warning for the host's log (natively, in unit tests, there is no host).
fn log_warning(line: &str) {
    #[cfg(target_arch = "wasm32")]
    wasm_ipam_guest::log::warn(line);
    #[cfg(not(target_arch = "wasm32"))]
    let _ = line;
}

export_module!(ClusterPool);

#[cfg(test)]
mod tests;
