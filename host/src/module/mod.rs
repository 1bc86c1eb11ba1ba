//! A module, from file to running instance: reading and compiling it (bounded, once per
//! digest, cached), and asking it one question ([`question`], one file per exported
//! interface) with only the interfaces the host provides (`host/`, one file per
//! imported one).

pub(crate) mod answer;
pub mod artifact;
pub(crate) mod bindings;
pub mod cache;
pub mod compile;
pub mod contract;
pub mod engine;
pub mod exports;
pub mod file;
pub(crate) mod host;
pub mod instance;
pub mod question;
mod ticker;
mod trap;
pub mod trust;
pub(crate) mod wasi;
