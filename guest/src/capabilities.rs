//! Which of its exported functions a module implements itself, for the host's
//! `cni:ipam/capabilities` export (`wasm-ipam inspect`): every SDK module exports all
//! of `handler`, `inspect`, `migrate`, `nodes`, `reservations` and `usage`, so only the module can say which
//! answers are its own, which are defaults built from them, and which are defaults
//! that answer "not implemented" (code 121).

use crate::IpamModule;
pub use crate::bindings::exports::cni::ipam::capabilities::{Function, Origin};

/// Each exported function, named as in the WIT (`handler.check`), with where its
/// answer comes from: `M`'s own code (its impl, as [`#[ipam_module]`](crate::ipam_module)
/// recorded it) or the [`IpamModule`] default, which works only if what it is built
/// from is implemented.
pub fn capabilities<M: IpamModule>() -> Vec<Function> {
    let own = |name: &str| M::IMPLEMENTED_BY_MODULE.contains(&name);
    // check, gc and pools are built on allocations; status answers ready (a host of
    // 0.2.5 or later answers STATUS itself and does not call it).
    let from_allocations = if own("allocations") {
        Origin::Derived
    } else {
        Origin::NotImplemented
    };
    // usage is built on pools, which is the module's own or built on allocations.
    let usage = if own("pools") {
        Origin::Derived
    } else {
        from_allocations
    };
    [
        ("handler.add", "add", Origin::Module),
        ("handler.del", "del", Origin::Module),
        ("handler.check", "check", from_allocations),
        ("handler.gc", "gc", from_allocations),
        ("handler.status", "status", Origin::Derived),
        ("inspect.allocations", "allocations", Origin::NotImplemented),
        ("inspect.pools", "pools", from_allocations),
        (
            "migrate.import-state",
            "import_state",
            Origin::NotImplemented,
        ),
        ("nodes.release-node", "release_node", Origin::NotImplemented),
        ("reservations.reserve", "reserve", Origin::NotImplemented),
        (
            "reservations.unreserve",
            "unreserve",
            Origin::NotImplemented,
        ),
        ("reservations.all", "reservations", Origin::NotImplemented),
        ("usage.pools", "usage", usage),
        ("wide-usage.pools", "usage", usage),
    ]
    .into_iter()
    .map(|(name, function, default)| Function {
        name: name.to_string(),
        origin: if own(function) {
            Origin::Module
        } else {
            default
        },
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::{Allocation, Context, Error, IpamResult, Request};

    fn origins<M: IpamModule>() -> Vec<(String, Origin)> {
        capabilities::<M>()
            .into_iter()
            .map(|f| (f.name, f.origin))
            .collect()
    }

    fn origin<M: IpamModule>(name: &str) -> Origin {
        origins::<M>()
            .into_iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{name} not listed"))
            .1
    }

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

    struct Listed;

    crate::export_module!(Listed);
    #[crate::ipam_module]
    impl IpamModule for Listed {
        fn add(_: &Request, _: &mut impl Store) -> Result<IpamResult, Error> {
            Ok(IpamResult::default())
        }
        fn del(_: &Request, _: &mut impl Store) -> Result<(), Error> {
            Ok(())
        }
        fn allocations(_: &Context, _: &impl Store) -> Result<Vec<Allocation>, Error> {
            // A nested fn is not one of the impl's own.
            fn import_state() {}
            import_state();
            Ok(Vec::new())
        }
    }

    #[test]
    fn a_bare_module_says_its_defaults_do_not_implement_what_needs_allocations() {
        assert_eq!(origin::<Bare>("handler.add"), Origin::Module);
        assert_eq!(origin::<Bare>("handler.check"), Origin::NotImplemented);
        assert_eq!(origin::<Bare>("handler.gc"), Origin::NotImplemented);
        assert_eq!(origin::<Bare>("handler.status"), Origin::Derived);
        assert_eq!(origin::<Bare>("inspect.pools"), Origin::NotImplemented);
        assert_eq!(
            origin::<Bare>("migrate.import-state"),
            Origin::NotImplemented
        );
        assert_eq!(origin::<Bare>("nodes.release-node"), Origin::NotImplemented);
        assert_eq!(
            origin::<Bare>("reservations.reserve"),
            Origin::NotImplemented
        );
        assert_eq!(origin::<Bare>("reservations.all"), Origin::NotImplemented);
        assert_eq!(origin::<Bare>("usage.pools"), Origin::NotImplemented);
        assert_eq!(origin::<Bare>("wide-usage.pools"), Origin::NotImplemented);
        assert_eq!(
            origins::<Bare>().len(),
            14,
            "every exported function is listed"
        );
    }

    #[test]
    fn allocations_make_the_defaults_built_on_it_work_and_nothing_else() {
        assert_eq!(origin::<Listed>("inspect.allocations"), Origin::Module);
        assert_eq!(origin::<Listed>("handler.check"), Origin::Derived);
        assert_eq!(origin::<Listed>("handler.gc"), Origin::Derived);
        assert_eq!(origin::<Listed>("inspect.pools"), Origin::Derived);
        assert_eq!(
            origin::<Listed>("migrate.import-state"),
            Origin::NotImplemented
        );
    }
}
