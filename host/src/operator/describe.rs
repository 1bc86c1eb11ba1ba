//! `wasm-ipam inspect MODULE`: what the host makes of a module, for the vendor who
//! wrote it and the operator about to deploy it. It goes through the same steps a
//! call does (read, digest, compile or load from the cache, check imports and
//! exports, link) and says where a module stops and exactly why.

use crate::error::CniError;
use crate::limits::Limits;
use crate::module::cache::ModuleCache;
use crate::module::file::ModuleFile;
use crate::module::instance::{Compiled, ModuleHost};
use crate::module::trust::{Policies, SignatureFile};
use serde::Serialize;
use std::fmt::Write;
use std::path::Path;
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
    /// `cni:ipam@0.2.1`, if the module exports a handler of a version the host runs.
    pub contract: Option<String>,
    pub exports_inspect: bool,
    pub exports_migrate: bool,
    pub exports_nodes: bool,
    pub imports: Vec<Import>,
    pub exports: Vec<String>,
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
    let mut description = Description {
        module: path.display().to_string(),
        sha256,
        size: file.size(),
        signed_by,
        trust: match &verdict {
            Ok(verdict) => verdict.describe(),
            Err(e) => format!("REFUSED: {e}"),
        },
        contract: None,
        exports_inspect: false,
        exports_migrate: false,
        exports_nodes: false,
        imports: Vec::new(),
        exports: Vec::new(),
        accepted: false,
        refused_because: None,
        cached_before,
        compile: None,
    };
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
    let interfaces = &compiled.interfaces;
    description.contract = interfaces.contract.map(|c| c.name());
    description.exports_inspect = interfaces.inspect;
    description.exports_migrate = interfaces.migrate;
    description.exports_nodes = interfaces.nodes;
    description.imports = interfaces
        .imports
        .iter()
        .map(|(name, provided)| Import {
            name: name.clone(),
            provided: *provided,
        })
        .collect();
    description.exports = interfaces.exports.clone();
    match host.link(path, compiled) {
        Ok(_) => description.accepted = true,
        Err(e) => description.refused_because = Some(e.to_string()),
    }
    Ok(description)
}

impl Description {
    pub fn text(&self) -> String {
        let mut out = String::new();
        let yes = |b: bool| if b { "yes" } else { "no" };
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
        let _ = writeln!(
            out,
            "inspect   {} (wasm-ipam list and stats)",
            yes(self.exports_inspect)
        );
        let _ = writeln!(
            out,
            "migrate   {} (wasm-ipam import-host-local)",
            yes(self.exports_migrate)
        );
        let _ = writeln!(
            out,
            "nodes     {} (wasm-ipam release-node)",
            yes(self.exports_nodes)
        );
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
        out
    }
}
