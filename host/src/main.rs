//! The `wasm-ipam` binary: a CNI plugin, so the call arrives as CNI_* environment
//! variables and a netconf on stdin; the answer is JSON on stdout and the exit code.

use std::io::{Read, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut stdin = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut stdin) {
        eprintln!("wasm-ipam: cannot read stdin: {e}");
    }
    let reply = wasm_ipam::plugin::handle(|name| std::env::var(name).ok(), &stdin);
    let (json, status) = match reply.outcome {
        Ok(Some(json)) => (Some(json), ExitCode::SUCCESS),
        Ok(None) => (None, ExitCode::SUCCESS),
        Err(err) => (Some(err.to_json(&reply.cni_version)), ExitCode::FAILURE),
    };
    if let Some(json) = json {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{json}");
    }
    status
}
