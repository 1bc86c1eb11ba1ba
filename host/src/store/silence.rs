//! A cluster store that failed a call only after its whole `timeoutSeconds` (no
//! answer, or nothing but server errors until then), remembered for a moment so the
//! calls queued behind it do not each wait for it again. Without this, N calls queued on the
//! node's lock behind a frozen etcd or apiserver fail one by one, each after its own
//! `timeoutSeconds` under the lock, and a call of another network behind them waits
//! N × that bound. With it, the first call that meets the silence under the lock
//! records it in `dataDir` (file [`FILE`]); for the next `timeoutSeconds` a CNI call
//! on the same store answers code 11 at once, naming the silence and when it was
//! seen, without sending anything. Any answer from the store (a call's or an operator
//! command's) clears the record; operator commands always ask the store, so they are
//! the probe an operator runs. The record counts on the monotonic clock with the boot
//! id beside it: a wall clock set back cannot stretch it, a reboot forgets it.

use super::rate::{boot_id, monotonic_nanos};
use crate::files;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// The record's file in `dataDir`.
pub const FILE: &str = "store-silence";

/// What this process last heard from a cluster store: nothing asked, an answer, or
/// silence past `timeoutSeconds`.
static HEARD: AtomicU8 = AtomicU8::new(NOTHING);
const NOTHING: u8 = 0;
const ANSWERED: u8 = 1;
const SILENT: u8 = 2;

/// The store answered a request (whatever it said).
pub fn answered() {
    HEARD.store(ANSWERED, Ordering::Relaxed);
}

/// No member of the store answered a request within `timeoutSeconds`.
pub fn silent() {
    HEARD.store(SILENT, Ordering::Relaxed);
}

/// What was heard since the last [`take_heard`]: `Some(true)` answered, `Some(false)`
/// silent, `None` nothing asked.
pub fn take_heard() -> Option<bool> {
    match HEARD.swap(NOTHING, Ordering::Relaxed) {
        ANSWERED => Some(true),
        SILENT => Some(false),
        _ => None,
    }
}

/// One store's silence: what the call that met it answered, and when.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Silence {
    msg: String,
    monotonic_nanos: u64,
    boot_id: String,
}

/// The silence of the store `store` (its [`crate::config::StoreConfig::identity`])
/// seen less than `window` ago: its message and how long ago.
pub fn recalled(data_dir: &Path, store: &str, window: Duration) -> Option<(String, Duration)> {
    let silence = read(data_dir).remove(store)?;
    if silence.boot_id != this_boot() {
        return None;
    }
    let ago = Duration::from_nanos(monotonic_nanos().checked_sub(silence.monotonic_nanos)?);
    (ago < window).then_some((silence.msg, ago))
}

/// Records (or with `msg` none, clears) the silence of `store`. Written under the
/// node's lock; a record that cannot be written costs the queue its fast answer,
/// never a call its answer.
pub fn record(data_dir: &Path, store: &str, msg: Option<&str>) {
    let mut all = read(data_dir);
    let changed = match msg {
        Some(msg) => {
            all.insert(
                store.to_string(),
                Silence {
                    msg: msg.to_string(),
                    monotonic_nanos: monotonic_nanos(),
                    boot_id: this_boot(),
                },
            );
            true
        }
        None => all.remove(store).is_some(),
    };
    if !changed {
        return;
    }
    let bytes = (!all.is_empty()).then(|| serde_json::to_vec(&all).expect("serialisable"));
    if let Err(e) = files::put_record(&data_dir.join(FILE), bytes.as_deref()) {
        tracing::warn!(target: "store", "cannot record the store's silence in {}: {e}", data_dir.display());
    }
}

fn read(data_dir: &Path) -> BTreeMap<String, Silence> {
    std::fs::read(data_dir.join(FILE))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

fn this_boot() -> String {
    String::from_utf8_lossy(&boot_id()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silence_is_recalled_within_its_window_for_its_store_only_and_cleared() {
        let dir = tempfile::tempdir().unwrap();
        let window = Duration::from_secs(60);
        assert!(recalled(dir.path(), "etcd a", window).is_none());
        record(dir.path(), "etcd a", Some("no member answered"));
        let (msg, ago) = recalled(dir.path(), "etcd a", window).unwrap();
        assert_eq!(msg, "no member answered");
        assert!(ago < window);
        assert!(recalled(dir.path(), "etcd b", window).is_none());
        assert!(recalled(dir.path(), "etcd a", Duration::ZERO).is_none());
        record(dir.path(), "etcd a", None);
        assert!(recalled(dir.path(), "etcd a", window).is_none());
        assert!(!dir.path().join(FILE).exists());
    }

    #[test]
    fn a_silence_of_an_earlier_boot_is_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let earlier = BTreeMap::from([(
            "etcd a".to_string(),
            Silence {
                msg: "no member answered".into(),
                monotonic_nanos: 0,
                boot_id: "an earlier boot".into(),
            },
        )]);
        std::fs::write(dir.path().join(FILE), serde_json::to_vec(&earlier).unwrap()).unwrap();
        assert!(recalled(dir.path(), "etcd a", Duration::from_secs(3600)).is_none());
    }
}
