//! `wasm-ipam import-host-local`: moves a node from host-local without leaking or
//! reusing an address. The host reads host-local's directory for a network (one file
//! per address holding `containerID\r\nifname`, or the container id alone from older
//! versions, and `last_reserved_ip.<N>` per range set) and hands the files to the
//! module's `migrate` export, format `host-local`; the module writes them into its
//! own keys, and the host commits those writes all or nothing. The host never writes
//! a module's keys itself.

use crate::error::{CniError, code};
use crate::module::bindings::{migrate, types};
use crate::module::instance::{Answer, Import, Question};
use crate::operator::ask::NetworkToAsk;
use crate::pipeline::Writes;
use std::io::Read;
use std::path::Path;
use std::time::UNIX_EPOCH;

/// The most host-local state read for one network: files, and bytes per file (an
/// address file holds an id and an interface name).
const MAX_FILES: usize = 1 << 20;
const MAX_FILE_BYTES: u64 = 64 << 10;

fn io_error(path: &Path, e: std::io::Error) -> CniError {
    CniError::new(code::IO_FAILURE, format!("cannot read {}", path.display())).with_details(e)
}

/// Imports host-local's directory `network_dir` into the network `asked` serves,
/// holding host-local's own lock (`<network_dir>/lock`) meanwhile so a host-local call
/// still in flight cannot change the files under it.
pub fn import_host_local(
    asked: &NetworkToAsk,
    network_dir: &Path,
    notes: &mut Vec<String>,
) -> Result<migrate::ImportReport, CniError> {
    let host_local_lock = network_dir.join("lock");
    let _held = match std::fs::File::open(&host_local_lock) {
        Ok(file) => {
            file.lock().map_err(|e| io_error(&host_local_lock, e))?;
            Some(file)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_error(&host_local_lock, e)),
    };
    let files = state_files(network_dir)?;
    let work = Question::Import(Import {
        format: "host-local".into(),
        network: asked.network.clone(),
        config: asked.served_by.config.clone(),
        files,
    });
    match asked.ask("import-host-local", work, Writes::Commit, notes)? {
        Answer::Imported(report) => Ok(report),
        _ => unreachable!("an import answers Imported"),
    }
}

/// The regular files directly in `dir` (host-local's `lock` included: what is state
/// is the module's to say), in name order.
fn state_files(dir: &Path) -> Result<Vec<migrate::StateFile>, CniError> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| io_error(dir, e))? {
        let entry = entry.map_err(|e| io_error(dir, e))?;
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).map_err(|e| io_error(&path, e))?;
        if !meta.is_file() {
            continue;
        }
        if files.len() == MAX_FILES {
            return Err(CniError::new(
                code::IO_FAILURE,
                format!(
                    "{} holds more than {MAX_FILES} files; is it host-local's network directory?",
                    dir.display()
                ),
            ));
        }
        let mut contents = Vec::new();
        std::fs::File::open(&path)
            .and_then(|f| f.take(MAX_FILE_BYTES).read_to_end(&mut contents))
            .map_err(|e| io_error(&path, e))?;
        let modified = meta
            .modified()
            .ok()
            .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
            .map(|d| types::WallInstant {
                seconds: d.as_secs(),
                nanoseconds: d.subsec_nanos(),
            });
        files.push(migrate::StateFile {
            name: entry.file_name().to_string_lossy().into_owned(),
            contents,
            modified,
        });
    }
    files.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(files)
}
