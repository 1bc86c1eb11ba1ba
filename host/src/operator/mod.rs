//! The operators' commands: what a person on the node runs, beside the CNI calls the
//! runtime makes, grouped by what the person is doing. `cli` parses the command line
//! and hands each command to the file that owns it; `args` is what several share;
//! `ask` is how a command reaches a network's module (through the same locked
//! pipeline as a call).

pub mod args;
pub mod ask;
pub mod cli;
mod doc_commands;
#[cfg(test)]
mod help_defaults;
/// Supplying and writing modules: `inspect`, `precompile`, `pull`, `push`, `new`, `try`.
pub mod modules;
/// Repairing and releasing: `gc`, `forget`, `release-node`, `reserve`, `unreserve`,
/// `store check | backup | restore`.
pub mod repair;
/// Setting a node up: `install`, `import-host-local`.
pub mod setup;
/// Looking at the state: `list`, `stats`.
pub mod view;
