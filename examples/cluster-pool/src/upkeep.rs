//! Upkeep: the work no call owns. Expired sticky holds are swept from this node's
//! blocks (with their pods' records) and its blocks idle past the grace are freed,
//! by each DEL and GC, after the call's own work and within what is left of its
//! transaction (`store.commit-room`: etcd refuses a transaction over
//! `--max-txn-ops`). A call never fails on a backlog: what does not fit is left to
//! the next calls, which start looking elsewhere among the node's blocks.
//!
//! Which blocks have work is read from each of the node's blocks (a key of the
//! commit each: a cluster store keeps the node's own blocks from its earlier calls, so
//! these reads cost no request, and only another node's write to one of them, a
//! borrow, makes the call run again). What each piece costs in the transaction, counted as
//! the store counts it (a key read and written once):
//! - a block with work: its record (read again, checked, and written back);
//! - an expired hold that names its pod: the pod's `sticky/` record (and its other
//!   family's block, where its hold goes too);
//! - freeing a block: its affinity and its range's `pool/` record.

use crate::blocks::Range;
use crate::{AddressHolder, Block, Call, block_key, read, write};
use ipnet::IpNet;
use std::net::IpAddr;
use wasm_ipam_guest::{Error, Store};

/// The most of its blocks a node looks at in one call: each is a key of its commit.
pub const BLOCKS_PER_CALL: usize = 16;
/// Keys an attachment's release may touch: its record, a block per family, and its
/// pod's `sticky/` record.
pub const ATTACHMENT_KEYS: usize = 4;
/// Keys a hold that names its pod may touch: the pod's record and its other
/// family's block (shared with the other holds of that block).
const HOLD_KEYS: usize = 2;
/// Keys a block's look and freeing touch: its record, its affinity and its range's
/// pool record.
pub const BLOCK_KEYS: usize = 3;

impl AddressHolder {
    /// Kept for a sticky pod, and its time has run out.
    pub fn expired(&self, now: u64) -> bool {
        self.held_until.is_some_and(|t| t < now)
    }
}

/// What sweeping a block did.
#[derive(Default)]
pub struct Swept {
    /// Holds were removed: the block must be written.
    pub changed: bool,
    /// Expired holds are left, for want of room.
    pub unfinished: bool,
}

impl<S: Store> Call<'_, S> {
    /// What the transaction still takes; unbounded on a store without a limit.
    pub fn room(&self) -> usize {
        self.store.commit_room().unwrap_or(usize::MAX)
    }

    /// This node's upkeep, the last work of a DEL or GC: sweeps and frees among at
    /// most [`BLOCKS_PER_CALL`] of its blocks, from the `start`-th on, within the
    /// room the call's own work left.
    pub fn upkeep(&mut self, start: usize) -> Result<(), Error> {
        let ranges: Vec<Range> = self.conf.ranges().cloned().collect();
        let mut mine: Vec<(Range, IpNet)> = Vec::new();
        for range in ranges {
            for block in self.my_blocks(&range) {
                mine.push((range.clone(), block));
            }
        }
        let count = mine.len();
        for i in 0..count.min(BLOCKS_PER_CALL) {
            if self.room() < BLOCK_KEYS {
                break;
            }
            let (range, block_net) = &mine[(start + i) % count];
            let key = block_key(*block_net);
            let Some(mut block) = read::<Block>(self.store, &key)? else {
                continue;
            };
            if !self.has_work(&block) {
                continue;
            }
            let swept = self.sweep(&mut block)?;
            if self.idle(&block) && self.room() >= 2 {
                self.free_block(range, *block_net)?;
            } else if swept.changed {
                write(self.store, &key, &block)?;
            }
        }
        Ok(())
    }

    /// Whether `block` is this node's and holds a hold that ran out, or has been
    /// empty past the grace.
    fn has_work(&self, block: &Block) -> bool {
        block.node == self.node
            && (self.idle(block) || block.ips.values().any(|h| h.expired(self.now)))
    }

    /// Empty for the grace.
    fn idle(&self, block: &Block) -> bool {
        block.ips.is_empty()
            && block
                .empty_since
                .is_some_and(|t| self.now >= t.saturating_add(self.conf.grace))
    }

    /// Drops `block`'s expired sticky holds, and each pod's record if that has run
    /// out too, as far as the room allows. The caller writes the block if it changed.
    pub fn sweep(&mut self, block: &mut Block) -> Result<Swept, Error> {
        let now = self.now;
        let expired: Vec<(IpAddr, bool)> = block
            .ips
            .iter()
            .filter(|(_, h)| h.expired(now))
            .map(|(ip, h)| (*ip, h.identity.is_some()))
            .collect();
        let mut swept = Swept::default();
        for (ip, names_pod) in expired {
            if names_pod && self.room() < HOLD_KEYS {
                swept.unfinished = true;
                break;
            }
            self.drop_hold(block, ip)?;
            swept.changed = true;
        }
        Ok(swept)
    }
}

/// Where a call's upkeep starts among its node's blocks: calls in one second look
/// at different blocks when a node has more than it looks at in one call.
pub fn start_for(container_id: &str, now: u64) -> usize {
    let hash = container_id
        .bytes()
        .fold(now, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    hash as usize
}

#[cfg(test)]
mod tests {
    use crate::{Block, ClusterPool, Sticky};
    use serde_json::json;
    use std::collections::BTreeSet;
    use wasm_ipam_guest::store::{MemoryStore, TxnLimited};
    use wasm_ipam_guest::{Attachment, Command, IpamModule, Request, Store};

    /// Dual stack, two pools (one watched by `warnPercent`), sticky pods, and a grace
    /// of 10 s.
    fn config() -> serde_json::Value {
        json!({"cniVersion": "1.1.0", "name": "pods", "ipam": {
            "pools": [
                {"name": "main", "cidr": ["10.0.0.0/16", "fd00::/112"], "default": true, "warnPercent": 90},
                {"name": "other", "cidr": ["10.1.0.0/16", "fd01::/112"], "namespaces": ["other"]}
            ],
            "stickySeconds": 30,
            "stickyPods": "all",
            "blockGraceSeconds": 10
        }})
    }

    fn request(command: Command, id: &str, at: u64) -> Request {
        Request::for_test(command, id, "eth0", config())
            .with_node_name("a")
            .with_lock_granted_at(at)
            .with_args(&[("K8S_POD_NAMESPACE", "web"), ("K8S_POD_NAME", id)])
    }

    /// Expired sticky holds left in node a's blocks, and its blocks.
    fn backlog(store: &MemoryStore, now: u64) -> (usize, usize) {
        let mut expired = 0;
        let mut blocks = 0;
        for (key, value) in store.list("blk/") {
            let block: Block = crate::decode(&key, &value).unwrap();
            blocks += 1;
            expired += block.ips.values().filter(|h| h.expired(now)).count();
        }
        (expired, blocks)
    }

    /// `pods` sticky pods added then deleted at 100 and 110: every address is held
    /// for its pod until 140.
    fn churned(pods: usize) -> MemoryStore {
        let mut store = MemoryStore::default();
        for i in 0..pods {
            ClusterPool::add(&request(Command::Add, &format!("p{i}"), 100), &mut store).unwrap();
        }
        for i in 0..pods {
            ClusterPool::del(&request(Command::Del, &format!("p{i}"), 110), &mut store).unwrap();
        }
        store
    }

    /// DELs of nothing, a second apart from 200 on (every hold has run out; a block is
    /// idle 10 s after it empties), until a thousand expired pods' holds and records
    /// and their blocks are gone; each DEL's commit within `limit` keys.
    fn drain(limit: usize) -> u64 {
        let mut store = churned(1000);
        let (expired, blocks) = backlog(&store, 200);
        assert_eq!(expired, 2000, "both families of 1000 pods are held");
        assert_eq!(blocks, 34, "17 blocks of 61 addresses per family");
        assert_eq!(store.list("sticky/").len(), 1000);
        let mut calls = 0u64;
        while backlog(&store, 200) != (0, 0) || !store.list("sticky/").is_empty() {
            calls += 1;
            assert!(
                calls <= 200,
                "the backlog never drains: {:?}",
                backlog(&store, 200)
            );
            let mut limited = TxnLimited::new(&mut store, limit);
            ClusterPool::del(&request(Command::Del, "gone", 200 + calls), &mut limited).unwrap();
            assert!(!limited.exceeded(), "DEL {calls} is over {limit} keys");
        }
        assert!(store.list("aff/a/").is_empty());
        assert!(store.list("pool/").iter().all(|(_, v)| v == b"[]"));
        calls
    }

    #[test]
    fn a_backlog_of_expired_holds_and_idle_blocks_drains_over_dels_each_within_the_limit() {
        // A DEL of nothing takes its attachment's key and the host's 2. With 32 keys,
        // 29 go to upkeep: a pod's record and its hold in both families' blocks take
        // 1 key (the blocks are shared by 61 pods), so about 1000 / 27 DELs, then
        // the last blocks' 10 s of grace; never fewer than 1000 / 29.
        let small = drain(32);
        assert!((35..=55).contains(&small), "{small} DELs at 32 keys");
        // At etcd's default of 128, about 1000 / 120 DELs, and the grace.
        let default = drain(128);
        assert!((9..=25).contains(&default), "{default} DELs at 128 keys");
        eprintln!("drained in {small} DELs at 32 keys, {default} at 128");
    }

    #[test]
    fn an_add_and_a_del_succeed_beside_a_backlog_and_take_back_an_expired_address() {
        let mut store = churned(200);
        let mut limited = TxnLimited::new(&mut store, 16);
        let added = ClusterPool::add(&request(Command::Add, "new", 200), &mut limited).unwrap();
        assert!(!limited.exceeded());
        assert_eq!(added.ips.len(), 2, "{added:?}");
        let mut limited = TxnLimited::new(&mut store, 16);
        ClusterPool::del(&request(Command::Del, "new", 210), &mut limited).unwrap();
        assert!(!limited.exceeded());
    }

    #[test]
    fn gc_releases_what_one_transaction_holds_and_the_rest_on_later_runs() {
        let mut store = MemoryStore::default();
        for i in 0..300 {
            ClusterPool::add(&request(Command::Add, &format!("p{i}"), 100), &mut store).unwrap();
        }
        let valid = [Attachment {
            container_id: "p7".into(),
            ifname: "eth0".into(),
        }];
        let mut runs = 0;
        loop {
            runs += 1;
            assert!(runs <= 100, "GC never finishes");
            let before = store.list("own/a/").len();
            let mut limited = TxnLimited::new(&mut store, 64);
            ClusterPool::gc(&request(Command::Gc, "", 100), &valid, &mut limited).unwrap();
            assert!(!limited.exceeded(), "GC run {runs} is over the limit");
            let room = limited.commit_room().unwrap();
            let after = store.list("own/a/").len();
            if after == before {
                break;
            }
            assert!(
                room < 8 || after == 1,
                "a run that left work filled its transaction"
            );
        }
        let left: BTreeSet<String> = store.list("own/a/").into_iter().map(|(k, _)| k).collect();
        assert_eq!(left, BTreeSet::from(["own/a/p7/eth0".to_string()]));
        // Each attachment released takes its record and its pod's sticky record: no run
        // can release more than (64 - 2) / 2 of them.
        assert!(runs >= 300 / 31, "{runs} runs");
        // Without a limit (the embedded store) one run does it all.
        let mut unlimited = MemoryStore::default();
        for i in 0..300 {
            ClusterPool::add(
                &request(Command::Add, &format!("p{i}"), 100),
                &mut unlimited,
            )
            .unwrap();
        }
        ClusterPool::gc(&request(Command::Gc, "", 100), &valid, &mut unlimited).unwrap();
        assert_eq!(unlimited.list("own/a/").len(), 1);
    }

    #[test]
    fn a_sticky_record_renewed_by_its_pod_is_not_swept_with_its_old_hold() {
        let mut store = churned(1);
        // The pod came back at 120 and went again at 125: a new record until 155.
        ClusterPool::add(&request(Command::Add, "p0", 120), &mut store).unwrap();
        ClusterPool::del(&request(Command::Del, "p0", 125), &mut store).unwrap();
        ClusterPool::del(&request(Command::Del, "x", 150), &mut store).unwrap();
        let sticky: Sticky = crate::read(&store, "sticky/web/p0").unwrap().unwrap();
        assert_eq!(sticky.until, 155);
    }

    #[test]
    fn stats_count_a_hold_past_its_time_as_free_before_upkeep_sweeps_it() {
        use wasm_ipam_guest::{Context, UsageKind};
        let store = churned(100);
        let main_v4 = |now: u64| {
            ClusterPool::usage(
                &Context::for_test("pods", Some(config())).with_now(now),
                &store,
            )
            .unwrap()
            .into_iter()
            .find(|r| r.kind == UsageKind::Pool && r.name == "pool main 10.0.0.0/16")
            .unwrap()
        };
        let kept = main_v4(120);
        assert_eq!((kept.in_use, kept.cooling_down), (0, 100));
        let ran_out = main_v4(200);
        assert_eq!((ran_out.in_use, ran_out.cooling_down), (0, 0));
        assert_eq!(ran_out.free, Some(kept.free.unwrap() + 100));
    }
}
