//! WASI 0.2 for a guest, linked interface by interface: only what the component
//! imports. Linking all of WASI (`wasmtime_wasi::p2::add_to_linker_async`) defines
//! about 250 functions in a call that uses a dozen; each definition costs a name-map
//! insertion, and together they were a sixth of a warm call's instructions.
//!
//! The table below is the same set `add_to_linker_async` links, with the same
//! implementations: a module sees no difference, and what it may import is exactly
//! what the table names.

use crate::module::host::GuestState;
use wasmtime::component::{HasData, Linker, ResourceTable};
use wasmtime_wasi::cli::{WasiCli, WasiCliView};
use wasmtime_wasi::clocks::{WasiClocks, WasiClocksView};
use wasmtime_wasi::filesystem::{WasiFilesystem, WasiFilesystemView};
use wasmtime_wasi::p2::bindings::{cli, clocks, filesystem, random, sockets};
use wasmtime_wasi::random::{WasiRandom, WasiRandomView};
use wasmtime_wasi::sockets::{WasiSockets, WasiSocketsView};
use wasmtime_wasi::{WasiView, p2::bindings::LinkOptions};
use wasmtime_wasi_io::bindings::wasi::io;

/// `wasi:io`'s host state: the guest's resource table (`wasmtime_wasi`'s own marker
/// for it is private).
struct HasIo;

impl HasData for HasIo {
    type Data<'a> = &'a mut ResourceTable;
}

pub type Link = fn(&mut Linker<GuestState>) -> wasmtime::Result<()>;

/// Every WASI 0.2 interface the host provides, by name without its version (the
/// linker matches any 0.2.x a module imports), with how to link it.
const INTERFACES: &[(&str, Link)] = &[
    ("wasi:io/error", |l| {
        io::error::add_to_linker::<_, HasIo>(l, |t| t.ctx().table)
    }),
    ("wasi:io/poll", |l| {
        io::poll::add_to_linker::<_, HasIo>(l, |t| t.ctx().table)
    }),
    ("wasi:io/streams", |l| {
        io::streams::add_to_linker::<_, HasIo>(l, |t| t.ctx().table)
    }),
    ("wasi:clocks/wall-clock", |l| {
        clocks::wall_clock::add_to_linker::<_, WasiClocks>(l, GuestState::clocks)
    }),
    ("wasi:clocks/monotonic-clock", |l| {
        clocks::monotonic_clock::add_to_linker::<_, WasiClocks>(l, GuestState::clocks)
    }),
    ("wasi:filesystem/types", |l| {
        filesystem::types::add_to_linker::<_, WasiFilesystem>(l, GuestState::filesystem)
    }),
    ("wasi:filesystem/preopens", |l| {
        filesystem::preopens::add_to_linker::<_, WasiFilesystem>(l, GuestState::filesystem)
    }),
    ("wasi:random/random", |l| {
        random::random::add_to_linker::<_, WasiRandom>(l, GuestState::random)
    }),
    ("wasi:random/insecure", |l| {
        random::insecure::add_to_linker::<_, WasiRandom>(l, GuestState::random)
    }),
    ("wasi:random/insecure-seed", |l| {
        random::insecure_seed::add_to_linker::<_, WasiRandom>(l, GuestState::random)
    }),
    ("wasi:cli/exit", |l| {
        cli::exit::add_to_linker::<_, WasiCli>(l, GuestState::cli)
    }),
    ("wasi:cli/environment", |l| {
        cli::environment::add_to_linker::<_, WasiCli>(l, GuestState::cli)
    }),
    ("wasi:cli/stdin", |l| {
        cli::stdin::add_to_linker::<_, WasiCli>(l, GuestState::cli)
    }),
    ("wasi:cli/stdout", |l| {
        cli::stdout::add_to_linker::<_, WasiCli>(l, GuestState::cli)
    }),
    ("wasi:cli/stderr", |l| {
        cli::stderr::add_to_linker::<_, WasiCli>(l, GuestState::cli)
    }),
    ("wasi:cli/terminal-input", |l| {
        cli::terminal_input::add_to_linker::<_, WasiCli>(l, GuestState::cli)
    }),
    ("wasi:cli/terminal-output", |l| {
        cli::terminal_output::add_to_linker::<_, WasiCli>(l, GuestState::cli)
    }),
    ("wasi:cli/terminal-stdin", |l| {
        cli::terminal_stdin::add_to_linker::<_, WasiCli>(l, GuestState::cli)
    }),
    ("wasi:cli/terminal-stdout", |l| {
        cli::terminal_stdout::add_to_linker::<_, WasiCli>(l, GuestState::cli)
    }),
    ("wasi:cli/terminal-stderr", |l| {
        cli::terminal_stderr::add_to_linker::<_, WasiCli>(l, GuestState::cli)
    }),
    ("wasi:sockets/tcp", |l| {
        sockets::tcp::add_to_linker::<_, WasiSockets>(l, GuestState::sockets)
    }),
    ("wasi:sockets/tcp-create-socket", |l| {
        sockets::tcp_create_socket::add_to_linker::<_, WasiSockets>(l, GuestState::sockets)
    }),
    ("wasi:sockets/udp", |l| {
        sockets::udp::add_to_linker::<_, WasiSockets>(l, GuestState::sockets)
    }),
    ("wasi:sockets/udp-create-socket", |l| {
        sockets::udp_create_socket::add_to_linker::<_, WasiSockets>(l, GuestState::sockets)
    }),
    ("wasi:sockets/instance-network", |l| {
        sockets::instance_network::add_to_linker::<_, WasiSockets>(l, GuestState::sockets)
    }),
    ("wasi:sockets/network", |l| {
        let options = LinkOptions::default();
        sockets::network::add_to_linker::<_, WasiSockets>(
            l,
            &(&options).into(),
            GuestState::sockets,
        )
    }),
    ("wasi:sockets/ip-name-lookup", |l| {
        sockets::ip_name_lookup::add_to_linker::<_, WasiSockets>(l, GuestState::sockets)
    }),
];

/// The WASI interface a component imports as `name` (`wasi:io/streams@0.2.3`), if
/// the host provides it: its unversioned name and how to link it.
pub fn interface(name: &str) -> Option<&'static (&'static str, Link)> {
    let unversioned = name.split_once('@').map_or(name, |(n, _)| n);
    INTERFACES
        .iter()
        .find(|(interface, _)| *interface == unversioned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_links_what_add_to_linker_async_links() {
        // Each interface in the table is one wasmtime-wasi's all-of-WASI linker
        // defines: linked again on top of it, it collides with its definitions.
        let engine = wasmtime::Engine::default();
        for (name, link) in INTERFACES {
            let mut all = Linker::<GuestState>::new(&engine);
            wasmtime_wasi::p2::add_to_linker_async(&mut all).unwrap();
            let err = link(&mut all).expect_err(name).to_string();
            assert!(err.contains("defined twice"), "{name}: {err}");
            let mut alone = Linker::<GuestState>::new(&engine);
            link(&mut alone).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        // And the table has every one of them, once: the 27 interfaces
        // `add_to_linker_with_options_async` links in wasmtime-wasi 48.
        let mut names: Vec<&str> = INTERFACES.iter().map(|(n, _)| *n).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 27);
    }

    #[test]
    fn an_interface_is_found_by_its_name_at_any_version() {
        assert!(interface("wasi:io/streams@0.2.3").is_some());
        assert!(interface("wasi:io/streams").is_some());
        assert!(interface("wasi:cli/environment@0.2.0").is_some());
        assert!(interface("wasi:http/types@0.2.0").is_none());
        assert!(interface("wasi:io/stream@0.2.3").is_none());
    }
}
