//! `docs/writing-a-module.md`, executed: every file the tutorial writes is written from
//! its code block, every command it runs is run, in order, from an empty directory,
//! and every output it shows must appear in what the command printed. So the tutorial
//! cannot rot: a step that stops working fails this test.
//!
//! The document's conventions (its blocks' info strings):
//! - ```` ```<lang> file=PATH ```` — the tutorial writes this file;
//! - ```` ```sh ```` — commands, run with bash (`set -euo pipefail`) in the tutorial's
//!   directory;
//! - ```` ```output ```` right after a `sh` block — lines that block must print (each
//!   line, whitespace collapsed, must appear in its stdout);
//! - `<!-- part: NAME -->` starts a part (`rust`, `python`), each in a directory of its
//!   own.
//!
//! Needs root (the tutorial runs `bridge` in a network namespace), as CI has; the
//! namespaces and links the tutorial makes are removed even when a step fails.

use crate::harness::*;
use std::path::{Path, PathBuf};
use std::process::Command;

const DOC: &str = "docs/writing-a-module.md";
const IP_FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";

#[derive(Debug, PartialEq)]
enum Step {
    File { path: String, text: String },
    Run { script: String, expect: Vec<String> },
}

/// The document's parts, each its steps in order.
fn parts(doc: &str) -> Vec<(String, Vec<Step>)> {
    let mut parts: Vec<(String, Vec<Step>)> = Vec::new();
    let mut lines = doc.lines();
    while let Some(line) = lines.next() {
        if let Some(name) = line
            .strip_prefix("<!-- part: ")
            .and_then(|l| l.strip_suffix(" -->"))
        {
            parts.push((name.to_string(), Vec::new()));
            continue;
        }
        let Some(info) = line.strip_prefix("```").filter(|i| !i.is_empty()) else {
            continue;
        };
        let mut body = String::new();
        for line in lines.by_ref() {
            if line.starts_with("```") {
                break;
            }
            body.push_str(line);
            body.push('\n');
        }
        let Some((_, steps)) = parts.last_mut() else {
            continue;
        };
        if let Some(path) = info
            .split_whitespace()
            .find_map(|w| w.strip_prefix("file="))
        {
            steps.push(Step::File {
                path: path.to_string(),
                text: body,
            });
        } else if info == "sh" {
            steps.push(Step::Run {
                script: body,
                expect: Vec::new(),
            });
        } else if info == "output" {
            match steps.last_mut() {
                Some(Step::Run { expect, .. }) => {
                    expect.extend(body.lines().map(collapse).filter(|l| !l.is_empty()))
                }
                _ => panic!("{DOC}: an output block must follow a sh block"),
            }
        }
    }
    parts
}

fn collapse(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// What the tutorial leaves on the host, removed on drop: namespaces and links named
/// `tutorial-*`/`tut-*`, and the host's IPv4 forwarding setting restored.
struct Cleanup {
    ip_forward: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for kind in ["netns", "link"] {
            let listed = Command::new("ip")
                .args(if kind == "netns" {
                    vec!["netns", "list"]
                } else {
                    vec!["-o", "link", "show"]
                })
                .output()
                .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                .unwrap_or_default();
            for line in listed.lines() {
                let name = if kind == "netns" {
                    line.split_whitespace().next().unwrap_or("")
                } else {
                    line.split(':').nth(1).unwrap_or("").trim()
                };
                let name = name.split('@').next().unwrap_or("");
                if name.starts_with("tutorial-") || name.starts_with("tut-") {
                    let _ = Command::new("ip").args([kind, "del", name]).status();
                }
            }
        }
        let _ = std::fs::write(IP_FORWARD, &self.ip_forward);
    }
}

/// Runs one part of the tutorial in `dir`, as a reader would.
fn run_part(name: &str, steps: &[Step], dir: &Path, path: &str) {
    let target = tutorial_target();
    for (i, step) in steps.iter().enumerate() {
        match step {
            Step::File { path: file, text } => {
                let target = dir.join(file);
                std::fs::create_dir_all(target.parent().unwrap()).unwrap();
                std::fs::write(target, text).unwrap();
            }
            Step::Run { script, expect } => {
                let out = Command::new("bash")
                    .args(["-euo", "pipefail", "-c", script])
                    .current_dir(dir)
                    .env("WASM_IPAM", workspace())
                    .env("CARGO_TARGET_DIR", &target)
                    .env("PATH", path)
                    .output()
                    .unwrap();
                let stdout = String::from_utf8_lossy(&out.stdout);
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(
                    out.status.success(),
                    "{DOC}, part {name}, step {i}:\n{script}\nfailed: {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
                    out.status
                );
                let printed: Vec<String> = stdout.lines().map(collapse).collect();
                for line in expect {
                    assert!(
                        printed.iter().any(|p| p.contains(line.as_str())),
                        "{DOC}, part {name}, step {i}:\n{script}\ndid not print {line:?}; stdout:\n{stdout}\nstderr:\n{stderr}"
                    );
                }
            }
        }
    }
}

/// A PATH with this build's `wasm-ipam` first, as an installed one would be.
fn path_with_wasm_ipam(dir: &Path) -> String {
    let bin_dir = dir.join("installed-bin");
    std::fs::create_dir_all(&bin_dir).unwrap();
    let link = bin_dir.join("wasm-ipam");
    if !link.exists() {
        std::os::unix::fs::symlink(bin(), &link).unwrap();
    }
    format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// Where the tutorial's builds go (its `CARGO_TARGET_DIR`): under this checkout's
/// target/, so a module's dependencies are built once per checkout, not once per run.
/// The tutorial's own directory is outside the checkout, where a reader's would be
/// (inside it, `cargo init` would join this workspace).
fn tutorial_target() -> PathBuf {
    workspace().join("target/tutorial")
}

fn run(part: &str) {
    let doc = std::fs::read_to_string(workspace().join(DOC)).unwrap();
    let parts = parts(&doc);
    let (_, steps) = parts
        .iter()
        .find(|(name, _)| name == part)
        .unwrap_or_else(|| panic!("{DOC} has no part {part}"));
    let _cleanup = Cleanup {
        ip_forward: std::fs::read_to_string(IP_FORWARD).unwrap(),
    };
    let dir = tempfile::tempdir().unwrap();
    let path = path_with_wasm_ipam(dir.path());
    let work = dir.path().join(part);
    std::fs::create_dir(&work).unwrap();
    run_part(part, steps, &work, &path);
}

#[test]
fn the_document_parses_into_both_parts() {
    let doc = std::fs::read_to_string(workspace().join(DOC)).unwrap();
    let parts = parts(&doc);
    let names: Vec<&str> = parts.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["rust", "python"]);
    for (name, steps) in &parts {
        assert!(
            steps.iter().any(|s| matches!(s, Step::File { .. })),
            "{name} writes no file"
        );
        assert!(
            steps
                .iter()
                .any(|s| matches!(s, Step::Run { expect, .. } if !expect.is_empty())),
            "{name} checks no output"
        );
    }
}

#[test]
fn the_rust_tutorial_runs_as_written() {
    let _serial = exclusive();
    run("rust");
}

#[test]
fn the_python_tutorial_runs_as_written() {
    let _serial = exclusive();
    run("python");
}
