//! The one error type that reaches the runtime: a CNI error with a spec code, printed
//! as CNI error JSON on stdout by the binary's single exit point.

use std::fmt;

/// Error codes, from the one table shared with the guest SDK.
pub use wasm_ipam_codes as code;

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

/// An error with its causes, as one line (`a: b: c`): what a library's error says
/// at each depth, for a message's details.
pub fn with_causes(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text += &format!(": {c}");
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::code;
    use crate::test_support::workspace_file;

    /// The code table is defined once, in `codes/`; docs/error-codes.md and the WIT
    /// docs must name every code in it, so neither drifts.
    #[test]
    fn the_docs_and_wit_docs_list_every_code() {
        let reference = workspace_file("docs/error-codes.md");
        let wit = workspace_file("wit/ipam.wit");
        for (number, name) in code::NAMED {
            let row = format!("| {number} | `{name}` |");
            assert!(
                reference.contains(&row),
                "docs/error-codes.md lacks the row {row}"
            );
            if *number >= 100 {
                let words = name.to_lowercase().replace('_', " ");
                let entry = format!("{number} {words}");
                let prose: Vec<&str> = wit.split_whitespace().filter(|w| *w != "///").collect();
                assert!(
                    prose.join(" ").contains(&entry),
                    "wit/ipam.wit lacks {entry:?}"
                );
            }
        }
    }
}
