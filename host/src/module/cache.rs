//! The compiled-module cache. Compiling a component with Cranelift costs tens to
//! hundreds of milliseconds per call; loading a precompiled artifact costs about one.
//!
//! Artifacts are native code that wasmtime loads without validation, so the rules are:
//! - the key is the module's sha256 plus the engine's compatibility hash (wasmtime
//!   version and settings), so an upgrade or config change never loads a stale one;
//! - the directory must be owned by the running user and writable by nobody else,
//!   otherwise the cache is refused (the caller compiles instead);
//! - each artifact file starts with its own sha256 (one hex line), checked before every
//!   load, and is written to a temporary file and renamed into place: concurrent first
//!   calls never see a partial file, and a corrupt one is recompiled, never loaded;
//! - one `<key>.lock` per artifact serialises compiling it across processes, and a
//!   `<key>.refused` file remembers a module the compiler refused, with the limits it
//!   was refused under (see [`crate::module::compile`]).

use crate::error::CniError;
use crate::limits::Limits;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write;
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

/// Feeds a `Hash` value into sha256, for a key stable across processes.
struct Sha256Hasher(Sha256);

impl Hasher for Sha256Hasher {
    fn finish(&self) -> u64 {
        unreachable!("only the digest is read")
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// The engine's compatibility hash (wasmtime version, target and settings), as hex.
pub fn engine_key(engine: &Engine) -> String {
    let mut hasher = Sha256Hasher(Sha256::new());
    engine.precompile_compatibility_hash().hash(&mut hasher);
    hex(&hasher.0.finalize()[..16])
}

impl ModuleCache {
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
    pub fn artifact_path(&self, engine: &Engine, module_sha256: &str) -> PathBuf {
        self.path(engine, module_sha256, "cwasm")
    }

    fn path(&self, engine: &Engine, module_sha256: &str, extension: &str) -> PathBuf {
        self.dir.join(format!(
            "{module_sha256}-{}.{extension}",
            engine_key(engine)
        ))
    }

    /// Takes the per-artifact compile lock, waiting at most `timeout`; held until the
    /// returned file is dropped.
    pub fn lock_for_compile(
        &self,
        engine: &Engine,
        module_sha256: &str,
        timeout: std::time::Duration,
    ) -> Result<fs::File, CacheError> {
        let path = self.path(engine, module_sha256, "lock");
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
    pub fn refusal(&self, engine: &Engine, module_sha256: &str) -> Option<Refusal> {
        let path = self.path(engine, module_sha256, "refused");
        let text = fs::read(path).ok()?;
        serde_json::from_slice::<RecordedRefusal>(&text)
            .ok()
            .map(Refusal::from)
    }

    /// Remembers that the compiler refused this module under these limits.
    pub fn record_refusal(
        &self,
        engine: &Engine,
        module_sha256: &str,
        refusal: &Refusal,
    ) -> Result<(), CacheError> {
        let recorded = RecordedRefusal {
            compile_timeout_ms: refusal.compile_time.as_millis() as u64,
            compile_memory: refusal.compile_memory,
            code: refusal.error.code,
            msg: refusal.error.msg.clone(),
            details: refusal.error.details.clone(),
        };
        let json = serde_json::to_vec(&recorded).expect("a plain struct serialises");
        write_atomically(&self.path(engine, module_sha256, "refused"), &json)
    }

    /// The cached component, if a sound artifact is there. `Err` means one is there
    /// but must not be loaded (corrupt, digest mismatch, or wasmtime refused it).
    pub fn load(
        &self,
        engine: &Engine,
        module_sha256: &str,
    ) -> Result<Option<Component>, CacheError> {
        let path = self.artifact_path(engine, module_sha256);
        let file = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(CacheError(format!("cannot read {}: {e}", path.display()))),
        };
        let (recorded, artifact) = split_artifact(&file).ok_or_else(|| {
            CacheError(format!(
                "artifact {} has no digest header; not loading it",
                path.display()
            ))
        })?;
        let actual = hex(&Sha256::digest(artifact));
        if recorded != actual {
            return Err(CacheError(format!(
                "artifact {} has sha256 {actual}, its header says {recorded}; not loading it",
                path.display()
            )));
        }
        // SAFETY: the bytes are an artifact this program serialised with an engine of
        // the same compatibility hash, in a directory only this user can write, and
        // they match the digest recorded when they were written.
        unsafe { Component::deserialize(engine, artifact) }
            .map(Some)
            .map_err(|e| CacheError(format!("wasmtime refused artifact {}: {e}", path.display())))
    }

    /// Stores `component`'s artifact, headed by its sha256, atomically.
    pub fn store(
        &self,
        engine: &Engine,
        module_sha256: &str,
        component: &Component,
    ) -> Result<(), CacheError> {
        let artifact = component
            .serialize()
            .map_err(|e| CacheError(format!("cannot serialise the compiled module: {e}")))?;
        self.store_artifact(engine, module_sha256, &artifact)
    }

    /// Stores a serialised artifact, headed by its sha256, atomically.
    pub fn store_artifact(
        &self,
        engine: &Engine,
        module_sha256: &str,
        artifact: &[u8],
    ) -> Result<(), CacheError> {
        let mut file = format!("{}\n", hex(&Sha256::digest(artifact))).into_bytes();
        file.extend_from_slice(artifact);
        write_atomically(&self.artifact_path(engine, module_sha256), &file)?;
        let _ = fs::remove_file(self.path(engine, module_sha256, "refused"));
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

/// Splits an artifact file into its recorded digest and the artifact bytes.
fn split_artifact(file: &[u8]) -> Option<(&str, &[u8])> {
    const HEADER: usize = 64 + 1;
    let header = file.get(..HEADER)?;
    let digest = std::str::from_utf8(&header[..64]).ok()?;
    (header[64] == b'\n').then_some((digest, &file[HEADER..]))
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), CacheError> {
    let fail = |e: std::io::Error| CacheError(format!("cannot write {}: {e}", path.display()));
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(fail)?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    if let Err(e) = written.and_then(|()| fs::rename(&tmp, path)) {
        let _ = fs::remove_file(&tmp);
        return Err(fail(e));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasmtime::Config;

    const COMPONENT: &str = "(component (core module (func (export \"f\"))))";

    #[test]
    fn an_engine_with_other_settings_never_loads_the_artifact() {
        let dir = tempfile::tempdir().unwrap();
        let cache = ModuleCache::open(&dir.path().join("c")).unwrap();
        let mut config = Config::new();
        config.epoch_interruption(true);
        let engine_a = Engine::new(&config).unwrap();
        config.epoch_interruption(false);
        let engine_b = Engine::new(&config).unwrap();
        assert_ne!(engine_key(&engine_a), engine_key(&engine_b));

        let bytes = wat::parse_str(COMPONENT).unwrap();
        let component = Component::new(&engine_a, &bytes).unwrap();
        cache.store(&engine_a, "abc", &component).unwrap();
        assert!(cache.load(&engine_a, "abc").unwrap().is_some());
        assert!(
            cache.load(&engine_b, "abc").unwrap().is_none(),
            "keyed by the engine's hash"
        );
        assert!(cache.load(&engine_a, "other-module").unwrap().is_none());
    }
}
