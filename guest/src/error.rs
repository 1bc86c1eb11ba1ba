//! CNI error codes and constructors for [`Error`], so modules report failures the way
//! the CNI spec and runtimes expect.

use crate::Error;

/// CNI error codes: the spec's, the host's (which a module may not return: the host
/// wraps them) and the SDK's, from the one table the host shares. A module's own codes
/// start at [`code::MODULE_SPECIFIC`].
pub use wasm_ipam_codes as code;

impl Error {
    pub fn new(code: u32, msg: impl Into<String>) -> Self {
        Error {
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    /// Code 7: the network configuration is invalid.
    pub fn invalid_config(msg: impl Into<String>) -> Self {
        Self::new(code::INVALID_NETWORK_CONFIG, msg)
    }
}
