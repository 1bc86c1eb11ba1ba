//! The module file: opened without ever hanging or reading without bound, read only
//! when its bytes are needed, and its sha256 known without reading it when the cache
//! has checked this very file before (same identity; see [`crate::module::cache`]).
//!
//! The module path is configuration, but the file behind it may be anything: a symlink
//! to `/dev/zero` would read until memory runs out, and opening a FIFO blocks until a
//! writer comes. So the file is opened non-blocking and must be a regular file no
//! larger than `moduleMaxMiB`.

use crate::error::{CniError, code};
use crate::module::cache::{FileIdentity, ModuleCache, hex};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// An opened, checked module file.
pub struct ModuleFile {
    file: File,
    path: PathBuf,
    identity: FileIdentity,
    /// `moduleMaxMiB`, in bytes.
    max: u64,
}

impl ModuleFile {
    /// Opens `path` and checks it is a regular file of at most `max` bytes.
    pub fn open(path: &Path, max: u64) -> Result<Self, CniError> {
        let name = path.display();
        let file = File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| io_error(format!("cannot read module {name}"), e))?;
        let meta = file
            .metadata()
            .map_err(|e| io_error(format!("cannot inspect module {name}"), e))?;
        let kind = meta.file_type();
        if !kind.is_file() {
            let what = if kind.is_dir() {
                "a directory"
            } else if kind.is_fifo() {
                "a FIFO"
            } else if kind.is_char_device() || kind.is_block_device() {
                "a device"
            } else if kind.is_socket() {
                "a socket"
            } else {
                "not a regular file"
            };
            return Err(CniError::new(
                code::MODULE_REJECTED,
                format!("module {name} is {what}, not a regular file"),
            ));
        }
        let module = ModuleFile {
            file,
            path: path.to_path_buf(),
            identity: FileIdentity::of(&meta),
            max,
        };
        if meta.len() > max {
            return Err(module.too_large(meta.len()));
        }
        Ok(module)
    }

    /// The file's size when it was opened.
    pub fn size(&self) -> u64 {
        self.identity.size()
    }

    fn too_large(&self, size: u64) -> CniError {
        CniError::new(
            code::MODULE_REJECTED,
            format!(
                "module {} is {size} bytes, over ipam.moduleMaxMiB ({} MiB)",
                self.path.display(),
                self.max >> 20
            ),
        )
    }

    /// The file's bytes (at most `max`, even if it grew since it was opened), from its
    /// start whatever was read before.
    pub fn read(&self) -> Result<Vec<u8>, CniError> {
        let mut bytes = Vec::new();
        (&self.file)
            .seek(SeekFrom::Start(0))
            .map_err(|e| io_error(format!("cannot read module {}", self.path.display()), e))?;
        (&self.file)
            .take(self.max + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| io_error(format!("cannot read module {}", self.path.display()), e))?;
        if bytes.len() as u64 > self.max {
            return Err(self.too_large(bytes.len() as u64));
        }
        Ok(bytes)
    }

    /// The module's sha256: recorded in `cache` for this file's identity, or computed
    /// (then the bytes come too, so a compile need not read them again).
    pub fn sha256(
        &self,
        cache: Option<&ModuleCache>,
    ) -> Result<(String, Option<Vec<u8>>), CniError> {
        if let Some(known) = cache.and_then(|c| c.module_digest(&self.path, &self.identity)) {
            return Ok((known, None));
        }
        let bytes = self.read()?;
        let sha256 = hex(&Sha256::digest(&bytes));
        if let Some(cache) = cache
            && let Err(e) = cache.record_module_digest(&self.path, self.identity, &sha256)
        {
            tracing::warn!(target: "cache", "{e}");
        }
        Ok((sha256, Some(bytes)))
    }
}

fn io_error(what: String, e: std::io::Error) -> CniError {
    CniError::new(code::IO_FAILURE, what).with_details(e)
}
