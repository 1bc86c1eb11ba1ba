//! The one place the WIT world is turned into Rust: everything else in the SDK
//! wraps these generated items.

wit_bindgen::generate!({
    path: "../wit",
    world: "ipam-module",
    pub_export_macro: true,
    default_bindings_module: "wasm_ipam_guest::bindings",
});
