//! [`export_module!`](crate::export_module): a type implementing
//! [`IpamModule`] becomes this component's `handler`, `inspect`, `migrate`, `nodes`,
//! `capabilities`, `reservations`, `usage` and `wide-usage` exports, each call wrapped into the SDK's types and given the
//! host's store.

use crate::bindings::cni::ipam::types::Request as RawRequest;
use crate::bindings::exports::cni::ipam::inspect::Context as RawContext;
use crate::bindings::exports::cni::ipam::nodes::Context as RawNodesContext;
use crate::bindings::exports::cni::ipam::usage::PoolUsage as RawPoolUsage;
use crate::bindings::exports::cni::ipam::wide_usage::PoolUsage as RawWidePoolUsage;
use crate::store::HostStore;
use crate::{
    Allocation, Attachment, Context, Error, ImportReport, ImportRequest, IpamModule, IpamResult,
    Pool, PoolUsage, ReleaseReport, Request, Reservation, StateFile,
};

pub fn add<M: IpamModule>(raw: RawRequest) -> Result<IpamResult, Error> {
    M::add(&Request::new(raw)?, &mut HostStore)
}
pub fn del<M: IpamModule>(raw: RawRequest) -> Result<(), Error> {
    M::del(&Request::new(raw)?, &mut HostStore)
}
pub fn check<M: IpamModule>(raw: RawRequest) -> Result<(), Error> {
    M::check(&Request::new(raw)?, &HostStore)
}
pub fn gc<M: IpamModule>(raw: RawRequest, valid: Vec<Attachment>) -> Result<(), Error> {
    M::gc(&Request::new(raw)?, &valid, &mut HostStore)
}
/// A host of 0.2.5 or later answers STATUS itself and never calls this; the export
/// stays in the world for hosts of earlier versions, which refuse a 0.2.5 module.
pub fn status<M: IpamModule>(raw: RawRequest) -> Result<(), Error> {
    Request::new(raw).map(|_| ())
}
pub fn allocations<M: IpamModule>(raw: RawContext) -> Result<Vec<Allocation>, Error> {
    M::allocations(&Context::new(raw)?, &HostStore)
}
pub fn pools<M: IpamModule>(raw: RawContext) -> Result<Vec<Pool>, Error> {
    M::pools(&Context::new(raw)?, &HostStore)
}
pub fn import_state<M: IpamModule>(
    format: String,
    network_name: String,
    config: Option<String>,
    files: Vec<StateFile>,
) -> Result<ImportReport, Error> {
    let import = ImportRequest::new(format, network_name, config, files)?;
    M::import_state(&import, &mut HostStore)
}

pub fn release_node<M: IpamModule>(
    raw: RawNodesContext,
    node: String,
    dry_run: bool,
) -> Result<ReleaseReport, Error> {
    M::release_node(&Context::of_nodes(raw)?, &node, dry_run, &mut HostStore)
}

pub fn reserve<M: IpamModule>(
    raw: RawNodesContext,
    cidr: String,
    note: String,
    force: bool,
) -> Result<Reservation, Error> {
    M::reserve(
        &Context::of_nodes(raw)?,
        &cidr,
        &note,
        force,
        &mut HostStore,
    )
}
pub fn unreserve<M: IpamModule>(raw: RawNodesContext, cidr: String) -> Result<Reservation, Error> {
    M::unreserve(&Context::of_nodes(raw)?, &cidr, &mut HostStore)
}
pub fn reservations<M: IpamModule>(raw: RawNodesContext) -> Result<Vec<Reservation>, Error> {
    M::reservations(&Context::of_nodes(raw)?, &HostStore)
}
pub fn usage<M: IpamModule>(raw: RawContext) -> Result<Vec<RawPoolUsage>, Error> {
    Ok(M::usage(&Context::new(raw)?, &HostStore)?
        .iter()
        .map(PoolUsage::to_usage)
        .collect())
}
pub fn wide_usage<M: IpamModule>(raw: RawContext) -> Result<Vec<RawWidePoolUsage>, Error> {
    Ok(M::usage(&Context::new(raw)?, &HostStore)?
        .iter()
        .map(PoolUsage::to_wide_usage)
        .collect())
}

/// Natively the exports are left out; this keeps the check that the type is a module.
pub const fn is_module<M: IpamModule>() {}

/// Exports a type implementing [`IpamModule`] as this component's
/// `handler`, `inspect`, `migrate`, `nodes`, `capabilities`, `reservations`, `usage` and
/// `wide-usage`.
///
/// Only a wasm32 build exports anything. Natively (`cargo test` of a module) the
/// macro only checks that the type implements `IpamModule`, so a module invokes it
/// unconditionally and still unit-tests natively.
#[macro_export]
macro_rules! export_module {
    ($module:ty) => {
        #[cfg(target_arch = "wasm32")]
        const _: () = {
            use $crate::bindings::cni::ipam::types as __types;
            use $crate::bindings::exports::cni::ipam::{
                capabilities as __capabilities, handler as __handler, inspect as __inspect,
                migrate as __migrate, nodes as __nodes, reservations as __reservations,
                usage as __usage, wide_usage as __wide_usage,
            };
            struct __WasmIpamExport;
            impl __handler::Guest for __WasmIpamExport {
                fn add(r: __types::Request) -> Result<__types::IpamResult, __types::Error> {
                    $crate::__export::add::<$module>(r)
                }
                fn del(r: __types::Request) -> Result<(), __types::Error> {
                    $crate::__export::del::<$module>(r)
                }
                fn check(r: __types::Request) -> Result<(), __types::Error> {
                    $crate::__export::check::<$module>(r)
                }
                fn gc(
                    r: __types::Request,
                    valid: Vec<__types::Attachment>,
                ) -> Result<(), __types::Error> {
                    $crate::__export::gc::<$module>(r, valid)
                }
                fn status(r: __types::Request) -> Result<(), __types::Error> {
                    $crate::__export::status::<$module>(r)
                }
            }
            impl __inspect::Guest for __WasmIpamExport {
                fn allocations(
                    c: __inspect::Context,
                ) -> Result<Vec<__inspect::Allocation>, __types::Error> {
                    $crate::__export::allocations::<$module>(c)
                }
                fn pools(c: __inspect::Context) -> Result<Vec<__inspect::Pool>, __types::Error> {
                    $crate::__export::pools::<$module>(c)
                }
            }
            impl __migrate::Guest for __WasmIpamExport {
                fn import_state(
                    format: String,
                    network_name: String,
                    config: Option<String>,
                    files: Vec<__migrate::StateFile>,
                ) -> Result<__migrate::ImportReport, __types::Error> {
                    $crate::__export::import_state::<$module>(format, network_name, config, files)
                }
            }
            impl __nodes::Guest for __WasmIpamExport {
                fn release_node(
                    c: __nodes::Context,
                    node: String,
                    dry_run: bool,
                ) -> Result<__nodes::ReleaseReport, __types::Error> {
                    $crate::__export::release_node::<$module>(c, node, dry_run)
                }
            }
            impl __reservations::Guest for __WasmIpamExport {
                fn reserve(
                    c: __nodes::Context,
                    cidr: String,
                    note: String,
                    force: bool,
                ) -> Result<__reservations::Reservation, __types::Error> {
                    $crate::__export::reserve::<$module>(c, cidr, note, force)
                }
                fn unreserve(
                    c: __nodes::Context,
                    cidr: String,
                ) -> Result<__reservations::Reservation, __types::Error> {
                    $crate::__export::unreserve::<$module>(c, cidr)
                }
                fn all(
                    c: __nodes::Context,
                ) -> Result<Vec<__reservations::Reservation>, __types::Error> {
                    $crate::__export::reservations::<$module>(c)
                }
            }
            impl __usage::Guest for __WasmIpamExport {
                fn pools(c: __inspect::Context) -> Result<Vec<__usage::PoolUsage>, __types::Error> {
                    $crate::__export::usage::<$module>(c)
                }
            }
            impl __wide_usage::Guest for __WasmIpamExport {
                fn pools(
                    c: __inspect::Context,
                ) -> Result<Vec<__wide_usage::PoolUsage>, __types::Error> {
                    $crate::__export::wide_usage::<$module>(c)
                }
            }
            impl __capabilities::Guest for __WasmIpamExport {
                fn functions() -> Vec<__capabilities::Function> {
                    $crate::capabilities::<$module>()
                }
            }
    $crate::bindings::export!(__WasmIpamExport with_types_in $crate::bindings);
        };
        #[cfg(not(target_arch = "wasm32"))]
        const _: () = $crate::__export::is_module::<$module>();
        impl $crate::Exported for $module {}
    };
}
