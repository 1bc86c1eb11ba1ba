//! CNI error codes and constructors for [`Error`], so modules report failures the way
//! the CNI spec and runtimes expect.

use crate::Error;

/// Error codes from the CNI spec; 100 and above are plugin-specific.
pub mod code {
    pub const INCOMPATIBLE_CNI_VERSION: u32 = 1;
    pub const UNSUPPORTED_FIELD: u32 = 2;
    pub const UNKNOWN_CONTAINER: u32 = 3;
    pub const INVALID_ENVIRONMENT_VARIABLES: u32 = 4;
    pub const IO_FAILURE: u32 = 5;
    pub const DECODING_FAILURE: u32 = 6;
    pub const INVALID_NETWORK_CONFIG: u32 = 7;
    pub const TRY_AGAIN_LATER: u32 = 11;
    pub const PLUGIN_NOT_AVAILABLE: u32 = 50;
    pub const PLUGIN_NOT_AVAILABLE_LIMITED_CONNECTIVITY: u32 = 51;
    /// First code a module may use for its own failures.
    pub const PLUGIN_SPECIFIC: u32 = 100;
}

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
