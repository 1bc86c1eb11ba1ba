//! The compiled-module cache. Compiling a component with Cranelift costs tens to
//! hundreds of milliseconds per call; loading a precompiled artifact costs about one.
//!
//! Artifacts are native code that wasmtime loads without validation, so the rules are:
//! - the key is the module's sha256 plus the engine's identity (wasmtime release,
//!   settings and target: `engine::engine_identity`), so an upgrade or config change
//!   never looks up a stale one, and wasmtime still checks the artifact's header;
//! - the directory must be owned by the running user and writable by nobody else,
//!   otherwise the cache is refused (the caller compiles instead); so must each
//!   artifact file;
//! - each artifact has a `<key>.sum` beside it: its sha256 and the file identity
//!   (device, inode, size, mtime, ctime) at which that digest was last checked. An
//!   artifact whose identity matches is loaded by mapping the file, without reading
//!   or hashing it; any other is hashed first, and never loaded if the digest differs.
//!   An identity recorded within [`RACY_WINDOW`] of its own ctime is not trusted (a
//!   write in the same clock tick would not change it), so a new artifact is hashed
//!   until it is older than that;
//! - artifacts are written to a temporary file and renamed into place: concurrent
//!   first calls never see a partial file, and a corrupt one is recompiled, never
//!   loaded;
//! - one `<key>.lock` per artifact serialises compiling it across processes, and a
//!   `<key>.refused` file remembers a module the compiler refused, with the limits it
//!   was refused under (see [`crate::module::compile`]).

use crate::error::CniError;
use crate::limits::Limits;
use crate::module::engine::engine_identity;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Why the cache could not be used; the call goes on by compiling.
#[derive(Debug)]
pub struct CacheError(pub String);

impl fmt::Display for CacheError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

pub struct ModuleCache {
    dir: PathBuf,
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The engine's identity (wasmtime release, settings and target), as hex.
pub fn engine_key() -> String {
    hex(&Sha256::digest(engine_identity().as_bytes())[..16])
}

impl ModuleCache {
    /// The cache directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Opens the cache at `dir`, creating it (mode 0700) if missing, and refuses it
    /// unless it is a directory owned by the running user that group and others cannot
    /// write to.
    pub fn open(dir: &Path) -> Result<Self, CacheError> {
        if !dir.exists() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| {
                    CacheError(format!("cannot create cache dir {}: {e}", dir.display()))
                })?;
        }
        let meta = fs::symlink_metadata(dir)
            .map_err(|e| CacheError(format!("cannot inspect cache dir {}: {e}", dir.display())))?;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let euid = unsafe { libc::geteuid() };
        if !meta.is_dir() {
            return Err(CacheError(format!(
                "cache dir {} is not a directory",
                dir.display()
            )));
        }
        if meta.uid() != euid {
            return Err(CacheError(format!(
                "cache dir {} is owned by uid {}, not by this user (uid {euid}); refusing to load native code from it",
                dir.display(),
                meta.uid()
            )));
        }
        if meta.mode() & 0o022 != 0 {
            return Err(CacheError(format!(
                "cache dir {} is writable by group or others (mode {:o}); refusing to load native code from it",
                dir.display(),
                meta.mode() & 0o7777
            )));
        }
        Ok(ModuleCache {
            dir: dir.to_path_buf(),
        })
    }

    /// Where the artifact for `module_sha256` compiled by `engine` lives.
    pub fn artifact_path(&self, module_sha256: &str) -> PathBuf {
        self.path(module_sha256, "cwasm")
    }

    fn path(&self, module_sha256: &str, extension: &str) -> PathBuf {
        self.dir
            .join(format!("{module_sha256}-{}.{extension}", engine_key()))
    }

    /// Takes the per-artifact compile lock, waiting at most `timeout`; held until the
    /// returned file is dropped.
    pub fn lock_for_compile(
        &self,
        module_sha256: &str,
        timeout: std::time::Duration,
    ) -> Result<fs::File, CacheError> {
        let path = self.path(module_sha256, "lock");
        let file = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
            .map_err(|e| CacheError(format!("cannot open {}: {e}", path.display())))?;
        let started = std::time::Instant::now();
        let mut pause = std::time::Duration::from_millis(1);
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(file),
                Err(fs::TryLockError::WouldBlock) if started.elapsed() < timeout => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(std::time::Duration::from_millis(20));
                }
                Err(fs::TryLockError::WouldBlock) => {
                    return Err(CacheError(format!(
                        "another call held {} for over {timeout:?}",
                        path.display()
                    )));
                }
                Err(fs::TryLockError::Error(e)) => {
                    return Err(CacheError(format!("cannot lock {}: {e}", path.display())));
                }
            }
        }
    }

    /// Why the compiler refused this module before, if it did.
    pub fn refusal(&self, module_sha256: &str) -> Option<Refusal> {
        let path = self.path(module_sha256, "refused");
        let text = fs::read(path).ok()?;
        serde_json::from_slice::<RecordedRefusal>(&text)
            .ok()
            .map(Refusal::from)
    }

    /// Remembers that the compiler refused this module under these limits.
    pub fn record_refusal(&self, module_sha256: &str, refusal: &Refusal) -> Result<(), CacheError> {
        let recorded = RecordedRefusal {
            compile_timeout_ms: refusal.compile_time.as_millis() as u64,
            compile_memory: refusal.compile_memory,
            code: refusal.error.code,
            msg: refusal.error.msg.clone(),
            details: refusal.error.details.clone(),
        };
        let json = serde_json::to_vec(&recorded).expect("a plain struct serialises");
        write_atomically(&self.path(module_sha256, "refused"), &json)
    }

    /// Where the digest of the module at `module_path` is recorded.
    fn module_sum_path(&self, module_path: &Path) -> PathBuf {
        let key = hex(&Sha256::digest(module_path.as_os_str().as_encoded_bytes()));
        self.dir.join(format!("module-{}.sum", &key[..32]))
    }

    /// Whether a trust verdict named `name` (a digest of every input it depends on:
    /// see [`crate::module::trust`]) was recorded, saying `line`. The file must be ours
    /// and writable by nobody else, like an artifact.
    pub fn has_verdict(&self, name: &str, line: &str) -> bool {
        let path = self.dir.join(format!("{name}.trusted"));
        let Ok(mut file) = fs::File::open(&path) else {
            return false;
        };
        let mut text = String::new();
        file.metadata().is_ok_and(|meta| check_owned(&meta).is_ok())
            && file.read_to_string(&mut text).is_ok()
            && text == line
    }

    /// Records a verdict for [`ModuleCache::has_verdict`].
    pub fn record_verdict(&self, name: &str, line: &str) -> Result<(), CacheError> {
        write_atomically(&self.dir.join(format!("{name}.trusted")), line.as_bytes())
    }

    /// The sha256 of the module file at `module_path`, if it was recorded for a file of
    /// exactly this identity (and early enough to vouch for it).
    pub fn module_digest(&self, module_path: &Path, identity: &FileIdentity) -> Option<String> {
        let text = fs::read_to_string(self.module_sum_path(module_path)).ok()?;
        let sum = Sum::parse(&text)?;
        sum.vouches_for(identity).then_some(sum.sha256)
    }

    /// Records the module file's sha256 for its identity, once that record can vouch
    /// for later calls (past [`RACY_WINDOW`] after the file last changed).
    pub fn record_module_digest(
        &self,
        module_path: &Path,
        identity: FileIdentity,
        sha256: &str,
    ) -> Result<(), CacheError> {
        let sum = Sum::checked_now(sha256.to_string(), identity);
        if !sum.vouches_for(&identity) {
            return Ok(());
        }
        write_atomically(
            &self.module_sum_path(module_path),
            sum.to_string().as_bytes(),
        )
    }

    /// The cached component, if a sound artifact is there. `Err` means one is there
    /// but must not be loaded (not ours, digest mismatch, or wasmtime refused it).
    pub fn load(
        &self,
        engine: &Engine,
        module_sha256: &str,
    ) -> Result<Option<Component>, CacheError> {
        let path = self.artifact_path(module_sha256);
        let fail = |what: String| CacheError(format!("artifact {}: {what}", path.display()));
        let file = match fs::File::options()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(fail(format!("cannot open: {e}"))),
        };
        let meta = file
            .metadata()
            .map_err(|e| fail(format!("cannot inspect: {e}")))?;
        check_owned(&meta).map_err(|why| fail(format!("{why}; not loading it")))?;
        let identity = FileIdentity::of(&meta);
        let sum_path = self.path(module_sha256, "sum");
        let sum = fs::read_to_string(&sum_path)
            .ok()
            .and_then(|text| Sum::parse(&text))
            .ok_or_else(|| fail("has no recorded digest; not loading it".into()))?;
        if !sum.vouches_for(&identity) {
            let mut bytes = Vec::with_capacity(meta.len() as usize);
            (&file)
                .read_to_end(&mut bytes)
                .map_err(|e| fail(format!("cannot read: {e}")))?;
            let actual = hex(&Sha256::digest(&bytes));
            if actual != sum.sha256 {
                return Err(fail(format!(
                    "has sha256 {actual}, its recorded digest is {}; not loading it",
                    sum.sha256
                )));
            }
            // Record the check once it can vouch for later calls (past the racy window).
            let checked = Sum::checked_now(actual, identity);
            if checked.vouches_for(&identity)
                && let Err(e) = write_atomically(&sum_path, checked.to_string().as_bytes())
            {
                tracing::warn!(target: "cache", "{e}");
            }
        }
        // SAFETY: the file is an artifact our compiler serialised with an engine of
        // the same identity (and wasmtime checks its header against this engine),
        // owned by this user in a directory only this user can write, and its
        // contents are those whose digest was checked (its identity is unchanged
        // since). Artifacts are replaced by rename, never rewritten in
        // place, so the mapping stays valid.
        unsafe { Component::deserialize_file(engine, &path) }
            .map(Some)
            .map_err(|e| fail(format!("wasmtime refused it: {e}")))
    }

    /// Stores a serialised artifact atomically, and its digest beside it.
    pub fn store_artifact(&self, module_sha256: &str, artifact: &[u8]) -> Result<(), CacheError> {
        let path = self.artifact_path(module_sha256);
        write_atomically(&path, artifact)?;
        let meta = fs::symlink_metadata(&path)
            .map_err(|e| CacheError(format!("cannot inspect {}: {e}", path.display())))?;
        let sum = Sum::checked_now(hex(&Sha256::digest(artifact)), FileIdentity::of(&meta));
        write_atomically(&self.path(module_sha256, "sum"), sum.to_string().as_bytes())?;
        let _ = fs::remove_file(self.path(module_sha256, "refused"));
        Ok(())
    }
}

/// The compiler refused a module: the error, and the limits it was refused under.
#[derive(Debug, Clone)]
pub struct Refusal {
    compile_time: std::time::Duration,
    compile_memory: u64,
    pub error: CniError,
}

impl Refusal {
    pub fn new(limits: &Limits, error: CniError) -> Self {
        Refusal {
            compile_time: limits.compile_time,
            compile_memory: limits.compile_memory,
            error,
        }
    }

    /// Whether compiling again under `limits` would only be refused again: they are no
    /// larger than the refused attempt's.
    pub fn covers(&self, limits: &Limits) -> bool {
        limits.compile_time <= self.compile_time && limits.compile_memory <= self.compile_memory
    }
}

#[derive(Serialize, Deserialize)]
struct RecordedRefusal {
    compile_timeout_ms: u64,
    compile_memory: u64,
    code: u32,
    msg: String,
    details: String,
}

impl From<RecordedRefusal> for Refusal {
    fn from(r: RecordedRefusal) -> Self {
        Refusal {
            compile_time: std::time::Duration::from_millis(r.compile_timeout_ms),
            compile_memory: r.compile_memory,
            error: CniError {
                code: r.code,
                msg: r.msg,
                details: r.details,
            },
        }
    }
}

/// How close to its own ctime an identity may be recorded and still be trusted:
/// file times advance in clock ticks, so a write within the same tick as the check
/// would leave the identity unchanged. Two seconds covers every tick Linux uses.
pub const RACY_WINDOW: std::time::Duration = std::time::Duration::from_secs(2);

/// What identifies a file's contents without reading them: a rewrite changes the
/// size, the mtime or the ctime (which only the kernel sets); a replacement changes
/// the inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileIdentity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl FileIdentity {
    pub fn size(&self) -> u64 {
        self.size
    }

    pub fn of(meta: &fs::Metadata) -> Self {
        let ns = |secs: i64, nanos: i64| i128::from(secs) * 1_000_000_000 + i128::from(nanos);
        FileIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime_ns: ns(meta.mtime(), meta.mtime_nsec()),
            ctime_ns: ns(meta.ctime(), meta.ctime_nsec()),
        }
    }
}

/// A `.sum` file: an artifact's sha256, the identity it had when that was checked, and
/// when that was (wall clock, ns).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sum {
    sha256: String,
    identity: FileIdentity,
    checked_ns: i128,
}

impl Sum {
    fn checked_now(sha256: String, identity: FileIdentity) -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Sum {
            sha256,
            identity,
            checked_ns: now.as_nanos() as i128,
        }
    }

    /// Whether the digest still holds for a file of `identity` without reading it.
    fn vouches_for(&self, identity: &FileIdentity) -> bool {
        self.identity == *identity
            && self.checked_ns - identity.ctime_ns >= RACY_WINDOW.as_nanos() as i128
    }

    fn parse(text: &str) -> Option<Sum> {
        let mut fields = text.split_whitespace();
        let sha256 = fields.next()?.to_string();
        let mut number = || fields.next()?.parse::<i128>().ok();
        let (dev, ino, size) = (number()?, number()?, number()?);
        let (mtime_ns, ctime_ns, checked_ns) = (number()?, number()?, number()?);
        (sha256.len() == 64).then_some(Sum {
            sha256,
            identity: FileIdentity {
                dev: u64::try_from(dev).ok()?,
                ino: u64::try_from(ino).ok()?,
                size: u64::try_from(size).ok()?,
                mtime_ns,
                ctime_ns,
            },
            checked_ns,
        })
    }
}

impl fmt::Display for Sum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = &self.identity;
        writeln!(
            f,
            "{} {} {} {} {} {} {}",
            self.sha256, i.dev, i.ino, i.size, i.mtime_ns, i.ctime_ns, self.checked_ns
        )
    }
}

/// An artifact file must be ours and writable by nobody else, like its directory.
fn check_owned(meta: &fs::Metadata) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if !meta.is_file() {
        return Err("is not a regular file".into());
    }
    if meta.uid() != euid {
        return Err(format!(
            "is owned by uid {}, not by this user (uid {euid})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "is writable by group or others (mode {:o})",
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), CacheError> {
    crate::files::write_atomically(path, bytes, 0o600)
        .map_err(|e| CacheError(format!("cannot write {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    const COMPONENT: &str = "(component (core module (func (export \"f\"))))";

    #[test]
    fn an_engine_with_other_settings_never_loads_the_artifact() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ModuleCache::open(&dir.path().join("c")).unwrap();
        let engine = Engine::new(&crate::module::engine::config()).unwrap();
        let mut other = crate::module::engine::config();
        other.epoch_interruption(false);
        let other = Engine::new(&other).unwrap();

        let bytes = wat::parse_str(COMPONENT).unwrap();
        let component = Component::new(&engine, &bytes).unwrap();
        cache
            .store_artifact("abc", &component.serialize().unwrap())
            .unwrap();
        assert!(cache.load(&engine, "abc").unwrap().is_some());
        // Settings are in the key (ENGINE_SETTINGS) and, should a change miss it, in
        // the artifact's own header, which wasmtime checks: refused, never run.
        let Err(refused) = cache.load(&other, "abc") else {
            panic!("an artifact of other settings was loaded");
        };
        assert!(refused.0.contains("wasmtime refused it"), "{}", refused.0);
        assert!(cache.load(&engine, "other-module").unwrap().is_none());
    }

    #[test]
    fn the_key_names_the_wasmtime_release_this_host_is_built_with() {
        let lock = fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock"))
            .expect("the workspace's Cargo.lock");
        let locked = lock
            .split("[[package]]")
            .find(|p| p.contains("\nname = \"wasmtime\"\n"))
            .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = \"")))
            .map(|v| v.trim_end_matches('"'))
            .expect("wasmtime in Cargo.lock");
        assert_eq!(
            crate::module::engine::WASMTIME_VERSION,
            locked,
            "update WASMTIME_VERSION with wasmtime, so no artifact of the old release is looked up"
        );
        assert!(engine_identity().contains(locked));
    }

    #[test]
    fn a_sum_vouches_only_for_its_identity_past_the_racy_window() {
        let id = FileIdentity {
            dev: 1,
            ino: 2,
            size: 3,
            mtime_ns: 10,
            ctime_ns: 1_000,
        };
        let window = RACY_WINDOW.as_nanos() as i128;
        let sum = |checked_ns| Sum {
            sha256: "a".repeat(64),
            identity: id,
            checked_ns,
        };
        assert!(!sum(1_000 + window - 1).vouches_for(&id), "same clock tick");
        let late = sum(1_000 + window);
        assert!(late.vouches_for(&id));
        assert!(!late.vouches_for(&FileIdentity { size: 4, ..id }));
        assert!(!late.vouches_for(&FileIdentity { ino: 9, ..id }));
        assert!(!late.vouches_for(&FileIdentity {
            ctime_ns: 1_001,
            ..id
        }));
        assert_eq!(Sum::parse(&late.to_string()), Some(late));
        assert_eq!(Sum::parse("short 1 2 3"), None);
    }

    #[test]
    fn a_module_digest_is_recorded_only_once_it_can_vouch() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ModuleCache::open(&dir.path().join("c")).unwrap();
        let module = dir.path().join("m.wasm");
        std::fs::write(&module, b"module").unwrap();
        let fresh = FileIdentity::of(&fs::metadata(&module).unwrap());
        cache
            .record_module_digest(&module, fresh, &"b".repeat(64))
            .unwrap();
        assert_eq!(
            cache.module_digest(&module, &fresh),
            None,
            "changed just now"
        );
        // A file last changed long ago is vouched for by its identity alone.
        let old = FileIdentity {
            ctime_ns: fresh.ctime_ns - 10 * RACY_WINDOW.as_nanos() as i128,
            ..fresh
        };
        cache
            .record_module_digest(&module, old, &"b".repeat(64))
            .unwrap();
        assert_eq!(cache.module_digest(&module, &old), Some("b".repeat(64)));
        assert_eq!(
            cache.module_digest(&module, &fresh),
            None,
            "another identity"
        );
        assert_eq!(cache.module_digest(&dir.path().join("other"), &old), None);
    }
}
