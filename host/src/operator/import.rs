//! `wasm-ipam import-host-local`: moves a node from host-local without leaking or
//! reusing an address. host-local keeps one file per address under
//! `<data-dir>/<network>/` holding `containerID\r\nifname` (or, from older versions,
//! the container id alone), plus `last_reserved_ip.<N>` per range set. Those map
//! one-to-one onto the store keys `ip/<address>` and `last_reserved_ip.<N>`, so the
//! host-local module continues exactly where host-local stopped.

use crate::error::{CniError, code};
use crate::store::{Changes, Quota, Store};
use std::net::IpAddr;
use std::path::Path;
use std::time::UNIX_EPOCH;

#[derive(Debug, Default, PartialEq, Eq)]
pub struct ImportReport {
    pub addresses: usize,
    pub last_reserved: usize,
    /// Addresses the store already held with the same owner.
    pub already_present: usize,
}

fn io_error(path: &Path, e: std::io::Error) -> CniError {
    CniError::new(code::IO_FAILURE, format!("cannot read {}", path.display())).with_details(e)
}

/// Imports host-local's directory `network_dir` into `network` in one transaction,
/// holding host-local's own lock (`<network_dir>/lock`) meanwhile so a host-local call
/// still in flight cannot change the files under it. An address the store already
/// gives to another owner aborts the import with nothing written.
pub fn import_host_local(
    store: &mut dyn Store,
    network_dir: &Path,
    network: &str,
) -> Result<ImportReport, CniError> {
    let host_local_lock = network_dir.join("lock");
    let _held = match std::fs::File::open(&host_local_lock) {
        Ok(file) => {
            file.lock().map_err(|e| io_error(&host_local_lock, e))?;
            Some(file)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_error(&host_local_lock, e)),
    };
    let mut changes = Changes::new();
    let mut report = ImportReport::default();
    let mut conflicts = Vec::new();
    let dir = std::fs::read_dir(network_dir).map_err(|e| io_error(network_dir, e))?;
    for entry in dir {
        let entry = entry.map_err(|e| io_error(network_dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if name.starts_with("last_reserved_ip.") {
            let value = std::fs::read(&path).map_err(|e| io_error(&path, e))?;
            changes.insert(name, Some(value));
            report.last_reserved += 1;
            continue;
        }
        let Ok(address) = name.parse::<IpAddr>() else {
            continue; // host-local's `lock` file and anything else that is not an address
        };
        let owner = std::fs::read(&path).map_err(|e| io_error(&path, e))?;
        let key = format!("ip/{address}");
        match store.get(network, &key)? {
            Some(existing) if existing == owner => report.already_present += 1,
            Some(existing) => conflicts.push(format!(
                "{address}: store has {:?}, host-local has {:?}",
                String::from_utf8_lossy(&existing),
                String::from_utf8_lossy(&owner)
            )),
            None => {
                let since = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                    .map(|d| d.as_secs());
                if let Some(since) = since {
                    let meta = serde_json::json!({ "since": since }).to_string();
                    changes.insert(format!("meta/{address}"), Some(meta.into_bytes()));
                }
                changes.insert(key, Some(owner));
                report.addresses += 1;
            }
        }
    }
    if !conflicts.is_empty() {
        return Err(CniError::new(
            code::INVALID_NETWORK_CONFIG,
            format!(
                "network {network}: {} address(es) already allocated differently; nothing imported",
                conflicts.len()
            ),
        )
        .with_details(conflicts.join("; ")));
    }
    store.commit(network, &changes, Quota::UNLIMITED, &|| false)?;
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imports_addresses_and_last_reserved_then_refuses_conflicts() {
        let hl = tempfile::tempdir().unwrap();
        let net = hl.path().join("mynet");
        std::fs::create_dir(&net).unwrap();
        std::fs::write(net.join("10.1.0.5"), "ctr-a\r\neth0").unwrap();
        std::fs::write(net.join("10.1.0.6"), "legacy-ctr").unwrap();
        std::fs::write(net.join("fd00::7"), "ctr-b\r\nnet1").unwrap();
        std::fs::write(net.join("last_reserved_ip.0"), "10.1.0.6").unwrap();
        std::fs::write(net.join("lock"), "").unwrap();
        let data = tempfile::tempdir().unwrap();
        let mut store = crate::store::open(data.path(), std::time::Duration::ZERO).unwrap();

        let report = import_host_local(store.as_mut(), &net, "mynet").unwrap();
        assert_eq!(
            report,
            ImportReport {
                addresses: 3,
                last_reserved: 1,
                already_present: 0
            }
        );
        assert_eq!(
            store.get("mynet", "ip/10.1.0.5").unwrap().unwrap(),
            b"ctr-a\r\neth0"
        );
        assert_eq!(
            store.get("mynet", "ip/10.1.0.6").unwrap().unwrap(),
            b"legacy-ctr"
        );
        assert_eq!(
            store.get("mynet", "last_reserved_ip.0").unwrap().unwrap(),
            b"10.1.0.6"
        );
        assert!(store.get("mynet", "meta/fd00::7").unwrap().is_some());
        assert!(store.get("mynet", "ip/lock").unwrap().is_none());

        // Importing again is harmless.
        assert_eq!(
            import_host_local(store.as_mut(), &net, "mynet")
                .unwrap()
                .already_present,
            3
        );

        // A different owner for an address already in the store aborts everything.
        std::fs::write(net.join("10.1.0.5"), "someone-else\r\neth0").unwrap();
        std::fs::write(net.join("10.1.0.9"), "new\r\neth0").unwrap();
        let err = import_host_local(store.as_mut(), &net, "mynet").unwrap_err();
        assert!(err.details.contains("10.1.0.5"), "{err}");
        assert!(store.get("mynet", "ip/10.1.0.9").unwrap().is_none());
    }
}
