//! Leveled messages for the host's log file.

pub use crate::bindings::cni::ipam::log::Level;
use crate::bindings::cni::ipam::log::log;

pub fn debug(message: &str) {
    log(Level::Debug, message)
}

pub fn info(message: &str) {
    log(Level::Info, message)
}

pub fn warn(message: &str) {
    log(Level::Warn, message)
}

pub fn error(message: &str) {
    log(Level::Error, message)
}
