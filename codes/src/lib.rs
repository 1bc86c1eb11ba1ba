//! The one table of CNI error codes wasm-ipam speaks, shared by the host and the
//! guest SDK so neither can drift from the other (docs/error-codes.md and the WIT docs list the
//! same table; a host test checks them against this file); and beside it the `ipam`
//! keys the host reads, which an SDK must not take for a module's misspelt ones.
//!
//! | range | owner | a module may return it |
//! |---|---|---|
//! | 0 | nobody: success is not an error | no |
//! | 1–99 | the CNI spec's well-known errors ([`SPEC_CODES`]) | only the ones the spec defines |
//! | 100–119 | the wasm-ipam host ([`HOST_RESERVED`]) | no |
//! | 120–139 | the guest SDK, on a module's behalf ([`SDK_RESERVED`]) | yes |
//! | 140 and up | the module's own | yes |
//!
//! A code a module may not return is never printed as given: the host answers
//! [`RESERVED_CODE_FROM_MODULE`] with the module's code and message in `details`, so no
//! module can pose as the host (say, fake a deadline error).
#![no_std]

use core::ops::RangeInclusive;

/// The CNI spec's error codes (1–99 are reserved for it).
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

/// Every code the CNI spec defines.
pub const SPEC_CODES: &[u32] = &[
    INCOMPATIBLE_CNI_VERSION,
    UNSUPPORTED_FIELD,
    UNKNOWN_CONTAINER,
    INVALID_ENVIRONMENT_VARIABLES,
    IO_FAILURE,
    DECODING_FAILURE,
    INVALID_NETWORK_CONFIG,
    TRY_AGAIN_LATER,
    PLUGIN_NOT_AVAILABLE,
    PLUGIN_NOT_AVAILABLE_LIMITED_CONNECTIVITY,
];

/// The host's own codes; a module returning one is wrapped.
pub const HOST_RESERVED: RangeInclusive<u32> = 100..=119;
/// The module is not a usable component: unreadable as one, not a regular file, too
/// large, past its compile limits, wrong exports, or imports the host does not provide.
pub const MODULE_REJECTED: u32 = 100;
/// The module's sha256 differs from `ipam.moduleSha256`.
pub const MODULE_DIGEST_MISMATCH: u32 = 101;
/// The module trapped (a panic, `unreachable`, a stack overflow, `exit`).
pub const MODULE_TRAPPED: u32 = 102;
/// The module, or the commit of its writes, ran past the deadline.
pub const DEADLINE_EXCEEDED: u32 = 103;
/// The store could not be opened, read or committed.
pub const STORE_FAILURE: u32 = 104;
/// The call went past one of its resource limits (guest memory, instance/memory/table
/// counts, host memory spent on the module's behalf, one transfer's size).
pub const LIMIT_EXCEEDED: u32 = 105;
/// The module returned a result that is not valid CNI, or larger than the host accepts.
pub const INVALID_MODULE_RESULT: u32 = 106;
/// The module returned 0, a code the CNI spec does not define, or a reserved code.
pub const RESERVED_CODE_FROM_MODULE: u32 = 107;
/// Committing the call's writes would take the network past its store quota.
pub const STORE_QUOTA_EXCEEDED: u32 = 108;
/// wasm-ipam itself failed (a bug: it panicked) and stopped where it was; the store
/// holds the state from before the call or, if it stopped after the commit, after it.
pub const INTERNAL_ERROR: u32 = 109;
/// A trust policy (the node's `/etc/wasm-ipam/trust.json` or `ipam.trustPolicy`)
/// refuses the module: unsigned where a signature is required, signed by a key the
/// policy does not trust, or a signature that does not verify for the module's bytes.
pub const MODULE_UNTRUSTED: u32 = 110;

/// Codes the guest SDK returns on a module's behalf.
pub const SDK_RESERVED: RangeInclusive<u32> = 120..=139;
/// The host refused a store write: key, value or the call's staged set too large, or
/// a write in a read-only call (`inspect`).
pub const STORE_WRITE_REFUSED: u32 = 120;
/// The module does not implement what it was asked: an `inspect` or `migrate`
/// operation, or an import format (the SDK's defaults answer it).
pub const NOT_IMPLEMENTED: u32 = 121;

/// The first code free for a module's own failures.
pub const MODULE_SPECIFIC: u32 = 140;

/// Whether a module may return `code` as its own error.
pub const fn module_may_return(code: u32) -> bool {
    let mut i = 0;
    while i < SPEC_CODES.len() {
        if SPEC_CODES[i] == code {
            return true;
        }
        i += 1;
    }
    code > *HOST_RESERVED.end()
}

/// The netconf `ipam` keys the host reads (its own, beside the module's): an SDK
/// checking a module's keys passes over these. `type` is CNI's.
pub const HOST_IPAM_KEYS: &[&str] = &[
    "type",
    "module",
    "moduleSha256",
    "trustPolicy",
    "deadlineSeconds",
    "lockFile",
    "lockTimeoutSeconds",
    "dataDir",
    "cacheDir",
    "logFile",
    "logLevel",
    "nodeName",
    "memoryLimitMiB",
    "hostMemoryLimitMiB",
    "logLimitKiB",
    "logMaxMiB",
    "logFiles",
    "storeQuotaEntries",
    "storeQuotaMiB",
    "moduleMaxMiB",
    "compileTimeoutSeconds",
    "compileMemoryMiB",
    "store",
    "strictStatus",
];

/// Every code with a name, for the docs check: (code, name).
pub const NAMED: &[(u32, &str)] = &[
    (INCOMPATIBLE_CNI_VERSION, "INCOMPATIBLE_CNI_VERSION"),
    (UNSUPPORTED_FIELD, "UNSUPPORTED_FIELD"),
    (UNKNOWN_CONTAINER, "UNKNOWN_CONTAINER"),
    (
        INVALID_ENVIRONMENT_VARIABLES,
        "INVALID_ENVIRONMENT_VARIABLES",
    ),
    (IO_FAILURE, "IO_FAILURE"),
    (DECODING_FAILURE, "DECODING_FAILURE"),
    (INVALID_NETWORK_CONFIG, "INVALID_NETWORK_CONFIG"),
    (TRY_AGAIN_LATER, "TRY_AGAIN_LATER"),
    (PLUGIN_NOT_AVAILABLE, "PLUGIN_NOT_AVAILABLE"),
    (
        PLUGIN_NOT_AVAILABLE_LIMITED_CONNECTIVITY,
        "PLUGIN_NOT_AVAILABLE_LIMITED_CONNECTIVITY",
    ),
    (MODULE_REJECTED, "MODULE_REJECTED"),
    (MODULE_DIGEST_MISMATCH, "MODULE_DIGEST_MISMATCH"),
    (MODULE_TRAPPED, "MODULE_TRAPPED"),
    (DEADLINE_EXCEEDED, "DEADLINE_EXCEEDED"),
    (STORE_FAILURE, "STORE_FAILURE"),
    (LIMIT_EXCEEDED, "LIMIT_EXCEEDED"),
    (INVALID_MODULE_RESULT, "INVALID_MODULE_RESULT"),
    (RESERVED_CODE_FROM_MODULE, "RESERVED_CODE_FROM_MODULE"),
    (STORE_QUOTA_EXCEEDED, "STORE_QUOTA_EXCEEDED"),
    (INTERNAL_ERROR, "INTERNAL_ERROR"),
    (MODULE_UNTRUSTED, "MODULE_UNTRUSTED"),
    (STORE_WRITE_REFUSED, "STORE_WRITE_REFUSED"),
    (NOT_IMPLEMENTED, "NOT_IMPLEMENTED"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modules_may_return_spec_and_their_own_codes_only() {
        for code in [0, 8, 42, 99, 100, 103, 107, 119] {
            assert!(!module_may_return(code), "{code}");
        }
        for code in [1, 7, 11, 50, 51, 120, 140, 999, u32::MAX] {
            assert!(module_may_return(code), "{code}");
        }
    }
}
