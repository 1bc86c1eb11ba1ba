//! A wasm-ipam module that behaves as containernetworking/plugins' `host-local` IPAM
//! plugin at v1.1.1: same configuration, same addresses in the same order, same
//! messages, and a store whose `ip/<address>` entries hold what host-local's per-IP
//! files hold. It adds CNI GC and STATUS, two options that are off by default
//! (`exclude`, `reuseCooldownSeconds`), the operators' views (`wasm-ipam list` and
//! `stats`) and taking over host-local's own files (`wasm-ipam import-host-local`).
//!
//! Each command is a function over the [`Store`] the SDK hands it, so the logic is
//! tested over [`wasm_ipam_guest::store::MemoryStore`]; in a host it runs on the
//! host's store, whose writes are committed only when the command succeeds.

mod allocator;
mod args;
mod config;
mod dns;
mod exclude;
mod inspect;
mod migrate;
mod range;
mod range_set;
mod summary;

use allocator::{IpAllocator, Policy, failure};
use config::IpamConfig;
use exclude::Exclusions;
use std::net::IpAddr;
use wasm_ipam_guest::store::Store;
use wasm_ipam_guest::{
    Allocation, Attachment, Context, Dns, Error, ImportReport, ImportRequest, IpamModule,
    IpamResult, Pool, Request, readiness,
};

pub use dns::parse_resolv_conf;

fn policy(conf: &IpamConfig, request: &Request) -> Policy {
    Policy {
        exclude: Exclusions::new(&conf.exclude),
        cooldown_seconds: conf.reuse_cooldown_seconds,
        now: request.lock_granted_at().seconds,
    }
}

/// The result's `dns`, from `resolvConfContents`. The module cannot read the
/// `resolvConf` path itself: the host injects the file's text as
/// `ipam.resolvConfContents` before calling the module, and without it ADD fails.
fn dns(conf: &IpamConfig) -> Result<Dns, Error> {
    match (&conf.resolv_conf_contents, conf.resolv_conf.as_str()) {
        (Some(text), _) => Ok(parse_resolv_conf(text)),
        (None, "") => Ok(parse_resolv_conf("")),
        (None, path) => Err(Error::invalid_config(format!(
            "resolvConf {path}: the host must supply the file's text as ipam.resolvConfContents \
             (a module cannot read files)"
        ))),
    }
}

/// Undoes a failed ADD as host-local does: one best-effort release per set already
/// allocated (the store discards this call's writes on error anyway).
fn release_taken(store: &mut impl Store, taken: usize, id: &str, ifname: &str, policy: &Policy) {
    for _ in 0..taken {
        let _ = allocator::release_by_id(store, id, ifname, policy);
    }
}

/// The exported module.
pub struct HostLocal;

/// The range sets with no address left for an ADD that asks for none, as conditions
/// for CNI STATUS (`readiness`): the node stays ready (a DEL clears it), and the
/// condition is logged and exported. Each ADD reports them, since it learns them.
fn exhausted(conf: &IpamConfig, policy: &Policy, store: &impl Store) -> Vec<Error> {
    conf.ranges
        .iter()
        .enumerate()
        .filter(|(idx, set)| !IpAllocator::new(set, *idx, policy).has_free(store))
        .map(|(idx, set)| {
            failure(format!(
                "no IP addresses available in range set {idx} ({set}): ADDs fail until a DEL or gc frees one, or the range grows"
            ))
        })
        .collect()
}

#[wasm_ipam_guest::ipam_module]
impl IpamModule for HostLocal {
    /// host-local's cmdAdd: one address per range set, a requested address going to
    /// the first set that contains it; on failure what was taken is released again.
    fn add(request: &Request, store: &mut impl Store) -> Result<IpamResult, Error> {
        let conf = config::load(request.config(), request.args())?;
        let dns = dns(&conf)?;
        let policy = policy(&conf, request);
        let (id, ifname) = (request.container_id(), request.ifname());

        let mut requested: Vec<IpAddr> = Vec::new();
        for ip in &conf.requested_ips {
            if !requested.contains(ip) {
                requested.push(*ip);
            }
        }
        let mut ips = Vec::new();
        for (idx, set) in conf.ranges.iter().enumerate() {
            let wanted = requested
                .iter()
                .position(|ip| set.contains(*ip))
                .map(|i| requested.remove(i));
            match IpAllocator::new(set, idx, &policy).get(store, id, ifname, wanted) {
                Ok(ip) => ips.push(ip),
                Err(mut e) => {
                    release_taken(store, ips.len(), id, ifname, &policy);
                    readiness::degraded(&exhausted(&conf, &policy, store));
                    e.msg = format!("failed to allocate for range {idx}: {}", e.msg);
                    return Err(e);
                }
            }
        }
        if !requested.is_empty() {
            release_taken(store, ips.len(), id, ifname, &policy);
            let left: String = requested.iter().map(|ip| format!(" {ip}")).collect();
            return Err(failure(format!(
                "failed to allocate all requested IPs:{left}"
            )));
        }
        summary::record(store, &conf)?;
        readiness::degraded(&exhausted(&conf, &policy, store));
        Ok(IpamResult {
            ips,
            routes: conf.routes,
            dns,
        })
    }

    /// host-local's cmdDel: releases the attachment's addresses once per range set (so
    /// an ID-only reservation of an older version goes too); nothing held is no error.
    fn del(request: &Request, store: &mut impl Store) -> Result<(), Error> {
        let conf = config::load(request.config(), request.args())?;
        let policy = policy(&conf, request);
        let mut released = false;
        for _ in &conf.ranges {
            released |=
                allocator::release_by_id(store, request.container_id(), request.ifname(), &policy)?;
        }
        // Each range set got an address back: none is exhausted now.
        if released {
            readiness::degraded(&[]);
        }
        summary::record(store, &conf)
    }

    /// host-local's cmdCheck: the attachment (or its container ID) holds some address.
    fn check(request: &Request, store: &impl Store) -> Result<(), Error> {
        config::load(request.config(), request.args())?;
        if allocator::find_by_id(store, request.container_id(), request.ifname()) {
            Ok(())
        } else {
            Err(failure(format!(
                "host-local: Failed to find address added by container {}",
                request.container_id()
            )))
        }
    }

    /// CNI GC: releases every reservation no valid attachment holds.
    fn gc(request: &Request, valid: &[Attachment], store: &mut impl Store) -> Result<(), Error> {
        let conf = config::load(request.config(), request.args())?;
        allocator::gc(store, valid, &policy(&conf, request))?;
        summary::record(store, &conf)
    }

    /// Every `ip/<address>` entry, with its `meta/<address>` time.
    fn allocations(_: &Context, store: &impl Store) -> Result<Vec<Allocation>, Error> {
        Ok(inspect::allocations(store))
    }

    /// One pool per range set (or, without a configuration, the recorded summary).
    fn pools(context: &Context, store: &impl Store) -> Result<Vec<Pool>, Error> {
        inspect::pools(context, store)
    }

    /// host-local's own files (format `host-local`).
    fn import_state(import: &ImportRequest, store: &mut impl Store) -> Result<ImportReport, Error> {
        migrate::import_state(import, store)
    }
}

wasm_ipam_guest::export_module!(HostLocal);

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};
    use wasm_ipam_guest::Command;
    use wasm_ipam_guest::error::code;
    use wasm_ipam_guest::store::MemoryStore;

    fn netconf(ipam: Value) -> Value {
        json!({"cniVersion": "1.0.0", "name": "net", "type": "bridge", "ipam": ipam})
    }

    fn dual_stack() -> Value {
        netconf(json!({"type": "host-local",
            "ranges": [[{"subnet": "10.0.0.0/29"}], [{"subnet": "fd00::/126"}]],
            "routes": [{"dst": "0.0.0.0/0"}, {"dst": "::/0", "gw": "fd00::1"}],
            "resolvConf": "/etc/resolv.conf",
            "resolvConfContents": "nameserver 10.0.0.53\nsearch example.org\n"}))
    }

    fn request(command: Command, id: &str, config: &Value) -> Request {
        Request::for_test(command, id, "eth0", config.clone())
    }

    fn addresses(result: &IpamResult) -> Vec<(&str, Option<&str>)> {
        result
            .ips
            .iter()
            .map(|ip| (ip.address.as_str(), ip.gateway.as_deref()))
            .collect()
    }

    #[test]
    fn add_allocates_one_address_per_range_set() {
        let conf = dual_stack();
        let mut store = MemoryStore::default();
        let result = HostLocal::add(&request(Command::Add, "c1", &conf), &mut store).unwrap();
        assert_eq!(
            addresses(&result),
            [
                ("10.0.0.2/29", Some("10.0.0.1")),
                ("fd00::2/126", Some("fd00::1"))
            ]
        );
        let routes: Vec<(&str, Option<&str>)> = result
            .routes
            .iter()
            .map(|r| (r.dst.as_str(), r.gw.as_deref()))
            .collect();
        assert_eq!(routes, [("0.0.0.0/0", None), ("::/0", Some("fd00::1"))]);
        assert_eq!(result.dns.nameservers, ["10.0.0.53"]);
        assert_eq!(result.dns.search, ["example.org"]);
        assert_eq!(
            store.get_string("ip/fd00::2").as_deref(),
            Some("c1\r\neth0")
        );
        assert_eq!(
            store.get_string("last_reserved_ip.1").as_deref(),
            Some("fd00::2")
        );
    }

    #[test]
    fn add_needs_the_resolv_conf_text_from_the_host() {
        let conf = netconf(json!({"subnet": "10.0.0.0/24", "resolvConf": "/etc/resolv.conf"}));
        let mut store = MemoryStore::default();
        let err = HostLocal::add(&request(Command::Add, "c1", &conf), &mut store).unwrap_err();
        assert_eq!(err.code, code::INVALID_NETWORK_CONFIG);
        assert!(err.msg.contains("resolvConfContents"), "{}", err.msg);
        assert!(store.entries.is_empty());
    }

    #[test]
    fn add_refuses_a_second_allocation_for_the_same_attachment() {
        let conf = dual_stack();
        let mut store = MemoryStore::default();
        HostLocal::add(&request(Command::Add, "c1", &conf), &mut store).unwrap();
        let err = HostLocal::add(&request(Command::Add, "c1", &conf), &mut store).unwrap_err();
        assert_eq!(err.code, allocator::HOST_LOCAL_ERROR);
        assert_eq!(
            err.msg,
            "failed to allocate for range 0: 10.0.0.2 has been allocated to c1, duplicate allocation is not allowed"
        );
    }

    #[test]
    fn failed_add_releases_what_it_took() {
        let conf = dual_stack();
        let mut store = MemoryStore::default();
        store.put("ip/fd00::2", b"x\r\neth0").unwrap();
        store.put("ip/fd00::3", b"y\r\neth0").unwrap();
        let err = HostLocal::add(&request(Command::Add, "c1", &conf), &mut store).unwrap_err();
        assert_eq!(
            err.msg,
            "failed to allocate for range 1: no IP addresses available in range set: fd00::1-fd00::3"
        );
        assert!(store.get("ip/10.0.0.2").is_none());
        assert_eq!(store.list("ip/").len(), 2);
    }

    #[test]
    fn add_honours_requested_addresses() {
        let conf = dual_stack();
        let mut store = MemoryStore::default();
        let req = request(Command::Add, "c1", &conf).with_args(&[
            ("IgnoreUnknown", "1"),
            ("K8S_POD_NAME", "p"),
            ("IP", "fd00::3"),
        ]);
        let result = HostLocal::add(&req, &mut store).unwrap();
        assert_eq!(addresses(&result)[1], ("fd00::3/126", Some("fd00::1")));

        let req = request(Command::Add, "c2", &conf).with_args(&[("IP", "10.9.9.9")]);
        let err = HostLocal::add(&req, &mut store).unwrap_err();
        assert_eq!(err.msg, "failed to allocate all requested IPs: 10.9.9.9");
        assert_eq!(store.list("ip/").len(), 2, "c2's addresses were released");

        let req = request(Command::Add, "c2", &conf).with_args(&[("K8S_POD_NAME", "p")]);
        let err = HostLocal::add(&req, &mut store).unwrap_err();
        assert_eq!(
            (err.code, err.msg.as_str()),
            (4, r#"ARGS: unknown args ["K8S_POD_NAME=p"]"#)
        );
    }

    #[test]
    fn del_releases_exactly_the_attachment() {
        let conf = dual_stack();
        let mut store = MemoryStore::default();
        HostLocal::add(&request(Command::Add, "c1", &conf), &mut store).unwrap();
        HostLocal::add(
            &Request::for_test(Command::Add, "c1", "eth1", conf.clone()),
            &mut store,
        )
        .unwrap();
        HostLocal::del(&request(Command::Del, "c1", &conf), &mut store).unwrap();
        let held: Vec<String> = store.list("ip/").into_iter().map(|(k, _)| k).collect();
        assert_eq!(held, ["ip/10.0.0.3", "ip/fd00::3"]);
        HostLocal::del(&request(Command::Del, "c1", &conf), &mut store).unwrap();
        HostLocal::del(&request(Command::Del, "nobody", &conf), &mut store).unwrap();
        assert_eq!(store.list("ip/").len(), 2);
    }

    #[test]
    fn check_finds_the_attachment() {
        let conf = dual_stack();
        let mut store = MemoryStore::default();
        HostLocal::add(&request(Command::Add, "c1", &conf), &mut store).unwrap();
        HostLocal::check(&request(Command::Check, "c1", &conf), &store).unwrap();
        let err = HostLocal::check(&request(Command::Check, "c2", &conf), &store).unwrap_err();
        assert_eq!(
            err.msg,
            "host-local: Failed to find address added by container c2"
        );
    }

    #[test]
    fn gc_keeps_only_valid_attachments() {
        let conf = dual_stack();
        let mut store = MemoryStore::default();
        HostLocal::add(&request(Command::Add, "keep", &conf), &mut store).unwrap();
        HostLocal::add(&request(Command::Add, "drop", &conf), &mut store).unwrap();
        let valid = [Attachment {
            container_id: "keep".into(),
            ifname: "eth0".into(),
        }];
        HostLocal::gc(
            &Request::for_test(Command::Gc, "", "", conf.clone()),
            &valid,
            &mut store,
        )
        .unwrap();
        let held: Vec<String> = store.list("ip/").into_iter().map(|(k, _)| k).collect();
        assert_eq!(held, ["ip/10.0.0.2", "ip/fd00::2"]);
        assert!(
            store
                .list("meta/")
                .iter()
                .all(|(k, _)| k.ends_with("::2") || k.ends_with(".2"))
        );
    }

    #[test]
    fn adds_report_an_exhausted_range_set_and_a_del_clears_it() {
        let conf = dual_stack();
        let mut store = MemoryStore::default();
        HostLocal::add(&request(Command::Add, "c1", &conf), &mut store).unwrap();
        assert_eq!(readiness::last_reported(), Some(vec![]));
        HostLocal::add(&request(Command::Add, "c2", &conf), &mut store).unwrap();
        let reported = readiness::last_reported().unwrap();
        assert_eq!(reported.len(), 1, "{reported:?}");
        assert!(
            reported[0]
                .msg
                .starts_with("no IP addresses available in range set 1 (fd00::1-fd00::3)"),
            "{}",
            reported[0].msg
        );
        HostLocal::add(&request(Command::Add, "c3", &conf), &mut store).unwrap_err();
        assert_eq!(readiness::last_reported().unwrap().len(), 1);
        // A DEL of nothing says nothing; one that frees an address clears it.
        HostLocal::del(&request(Command::Del, "nobody", &conf), &mut store).unwrap();
        assert_eq!(readiness::last_reported(), None);
        HostLocal::del(&request(Command::Del, "c1", &conf), &mut store).unwrap();
        assert_eq!(readiness::last_reported(), Some(vec![]));
    }

    #[test]
    fn configuration_errors_are_code_7() {
        let conf =
            netconf(json!({"ranges": [[{"subnet": "10.0.0.0/16"}], [{"subnet": "10.0.5.0/24"}]]}));
        for err in [
            HostLocal::add(
                &request(Command::Add, "c1", &conf),
                &mut MemoryStore::default(),
            )
            .unwrap_err(),
            HostLocal::del(
                &request(Command::Del, "c1", &conf),
                &mut MemoryStore::default(),
            )
            .unwrap_err(),
            HostLocal::check(
                &request(Command::Check, "c1", &conf),
                &MemoryStore::default(),
            )
            .unwrap_err(),
        ] {
            assert_eq!(
                (err.code, err.msg.as_str()),
                (7, "range set 0 overlaps with 1")
            );
        }
    }
}
