//! The `wasm-ipam` binary. Run by a container runtime it is a CNI plugin: the call
//! arrives as CNI_* environment variables and a netconf on stdin, and the answer is
//! JSON on stdout plus the exit code. Run with arguments, it serves operators. It
//! carries no compiler: on a cache miss it runs `wasm-ipam-compile` (see
//! `module::compile`).

use clap::Parser;
use std::io::{Read, Write};
use std::process::ExitCode;

fn main() -> ExitCode {
    wasm_ipam::caller::record();
    let operating = std::env::var_os("CNI_COMMAND").is_none() && std::env::args_os().len() > 1;
    report_panics(operating);
    if operating {
        return operator(wasm_ipam::operator::cli::Cli::parse());
    }
    let mut stdin = Vec::new();
    if let Err(e) = std::io::stdin().read_to_end(&mut stdin) {
        let _ = writeln!(std::io::stderr(), "wasm-ipam: cannot read stdin: {e}");
    }
    let reply = wasm_ipam::call::handle(|name| std::env::var(name).ok(), &stdin);
    let (json, status) = match reply.outcome {
        Ok(Some(json)) => (Some(json), ExitCode::SUCCESS),
        Ok(None) => (None, ExitCode::SUCCESS),
        Err(err) => (Some(err.to_json(&reply.cni_version)), ExitCode::FAILURE),
    };
    if let Some(json) = json {
        let _ = writeln!(std::io::stdout().lock(), "{json}");
    }
    status
}

fn operator(cli: wasm_ipam::operator::cli::Cli) -> ExitCode {
    match wasm_ipam::operator::cli::run(cli) {
        // A reader that stopped early (`wasm-ipam list | head`) is no error: like
        // any Unix filter, stop quietly rather than panic in print!.
        Ok(out) => match std::io::stdout().lock().write_all(out.text.as_bytes()) {
            Ok(()) => {
                for note in &out.notes {
                    let _ = writeln!(std::io::stderr(), "wasm-ipam: {note}");
                }
                if out.failed {
                    ExitCode::FAILURE
                } else {
                    ExitCode::SUCCESS
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "wasm-ipam: cannot write the output: {e}");
                ExitCode::FAILURE
            }
        },
        Err(err) => {
            let _ = writeln!(std::io::stderr(), "wasm-ipam: {err}");
            ExitCode::FAILURE
        }
    }
}

/// A panic is a bug, but the runtime must still get an answer it can read: CNI error
/// JSON on stdout (code 104 if it came from the store or its engine, else 109), or an operator a one-line error, then exit 1 (not a
/// panic message and exit 101, nor an abort in the packaged `panic = "abort"` build).
fn report_panics(operating: bool) {
    std::panic::set_hook(Box::new(move |info| {
        let details = info.to_string();
        if operating {
            let _ = writeln!(
                std::io::stderr(),
                "wasm-ipam: internal error (a bug, please report it): {details}"
            );
        } else {
            // The storage engine's failures are the store's (104), wherever they come from.
            let in_store = info.location().is_some_and(|l| {
                ["/store/", "rusqlite", "libsqlite3"]
                    .iter()
                    .any(|part| l.file().contains(part))
            });
            let (code, what) = if in_store {
                (wasm_ipam::error::code::STORE_FAILURE, "the store")
            } else {
                (wasm_ipam::error::code::INTERNAL_ERROR, "wasm-ipam")
            };
            let err = wasm_ipam::error::CniError::new(
                code,
                format!("{what} failed internally (a bug) and the call stopped; the store holds the state from before the call, or from after it if it stopped after the commit"),
            )
            .with_details(details);
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{}", err.to_json(&wasm_ipam::call::reply_version()));
            let _ = out.flush();
        }
        std::process::exit(1);
    }));
}
