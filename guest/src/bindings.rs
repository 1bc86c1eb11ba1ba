//! The one place the WIT world is turned into Rust: everything else in the SDK
//! wraps these generated items.
//!
//! Records get `PartialEq`, `Eq` and `Default`, so module tests compare results whole
//! and the SDK's builders start from an empty value. The derives are left off the enums
//! (no variant is a natural default; wit-bindgen gives them `PartialEq` itself), off
//! `request`, which holds one, and off inspect's `context` (the host always sends
//! both), and off `error`: code 0 is no error, so the SDK compares errors by hand; and off
//! usage's `kind` and `pool-usage`, which has one ([`crate::PoolUsage`]'s constructors
//! start it).

wit_bindgen::generate!({
    path: "../wit",
    world: "ipam-module",
    pub_export_macro: true,
    default_bindings_module: "wasm_ipam_guest::bindings",
    additional_derives: [PartialEq, Eq, Default],
    additional_derives_ignore: ["command", "level", "store-error", "request", "error", "context", "origin", "function", "kind", "pool-usage"],
});
