//! Taking over a node from host-local (`wasm-ipam import-host-local`), without leaking
//! or reusing an address. host-local keeps one file per address holding
//! `containerID\r\nifname` (older versions: the container id alone) and one
//! `last_reserved_ip.<N>` per range set; the host hands them over as they are and
//! they become this module's entries for the same things, so it continues exactly
//! where host-local stopped.

use crate::allocator::{self, LAST_RESERVED_PREFIX};
use crate::range::parse_ip;
use crate::{config, summary};
use std::collections::BTreeMap;
use std::net::IpAddr;
use wasm_ipam_guest::error::code;
use wasm_ipam_guest::store::Store;
use wasm_ipam_guest::{Error, ImportReport, ImportRequest, StateFile};

/// The one format this module imports.
pub const HOST_LOCAL: &str = "host-local";

/// Imports host-local's files: each address file the store does not hold yet (with
/// when it was written, as the reservation's time), each `last_reserved_ip.<N>` as
/// it is; what the store already holds the same counts as already present. An address the store, or another file, gives to another owner aborts the
/// import before anything is written. With a configuration, the summary `stats`
/// falls back on is recorded too.
pub fn import_state(import: &ImportRequest, store: &mut impl Store) -> Result<ImportReport, Error> {
    if import.format() != HOST_LOCAL {
        return Err(Error::unsupported(format!(
            "this module cannot import format {:?}; it imports {HOST_LOCAL:?}",
            import.format()
        )));
    }
    let conf = import.config().map(|c| config::load(c, &[])).transpose()?;
    let mut report = ImportReport::default();
    let mut adopted: BTreeMap<IpAddr, &StateFile> = BTreeMap::new();
    let mut last_reserved: Vec<&StateFile> = Vec::new();
    let mut conflicts = Vec::new();
    for file in import.files() {
        if file.name.starts_with(LAST_RESERVED_PREFIX) {
            last_reserved.push(file);
            continue;
        }
        let Some(ip) = parse_ip(&file.name) else {
            let why = if file.name == "lock" {
                "host-local's lock file"
            } else {
                "not an address or last_reserved_ip.<N>"
            };
            report = report.note(format!("{}: {why}, skipped", file.name));
            continue;
        };
        let held = match adopted.get(&ip) {
            Some(earlier) => Some(earlier.contents.clone()),
            None => allocator::owner_of(store, ip),
        };
        match held {
            Some(owner) if owner == file.contents => report.already_present += 1,
            Some(owner) => conflicts.push(format!(
                "{ip}: store has {:?}, host-local has {:?}",
                String::from_utf8_lossy(&owner),
                String::from_utf8_lossy(&file.contents)
            )),
            None => {
                adopted.insert(ip, file);
            }
        }
    }
    if !conflicts.is_empty() {
        return Err(Error::new(
            code::INVALID_NETWORK_CONFIG,
            format!(
                "network {}: {} address(es) already allocated differently; nothing imported",
                import.network_name(),
                conflicts.len()
            ),
        )
        .with_details(conflicts.join("; ")));
    }
    for (ip, file) in &adopted {
        let since = file.modified.map(|m| m.seconds);
        allocator::adopt(store, *ip, &file.contents, since)?;
    }
    let mut imported = adopted.len();
    // host-local's file and this module's entry share the name; host-local's value
    // wins, since it saw the last reservation.
    for file in last_reserved {
        match store.get(&file.name) {
            Some(value) if value == file.contents => report.already_present += 1,
            previous => {
                if let Some(previous) = previous {
                    report = report.note(format!(
                        "{}: {:?} replaced with host-local's {:?}",
                        file.name,
                        String::from_utf8_lossy(&previous),
                        String::from_utf8_lossy(&file.contents)
                    ));
                }
                store.put(&file.name, &file.contents)?;
                imported += 1;
            }
        }
    }
    if let Some(conf) = &conf {
        summary::record(store, conf)?;
    }
    report.imported = u32::try_from(imported).unwrap_or(u32::MAX);
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use wasm_ipam_guest::store::MemoryStore;

    fn host_local_dir() -> Vec<StateFile> {
        vec![
            StateFile::new("10.1.0.5", "ctr-a\r\neth0").modified(1_700_000_000),
            StateFile::new("10.1.0.6", "legacy-ctr"),
            StateFile::new("fd00::7", "ctr-b\r\nnet1").modified(1_700_000_100),
            StateFile::new("last_reserved_ip.0", "10.1.0.6"),
            StateFile::new("lock", ""),
        ]
    }

    fn import(files: Vec<StateFile>) -> ImportRequest {
        ImportRequest::for_test(HOST_LOCAL, "mynet", None, files)
    }

    #[test]
    fn imports_addresses_and_last_reserved_then_finds_them_present() {
        let mut store = MemoryStore::default();
        let report = import_state(&import(host_local_dir()), &mut store).unwrap();
        assert_eq!(
            report,
            ImportReport {
                imported: 4,
                already_present: 0,
                notes: vec!["lock: host-local's lock file, skipped".into()],
            }
        );
        let entries: Vec<(&str, &str)> = store
            .entries
            .iter()
            .map(|(k, v)| (k.as_str(), std::str::from_utf8(v).unwrap()))
            .collect();
        assert_eq!(
            entries,
            [
                ("ip/10.1.0.5", "ctr-a\r\neth0"),
                ("ip/10.1.0.6", "legacy-ctr"),
                ("ip/fd00::7", "ctr-b\r\nnet1"),
                ("last_reserved_ip.0", "10.1.0.6"),
                ("meta/10.1.0.5", r#"{"since":1700000000}"#),
                ("meta/fd00::7", r#"{"since":1700000100}"#),
            ]
        );

        let again = import_state(&import(host_local_dir()), &mut store).unwrap();
        assert_eq!((again.imported, again.already_present), (0, 4));

        // A newer last reservation replaces the store's, and says so.
        let files = vec![StateFile::new("last_reserved_ip.0", "10.1.0.9")];
        let report = import_state(&import(files), &mut store).unwrap();
        assert_eq!(report.imported, 1);
        assert_eq!(
            report.notes,
            [r#"last_reserved_ip.0: "10.1.0.6" replaced with host-local's "10.1.0.9""#]
        );
    }

    #[test]
    fn a_different_owner_aborts_the_import_with_nothing_written() {
        let mut store: MemoryStore = [("ip/10.1.0.5", "someone-else\r\neth0")]
            .into_iter()
            .collect();
        let before = store.clone();
        let mut files = host_local_dir();
        files.push(StateFile::new("10.1.0.9", "new\r\neth0"));
        let err = import_state(&import(files), &mut store).unwrap_err();
        assert_eq!(err.code, code::INVALID_NETWORK_CONFIG);
        assert_eq!(
            err.msg,
            "network mynet: 1 address(es) already allocated differently; nothing imported"
        );
        assert_eq!(
            err.details,
            r#"10.1.0.5: store has "someone-else\r\neth0", host-local has "ctr-a\r\neth0""#
        );
        assert_eq!(store, before);
    }

    #[test]
    fn two_files_for_one_address_must_agree() {
        let files = vec![
            StateFile::new("10.1.0.5", "a\r\neth0"),
            StateFile::new("::ffff:10.1.0.5", "b\r\neth0"),
        ];
        let err = import_state(&import(files), &mut MemoryStore::default()).unwrap_err();
        assert!(err.details.starts_with("10.1.0.5: "), "{}", err.details);
    }

    #[test]
    fn with_a_configuration_the_summary_is_recorded() {
        let conf =
            json!({"cniVersion": "1.0.0", "name": "mynet", "ipam": {"subnet": "10.1.0.0/24"}});
        let import = ImportRequest::for_test(HOST_LOCAL, "mynet", Some(conf), host_local_dir());
        let mut store = MemoryStore::default();
        import_state(&import, &mut store).unwrap();
        assert_eq!(summary::read(&store), Some((253, 0)));
    }

    #[test]
    fn imported_state_is_what_the_allocator_continues_from() {
        let conf =
            json!({"cniVersion": "1.0.0", "name": "mynet", "ipam": {"subnet": "10.1.0.0/24"}});
        let mut store = MemoryStore::default();
        import_state(&import(host_local_dir()), &mut store).unwrap();
        let add =
            wasm_ipam_guest::Request::for_test(wasm_ipam_guest::Command::Add, "new", "eth0", conf);
        let result =
            <crate::HostLocal as wasm_ipam_guest::IpamModule>::add(&add, &mut store).unwrap();
        assert_eq!(result.ips[0].address, "10.1.0.7/24");
    }

    #[test]
    fn other_formats_are_refused() {
        let import = ImportRequest::for_test("calico", "mynet", None, host_local_dir());
        let err = import_state(&import, &mut MemoryStore::default()).unwrap_err();
        assert_eq!(
            (err.code, err.msg.as_str()),
            (
                code::NOT_IMPLEMENTED,
                r#"this module cannot import format "calico"; it imports "host-local""#
            )
        );
    }
}
