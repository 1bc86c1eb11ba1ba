//! The one error type that reaches the runtime: a CNI error with a spec code, printed
//! as CNI error JSON on stdout by the binary's single exit point.

use std::fmt;

/// Error codes: 1–11 are the CNI spec's, 100 and up are wasm-ipam's own.
pub mod code {
    pub const INCOMPATIBLE_CNI_VERSION: u32 = 1;
    pub const INVALID_ENVIRONMENT_VARIABLES: u32 = 4;
    pub const IO_FAILURE: u32 = 5;
    pub const DECODING_FAILURE: u32 = 6;
    pub const INVALID_NETWORK_CONFIG: u32 = 7;
    pub const TRY_AGAIN_LATER: u32 = 11;
    /// The module is not a usable component: invalid, wrong exports, or imports the host
    /// does not provide.
    pub const MODULE_REJECTED: u32 = 100;
    /// The module's sha256 differs from `ipam.moduleSha256`.
    pub const MODULE_DIGEST_MISMATCH: u32 = 101;
    /// The module trapped (including exceeding its memory limit).
    pub const MODULE_TRAPPED: u32 = 102;
    /// The module ran past its deadline.
    pub const DEADLINE_EXCEEDED: u32 = 103;
    /// The store could not be opened, read or committed.
    pub const STORE_FAILURE: u32 = 104;
    /// The module returned a result that is not valid CNI.
    pub const INVALID_MODULE_RESULT: u32 = 106;
}

/// A CNI error: `code`, `msg` and optional `details`, as the spec's error result has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CniError {
    pub code: u32,
    pub msg: String,
    pub details: String,
}

impl CniError {
    pub fn new(code: u32, msg: impl Into<String>) -> Self {
        CniError {
            code,
            msg: msg.into(),
            details: String::new(),
        }
    }

    pub fn with_details(mut self, details: impl fmt::Display) -> Self {
        self.details = details.to_string();
        self
    }

    pub fn env(msg: impl Into<String>) -> Self {
        Self::new(code::INVALID_ENVIRONMENT_VARIABLES, msg)
    }

    pub fn config(msg: impl Into<String>) -> Self {
        Self::new(code::INVALID_NETWORK_CONFIG, msg)
    }

    /// The error result JSON the CNI spec defines, tagged with `cni_version`.
    pub fn to_json(&self, cni_version: &str) -> serde_json::Value {
        let mut out = serde_json::json!({
            "cniVersion": cni_version,
            "code": self.code,
            "msg": self.msg,
        });
        if !self.details.is_empty() {
            out["details"] = self.details.clone().into();
        }
        out
    }
}

impl fmt::Display for CniError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "code {}: {}", self.code, self.msg)?;
        if !self.details.is_empty() {
            write!(f, " ({})", self.details)?;
        }
        Ok(())
    }
}

impl std::error::Error for CniError {}
