//! CNI error codes and constructors for [`Error`], so modules report failures the way
//! the CNI spec and runtimes expect.

use crate::Error;

/// CNI error codes: the spec's, the host's (which a module may not return: the host
/// wraps them) and the SDK's, from the one table the host shares. A module's own codes
/// start at [`code::MODULE_SPECIFIC`].
pub use wasm_ipam_codes as code;

impl Error {
    /// An error with `code` and a message for the runtime's user.
    ///
    /// ```
    /// use wasm_ipam_guest::{Error, error::code};
    ///
    /// let err = Error::new(code::MODULE_SPECIFIC, "pool empty").with_details("10.0.0.0/29");
    /// assert_eq!((err.code, err.msg.as_str(), err.details.as_str()), (140, "pool empty", "10.0.0.0/29"));
    /// ```
    pub fn new(code: u32, msg: impl Into<String>) -> Self {
        Error {
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    /// Replaces the error's details (CNI's `details`: what an operator needs next).
    pub fn with_details(mut self, details: impl Into<String>) -> Self {
        self.details = details.into();
        self
    }

    /// Code 7: the network configuration is invalid.
    pub fn invalid_config(msg: impl Into<String>) -> Self {
        Self::new(code::INVALID_NETWORK_CONFIG, msg)
    }

    /// Code 121: the module does not implement what it was asked for. The SDK's
    /// defaults answer with it for an inspect or migrate operation a module does not
    /// implement; the message says what is missing.
    pub fn unsupported(msg: impl Into<String>) -> Self {
        Self::new(code::NOT_IMPLEMENTED, msg)
    }
}

/// Errors are equal when code, message and details are (tests compare them whole).
impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        (self.code, &self.msg, &self.details) == (other.code, &other.msg, &other.details)
    }
}

impl Eq for Error {}
