//! The one place the WIT worlds become Rust: `cni:ipam@0.2.5` (current, `wit/ipam.wit`)
//! and `cni:ipam@0.1.0` (`wit/v0.1.0/`, still run; see docs/wit-versions.md). A 0.2.0
//! to 0.2.4 module needs no bindings of its own: each later patch only adds optional
//! exports and functions an older module does not import, and wasmtime finds the
//! older exports and serves their imports through 0.2.5's by their semver-compatible
//! names (`…@0.2`). The host
//! works in 0.2's types; a 0.1.0 module is reached through [`v0_1`]'s conversions
//! (`module/host/v0_1.rs`). Imports are trappable so a host call made after the
//! deadline (or failing in the store) stops the guest; exports are async so the host
//! can bound the whole call by the time left.

mod current {
    wasmtime::component::bindgen!({
        path: "../wit/ipam.wit",
        world: "ipam-module",
        imports: { default: trappable },
        exports: { default: async },
    });
}

/// `cni:ipam@0.1.0`: its imports are served by forwarding to 0.2.0's host
/// implementations; its handler is called with a request converted down.
pub mod v0_1 {
    mod generated {
        wasmtime::component::bindgen!({
            path: "../wit/v0.1.0/ipam.wit",
            world: "ipam-module",
            imports: { default: trappable },
            exports: { default: async },
        });
    }
    pub use generated::cni::ipam::{deadline, log, store, types};
    pub use generated::exports::cni::ipam::handler;
}

pub use current::cni::ipam::{deadline, log, readiness, store, types};
pub use current::exports::cni::ipam::{
    capabilities, handler, inspect, migrate, nodes, reservations, usage, wide_usage,
};
