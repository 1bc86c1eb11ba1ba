//! [`IpamModule`], what a module implements: ADD and DEL, and whatever else it can do
//! better than the defaults, which are built from what it does implement.

use crate::error::code;
use crate::store::Store;
use crate::{
    Allocation, Attachment, Command, Context, Error, ImportReport, ImportRequest, IpamResult, Pool,
    PoolUsage, ReleaseReport, Request, Reservation,
};

/// What a module implements: one function per CNI command and per operator request,
/// each over the network's store. The SDK passes the host's store in a host; a test
/// passes a [`MemoryStore`](crate::store::MemoryStore).
///
/// Only [`add`](Self::add) and [`del`](Self::del) are required. The defaults use what
/// the module does implement, and say so when that is not enough:
///
/// | function | default |
/// |---|---|
/// | `check` | the attachment holds an address, by `allocations` |
/// | `gc` | a DEL for every attachment `allocations` lists and no valid attachment is |
/// | `allocations` | error (code 121): the module does not report allocations |
/// | `pools` | one pool named after the network, its in-use count from `allocations`, capacity unknown |
/// | `import_state` | error (code 121): the module cannot import the format |
/// | `release_node` | error (code 121): the module keeps no per-node state to release |
///
/// CNI STATUS is answered by the host, from what the node's calls recorded: a module
/// reports what makes some ADDs fail while the node stays ready with
/// [`readiness::degraded`](crate::readiness::degraded) in the calls that learn it.
///
/// So a module that implements `allocations` gets a working CHECK, GC, `wasm-ipam
/// list` and `stats`; one that implements neither fails CHECK and GC, saying why,
/// rather than claiming success for work it cannot do.
///
/// Each function returns a CNI [`Error`] on failure; the host prints it and discards
/// the call's store writes.
///
/// Put [`#[ipam_module]`](crate::ipam_module) on the impl: it records which functions
/// the impl writes, so the module tells `wasm-ipam inspect` which answers are its own
/// and which are the defaults above ([`capabilities`](crate::capabilities)). Without
/// it the type lacks [`ImplementedByModule`] and the compiler says to add it.
pub trait IpamModule: ImplementedByModule {
    /// Allocates addresses for `request.container_id()` / `request.ifname()`.
    fn add(request: &Request, store: &mut impl Store) -> Result<IpamResult, Error>;

    /// Releases what ADD allocated; succeeds when nothing is allocated (a DEL may come
    /// twice, or for an ADD that failed).
    fn del(request: &Request, store: &mut impl Store) -> Result<(), Error>;

    /// Verifies the attachment still holds what ADD allocated. By default: some
    /// allocation listed by [`allocations`](Self::allocations) is the attachment's (one
    /// with an empty `ifname` is the container's), else code 3.
    fn check(request: &Request, store: &impl Store) -> Result<(), Error> {
        let held = Self::allocations(&Context::from(request), store)
            .map_err(|e| prefixed("cannot check the attachment", e))?;
        let attachment = request.attachment();
        if held.iter().any(|a| holds(a, &attachment)) {
            Ok(())
        } else {
            Err(Error::new(
                code::UNKNOWN_CONTAINER,
                format!(
                    "no address is allocated to container {} interface {}",
                    request.container_id(),
                    request.ifname()
                ),
            ))
        }
    }

    /// Releases everything no attachment of `valid_attachments` holds (CNI GC). By
    /// default: a DEL, as [`del`](Self::del) does it, for each attachment
    /// [`allocations`](Self::allocations) lists that no valid attachment is (one with
    /// an empty `ifname` stays while its container has a valid attachment, and is
    /// released by a DEL with an empty `ifname`). Every DEL is tried and the failures
    /// are reported together (the host then commits none of the call's writes).
    fn gc(
        request: &Request,
        valid_attachments: &[Attachment],
        store: &mut impl Store,
    ) -> Result<(), Error> {
        let held = Self::allocations(&Context::from(request), &*store)
            .map_err(|e| prefixed("cannot collect garbage", e))?;
        let mut stale: Vec<Attachment> = Vec::new();
        for allocation in &held {
            let attachment = Attachment {
                container_id: allocation.container_id.clone(),
                ifname: allocation.ifname.clone(),
            };
            let valid = valid_attachments.iter().any(|v| holds(allocation, v));
            if !valid && !stale.contains(&attachment) {
                stale.push(attachment);
            }
        }
        let mut failures = Vec::new();
        for attachment in &stale {
            if let Err(e) = Self::del(&request.for_attachment(Command::Del, attachment), store) {
                failures.push((attachment, e));
            }
        }
        match failures.first() {
            None => Ok(()),
            Some((_, first)) => Err(Error::new(
                first.code,
                format!("GC could not release {} attachment(s)", failures.len()),
            )
            .with_details(
                failures
                    .iter()
                    .map(|(a, e)| format!("{} {}: {}", a.container_id, a.ifname, e.msg))
                    .collect::<Vec<_>>()
                    .join("; "),
            )),
        }
    }

    /// Every address handed out, for `wasm-ipam list`. By default an error: a module
    /// cannot be listed without telling how it stores its allocations.
    fn allocations(context: &Context, store: &impl Store) -> Result<Vec<Allocation>, Error> {
        let _ = (context, store);
        Err(Error::unsupported(
            "this module does not report allocations",
        ))
    }

    /// The pools and their use, for `wasm-ipam stats`. By default one pool named after
    /// the network with [`allocations`](Self::allocations)' count in use, capacity and
    /// free unknown: what can be said without knowing the module's pools.
    fn pools(context: &Context, store: &impl Store) -> Result<Vec<Pool>, Error> {
        let held = Self::allocations(context, store)?;
        let in_use = u64::try_from(held.len()).unwrap_or(u64::MAX);
        Ok(vec![Pool::new(context.network_name()).in_use(in_use)])
    }

    /// Takes over another plugin's state (`wasm-ipam import-host-local` sends format
    /// `host-local`), writing it into the module's own store keys. State that
    /// conflicts with the store's is an error, and then nothing is written. By
    /// default an error: the module imports no format.
    fn import_state(import: &ImportRequest, store: &mut impl Store) -> Result<ImportReport, Error> {
        let _ = store;
        Err(Error::unsupported(format!(
            "this module cannot import format {:?}",
            import.format()
        )))
    }

    /// Releases everything the module records for `node`, a node removed from the
    /// cluster (`wasm-ipam release-node`), for a module whose store several nodes
    /// share: its attachments' addresses and whatever it keeps per node. The host asks
    /// only once the node has made no committing call for a while; `context.node_name()`
    /// is the node the operator runs the command on. With `dry_run` the host refuses
    /// every write: answer what would be released, writing nothing. By default an
    /// error: the module keeps no per-node state to release.
    fn release_node(
        context: &Context,
        node: &str,
        dry_run: bool,
        store: &mut impl Store,
    ) -> Result<ReleaseReport, Error> {
        let _ = (context, dry_run, store);
        Err(Error::unsupported(format!(
            "this module keeps nothing per node: nothing to release for node {node:?}"
        )))
    }

    /// Keeps `cidr` (an address or CIDR) out of use from the next ADD on
    /// (`wasm-ipam reserve`). An address of it in use is an error unless `force`, which
    /// leaves its holder alone and keeps it out of use after the holder's DEL.
    /// `context.config()` is the operator's netconf. By default an error: the module
    /// keeps no reservations.
    fn reserve(
        context: &Context,
        cidr: &str,
        note: &str,
        force: bool,
        store: &mut impl Store,
    ) -> Result<Reservation, Error> {
        let _ = (context, note, force, store);
        Err(Error::unsupported(format!(
            "this module keeps no reservations: cannot reserve {cidr}"
        )))
    }

    /// Ends the reservation of exactly `cidr` (`wasm-ipam unreserve`) and answers it.
    /// By default an error: the module keeps no reservations.
    fn unreserve(
        context: &Context,
        cidr: &str,
        store: &mut impl Store,
    ) -> Result<Reservation, Error> {
        let _ = (context, store);
        Err(Error::unsupported(format!(
            "this module keeps no reservations: cannot unreserve {cidr}"
        )))
    }

    /// Every reservation, for `wasm-ipam list` (read-only). By default an error: the
    /// module keeps no reservations.
    fn reservations(context: &Context, store: &impl Store) -> Result<Vec<Reservation>, Error> {
        let _ = (context, store);
        Err(Error::unsupported("this module keeps no reservations"))
    }

    /// `stats` in detail: a row per pool and, if the module has them, per block of a
    /// pool (read-only). By default [`IpamModule::pools`] as pool rows.
    fn usage(context: &Context, store: &impl Store) -> Result<Vec<PoolUsage>, Error> {
        Ok(Self::pools(context, store)?
            .into_iter()
            .map(PoolUsage::from_pool)
            .collect())
    }
}

/// Which functions a type's `impl IpamModule` block defines, by name: implemented by
/// [`#[ipam_module]`](crate::ipam_module) on that block, never by hand.
#[diagnostic::on_unimplemented(
    message = "`impl IpamModule for {Self}` needs #[ipam_module] on it",
    label = "put #[wasm_ipam_guest::ipam_module] on the `impl IpamModule for {Self}` block",
    note = "#[ipam_module] records which functions the impl writes, so `wasm-ipam inspect` can tell them from the SDK's defaults"
)]
pub trait ImplementedByModule: Exported {
    #[doc(hidden)]
    const IMPLEMENTED_BY_MODULE: &'static [&'static str];
}

/// That a type is the component's module: implemented by
/// [`export_module!`](crate::export_module) for its type, never by hand. A module
/// whose `impl IpamModule` has `#[ipam_module]` but that never calls `export_module!`
/// would build into a component exporting nothing; this makes it a build error that
/// names the macro.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is never exported: the crate must call `export_module!({Self});`",
    label = "`#[ipam_module]` is here, but no `wasm_ipam_guest::export_module!({Self});` in the crate",
    note = "without it the component exports no cni:ipam/handler, and the host refuses it at every call"
)]
pub trait Exported {}

/// Whether `allocation` is the attachment's; one with an empty `ifname` (the module
/// does not know it) is its container's.
fn holds(allocation: &Allocation, attachment: &Attachment) -> bool {
    allocation.container_id == attachment.container_id
        && (allocation.ifname.is_empty() || allocation.ifname == attachment.ifname)
}

fn prefixed(what: &str, mut e: Error) -> Error {
    e.msg = format!("{what}: {}", e.msg);
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;
    use serde_json::json;

    /// Hands out `10.0.0.<n>` from a store of `a/<n>` → `id\r\nifname`, n in 2..=3; a
    /// value of the id alone is a legacy allocation, which a DEL for the id releases.
    struct Two;

    crate::export_module!(Two);
    #[crate::ipam_module]
    impl IpamModule for Two {
        fn add(request: &Request, store: &mut impl Store) -> Result<IpamResult, Error> {
            let owner = format!("{}\r\n{}", request.container_id(), request.ifname());
            let n = (2..=3)
                .find(|n| store.get(&format!("a/{n}")).is_none())
                .ok_or_else(|| Error::new(code::MODULE_SPECIFIC, "full"))?;
            store.put(&format!("a/{n}"), owner.as_bytes())?;
            Ok(IpamResult::default().ip(crate::IpConfig::new(format!("10.0.0.{n}/30"))))
        }
        fn del(request: &Request, store: &mut impl Store) -> Result<(), Error> {
            if request.container_id() == "undeletable" {
                return Err(Error::new(150, "refused"));
            }
            let owner = format!("{}\r\n{}", request.container_id(), request.ifname());
            for (key, value) in store.list("a/") {
                if value == owner.as_bytes() || value == request.container_id().as_bytes() {
                    store.delete(&key)?;
                }
            }
            Ok(())
        }
        fn allocations(_: &Context, store: &impl Store) -> Result<Vec<Allocation>, Error> {
            Ok(store
                .list("a/")
                .into_iter()
                .map(|(key, value)| {
                    let owner = String::from_utf8_lossy(&value).into_owned();
                    let (id, ifname) = owner.split_once("\r\n").unwrap_or((&owner, ""));
                    Allocation::new(format!("10.0.0.{}", &key[2..]), id, ifname)
                })
                .collect())
        }
    }

    /// Implements only what is required.
    struct Bare;

    crate::export_module!(Bare);
    #[crate::ipam_module]
    impl IpamModule for Bare {
        fn add(_: &Request, _: &mut impl Store) -> Result<IpamResult, Error> {
            Ok(IpamResult::default())
        }
        fn del(_: &Request, _: &mut impl Store) -> Result<(), Error> {
            Ok(())
        }
    }

    fn request(command: Command, id: &str, ifname: &str) -> Request {
        Request::for_test(command, id, ifname, json!({"name": "net"}))
    }

    fn attachment(id: &str, ifname: &str) -> Attachment {
        Attachment {
            container_id: id.into(),
            ifname: ifname.into(),
        }
    }

    #[test]
    fn default_check_finds_the_attachment_in_allocations() {
        let mut store = MemoryStore::default();
        Two::add(&request(Command::Add, "c1", "eth0"), &mut store).unwrap();
        Two::check(&request(Command::Check, "c1", "eth0"), &store).unwrap();
        let err = Two::check(&request(Command::Check, "c1", "eth1"), &store).unwrap_err();
        assert_eq!(err.code, code::UNKNOWN_CONTAINER);
        assert_eq!(
            err.msg,
            "no address is allocated to container c1 interface eth1"
        );
        // An allocation whose interface the module does not know is its container's.
        store.put("a/3", b"legacy").unwrap();
        Two::check(&request(Command::Check, "legacy", "eth7"), &store).unwrap();
    }

    #[test]
    fn default_gc_deletes_each_stale_attachment_once() {
        let mut store: MemoryStore = [
            ("a/2", "keep\r\neth0"),
            ("a/3", "gone\r\neth0"),
            ("a/4", "gone\r\neth0"),
            ("a/5", "legacy"),
            ("a/6", "stale-legacy"),
        ]
        .into_iter()
        .collect();
        let gc = request(Command::Gc, "", "");
        let valid = [attachment("keep", "eth0"), attachment("legacy", "net1")];
        Two::gc(&gc, &valid, &mut store).unwrap();
        let left: Vec<&str> = store.entries.keys().map(String::as_str).collect();
        assert_eq!(left, ["a/2", "a/5"]);
    }

    #[test]
    fn default_gc_tries_every_release_and_reports_all_failures() {
        let mut store: MemoryStore = [
            ("a/2", "undeletable\r\neth0"),
            ("a/3", "gone\r\neth0"),
            ("a/4", "undeletable\r\neth1"),
        ]
        .into_iter()
        .collect();
        let err = Two::gc(&request(Command::Gc, "", ""), &[], &mut store).unwrap_err();
        assert_eq!(
            (err.code, err.msg.as_str()),
            (150, "GC could not release 2 attachment(s)")
        );
        assert_eq!(
            err.details,
            "undeletable eth0: refused; undeletable eth1: refused"
        );
        assert!(store.get("a/3").is_none(), "the other DEL still ran");
    }

    #[test]
    fn default_pools_count_allocations() {
        let mut store = MemoryStore::default();
        Two::add(&request(Command::Add, "c1", "eth0"), &mut store).unwrap();
        let pools = Two::pools(&Context::for_test("net", None), &store).unwrap();
        assert_eq!(pools, [Pool::new("net").in_use(1)]);
    }

    #[test]
    fn a_bare_module_says_what_it_cannot_do() {
        let mut store = MemoryStore::default();
        let context = Context::for_test("net", None);
        let err = Bare::allocations(&context, &store).unwrap_err();
        assert_eq!(
            err,
            Error::new(
                code::NOT_IMPLEMENTED,
                "this module does not report allocations"
            )
        );
        assert_eq!(Bare::pools(&context, &store).unwrap_err(), err);
        let err = Bare::check(&request(Command::Check, "c1", "eth0"), &store).unwrap_err();
        assert_eq!(
            err.msg,
            "cannot check the attachment: this module does not report allocations"
        );
        let err = Bare::gc(&request(Command::Gc, "", ""), &[], &mut store).unwrap_err();
        assert_eq!(
            err.msg,
            "cannot collect garbage: this module does not report allocations"
        );
        let import = ImportRequest::for_test("calico", "net", None, Vec::new());
        let err = Bare::import_state(&import, &mut store).unwrap_err();
        assert_eq!(
            (err.code, err.msg.as_str()),
            (
                code::NOT_IMPLEMENTED,
                r#"this module cannot import format "calico""#
            )
        );
        let err = Bare::release_node(&context, "gone", false, &mut store).unwrap_err();
        assert_eq!(err.code, code::NOT_IMPLEMENTED);
        assert!(err.msg.contains(r#"node "gone""#), "{}", err.msg);
    }
}
