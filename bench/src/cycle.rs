//! A warm cycle's store changes, as host-local's module makes them: an ADD puts an
//! address, its metadata and `last`; its DEL removes the first two. Shared by the
//! store-engine call (`bin/store_call.rs`) and the `store-open` scenario.

use wasm_ipam::store::Changes;

/// The changes of `id`'s ADD (`add`) or DEL of `addr`.
pub fn changes(add: bool, id: &str, addr: &str) -> Changes {
    let mut changes = Changes::new();
    if add {
        let meta = format!(r#"{{"containerID":"{id}","ifName":"eth0","address":"{addr}/16"}}"#);
        changes.insert(format!("ip/{addr}"), Some(id.as_bytes().to_vec()));
        changes.insert(format!("meta/{addr}"), Some(meta.into_bytes()));
        changes.insert("last".into(), Some(addr.as_bytes().to_vec()));
    } else {
        changes.insert(format!("ip/{addr}"), None);
        changes.insert(format!("meta/{addr}"), None);
    }
    changes
}
