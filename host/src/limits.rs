//! Every resource limit, in one place: what a module can make the node spend —
//! memory (its own and the host's on its behalf), disk, lock time, compile time — is
//! bounded per call, the log file over time too, and each bound has a documented
//! default and, where an operator may need to change it, a netconf key.
//! docs/configuration.md and SECURITY.md list them.

use std::time::Duration;

/// The limits an operator may set in the netconf (`ipam.<key>`), defaults applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// `memoryLimitMiB`: all linear memories and tables of the module's instances,
    /// summed.
    pub guest_memory: usize,
    /// `hostMemoryLimitMiB`: what the host holds for the module: its staged writes as
    /// stored (see [`STAGED_ENTRY_OVERHEAD`]); and, separately, each transfer from it
    /// (one host call's arguments, the handler's result or error) and each
    /// `list-prefix` answer.
    pub host_memory: usize,
    /// `logLimitKiB`: log bytes one call may write for the module (its `log` messages
    /// and captured stdout/stderr); later messages are dropped and counted.
    pub log_bytes: usize,
    /// `logMaxMiB` and `logFiles`: how big the log file grows and how many renamed
    /// files are kept, so calls over months stay within a bound too.
    pub log_rotation: LogRotation,
    /// `storeQuotaEntries`: entries one network may hold in the store.
    pub store_entries: u64,
    /// `storeQuotaMiB`: key and value bytes one network may hold in the store.
    pub store_bytes: u64,
    /// `moduleMaxMiB`: the largest module file the host reads.
    pub module_bytes: u64,
    /// `compileTimeoutSeconds`: wall time to compile a module that is not cached.
    pub compile_time: Duration,
    /// `compileMemoryMiB`: data memory the compiler process may use.
    pub compile_memory: u64,
}

pub const MIB: u64 = 1 << 20;

/// The log file is renamed aside (`<log>.1`, older ones shifted up, the oldest
/// removed) by the first line written once it holds `max_bytes`; `kept` renamed files
/// stay. On disk: at most (`kept` + 1) files of `max_bytes`, each plus the lines
/// being written when it filled, one per call writing then (see [`crate::logging`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogRotation {
    pub max_bytes: u64,
    pub kept: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            guest_memory: 64 << 20,
            host_memory: 32 << 20,
            log_bytes: 256 << 10,
            log_rotation: LogRotation {
                max_bytes: 64 * MIB,
                kept: 2,
            },
            store_entries: 1_000_000,
            store_bytes: 256 * MIB,
            module_bytes: 16 * MIB,
            compile_time: Duration::from_secs(30),
            compile_memory: 1024 * MIB,
        }
    }
}

/// Fixed limits: no host-local-like module comes near them, and raising them would
/// only let a module cost more.
///
/// Core instances one call's component may create (a Rust module has about five).
pub const MAX_INSTANCES: usize = 32;
/// Linear memories across those instances.
pub const MAX_MEMORIES: usize = 8;
/// Tables across those instances.
pub const MAX_TABLES: usize = 16;
/// Bytes a table element costs the host (wasmtime stores a pointer per element).
pub const TABLE_ELEMENT_BYTES: usize = 8;
/// Host bytes a staged entry costs beyond its key and value: the map node's share and
/// the allocations' headers (measured at ~100 B; rounded up).
pub const STAGED_ENTRY_OVERHEAD: usize = 128;
/// Host bytes a `list-prefix` answer's entry costs beyond its key and value.
pub const LISTED_ENTRY_OVERHEAD: usize = 64;
pub const MAX_KEY_BYTES: usize = 1024;
pub const MAX_VALUE_BYTES: usize = 64 << 10;

/// The most renamed log files kept (`logFiles`); `stats` reads no further back.
pub const MAX_LOG_FILES: u32 = 1000;

/// A module error's `msg` and `details` are cut to these on stdout and in the log.
pub const MAX_ERROR_MSG_BYTES: usize = 1024;
pub const MAX_ERROR_DETAILS_BYTES: usize = 4096;

/// The most conditions one `readiness.degraded` report keeps; more are counted in
/// the last one's message.
pub const MAX_DEGRADED_CONDITIONS: usize = 16;

/// What a result may hold; more is code 106.
pub const MAX_RESULT_IPS: usize = 64;
pub const MAX_RESULT_ROUTES: usize = 1024;
pub const MAX_DNS_NAMESERVERS: usize = 16;
pub const MAX_DNS_SEARCH: usize = 64;
pub const MAX_DNS_OPTIONS: usize = 64;

/// `text` cut to at most `max` bytes on a character boundary, saying how much was cut.
pub fn truncated(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return text.into();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… [{} bytes cut]", &text[..end], text.len() - end).into()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::workspace_file;

    /// docs/configuration.md's key table and SECURITY.md's limits table give each key's default
    /// as this file sets it.
    #[test]
    fn docs_give_every_limit_its_default() {
        let d = Limits::default();
        let mib = |bytes: u64| bytes >> 20;
        let keys = [
            ("memoryLimitMiB", mib(d.guest_memory as u64), "MiB"),
            ("hostMemoryLimitMiB", mib(d.host_memory as u64), "MiB"),
            ("logLimitKiB", d.log_bytes as u64 >> 10, "KiB"),
            ("logMaxMiB", mib(d.log_rotation.max_bytes), "MiB"),
            ("logFiles", d.log_rotation.kept.into(), ""),
            ("storeQuotaEntries", d.store_entries, ""),
            ("storeQuotaMiB", mib(d.store_bytes), "MiB"),
            ("moduleMaxMiB", mib(d.module_bytes), "MiB"),
            ("compileTimeoutSeconds", d.compile_time.as_secs(), "s"),
            ("compileMemoryMiB", mib(d.compile_memory), "MiB"),
        ];
        let reference = workspace_file("docs/configuration.md");
        let security = workspace_file("SECURITY.md");
        for (key, default, unit) in keys {
            let row = format!("| `{key}` | `{default}` |");
            assert!(
                reference.contains(&row),
                "docs/configuration.md lacks {row}"
            );
            let shown = if unit.is_empty() {
                // 1000000 is written 1,000,000.
                default
                    .to_string()
                    .as_bytes()
                    .rchunks(3)
                    .rev()
                    .map(|c| std::str::from_utf8(c).unwrap())
                    .collect::<Vec<_>>()
                    .join(",")
            } else {
                format!("{default} {unit}")
            };
            assert!(
                security
                    .lines()
                    .any(|l| l.contains(&format!("`{key}`")) && l.contains(&shown)),
                "SECURITY.md has no row for {key} with {shown}"
            );
        }
    }

    #[test]
    fn truncation_keeps_characters_whole_and_says_so() {
        assert_eq!(truncated("short", 10), "short");
        assert_eq!(truncated("ééé", 3), "é… [4 bytes cut]");
    }
}
