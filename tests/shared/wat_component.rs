//! Components made in the test itself from a few lines of core WAT, for behaviour no
//! real module would show on purpose (a trap after a write, a loop in a start
//! function, many memories): the pipeline's unit tests and the hostile-module suite
//! build them the same way, written once and included in each by `#[path]`.

/// The exports of `cni:ipam/handler@0.1.0`, every one the core module's `$handler`.
pub const HANDLER_EXPORTS: &str = r#"
          (export "cni:ipam/handler@0.1.0#add" (func $handler))
          (export "cni:ipam/handler@0.1.0#del" (func $handler))
          (export "cni:ipam/handler@0.1.0#check" (func $handler))
          (export "cni:ipam/handler@0.1.0#gc" (func $handler))
          (export "cni:ipam/handler@0.1.0#status" (func $handler))"#;

/// The component of the `ipam-module` world (wit/v0.1.0) around the core module
/// `core_wat`, made with wit-component as `wasm-tools component new` makes one.
pub fn component_from_core_wat(core_wat: &str) -> Vec<u8> {
    let mut module = wat::parse_str(core_wat).unwrap();
    let mut resolve = wit_parser::Resolve::default();
    let package = resolve
        .push_file(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../wit/v0.1.0/ipam.wit"
        ))
        .unwrap();
    let world = resolve
        .select_world(&[package], Some("ipam-module"))
        .unwrap();
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .unwrap();
    wit_component::ComponentEncoder::default()
        .module(&module)
        .unwrap()
        .validate(true)
        .encode()
        .unwrap()
}
