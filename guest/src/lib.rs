//! SDK for writing wasm-ipam IPAM modules (WebAssembly components the `wasm-ipam` CNI
//! plugin runs under its host-wide lock and post-grant deadline).
//!
//! A module implements [`IpamModule`] and exports it with [`export_module!`]:
//!
//! ```ignore
//! struct MyIpam;
//! impl wasm_ipam_guest::IpamModule for MyIpam { /* add, del, check, gc, status */ }
//! wasm_ipam_guest::export_module!(MyIpam);
//! ```
//!
//! The module is instantiated only after the host holds the host-wide IPAM lock, and
//! [`deadline`] measures the budget from that grant. Store writes made through
//! [`store`] are staged and committed by the host only when the handler returns `Ok`.
//! Build with `cargo build --target wasm32-wasip2`.

pub mod bindings;
pub mod deadline;
pub mod error;
pub mod log;
mod request;
pub mod store;

pub use bindings::cni::ipam::types::{
    Attachment, Command, Dns, Error, IpConfig, IpamResult, Route, WallInstant,
};
pub use request::Request;
pub use store::Store;

/// What a module implements: one function per CNI command.
///
/// Each returns a CNI [`Error`] on failure; the host prints it for the runtime and
/// discards the call's store writes.
pub trait IpamModule {
    /// Allocates addresses for `request.container_id()` / `request.ifname()`.
    fn add(request: &Request) -> Result<IpamResult, Error>;
    /// Releases what ADD allocated; succeeds when nothing is allocated.
    fn del(request: &Request) -> Result<(), Error>;
    /// Verifies the attachment still holds what ADD allocated.
    fn check(request: &Request) -> Result<(), Error>;
    /// Releases everything not held by one of `valid_attachments`.
    fn gc(request: &Request, valid_attachments: &[Attachment]) -> Result<(), Error>;
    /// Reports whether the module can serve ADDs (CNI STATUS).
    fn status(request: &Request) -> Result<(), Error>;
}

/// Glue used by [`export_module!`]; not part of the public API.
#[doc(hidden)]
pub mod __export {
    use super::*;
    use bindings::cni::ipam::types::Request as RawRequest;

    pub fn add<M: IpamModule>(raw: RawRequest) -> Result<IpamResult, Error> {
        M::add(&Request::new(raw)?)
    }
    pub fn del<M: IpamModule>(raw: RawRequest) -> Result<(), Error> {
        M::del(&Request::new(raw)?)
    }
    pub fn check<M: IpamModule>(raw: RawRequest) -> Result<(), Error> {
        M::check(&Request::new(raw)?)
    }
    pub fn gc<M: IpamModule>(raw: RawRequest, valid: Vec<Attachment>) -> Result<(), Error> {
        M::gc(&Request::new(raw)?, &valid)
    }
    pub fn status<M: IpamModule>(raw: RawRequest) -> Result<(), Error> {
        M::status(&Request::new(raw)?)
    }
}

/// Exports a type implementing [`IpamModule`] as this component's `handler`.
#[macro_export]
macro_rules! export_module {
    ($module:ty) => {
        const _: () = {
            use $crate::bindings::cni::ipam::types as __types;
            struct __WasmIpamExport;
            impl $crate::bindings::exports::cni::ipam::handler::Guest for __WasmIpamExport {
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
    $crate::bindings::export!(__WasmIpamExport with_types_in $crate::bindings);
        };
    };
}
