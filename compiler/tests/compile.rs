//! The compiler as wasm-ipam runs it: a component on stdin, an artifact that the
//! host's engine loads on stdout; exit code 2 for input that is not a component.
//! (Building this test also puts `wasm-ipam-compile` next to the host's binary under
//! test, where the host's integration tests expect it.)

use std::io::Write;
use std::process::{Command, Stdio};
use wasmtime::Engine;
use wasmtime::component::Component;

fn compile(input: &[u8]) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_wasm-ipam-compile"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn a_component_becomes_an_artifact_the_hosts_engine_loads() {
    let component = wat::parse_str("(component (core module (func (export \"f\"))))").unwrap();
    let out = compile(&component);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let engine = Engine::new(&wasm_ipam::module::engine::config()).unwrap();
    // SAFETY: the artifact was just produced by our compiler for this engine config.
    unsafe { Component::deserialize(&engine, &out.stdout) }.expect("the host loads it");
}

#[test]
fn input_that_is_not_a_component_exits_2() {
    let out = compile(b"\0asm not really");
    assert_eq!(
        out.status.code(),
        Some(i32::from(wasm_ipam::module::compile::INVALID_COMPONENT))
    );
    assert!(out.stdout.is_empty());
}
