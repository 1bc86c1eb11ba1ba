//! What a cluster store keeps on the node between calls, one record per network, in a
//! file of `dataDir`: the Kubernetes store's homes ([`super::kubernetes::homes`]), the
//! etcd store's copies of keys ([`super::etcd`]). Only ever a cache, checked by the
//! commit that relies on it: a missing, torn or foreign file (another store's: its
//! identity is in the file) reads as empty, and it is written without a disk sync (a
//! record lost in a crash costs the next call a read).

use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

#[derive(serde::Serialize, serde::Deserialize)]
struct File<T> {
    /// Which store the records are of: another's are no use.
    store: String,
    networks: BTreeMap<String, T>,
}

pub struct Kept<T> {
    path: PathBuf,
    store: String,
    record: PhantomData<T>,
}

impl<T: Serialize + DeserializeOwned + Default> Kept<T> {
    /// The file `name` in `data_dir`, for the store `store` names.
    pub fn new(data_dir: &Path, name: &str, store: &str) -> Self {
        Kept {
            path: data_dir.join(name),
            store: store.to_string(),
            record: PhantomData,
        }
    }

    fn read(&self) -> BTreeMap<String, T> {
        std::fs::read(&self.path)
            .ok()
            .and_then(|bytes| serde_json::from_slice::<File<T>>(&bytes).ok())
            .filter(|file| file.store == self.store)
            .map(|file| file.networks)
            .unwrap_or_default()
    }

    /// `network`'s record (the default when none is kept).
    pub fn get(&self, network: &str) -> T {
        self.read().remove(network).unwrap_or_default()
    }

    /// Keeps `record` for `network` (`None`: keeps none). A failure to write only
    /// costs the next call a read.
    pub fn put(&self, network: &str, record: Option<T>) {
        let mut networks = self.read();
        match record {
            Some(record) => networks.insert(network.to_string(), record),
            None => networks.remove(network),
        };
        let file = File {
            store: self.store.clone(),
            networks,
        };
        let bytes = serde_json::to_vec(&file).expect("serialisable");
        let tmp = self
            .path
            .with_extension(format!("tmp.{}", std::process::id()));
        let written = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, &self.path));
        if let Err(e) = written {
            let _ = std::fs::remove_file(&tmp);
            tracing::debug!(target: "store", "cannot keep the node's copy in {}: {e}", self.path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_of_one_store_are_not_read_for_another_and_a_torn_file_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let kept: Kept<Vec<u32>> = Kept::new(dir.path(), "copies", "a");
        kept.put("n", Some(vec![7]));
        kept.put("m", Some(vec![8]));
        assert_eq!(kept.get("n"), vec![7]);
        let other: Kept<Vec<u32>> = Kept::new(dir.path(), "copies", "b");
        assert!(other.get("n").is_empty());
        kept.put("n", None);
        assert!(kept.get("n").is_empty());
        assert_eq!(kept.get("m"), vec![8]);
        std::fs::write(dir.path().join("copies"), b"{\"store\":").unwrap();
        assert!(kept.get("m").is_empty());
    }
}
