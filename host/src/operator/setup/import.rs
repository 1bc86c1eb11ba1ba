//! `wasm-ipam import-host-local`: moves a node from host-local without leaking or
//! reusing an address. The host reads host-local's directory for a network (one file
//! per address holding `containerID\r\nifname`, or the container id alone from older
//! versions, and `last_reserved_ip.<N>` per range set) and hands the files to the
//! module's `migrate` export, format `host-local`; the module writes them into its
//! own keys, and the host commits those writes all or nothing. The host never writes
//! a module's keys itself.

use crate::config::{DEFAULT_DATA_DIR, DEFAULT_LOCK_FILE};
use crate::error::{CniError, code};
use crate::module::bindings::{migrate, types};
use crate::module::question::Import;
use crate::operator::args::{LOCK_TIMEOUT_SECONDS, Output};
use crate::operator::ask::{NetworkToAsk, Note, StoreAccess};
use crate::operator::view::inventory::printable;
use crate::pipeline::Writes;
use crate::store::ServedBy;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;
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
    notes: &mut Vec<Note>,
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
    let work = Import {
        format: "host-local".into(),
        network: asked.network.clone(),
        config: asked.served_by.config.clone(),
        files,
    };
    asked.ask("import-host-local", work, Writes::Commit, notes)
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

/// Import host-local's on-disk allocations so a node can switch without leaking or
/// reusing addresses: the module serving the network (its `migrate` export) takes
/// them over.
#[derive(clap::Args, Debug, PartialEq)]
pub struct ImportHostLocalCommand {
    /// host-local's dataDir (holding one directory per network).
    #[arg(long, default_value = "/var/lib/cni/networks")]
    pub data_dir: PathBuf,
    /// The network(s) to import.
    #[arg(long, required = true)]
    pub network: Vec<String>,
    /// The module to import into (default: the one the store recorded for the
    /// network).
    #[arg(long)]
    pub module: Option<PathBuf>,
    /// The network's configuration (or conflist), giving its module and the
    /// configuration the module is told; its name must be the imported network's.
    #[arg(long, conflicts_with = "module")]
    pub netconf: Option<PathBuf>,
    /// wasm-ipam's store directory (the netconf's `ipam.dataDir`).
    #[arg(long, default_value = DEFAULT_DATA_DIR)]
    pub store_dir: PathBuf,
    /// The host-wide lock (the netconf's `ipam.lockFile`).
    #[arg(long, default_value = DEFAULT_LOCK_FILE)]
    pub lock_file: PathBuf,
}

impl ImportHostLocalCommand {
    pub fn run(self) -> Result<Output, CniError> {
        let mut access = StoreAccess::embedded(
            self.store_dir.clone(),
            self.lock_file.clone(),
            Duration::from_secs_f64(LOCK_TIMEOUT_SECONDS),
        );
        // Into the store the netconf names (a cluster store too), as its calls would.
        if let Some(netconf) = &self.netconf {
            access.adopt(&crate::operator::ask::read_netconf(netconf)?.ipam);
        }
        let named = self
            .netconf
            .as_deref()
            .map(crate::operator::ask::from_netconf)
            .transpose()?;
        let recorded = match (&self.module, &named) {
            (None, None) => access.served()?,
            _ => Vec::new(),
        };
        let (mut text, mut notes) = (String::new(), Vec::new());
        for name in &self.network {
            let served_by = match (&self.module, &named) {
                (Some(module), _) => ServedBy {
                    // A netconf's module is absolute; --module is resolved here.
                    module: std::path::absolute(module).unwrap_or_else(|_| module.clone()),
                    sha256: String::new(),
                    contract: String::new(),
                    config: None,
                },
                (None, Some((of, served_by))) if of == name => served_by.clone(),
                (None, Some((of, _))) => {
                    return Err(CniError::config(format!(
                        "--netconf configures network {of}, not {name}"
                    )));
                }
                (None, None) => recorded
                    .iter()
                    .find(|(n, _)| n == name)
                    .and_then(|(_, r)| r.clone().ok())
                    .ok_or_else(|| {
                        CniError::config(format!(
                            "no module is recorded for network {name}: pass --module or --netconf"
                        ))
                    })?,
            };
            // An import is the first thing a node moving from host-local commits.
            let asked = NetworkToAsk::new(name, served_by, &access)?.creating_store();
            let r = import_host_local(&asked, &self.data_dir.join(name), &mut notes)?;
            text += &format!(
                "{name}: imported {} entr{} into {}; {} already present\n",
                r.imported,
                if r.imported == 1 { "y" } else { "ies" },
                asked.served_by.module.display(),
                r.already_present
            );
            // The module's own notes on what it skipped: the import is whole.
            notes.extend(
                r.notes
                    .iter()
                    .map(|n| Note::Warning(format!("{name}: {}", printable(n)))),
            );
        }
        Ok(Output::with_notes(text, notes))
    }
}
