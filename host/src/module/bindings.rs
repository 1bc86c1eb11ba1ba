//! The one place the WIT world becomes Rust. Imports are trappable so a host call
//! made after the deadline (or failing in the store) stops the guest; exports are
//! async so the host can bound the whole call by the time left.

mod generated {
    wasmtime::component::bindgen!({
        path: "../wit",
        world: "ipam-module",
        imports: { default: trappable },
        exports: { default: async },
    });
}

pub use generated::IpamModulePre;
pub use generated::cni::ipam::{deadline, log, store, types};
