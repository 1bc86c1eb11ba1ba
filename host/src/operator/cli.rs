//! The operator's command line: `Cli` parses it, `run` hands each command to the file
//! that owns it (its arguments, its run and its output). Those that read or write a
//! node's store take the same host-wide lock as CNI calls, so they see and write a
//! consistent store; those that touch no store (`inspect`, `pull`, `push`, `new`,
//! `try`, `install`) take none (`inspect` and `try` run on a lock and store of their
//! own).

use crate::error::CniError;
use crate::operator::args::Output;
use crate::operator::modules::conform::ConformCommand;
use crate::operator::modules::oci::{pull::PullCommand, push::PushCommand};
use crate::operator::modules::try_call::TryCommand;
use crate::operator::modules::{
    inspect::InspectCommand, new::NewCommand, precompile::PrecompileCommand,
};
use crate::operator::repair::release_node::ReleaseNodeCommand;
use crate::operator::repair::reserve::{ReserveCommand, UnreserveCommand};
use crate::operator::repair::{forget::ForgetCommand, gc::GcCommand, store::StoreCommand};
use crate::operator::setup::kubernetes::KubernetesCommand;
use crate::operator::setup::{import::ImportHostLocalCommand, install::InstallCommand};
use crate::operator::view::{list::ListCommand, stats::StatsCommand};
use clap::{Parser, Subcommand};

/// wasm-ipam: a CNI IPAM plugin that runs IPAM modules as WebAssembly components.
///
/// As a CNI plugin it is run by a container runtime with CNI_COMMAND set; the
/// subcommands below are for operators.
#[derive(Parser, Debug)]
#[command(version, long_version = long_version())]
pub struct Cli {
    #[command(subcommand)]
    pub command: Operation,
}

/// `--version`: the package's version (Cargo's), and what this binary runs: the module
/// contracts (docs/wit-versions.md) and the CNI versions, which say more about a
/// node's binary than its release number does.
fn long_version() -> &'static str {
    use crate::module::contract::Contract;
    static TEXT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| {
        format!(
            "{}\nmodules: {} and {} to {}\nCNI versions: {}",
            env!("CARGO_PKG_VERSION"),
            Contract::V0_1.name(),
            Contract::V0_2 { patch: 0 }.name(),
            Contract::CURRENT.name(),
            crate::cni::SUPPORTED_VERSIONS.join(", ")
        )
    })
}

/// Every operator command, by what the operator is doing: looking at the state,
/// setting a node up, repairing and releasing, supplying and writing modules.
#[derive(Subcommand, Debug)]
pub enum Operation {
    List(ListCommand),
    Stats(StatsCommand),
    // Boxed: its flags make it by far the largest command.
    Install(Box<InstallCommand>),
    #[command(subcommand)]
    Kubernetes(KubernetesCommand),
    ImportHostLocal(ImportHostLocalCommand),
    Gc(GcCommand),
    Forget(ForgetCommand),
    ReleaseNode(ReleaseNodeCommand),
    Reserve(ReserveCommand),
    Unreserve(UnreserveCommand),
    #[command(subcommand)]
    Store(StoreCommand),
    Inspect(InspectCommand),
    Precompile(PrecompileCommand),
    Pull(PullCommand),
    Push(PushCommand),
    New(NewCommand),
    Try(TryCommand),
    Conform(ConformCommand),
}

/// Runs an operator command; returns what to print.
pub fn run(cli: Cli) -> Result<Output, CniError> {
    match cli.command {
        Operation::List(command) => command.run(),
        Operation::Stats(command) => command.run(),
        Operation::Install(command) => (*command).run(),
        Operation::Kubernetes(command) => command.run(),
        Operation::ImportHostLocal(command) => command.run(),
        Operation::Gc(command) => command.run(),
        Operation::Forget(command) => command.run(),
        Operation::ReleaseNode(command) => command.run(),
        Operation::Reserve(command) => command.run(),
        Operation::Unreserve(command) => command.run(),
        Operation::Store(command) => command.run(),
        Operation::Inspect(command) => command.run(),
        Operation::Precompile(command) => command.run(),
        Operation::Pull(command) => command.run(),
        Operation::Push(command) => command.run(),
        Operation::New(command) => command.run(),
        Operation::Try(command) => command.run(),
        Operation::Conform(command) => command.run(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use clap::error::ErrorKind;
    use std::path::PathBuf;

    fn parse(line: &str) -> Result<Operation, clap::Error> {
        Cli::try_parse_from(line.split_whitespace()).map(|cli| cli.command)
    }

    /// The refusal of `line`: its kind, and clap's message.
    fn refused(line: &str) -> (ErrorKind, String) {
        let err = parse(line).expect_err(line);
        (err.kind(), err.to_string())
    }

    /// `--help` lists every command with what it does: none without a line, none
    /// with the Rust doc of its arguments' type instead.
    #[test]
    fn every_command_says_what_it_does() {
        let cli = Cli::command();
        for command in cli.get_subcommands() {
            let about = command
                .get_about()
                .map(|a| a.to_string())
                .unwrap_or_default();
            assert!(
                !about.trim().is_empty() && !about.contains("arguments"),
                "`wasm-ipam {}` says {about:?}",
                command.get_name()
            );
        }
    }

    #[test]
    fn version_is_cargos_with_the_contracts_and_cni_versions_it_runs() {
        let text = Cli::command().render_long_version();
        let mut lines = text.lines();
        assert_eq!(
            lines.next(),
            Some(format!("wasm-ipam {}", env!("CARGO_PKG_VERSION")).as_str())
        );
        assert_eq!(
            lines.next(),
            Some(
                format!(
                    "modules: cni:ipam@0.1.0 and cni:ipam@0.2.0 to {}",
                    crate::module::contract::Contract::CURRENT.name()
                )
                .as_str()
            )
        );
        assert_eq!(
            lines.next(),
            Some(
                format!(
                    "CNI versions: {}",
                    crate::cni::SUPPORTED_VERSIONS.join(", ")
                )
                .as_str()
            )
        );
    }

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn each_command_takes_its_operands_and_defaults() {
        let Operation::Install(install) =
            parse("wasm-ipam install --module m.wasm --subnet 10.85.0.0/24").unwrap()
        else {
            panic!("not install");
        };
        assert_eq!(install.subnet.unwrap().to_string(), "10.85.0.0/24");
        assert_eq!(install.network, "wasm-ipam");
        assert_eq!(install.conf_dir, PathBuf::from("/etc/cni/net.d"));
        assert_eq!(
            install.plugin_dirs,
            [PathBuf::from("/usr/lib/cni"), "/usr/libexec/cni".into()]
        );

        let Operation::ImportHostLocal(import) =
            parse("wasm-ipam import-host-local --network a --network b --module m.wasm").unwrap()
        else {
            panic!("not import-host-local");
        };
        assert_eq!(import.network, ["a", "b"]);
        assert_eq!(import.data_dir, PathBuf::from("/var/lib/cni/networks"));

        let Operation::Gc(gc) = parse("wasm-ipam gc --all-networks --dry-run").unwrap() else {
            panic!("not gc");
        };
        assert!(gc.all_networks && gc.dry_run && !gc.json);
        assert_eq!(
            gc.store.lock_timeout,
            crate::operator::args::LOCK_TIMEOUT_SECONDS
        );

        let Operation::ReleaseNode(release) =
            parse("wasm-ipam release-node node-b --netconf n.conflist --window 1h").unwrap()
        else {
            panic!("not release-node");
        };
        assert_eq!(release.node, "node-b");
        assert_eq!(*release.window, std::time::Duration::from_secs(3600));

        let Operation::Reserve(reserve) =
            parse("wasm-ipam reserve 10.80.3.0/28 --netconf n.conflist --note vip").unwrap()
        else {
            panic!("not reserve");
        };
        assert_eq!(
            (reserve.cidr.as_str(), reserve.note.as_str()),
            ("10.80.3.0/28", "vip")
        );

        let Operation::Try(tried) =
            parse("wasm-ipam try m.wasm add --set start=10.99.0.10 --set prefixLen=24").unwrap()
        else {
            panic!("not try");
        };
        assert_eq!(tried.set, ["start=10.99.0.10", "prefixLen=24"]);
        assert_eq!((tried.id.as_str(), tried.ifname.as_str()), ("pod1", "eth0"));

        let Operation::Push(push) =
            parse("wasm-ipam push m.wasm oci://r/acme/m:1.0 --signature m.wasm.minisig").unwrap()
        else {
            panic!("not push");
        };
        assert_eq!(push.reference, "oci://r/acme/m:1.0");

        let Operation::New(new) = parse("wasm-ipam new my-ipam --lang go").unwrap() else {
            panic!("not new");
        };
        assert_eq!(new.name, "my-ipam");

        for line in [
            "wasm-ipam list --json",
            "wasm-ipam stats --prometheus --netconf n.conflist",
            "wasm-ipam forget old-net --force",
            "wasm-ipam unreserve 10.80.0.10 --netconf n.conflist",
            "wasm-ipam store check",
            "wasm-ipam inspect m.wasm --no-cache --json",
            "wasm-ipam precompile m.wasm --compile-memory-mib 512",
            "wasm-ipam pull oci://r/acme/m:1.0 --json",
        ] {
            parse(line).unwrap_or_else(|e| panic!("{line}: {e}"));
        }
    }

    #[test]
    fn what_a_command_cannot_mean_is_refused_naming_it() {
        let cases = [
            (
                "wasm-ipam install --module m.wasm",
                ErrorKind::MissingRequiredArgument,
                "--subnet",
            ),
            (
                "wasm-ipam install --module m.wasm --subnet 10.85.0.0",
                ErrorKind::ValueValidation,
                "--subnet",
            ),
            (
                "wasm-ipam reserve 10.80.0.10",
                ErrorKind::MissingRequiredArgument,
                "--netconf",
            ),
            (
                "wasm-ipam gc",
                ErrorKind::MissingRequiredArgument,
                "--network",
            ),
            (
                "wasm-ipam gc --all-networks --network a",
                ErrorKind::ArgumentConflict,
                "--network",
            ),
            (
                "wasm-ipam gc --network a --runtime-endpoint unix:///run/c.sock --valid-from v.json",
                ErrorKind::ArgumentConflict,
                "--valid-from",
            ),
            (
                "wasm-ipam stats --prometheus --json",
                ErrorKind::ArgumentConflict,
                "--json",
            ),
            (
                "wasm-ipam import-host-local --network a --module m.wasm --netconf n.conf",
                ErrorKind::ArgumentConflict,
                "--netconf",
            ),
            (
                "wasm-ipam try m.wasm FOO",
                ErrorKind::InvalidValue,
                "ADD, DEL, CHECK, GC, STATUS",
            ),
            (
                "wasm-ipam new m --lang java",
                ErrorKind::InvalidValue,
                "rust, python, go",
            ),
            (
                "wasm-ipam release-node n --netconf n.conf --window soon",
                ErrorKind::ValueValidation,
                "--window",
            ),
            (
                "wasm-ipam list --lock-timeout soon",
                ErrorKind::ValueValidation,
                "--lock-timeout",
            ),
            (
                "wasm-ipam list --no-such-flag",
                ErrorKind::UnknownArgument,
                "--no-such-flag",
            ),
        ];
        for (line, kind, named) in cases {
            let (got, message) = refused(line);
            assert_eq!(got, kind, "{line}: {message}");
            assert!(message.contains(named), "{line}: {message}");
        }
    }
}
