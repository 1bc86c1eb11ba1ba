//! host-local's allocator (`IPAllocator`, `RangeIter`) and its disk store, rebuilt on
//! the module's key/value store so an allocation sequence matches host-local v1.1.1
//! address for address. Layout, one entry per host-local file:
//!
//! - `ip/<address>` → `<containerID>\r\n<ifname>`, byte for byte host-local's per-IP
//!   file (older files hold only the container ID, and are matched by ID);
//! - `last_reserved_ip.<N>` → the last address reserved in range set N;
//! - `meta/<address>` → `{"since": <unix seconds>}`, when the address was reserved;
//! - `cooldown/<address>` → `{"until": <unix seconds>}`: not handed out before then,
//!   only with `reuseCooldownSeconds`.
//!
//! Only this file knows the layout: inspect and migrate read and write through its
//! functions ([`held`], [`cooling`], [`adopt`]).

use crate::exclude::{Exclusions, int};
use crate::range::{Range, parse_ip};
use crate::range_set::RangeSet;
use std::collections::BTreeMap;
use std::net::IpAddr;
use wasm_ipam_guest::store::Store;
use wasm_ipam_guest::{Attachment, Error, IpConfig};

/// The code host-local's own failures carry: libcni's `ErrInternal`, which skel gives
/// every error a plugin returns.
pub const HOST_LOCAL_ERROR: u32 = 999;

pub fn failure(msg: impl Into<String>) -> Error {
    Error::new(HOST_LOCAL_ERROR, msg)
}

const IP_PREFIX: &str = "ip/";
const META_PREFIX: &str = "meta/";
const COOLDOWN_PREFIX: &str = "cooldown/";
/// host-local's file for the last address reserved in range set N is this and N.
pub const LAST_RESERVED_PREFIX: &str = "last_reserved_ip.";

pub fn ip_key(ip: IpAddr) -> String {
    format!("{IP_PREFIX}{ip}")
}

pub fn last_reserved_key(range_id: usize) -> String {
    format!("{LAST_RESERVED_PREFIX}{range_id}")
}

pub fn meta_key(ip: IpAddr) -> String {
    format!("{META_PREFIX}{ip}")
}

pub fn cooldown_key(ip: IpAddr) -> String {
    format!("{COOLDOWN_PREFIX}{ip}")
}

/// What host-local writes for, and compares against, an attachment.
fn owner(id: &str, ifname: &str) -> String {
    format!("{}\r\n{ifname}", id.trim())
}

/// The rules beyond host-local; with none configured it behaves exactly as host-local.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Policy {
    /// Addresses never handed out.
    pub exclude: Exclusions,
    /// Seconds a released address rests before it is handed out again.
    pub cooldown_seconds: Option<u64>,
    /// Unix seconds of the lock grant: the module's only notion of "now".
    pub now: u64,
}

impl Policy {
    fn allows(&self, store: &impl Store, ip: IpAddr) -> bool {
        !self.exclude.contains(ip) && !self.cooling(store, ip)
    }

    fn cooling(&self, store: &impl Store, ip: IpAddr) -> bool {
        // Without the option, cooldown entries left from an earlier config are ignored.
        if self.cooldown_seconds.is_none() {
            return false;
        }
        store
            .get(&cooldown_key(ip))
            .and_then(|v| seconds(&v, "until"))
            .is_some_and(|until| self.now < until)
    }
}

/// Records `ip` for the attachment unless it is taken (host-local's `Reserve`).
pub fn reserve(
    store: &mut impl Store,
    id: &str,
    ifname: &str,
    ip: IpAddr,
    range_id: usize,
    policy: &Policy,
) -> Result<bool, Error> {
    let key = ip_key(ip);
    if store.get(&key).is_some() {
        return Ok(false);
    }
    store.put(&key, owner(id, ifname).as_bytes())?;
    let since = serde_json::json!({ "since": policy.now }).to_string();
    store.put(&meta_key(ip), since.as_bytes())?;
    store.delete(&cooldown_key(ip))?;
    store.put(&last_reserved_key(range_id), ip.to_string().as_bytes())?;
    Ok(true)
}

pub fn last_reserved_ip(store: &impl Store, range_id: usize) -> Option<IpAddr> {
    parse_ip(store.get_string(&last_reserved_key(range_id))?.as_str())
}

/// Every reservation as (store key, address, trimmed owner text).
fn reservations(store: &impl Store) -> Vec<(String, Option<IpAddr>, String)> {
    store
        .list(IP_PREFIX)
        .into_iter()
        .map(|(key, value)| {
            let ip = parse_ip(&key[IP_PREFIX.len()..]);
            let owner = String::from_utf8_lossy(&value).trim().to_string();
            (key, ip, owner)
        })
        .collect()
}

fn release(
    store: &mut impl Store,
    key: &str,
    ip: Option<IpAddr>,
    policy: &Policy,
) -> Result<(), Error> {
    store.delete(key)?;
    if let Some(ip) = ip {
        store.delete(&meta_key(ip))?;
        if let Some(seconds) = policy.cooldown_seconds {
            let until = serde_json::json!({ "until": policy.now.saturating_add(seconds) });
            store.put(&cooldown_key(ip), until.to_string().as_bytes())?;
        }
    }
    Ok(())
}

fn release_matching(
    store: &mut impl Store,
    matching: &str,
    policy: &Policy,
) -> Result<bool, Error> {
    let mut found = false;
    for (key, ip, owner) in reservations(store) {
        if owner == matching {
            release(store, &key, ip, policy)?;
            found = true;
        }
    }
    Ok(found)
}

/// Releases the attachment's addresses; only when it holds none, those recorded for
/// its container ID alone by older host-local versions (host-local's `ReleaseByID`).
pub fn release_by_id(
    store: &mut impl Store,
    id: &str,
    ifname: &str,
    policy: &Policy,
) -> Result<bool, Error> {
    if release_matching(store, &owner(id, ifname), policy)? {
        return Ok(true);
    }
    release_matching(store, id.trim(), policy)
}

/// Whether the attachment, or failing that its container ID alone, holds an address.
pub fn find_by_id(store: &impl Store, id: &str, ifname: &str) -> bool {
    let all = reservations(store);
    let new = owner(id, ifname);
    all.iter().any(|(_, _, o)| *o == new) || all.iter().any(|(_, _, o)| o == id.trim())
}

/// The addresses held by the attachment or by its container ID alone, in key order.
pub fn get_by_id(store: &impl Store, id: &str, ifname: &str) -> Vec<IpAddr> {
    let new = owner(id, ifname);
    reservations(store)
        .into_iter()
        .filter(|(_, _, o)| *o == new || o == id.trim())
        .filter_map(|(_, ip, _)| ip)
        .collect()
}

/// A reservation as operators see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub ip: IpAddr,
    pub container_id: String,
    /// Empty for host-local's legacy id-only form.
    pub ifname: String,
    /// Unix seconds of the reservation, when `meta/<address>` records it.
    pub since: Option<u64>,
}

/// A `{"<field>": <unix seconds>}` value, if it is one.
fn seconds(value: &[u8], field: &str) -> Option<u64> {
    serde_json::from_slice::<serde_json::Value>(value).ok()?[field].as_u64()
}

/// Every reservation, in key order. Keys that are not an address are skipped; an
/// owner that is not text is shown with its invalid bytes replaced, and metadata that
/// is not host-local's is left out.
pub fn held(store: &impl Store) -> Vec<Held> {
    let since: BTreeMap<String, u64> = store
        .list(META_PREFIX)
        .into_iter()
        .filter_map(|(key, value)| {
            Some((
                key[META_PREFIX.len()..].to_string(),
                seconds(&value, "since")?,
            ))
        })
        .collect();
    store
        .list(IP_PREFIX)
        .into_iter()
        .filter_map(|(key, value)| {
            let address = &key[IP_PREFIX.len()..];
            let ip = parse_ip(address)?;
            let owner = String::from_utf8_lossy(&value);
            let (id, ifname) = owner.split_once("\r\n").unwrap_or((&owner, ""));
            Some(Held {
                ip,
                container_id: id.trim().to_string(),
                ifname: ifname.trim().to_string(),
                since: since.get(address).copied(),
            })
        })
        .collect()
}

/// The addresses resting after release at `now` (unix seconds): a cooldown entry
/// whose `until` is later. Entries that are not host-local's are skipped.
pub fn cooling(store: &impl Store, now: u64) -> Vec<IpAddr> {
    store
        .list(COOLDOWN_PREFIX)
        .into_iter()
        .filter(|(_, value)| seconds(value, "until").is_some_and(|until| until > now))
        .filter_map(|(key, _)| parse_ip(&key[COOLDOWN_PREFIX.len()..]))
        .collect()
}

/// The owner `ip` is recorded for, as stored (host-local's file contents).
pub fn owner_of(store: &impl Store, ip: IpAddr) -> Option<Vec<u8>> {
    store.get(&ip_key(ip))
}

/// Records `ip` for `owner` as host-local's file held it, reserved at `since` if
/// known: an address taken over from host-local.
pub fn adopt(
    store: &mut impl Store,
    ip: IpAddr,
    owner: &[u8],
    since: Option<u64>,
) -> Result<(), Error> {
    store.put(&ip_key(ip), owner)?;
    if let Some(since) = since {
        let meta = serde_json::json!({ "since": since }).to_string();
        store.put(&meta_key(ip), meta.as_bytes())?;
    }
    store.delete(&cooldown_key(ip))?;
    Ok(())
}

/// Releases every reservation not held by one of `valid`; an ID-only reservation is
/// kept while its container has any valid attachment.
pub fn gc(store: &mut impl Store, valid: &[Attachment], policy: &Policy) -> Result<(), Error> {
    for (key, ip, held_by) in reservations(store) {
        let kept = valid.iter().any(|a| match held_by.split_once("\r\n") {
            Some(_) => held_by == owner(&a.container_id, &a.ifname),
            None => held_by == a.container_id.trim(),
        });
        if !kept {
            release(store, &key, ip, policy)?;
        }
    }
    Ok(())
}

/// Allocates from one range set (host-local's `IPAllocator`).
pub struct IpAllocator<'a> {
    set: &'a RangeSet,
    range_id: usize,
    policy: &'a Policy,
}

impl<'a> IpAllocator<'a> {
    pub fn new(set: &'a RangeSet, range_id: usize, policy: &'a Policy) -> Self {
        IpAllocator {
            set,
            range_id,
            policy,
        }
    }

    /// Reserves `requested`, or else the next free address round robin, for the
    /// attachment (host-local's `Get`).
    pub fn get(
        &self,
        store: &mut impl Store,
        id: &str,
        ifname: &str,
        requested: Option<IpAddr>,
    ) -> Result<IpConfig, Error> {
        let config = |ip: IpAddr, r: &Range| {
            IpConfig::new(format!("{ip}/{}", r.subnet.prefix_len())).gateway(r.gateway)
        };
        if let Some(ip) = requested {
            let r = self.set.range_for(ip).map_err(failure)?;
            if ip == r.gateway {
                return Err(failure(format!("requested ip {ip} is subnet's gateway")));
            }
            if !self.policy.allows(store, ip)
                || !reserve(store, id, ifname, ip, self.range_id, self.policy)?
            {
                return Err(failure(format!(
                    "requested IP address {ip} is not available in range set {}",
                    self.set
                )));
            }
            return Ok(config(ip, r));
        }
        if let Some(held) = get_by_id(store, id, ifname)
            .into_iter()
            .find(|ip| self.set.contains(*ip))
        {
            return Err(failure(format!(
                "{held} has been allocated to {id}, duplicate allocation is not allowed"
            )));
        }
        for (ip, r) in self.iter(store) {
            if self.policy.allows(store, ip)
                && reserve(store, id, ifname, ip, self.range_id, self.policy)?
            {
                return Ok(config(ip, r));
            }
        }
        Err(failure(format!(
            "no IP addresses available in range set: {}",
            self.set
        )))
    }

    /// Whether a `get` without a requested address would find one.
    pub fn has_free(&self, store: &impl Store) -> bool {
        self.iter(store)
            .any(|(ip, _)| store.get(&ip_key(ip)).is_none() && self.policy.allows(store, ip))
    }

    /// Round robin from the address after the set's last reservation, else from the
    /// first range's start (host-local's `GetIter`).
    pub fn iter(&self, store: &impl Store) -> RangeIter<'a> {
        let last = last_reserved_ip(store, self.range_id);
        let from = last.and_then(|ip| {
            self.set
                .ranges()
                .iter()
                .position(|r| r.contains(ip))
                .map(|i| (i, ip))
        });
        match from {
            Some((range_idx, cur)) => RangeIter {
                set: self.set,
                exclude: &self.policy.exclude,
                range_idx,
                cur: Some(cur),
                start_ip: None,
            },
            None => RangeIter {
                set: self.set,
                exclude: &self.policy.exclude,
                range_idx: 0,
                cur: None,
                start_ip: Some(self.set.ranges()[0].range_start),
            },
        }
    }
}

/// host-local's `RangeIter`: every address of the set once, skipping gateways, and
/// skipping each excluded run in one step.
pub struct RangeIter<'a> {
    set: &'a RangeSet,
    exclude: &'a Exclusions,
    range_idx: usize,
    cur: Option<IpAddr>,
    /// Where iteration began; meeting it again ends the walk.
    start_ip: Option<IpAddr>,
}

impl<'a> Iterator for RangeIter<'a> {
    type Item = (IpAddr, &'a Range);

    fn next(&mut self) -> Option<Self::Item> {
        let ranges = self.set.ranges();
        loop {
            let mut r = &ranges[self.range_idx];
            let cur = match self.cur {
                None => {
                    self.cur = Some(r.range_start);
                    self.start_ip = self.cur;
                    r.range_start
                }
                Some(cur) => {
                    let next = if cur == r.range_end {
                        self.range_idx = (self.range_idx + 1) % ranges.len();
                        r = &ranges[self.range_idx];
                        r.range_start
                    } else {
                        crate::range::next_ip(cur)
                    };
                    self.cur = Some(next);
                    match self.start_ip {
                        None => self.start_ip = Some(next),
                        Some(start) if start == next => return None,
                        Some(_) => {}
                    }
                    next
                }
            };
            if let Some(run_end) = self.exclude.run_end(cur) {
                let last = if int(run_end) < int(r.range_end) {
                    run_end
                } else {
                    r.range_end
                };
                // Jumping over the address the walk began at ends the walk.
                if let Some(start) = self.start_ip
                    && start != cur
                    && r.contains(start)
                    && (int(cur)..=int(last)).contains(&int(start))
                {
                    return None;
                }
                self.cur = Some(last);
                continue;
            }
            if cur != r.gateway {
                return Some((cur, r));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range::tests::{ip, range, spec};
    use wasm_ipam_guest::store::MemoryStore;

    static POLICY: Policy = Policy {
        exclude: Exclusions::NONE,
        cooldown_seconds: None,
        now: 0,
    };

    fn set(subnets: &[&str]) -> RangeSet {
        RangeSet::canonicalize(&subnets.iter().map(|s| spec(s)).collect::<Vec<_>>()).unwrap()
    }

    fn walk(set: &RangeSet, store: &MemoryStore) -> Vec<String> {
        let alloc = IpAllocator::new(set, 0, &POLICY);
        alloc.iter(store).map(|(ip, _)| ip.to_string()).collect()
    }

    fn reserve_release(store: &mut MemoryStore, addr: &str) {
        assert!(reserve(store, "ID", "eth0", ip(addr), 0, &POLICY).unwrap());
        release_by_id(store, "ID", "eth0", &POLICY).unwrap();
    }

    #[test]
    fn iterates_from_the_beginning() {
        let p = set(&["192.168.1.0/29"]);
        let all = [
            "192.168.1.2",
            "192.168.1.3",
            "192.168.1.4",
            "192.168.1.5",
            "192.168.1.6",
        ];
        assert_eq!(walk(&p, &MemoryStore::default()), all);
    }

    #[test]
    fn iterates_from_the_end() {
        let p = set(&["192.168.1.0/29"]);
        let mut store = MemoryStore::default();
        reserve_release(&mut store, "192.168.1.6");
        let all = [
            "192.168.1.2",
            "192.168.1.3",
            "192.168.1.4",
            "192.168.1.5",
            "192.168.1.6",
        ];
        assert_eq!(walk(&p, &store), all);
    }

    #[test]
    fn iterates_from_the_middle() {
        let p = set(&["192.168.1.0/29"]);
        let mut store = MemoryStore::default();
        reserve_release(&mut store, "192.168.1.3");
        let all = [
            "192.168.1.4",
            "192.168.1.5",
            "192.168.1.6",
            "192.168.1.2",
            "192.168.1.3",
        ];
        assert_eq!(walk(&p, &store), all);
    }

    fn multi_ranges() -> RangeSet {
        let r = |net: &str, s: &str, e: &str, gw: &str| Range {
            subnet: net.parse().unwrap(),
            range_start: ip(s),
            range_end: ip(e),
            gateway: ip(gw),
        };
        RangeSet(vec![
            r(
                "192.168.1.0/30",
                "192.168.1.0",
                "192.168.1.3",
                "192.168.1.1",
            ),
            r(
                "192.168.2.0/30",
                "192.168.2.0",
                "192.168.2.3",
                "192.168.2.1",
            ),
        ])
    }

    #[test]
    fn starts_at_the_next_range_after_a_range_end_reservation() {
        let p = multi_ranges();
        let mut store = MemoryStore::default();
        assert!(reserve(&mut store, "ID", "eth0", ip("192.168.1.3"), 0, &POLICY).unwrap());
        let mut iter = IpAllocator::new(&p, 0, &POLICY).iter(&store);
        assert!(iter.next().is_some());
        assert_eq!(iter.start_ip, Some(ip("192.168.2.0")));
    }

    #[test]
    fn starts_at_the_first_range_without_a_reservation() {
        let p = multi_ranges();
        let mut iter = IpAllocator::new(&p, 0, &POLICY).iter(&MemoryStore::default());
        assert!(iter.next().is_some());
        assert_eq!(iter.start_ip, Some(ip("192.168.1.0")));
    }

    /// host-local's table: subnets, addresses already taken (held by "id"), the last
    /// reserved address, and what `Get` must return.
    fn get_with(subnets: &[&str], taken: &[&str], last: &str) -> Result<IpConfig, Error> {
        let p = set(subnets);
        let mut store = MemoryStore::default();
        for addr in taken {
            store.put(&ip_key(ip(addr)), b"id").unwrap();
        }
        if !last.is_empty() {
            store.put(&last_reserved_key(0), last.as_bytes()).unwrap();
        }
        IpAllocator::new(&p, 0, &POLICY).get(&mut store, "ID", "eth0", None)
    }

    #[test]
    fn allocates_round_robin() {
        let cases: &[(&[&str], &[&str], &str, &str)] = &[
            (&["10.0.0.0/29"], &[], "", "10.0.0.2/29"),
            (&["2001:db8:1::0/64"], &[], "", "2001:db8:1::2/64"),
            (&["10.0.0.0/30"], &[], "", "10.0.0.2/30"),
            (&["10.0.0.0/29"], &["10.0.0.2"], "", "10.0.0.3/29"),
            (&["10.0.0.0/29"], &[], "10.0.0.5", "10.0.0.6/29"),
            (
                &["10.0.0.0/29"],
                &["10.0.0.4", "10.0.0.5"],
                "10.0.0.3",
                "10.0.0.6/29",
            ),
            (&["10.0.0.0/29"], &["10.0.0.6"], "10.0.0.5", "10.0.0.2/29"),
            (&["10.0.0.0/29"], &["10.0.0.2"], "10.0.0.128", "10.0.0.3/29"),
            (
                &["10.0.0.0/29"],
                &["10.0.0.2", "10.0.0.4", "10.0.0.5", "10.0.0.6"],
                "10.0.0.3",
                "10.0.0.3/29",
            ),
            (&["10.0.0.0/30", "10.0.1.0/30"], &[], "", "10.0.0.2/30"),
            (
                &["10.0.0.0/30", "10.0.1.0/30"],
                &[],
                "10.0.0.2",
                "10.0.1.2/30",
            ),
            (
                &["10.0.0.0/30", "10.0.1.0/30", "10.0.2.0/30"],
                &[],
                "10.0.2.2",
                "10.0.0.2/30",
            ),
        ];
        for (i, (subnets, taken, last, expected)) in cases.iter().enumerate() {
            let got = get_with(subnets, taken, last).unwrap();
            assert_eq!(got.address, *expected, "case {i}");
        }
    }

    #[test]
    fn reports_exhaustion() {
        let cases: &[(&[&str], &[&str])] = &[
            (&["10.0.0.0/30"], &["10.0.0.2"]),
            (
                &["10.0.0.0/29"],
                &["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"],
            ),
            (&["10.0.0.0/30", "10.0.1.0/30"], &["10.0.0.2", "10.0.1.2"]),
        ];
        for (subnets, taken) in cases {
            let err = get_with(subnets, taken, "").unwrap_err();
            assert_eq!(err.code, HOST_LOCAL_ERROR);
            assert!(
                err.msg
                    .starts_with("no IP addresses available in range set"),
                "{}",
                err.msg
            );
        }
        let err = get_with(&["10.0.0.0/30"], &["10.0.0.2"], "").unwrap_err();
        assert_eq!(
            err.msg,
            "no IP addresses available in range set: 10.0.0.1-10.0.0.2"
        );
    }

    #[test]
    fn never_allocates_the_broadcast_address() {
        let p = set(&["192.168.1.0/29"]);
        let mut store = MemoryStore::default();
        let alloc = IpAllocator::new(&p, 0, &POLICY);
        for i in 2..7 {
            let got = alloc
                .get(&mut store, &format!("ID{i}"), "eth0", None)
                .unwrap();
            assert_eq!(got.address, format!("192.168.1.{i}/29"));
            assert_eq!(got.gateway.as_deref(), Some("192.168.1.1"));
        }
        assert!(alloc.get(&mut store, "ID8", "eth0", None).is_err());
    }

    #[test]
    fn moves_on_after_a_release() {
        let p = set(&["192.168.1.0/29"]);
        let mut store = MemoryStore::default();
        let alloc = IpAllocator::new(&p, 0, &POLICY);
        assert_eq!(
            alloc.get(&mut store, "ID", "eth0", None).unwrap().address,
            "192.168.1.2/29"
        );
        release_by_id(&mut store, "ID", "eth0", &POLICY).unwrap();
        assert_eq!(
            alloc.get(&mut store, "ID", "eth0", None).unwrap().address,
            "192.168.1.3/29"
        );
    }

    #[test]
    fn refuses_a_duplicate_allocation_for_the_same_attachment() {
        let p = set(&["192.168.1.0/29"]);
        let mut store = MemoryStore::default();
        let alloc = IpAllocator::new(&p, 0, &POLICY);
        alloc.get(&mut store, "ID", "eth0", None).unwrap();
        let err = alloc.get(&mut store, "ID", "eth0", None).unwrap_err();
        assert_eq!(
            err.msg,
            "192.168.1.2 has been allocated to ID, duplicate allocation is not allowed"
        );
        assert_eq!(
            alloc.get(&mut store, "ID", "eth1", None).unwrap().address,
            "192.168.1.3/29"
        );
    }

    #[test]
    fn allocates_a_requested_ip_once() {
        let p = set(&["192.168.1.0/29"]);
        let mut store = MemoryStore::default();
        let alloc = IpAllocator::new(&p, 0, &POLICY);
        let got = alloc
            .get(&mut store, "ID", "eth0", Some(ip("192.168.1.5")))
            .unwrap();
        assert_eq!(got.address, "192.168.1.5/29");
        assert_eq!(last_reserved_ip(&store, 0), Some(ip("192.168.1.5")));
        let err = alloc
            .get(&mut store, "ID", "eth0", Some(ip("192.168.1.5")))
            .unwrap_err();
        assert_eq!(
            err.msg,
            "requested IP address 192.168.1.5 is not available in range set 192.168.1.1-192.168.1.6"
        );
        let err = alloc
            .get(&mut store, "ID2", "eth0", Some(ip("192.168.1.1")))
            .unwrap_err();
        assert_eq!(err.msg, "requested ip 192.168.1.1 is subnet's gateway");
    }

    #[test]
    fn refuses_requested_ips_outside_start_and_end() {
        let bounded = RangeSet(vec![Range {
            range_start: ip("192.168.1.3"),
            range_end: ip("192.168.1.4"),
            ..range("192.168.1.0/29")
        }]);
        let alloc = IpAllocator::new(&bounded, 0, &POLICY);
        let mut store = MemoryStore::default();
        for addr in ["192.168.1.5", "192.168.1.2"] {
            let err = alloc
                .get(&mut store, "ID", "eth0", Some(ip(addr)))
                .unwrap_err();
            assert_eq!(
                err.msg,
                format!("{addr} not in range set 192.168.1.3-192.168.1.4")
            );
        }
    }

    #[test]
    fn writes_host_local_file_contents_and_metadata() {
        let p = set(&["10.0.0.0/29"]);
        let mut store = MemoryStore::default();
        let policy = Policy {
            now: 1700000000,
            ..Policy::default()
        };
        IpAllocator::new(&p, 3, &policy)
            .get(&mut store, " ctr ", "eth0", None)
            .unwrap();
        assert_eq!(store.get("ip/10.0.0.2").unwrap(), b"ctr\r\neth0");
        assert_eq!(
            store.get_string("last_reserved_ip.3").as_deref(),
            Some("10.0.0.2")
        );
        assert_eq!(
            store.get_string("meta/10.0.0.2").as_deref(),
            Some(r#"{"since":1700000000}"#)
        );
        release_by_id(&mut store, "ctr", "eth0", &policy).unwrap();
        assert!(store.get("ip/10.0.0.2").is_none() && store.get("meta/10.0.0.2").is_none());
        assert!(store.get("cooldown/10.0.0.2").is_none());
        assert_eq!(
            store.get_string("last_reserved_ip.3").as_deref(),
            Some("10.0.0.2")
        );
    }

    #[test]
    fn matches_legacy_id_only_reservations() {
        let mut store = MemoryStore::default();
        store.put("ip/10.0.0.2", b"ctr").unwrap();
        store.put("ip/10.0.0.3", b"ctr\r\neth1").unwrap();
        store.put("ip/10.0.0.4", b"other\r\neth0").unwrap();
        assert!(find_by_id(&store, "ctr", "eth0"));
        assert!(!find_by_id(&store, "nobody", "eth0"));
        assert_eq!(get_by_id(&store, "ctr", "eth0"), vec![ip("10.0.0.2")]);
        assert_eq!(
            get_by_id(&store, "ctr", "eth1"),
            vec![ip("10.0.0.2"), ip("10.0.0.3")]
        );
        // The attachment's own reservation goes first; the legacy one only when none is left.
        release_by_id(&mut store, "ctr", "eth1", &POLICY).unwrap();
        assert!(store.get("ip/10.0.0.2").is_some() && store.get("ip/10.0.0.3").is_none());
        release_by_id(&mut store, "ctr", "eth1", &POLICY).unwrap();
        assert!(store.get("ip/10.0.0.2").is_none());
        assert!(store.get("ip/10.0.0.4").is_some());
    }

    fn attachment(id: &str, ifname: &str) -> Attachment {
        Attachment {
            container_id: id.into(),
            ifname: ifname.into(),
        }
    }

    #[test]
    fn gc_releases_what_no_valid_attachment_holds() {
        let mut store = MemoryStore::default();
        for (addr, held) in [
            ("10.0.0.1", "keep-me\r\neth0"),
            ("10.0.0.2", "gone\r\neth0"),
            ("10.0.0.3", "twoif\r\neth0"),
            ("10.0.0.4", "twoif\r\neth1"),
            ("10.0.0.9", "legacy-id"),
            ("10.0.0.10", "stale-legacy"),
        ] {
            store.put(&format!("ip/{addr}"), held.as_bytes()).unwrap();
        }
        store.put("last_reserved_ip.0", b"10.0.0.4").unwrap();
        let valid = [
            attachment("keep-me", "eth0"),
            attachment("twoif", "eth0"),
            attachment("legacy-id", "eth0"),
        ];
        gc(&mut store, &valid, &POLICY).unwrap();
        let left: Vec<&str> = store.entries.keys().map(String::as_str).collect();
        assert_eq!(
            left,
            [
                "ip/10.0.0.1",
                "ip/10.0.0.3",
                "ip/10.0.0.9",
                "last_reserved_ip.0"
            ]
        );
        gc(&mut store, &[], &POLICY).unwrap();
        assert_eq!(store.list("ip/"), vec![]);
    }

    #[test]
    fn excluded_addresses_are_never_handed_out() {
        let p = set(&["10.0.0.0/29"]);
        let policy = Policy {
            exclude: Exclusions::new(&[
                "10.0.0.2/32".parse().unwrap(),
                "10.0.0.4/31".parse().unwrap(),
            ]),
            ..Policy::default()
        };
        let alloc = IpAllocator::new(&p, 0, &policy);
        let mut store = MemoryStore::default();
        assert_eq!(
            alloc.get(&mut store, "a", "eth0", None).unwrap().address,
            "10.0.0.3/29"
        );
        assert_eq!(
            alloc.get(&mut store, "b", "eth0", None).unwrap().address,
            "10.0.0.6/29"
        );
        assert!(!alloc.has_free(&store));
        let err = alloc.get(&mut store, "c", "eth0", None).unwrap_err();
        assert_eq!(
            err.msg,
            "no IP addresses available in range set: 10.0.0.1-10.0.0.6"
        );
        let err = alloc
            .get(&mut store, "c", "eth0", Some(ip("10.0.0.5")))
            .unwrap_err();
        assert!(
            err.msg
                .starts_with("requested IP address 10.0.0.5 is not available")
        );
    }

    /// An ordinary IPv6 exclusion holds 2^28 addresses: the walk skips it in one step,
    /// so ADD and STATUS cost per excluded range, not per excluded address.
    #[test]
    fn a_large_exclusion_is_skipped_in_one_step() {
        let p = set(&["fd00::/64"]);
        let policy = Policy {
            exclude: Exclusions::new(&["fd00::/100".parse().unwrap()]),
            ..Policy::default()
        };
        let alloc = IpAllocator::new(&p, 0, &policy);
        let mut store = MemoryStore::default();
        assert!(alloc.has_free(&store));
        assert_eq!(
            alloc.get(&mut store, "a", "eth0", None).unwrap().address,
            "fd00::1000:0/64"
        );
        // The whole range excluded in two runs: the walk wraps, meets its start
        // inside an excluded run, and stops.
        let tight = Policy {
            exclude: Exclusions::new(&[
                "fd00::/65".parse().unwrap(),
                "fd00:0:0:0:8000::/65".parse().unwrap(),
            ]),
            ..Policy::default()
        };
        let alloc = IpAllocator::new(&p, 0, &tight);
        assert!(!alloc.has_free(&store));
        assert!(alloc.get(&mut store, "b", "eth0", None).is_err());
        // Starting inside an excluded run (the last reservation is now excluded).
        let policy = Policy {
            exclude: Exclusions::new(&["fd00::1000:0/100".parse().unwrap()]),
            ..Policy::default()
        };
        let alloc = IpAllocator::new(&p, 0, &policy);
        assert_eq!(
            alloc.get(&mut store, "c", "eth0", None).unwrap().address,
            "fd00::2000:0/64"
        );
    }

    #[test]
    fn released_addresses_cool_down_before_reuse() {
        let p = set(&["10.0.0.0/30"]);
        let mut store = MemoryStore::default();
        let at = |now| Policy {
            cooldown_seconds: Some(60),
            now,
            ..Policy::default()
        };
        let (t0, t1, t2) = (at(1000), at(1059), at(1060));
        IpAllocator::new(&p, 0, &t0)
            .get(&mut store, "a", "eth0", None)
            .unwrap();
        release_by_id(&mut store, "a", "eth0", &t0).unwrap();
        assert_eq!(
            store.get_string("cooldown/10.0.0.2").as_deref(),
            Some(r#"{"until":1060}"#)
        );

        let alloc = IpAllocator::new(&p, 0, &t1);
        assert!(!alloc.has_free(&store));
        assert!(alloc.get(&mut store, "b", "eth0", None).is_err());
        assert!(
            alloc
                .get(&mut store, "b", "eth0", Some(ip("10.0.0.2")))
                .is_err()
        );
        // Without the option the rest is ignored, as host-local would.
        let plain = IpAllocator::new(&p, 0, &POLICY);
        assert!(plain.has_free(&store));

        let alloc = IpAllocator::new(&p, 0, &t2);
        assert_eq!(
            alloc.get(&mut store, "b", "eth0", None).unwrap().address,
            "10.0.0.2/30"
        );
        assert!(store.get("cooldown/10.0.0.2").is_none());
    }
}
