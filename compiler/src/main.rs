//! `wasm-ipam-compile`: wasm-ipam's compiler child. A component on stdin, its
//! serialised artifact on stdout; exit code 2 for input that is not a valid
//! component. `wasm-ipam` runs it on a cache miss under the call's compile limits
//! (`module::compile`), so the per-call binary carries no compiler (Cranelift is
//! most of a binary's text, and a warm call never runs it).

use std::io::{Read, Write};
use std::process::ExitCode;
use wasm_ipam::module::compile::INVALID_COMPONENT;
use wasmtime::Engine;
use wasmtime::component::Component;

fn main() -> ExitCode {
    let mut module = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut module) {
        eprintln!("cannot read the module: {e}");
        return ExitCode::FAILURE;
    }
    let engine = match Engine::new(&wasm_ipam::module::engine::config()) {
        Ok(engine) => engine,
        Err(e) => {
            eprintln!("cannot set up the compiler: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let artifact = match Component::from_binary(&engine, &module).and_then(|c| c.serialize()) {
        Ok(artifact) => artifact,
        Err(e) => {
            eprintln!("{e:#}");
            return ExitCode::from(INVALID_COMPONENT);
        }
    };
    match std::io::stdout().lock().write_all(&artifact) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("cannot write the artifact: {e}");
            ExitCode::FAILURE
        }
    }
}
