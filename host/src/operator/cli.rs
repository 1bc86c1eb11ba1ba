//! The operator's command line: `Cli` parses it, `run` hands each command to the file
//! that owns it (its arguments, its run and its output). Those that read or write a
//! node's store take the same host-wide lock as CNI calls, so they see and write a
//! consistent store; those that touch no store (`inspect`, `pull`, `push`, `new`,
//! `try`, `install`) take none (`inspect` and `try` run on a lock and store of their
//! own).

use crate::error::CniError;
use crate::operator::args::Output;
use crate::operator::modules::oci::{pull::PullCommand, push::Push};
use crate::operator::modules::try_call::TryCall;
use crate::operator::modules::{inspect::Inspect, new::New, precompile::Precompile};
use crate::operator::repair::release_node::ReleaseNodeCommand;
use crate::operator::repair::reserve::{ReserveCommand, UnreserveCommand};
use crate::operator::repair::{forget::Forget, gc::GcCommand, store::StoreCommand};
use crate::operator::setup::{import::ImportHostLocal, install::Install};
use crate::operator::view::{list::List, stats::Stats};
use clap::{Parser, Subcommand};

/// wasm-ipam: a CNI IPAM plugin that runs IPAM modules as WebAssembly components.
///
/// As a CNI plugin it is run by a container runtime with CNI_COMMAND set; the
/// subcommands below are for operators.
#[derive(Parser, Debug)]
#[command(version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Operation,
}

/// Every operator command, by what the operator is doing: looking at the state,
/// setting a node up, repairing and releasing, supplying and writing modules.
#[derive(Subcommand, Debug)]
pub enum Operation {
    List(List),
    Stats(Stats),
    Install(Install),
    ImportHostLocal(ImportHostLocal),
    Gc(GcCommand),
    Forget(Forget),
    ReleaseNode(ReleaseNodeCommand),
    Reserve(ReserveCommand),
    Unreserve(UnreserveCommand),
    #[command(subcommand)]
    Store(StoreCommand),
    Inspect(Inspect),
    Precompile(Precompile),
    Pull(PullCommand),
    Push(Push),
    New(New),
    Try(TryCall),
}

/// Runs an operator command; returns what to print.
pub fn run(cli: Cli) -> Result<Output, CniError> {
    match cli.command {
        Operation::List(command) => command.run(),
        Operation::Stats(command) => command.run(),
        Operation::Install(command) => command.run(),
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
    }
}
