//! `wasm-ipam inspect MODULE`: what the host makes of a module, for the vendor who
//! wrote it and the operator about to deploy it. It goes through the same steps a
//! call does (read, digest, compile or load from the cache, check imports and
//! exports, link) and says where a module stops and exactly why.
//!
//! An export alone does not say a module does the work: every SDK module exports
//! `migrate`, most answering "not implemented". So a module that exports
//! `cni:ipam/capabilities` (0.2.2) is asked which functions are its own, through the
//! same locked pipeline as any question to a module, on a private lock and store that
//! exist only for this question.

use crate::config::DEFAULT_CACHE_DIR;
use crate::error::CniError;
use crate::limits::Limits;
use crate::module::bindings::capabilities::Origin;
use crate::module::cache::ModuleCache;
use crate::module::contract::Interfaces;
use crate::module::file::ModuleFile;
use crate::module::instance::{Compiled, ModuleHost};
use crate::module::trust::{Policies, SignatureFile};
use crate::operator::args::{CompileArgs, Output, open_cache};
use crate::operator::modules::answers;
use serde::Serialize;
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

#[derive(Debug, Serialize)]
pub struct Description {
    pub module: String,
    pub sha256: String,
    pub size: u64,
    /// The key id of the module's signature (`MODULE.minisig`), if it has one.
    pub signed_by: Option<String>,
    /// What the trust policies (the node's and `--trust-policy`) say of it.
    pub trust: String,
    /// `cni:ipam@0.2.5`, if the module exports a handler of a version the host runs.
    pub contract: Option<String>,
    pub exports_inspect: bool,
    pub exports_migrate: bool,
    pub exports_nodes: bool,
    pub exports_reservations: bool,
    pub exports_usage: bool,
    pub imports: Vec<Import>,
    pub exports: Vec<String>,
    /// Each exported function and where its answer comes from (`module`, `derived`,
    /// `not-implemented`), as the module's `capabilities` says; `None` when it cannot
    /// be asked (`functions_unknown` says why).
    pub functions: Option<Vec<Function>>,
    pub functions_unknown: Option<String>,
    pub accepted: bool,
    /// Why the host refuses it, as a call would say.
    pub refused_because: Option<String>,
    /// Whether the cache held a compiled artifact before this command ran.
    pub cached_before: bool,
    /// How the compiled code was obtained, and how long it took.
    pub compile: Option<Compile>,
}

#[derive(Debug, Serialize)]
pub struct Import {
    pub name: String,
    pub provided: bool,
}

#[derive(Debug, Serialize)]
pub struct Function {
    /// `handler.check`, as in the WIT.
    pub name: String,
    pub origin: &'static str,
}

impl Function {
    fn of(function: crate::module::bindings::capabilities::Function) -> Self {
        Function {
            name: function.name,
            origin: match function.origin {
                Origin::Module => "module",
                Origin::Derived => "derived",
                Origin::NotImplemented => "not-implemented",
            },
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Compile {
    /// `compiled` (now, by the compiler) or `cache` (loaded from an earlier compile).
    pub how: &'static str,
    pub milliseconds: f64,
}

/// Describes the module at `path`, compiling it (into `cache`, if given) if need be,
/// and judges it by `policies` as a call would. Only a module that cannot be read at
/// all is an error.
pub fn describe(
    path: &Path,
    policies: &Policies,
    cache: Option<&ModuleCache>,
    limits: &Limits,
) -> Result<Description, CniError> {
    let file = ModuleFile::open(path, limits.module_bytes)?;
    let (sha256, bytes) = file.sha256(None)?;
    let signature = SignatureFile::beside(path);
    let signed_by = match &signature {
        Ok(Some(signature)) => Some(signature.key_id().to_string()),
        _ => None,
    };
    let verdict = signature.and_then(|signature| {
        let bytes = || bytes.map_or_else(|| file.read(), Ok);
        policies.check(path, &sha256, signature.as_ref(), bytes, None)
    });
    let cached_before = cache.is_some_and(|c| c.artifact_path(&sha256).exists());
    let trust = match &verdict {
        Ok(verdict) => verdict.describe(),
        Err(e) => format!("REFUSED: {e}"),
    };
    let mut description =
        Description::of_file(path, sha256, file.size(), signed_by, trust, cached_before);
    if let Err(e) = verdict {
        description.refused_because = Some(e.to_string());
        return Ok(description);
    }
    let host = ModuleHost::new()?;
    let started = Instant::now();
    let compiled: Compiled = match host.compile(path, None, &Policies::none(), cache, limits) {
        Ok(compiled) => compiled,
        Err(e) => {
            description.refused_because = Some(e.to_string());
            return Ok(description);
        }
    };
    description.compile = Some(Compile {
        how: if compiled.from_cache {
            "cache"
        } else {
            "compiled"
        },
        milliseconds: started.elapsed().as_secs_f64() * 1000.0,
    });
    description.record_interfaces(&compiled.interfaces);
    let asks_capabilities = compiled.interfaces.capabilities;
    match host.link(path, compiled) {
        Ok(_) => description.accepted = true,
        Err(e) => description.refused_because = Some(e.to_string()),
    }
    if description.accepted {
        description.record_functions(path, cache, limits, asks_capabilities);
    }
    Ok(description)
}

fn origin_text(origin: &str) -> &'static str {
    match origin {
        "module" => "implemented",
        "derived" => "default (built on what it implements)",
        _ => "default (not implemented)",
    }
}

impl Description {
    /// What the file and the trust policies say of a module, before it is compiled:
    /// nothing yet of its interfaces, not (yet) accepted.
    fn of_file(
        path: &Path,
        sha256: String,
        size: u64,
        signed_by: Option<String>,
        trust: String,
        cached_before: bool,
    ) -> Self {
        Description {
            module: path.display().to_string(),
            sha256,
            size,
            signed_by,
            trust,
            contract: None,
            exports_inspect: false,
            exports_migrate: false,
            exports_nodes: false,
            exports_reservations: false,
            exports_usage: false,
            imports: Vec::new(),
            exports: Vec::new(),
            functions: None,
            functions_unknown: None,
            accepted: false,
            refused_because: None,
            cached_before,
            compile: None,
        }
    }

    /// Records what the compiled module targets, imports and exports.
    fn record_interfaces(&mut self, interfaces: &Interfaces) {
        self.contract = interfaces.contract.map(|c| c.name());
        self.exports_inspect = interfaces.inspect;
        self.exports_migrate = interfaces.migrate;
        self.exports_nodes = interfaces.nodes;
        self.exports_reservations = interfaces.reservations;
        self.exports_usage = interfaces.usage;
        self.imports = interfaces
            .imports
            .iter()
            .map(|(name, provided)| Import {
                name: name.clone(),
                provided: *provided,
            })
            .collect();
        self.exports = interfaces.exports.clone();
    }

    /// Records which functions of an accepted module are its own, by asking it when
    /// it `asks_capabilities` (a module that cannot answer is refused), else why that
    /// is unknown.
    fn record_functions(
        &mut self,
        path: &Path,
        cache: Option<&ModuleCache>,
        limits: &Limits,
        asks_capabilities: bool,
    ) {
        if asks_capabilities {
            match answers::capabilities(path, cache, limits) {
                Ok(functions) => {
                    self.functions = Some(functions.into_iter().map(Function::of).collect())
                }
                // A module that cannot answer this cannot answer a call either.
                Err(e) => {
                    self.accepted = false;
                    self.refused_because = Some(answers::does_not_answer(path, &e).to_string());
                }
            }
        } else {
            self.functions_unknown = Some(format!(
                "the module does not export cni:ipam/capabilities (since cni:ipam@0.2.2; it targets {})",
                self.contract.as_deref().unwrap_or("an older contract")
            ));
        }
    }

    /// Whether the module does what `interface` is for: `no` if it does not export
    /// it; else, by its `capabilities`, `yes` if one of its functions is the module's
    /// own, the default's kind if none is; `exported` when the module does not say.
    fn implements(&self, interface: &str, exported: bool) -> &'static str {
        if !exported {
            return "no";
        }
        let Some(functions) = &self.functions else {
            return "exported (implemented or not: unknown)";
        };
        let prefix = format!("{interface}.");
        let origins: Vec<&str> = functions
            .iter()
            .filter(|f| f.name.starts_with(&prefix))
            .map(|f| f.origin)
            .collect();
        if origins.contains(&"module") {
            "yes"
        } else if origins.contains(&"derived") {
            "default (built on what it implements)"
        } else if origins.is_empty() {
            "exported (implemented or not: unknown)"
        } else {
            "default (not implemented)"
        }
    }

    pub fn text(&self) -> String {
        let mut out = String::new();
        self.write_identity(&mut out);
        self.write_interfaces(&mut out);
        self.write_imports_exports_and_functions(&mut out);
        self.write_verdict(&mut out);
        out
    }

    /// The text's first lines: the file, its signature and trust, its contract.
    fn write_identity(&self, out: &mut String) {
        let _ = writeln!(out, "module    {}", self.module);
        let _ = writeln!(out, "sha256    {}", self.sha256);
        let _ = writeln!(out, "size      {} bytes", self.size);
        let _ = writeln!(
            out,
            "signed    {}",
            match &self.signed_by {
                Some(key_id) => format!("by key {key_id} ({}.minisig)", self.module),
                None => "no".into(),
            }
        );
        let _ = writeln!(out, "trust     {}", self.trust);
        let _ = writeln!(
            out,
            "contract  {}",
            self.contract.as_deref().unwrap_or("none the host runs")
        );
    }

    /// A line per optional interface: whether the module does it, and the commands
    /// that need it.
    fn write_interfaces(&self, out: &mut String) {
        for (interface, exported, command) in [
            ("inspect", self.exports_inspect, "wasm-ipam list and stats"),
            (
                "migrate",
                self.exports_migrate,
                "wasm-ipam import-host-local",
            ),
            ("nodes", self.exports_nodes, "wasm-ipam release-node"),
            (
                "reservations",
                self.exports_reservations,
                "wasm-ipam reserve, unreserve and list --reservations",
            ),
            (
                "usage",
                self.exports_usage,
                "wasm-ipam stats (reserved, borrowed, blocks)",
            ),
        ] {
            let _ = writeln!(
                out,
                "{interface:<12} {:<38} {command}",
                self.implements(interface, exported)
            );
        }
    }

    /// The imports (each provided or not), the exports, and each function's origin
    /// or why it is unknown.
    fn write_imports_exports_and_functions(&self, out: &mut String) {
        let _ = writeln!(out, "imports");
        for import in &self.imports {
            let provided = if import.provided {
                "provided"
            } else {
                "NOT PROVIDED"
            };
            let _ = writeln!(out, "  {:<44} {provided}", import.name);
        }
        let _ = writeln!(out, "exports");
        for export in &self.exports {
            let _ = writeln!(out, "  {export}");
        }
        match (&self.functions, &self.functions_unknown) {
            (Some(functions), _) => {
                let _ = writeln!(out, "functions (as the module's capabilities say)");
                for f in functions {
                    let _ = writeln!(out, "  {:<44} {}", f.name, origin_text(f.origin));
                }
            }
            (None, Some(why)) => {
                let _ = writeln!(out, "functions unknown: {why}");
            }
            (None, None) => {}
        }
    }

    /// The text's last lines: accepted or why not, the compile, the cache before.
    fn write_verdict(&self, out: &mut String) {
        match &self.refused_because {
            None => {
                let _ = writeln!(out, "accepted  yes");
            }
            Some(why) => {
                let _ = writeln!(out, "accepted  no: {why}");
            }
        }
        if let Some(compile) = &self.compile {
            let how = match compile.how {
                "cache" => "loaded from the cache in",
                _ => "compiled in",
            };
            let _ = writeln!(out, "compile   {how} {:.1} ms", compile.milliseconds);
        }
        let _ = writeln!(
            out,
            "cached    {}",
            if self.cached_before {
                "yes (before this command)"
            } else {
                "no (before this command)"
            }
        );
    }
}

/// Describe a module: digest, size, the contract it targets, its imports (each
/// provided or not) and exports, whether the host accepts it and why not, its compile
/// time and whether the cache holds it.
#[derive(clap::Args, Debug, PartialEq)]
pub struct InspectCommand {
    /// The module's .wasm component.
    pub module: PathBuf,
    /// The cache directory (the netconf's `ipam.cacheDir`).
    #[arg(long, default_value = DEFAULT_CACHE_DIR)]
    pub cache_dir: PathBuf,
    /// Compile without the cache (to measure the compile; nothing is stored).
    #[arg(long)]
    pub no_cache: bool,
    /// Judge the module by this trust policy too, besides the node's
    /// (/etc/wasm-ipam/trust.json), as the netconf's `ipam.trustPolicy` would.
    #[arg(long)]
    pub trust_policy: Option<PathBuf>,
    #[command(flatten)]
    pub compile: CompileArgs,
    /// JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

impl InspectCommand {
    /// Fails (exit 1) when the host would refuse the module.
    pub fn run(self) -> Result<Output, CniError> {
        let cache = match self.no_cache {
            true => None,
            false => Some(open_cache(
                &self.cache_dir,
                "--cache-dir DIR (one of your own) or --no-cache",
            )?),
        };
        let report = describe(
            &self.module,
            &Policies::for_call(self.trust_policy.as_deref())?,
            cache.as_ref(),
            &self.compile.limits()?,
        )?;
        let mut out = match self.json {
            true => Output::json(&report, Vec::new()),
            false => Output::from(report.text()),
        };
        out.failed = !report.accepted;
        Ok(out)
    }
}
