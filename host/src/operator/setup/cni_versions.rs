//! Which CNI versions `install` writes into the conflist: every plugin of the chain
//! is asked (its VERSION), and the list is what they all support.
//!
//! libcni sends STATUS and GC only to a list whose version is 1.1.0 or later, but
//! libcni before 1.2 (containerd 1.6 and 1.7) reads only `cniVersion` and cannot read
//! a 1.1.0 result; libcni 1.2 and later read `cniVersions` and take its highest entry
//! they support. So `cniVersion` is the highest common version older libcni reads
//! (1.0.0), and `cniVersions` every common one: 1.1.0 is in it wherever every plugin
//! of the chain has it, and a plugin that holds it lower is named.

use crate::cni::{self, version_tuple};
use crate::error::CniError;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The newest version libcni before 1.2 reads as a list's `cniVersion`.
const OLD_LIBCNI_NEWEST: &str = "1.0.0";
/// The first version libcni sends STATUS and GC for.
const STATUS_AND_GC: &str = "1.1.0";
/// How long a plugin may take to answer VERSION.
const ASK_TIMEOUT: Duration = Duration::from_secs(10);

/// What the conflist declares, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chosen {
    pub cni_version: String,
    pub cni_versions: Vec<String>,
    /// The plugins without 1.1.0 (each with its newest version): STATUS and GC stay
    /// off while they are in the chain.
    pub held_lower: Vec<(String, String)>,
}

impl Chosen {
    /// One line for `install`'s output.
    pub fn line(&self) -> String {
        let mut line = format!(
            "versions: cniVersion {}, cniVersions {}",
            self.cni_version,
            self.cni_versions.join(", ")
        );
        if !self.held_lower.is_empty() {
            let held: Vec<String> = self
                .held_lower
                .iter()
                .map(|(plugin, newest)| format!("{plugin} supports up to {newest}"))
                .collect();
            line += &format!(
                " ({}, so {STATUS_AND_GC} is left out: runtimes send STATUS and GC only from {STATUS_AND_GC}, so they stay off until it is upgraded and install runs again)",
                held.join(", ")
            );
        }
        line
    }
}

/// A plugin's supported versions, from its VERSION answer.
pub fn ask(plugin: &Path) -> Result<Vec<String>, String> {
    let mut child = Command::new(plugin)
        .env("CNI_COMMAND", "VERSION")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", plugin.display()))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(br#"{"cniVersion":"0.4.0"}"#);
    }
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < ASK_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(10))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} did not answer VERSION within {} s",
                    plugin.display(),
                    ASK_TIMEOUT.as_secs()
                ));
            }
        }
    };
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = stdout.read_to_string(&mut out);
    }
    let answer: serde_json::Value = serde_json::from_str(&out).map_err(|_| {
        format!(
            "{} answered VERSION with {out:?} ({status})",
            plugin.display()
        )
    })?;
    let versions: Vec<String> = answer["supportedVersions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str())
        .filter(|v| version_tuple(v).is_some())
        .map(String::from)
        .collect();
    match versions.is_empty() {
        true => Err(format!(
            "{} answered VERSION without supportedVersions",
            plugin.display()
        )),
        false => Ok(versions),
    }
}

/// What the chain's plugins all support, wasm-ipam's own versions among them.
pub fn choose(chain: &[(String, Vec<String>)]) -> Result<Chosen, CniError> {
    let ours: Vec<String> = cni::SUPPORTED_VERSIONS
        .iter()
        .map(|v| v.to_string())
        .collect();
    let mut common: Vec<String> = ours
        .iter()
        .filter(|v| chain.iter().all(|(_, theirs)| theirs.contains(v)))
        .cloned()
        .collect();
    common.sort_by_key(|v| version_tuple(v));
    let old_newest = version_tuple(OLD_LIBCNI_NEWEST);
    let cni_version = common
        .iter()
        .rev()
        .find(|v| version_tuple(v) <= old_newest)
        .or(common.last())
        .cloned()
        .ok_or_else(|| {
            let each: Vec<String> = chain
                .iter()
                .map(|(plugin, versions)| format!("{plugin}: {}", versions.join(", ")))
                .collect();
            CniError::config(format!(
                "the chain's plugins share no CNI version with wasm-ipam ({}; wasm-ipam: {})",
                each.join("; "),
                ours.join(", ")
            ))
        })?;
    let held_lower = chain
        .iter()
        .filter(|(_, versions)| !versions.iter().any(|v| v == STATUS_AND_GC))
        .map(|(plugin, versions)| {
            let newest = versions
                .iter()
                .max_by_key(|v| version_tuple(v))
                .cloned()
                .unwrap_or_default();
            (plugin.clone(), newest)
        })
        .collect();
    Ok(Chosen {
        cni_version,
        cni_versions: common,
        held_lower,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(plugins: &[(&str, &[&str])]) -> Vec<(String, Vec<String>)> {
        plugins
            .iter()
            .map(|(p, v)| (p.to_string(), v.iter().map(|s| s.to_string()).collect()))
            .collect()
    }

    #[test]
    fn a_chain_up_to_1_0_0_writes_1_0_0_and_names_what_holds_it_lower() {
        let debian = ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"];
        let chosen = choose(&chain(&[("bridge", &debian), ("portmap", &debian)])).unwrap();
        assert_eq!(chosen.cni_version, "1.0.0");
        assert_eq!(chosen.cni_versions, ["0.3.0", "0.3.1", "0.4.0", "1.0.0"]);
        assert_eq!(
            chosen.held_lower,
            [
                ("bridge".to_string(), "1.0.0".to_string()),
                ("portmap".to_string(), "1.0.0".to_string())
            ]
        );
        assert!(
            chosen.line().contains("bridge supports up to 1.0.0")
                && chosen.line().contains("STATUS and GC")
        );
    }

    #[test]
    fn a_chain_with_1_1_0_lists_it_and_keeps_1_0_0_for_older_libcni() {
        let newer = ["0.4.0", "1.0.0", "1.1.0"];
        let chosen = choose(&chain(&[("bridge", &newer), ("portmap", &newer)])).unwrap();
        assert_eq!(chosen.cni_version, "1.0.0");
        assert_eq!(chosen.cni_versions, ["0.4.0", "1.0.0", "1.1.0"]);
        assert!(chosen.held_lower.is_empty());
        assert!(!chosen.line().contains("left out"), "{}", chosen.line());
    }

    #[test]
    fn no_shared_version_is_an_error_naming_each_plugins() {
        let err = choose(&chain(&[("bridge", &["0.2.0"])])).unwrap_err();
        assert!(err.msg.contains("bridge: 0.2.0"), "{}", err.msg);
    }
}
