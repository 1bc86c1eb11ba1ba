//! `wasm-ipam new NAME [--lang rust|python|go]`: a module project that builds with one
//! command and passes its own unit test, so an author starts from a module that
//! answers `wasm-ipam try` and changes it, rather than from `cargo init` and a list
//! of things to know (the SDK's path, the crate type, the contract's WIT).
//!
//! The templates are in the binary (`new/`), so what it writes matches the contract
//! this binary runs: the Rust crate depends on the SDK of the checkout the binary was
//! built from (or `--sdk`); the Go module carries a copy of this binary's Go SDK and
//! WIT (or names `--sdk`), so its `go.mod` builds on any machine, the project moved
//! or committed anywhere (there is no module proxy to fetch the SDK from); and the
//! Python project carries this binary's WIT.

use crate::error::{CniError, code};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// The language a module is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lang {
    Rust,
    Python,
    Go,
}

/// Start a module: a directory with a working IPAM module in Rust, Python or Go (a
/// pool that hands out addresses in order), its build command and its README.
#[derive(Debug, Clone, clap::Args)]
pub struct NewCommand {
    /// The module's name: the directory made, and the crate or component name.
    pub name: String,
    #[arg(long, value_enum, default_value_t = Lang::Rust)]
    pub lang: Lang,
    /// The SDK, for a Rust module (`guest/` of a wasm-ipam checkout) or a Go one
    /// (`guest-go/`). Default: for Rust, the one this binary was built with; for Go, a
    /// copy of this binary's SDK written into the project (`guest-go/`).
    #[arg(long)]
    pub sdk: Option<PathBuf>,
}

/// The SDKs of the checkout this binary was built from.
const BUILT_WITH_SDK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../guest");
const BUILT_WITH_GO_SDK: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../guest-go");

/// One file of a template: its path in the project, its text, whether it is run.
struct Template {
    path: &'static str,
    text: &'static str,
    executable: bool,
}

const fn file(path: &'static str, text: &'static str) -> Template {
    Template {
        path,
        text,
        executable: false,
    }
}

const RUST: &[Template] = &[
    file("Cargo.toml", include_str!("new/rust/Cargo.toml")),
    file("src/lib.rs", include_str!("new/rust/src/lib.rs")),
    file("net.json", include_str!("new/rust/net.json")),
    file("README.md", include_str!("new/rust/README.md")),
    file(".gitignore", include_str!("new/rust/gitignore")),
];

const PYTHON: &[Template] = &[
    file("ipam.py", include_str!("new/python/ipam.py")),
    file("app.py", include_str!("new/python/app.py")),
    file("test_ipam.py", include_str!("new/python/test_ipam.py")),
    Template {
        path: "build.sh",
        text: include_str!("new/python/build.sh"),
        executable: true,
    },
    file("wit/ipam.wit", include_str!("../../../../wit/ipam.wit")),
    file("net.json", include_str!("new/python/net.json")),
    file("README.md", include_str!("new/python/README.md")),
    file(".gitignore", include_str!("new/python/gitignore")),
];

/// The Go SDK as this binary was built with it, copied into a Go project as
/// `guest-go/` (its `go.mod`'s `replace` names `./guest-go`), with the WIT its
/// `build.sh` reads from `../wit/`: everything but its tests and their fixtures.
const GO_SDK_COPY: &[(&str, &[u8])] = &[
    (
        "guest-go/go.mod",
        include_bytes!("../../../../guest-go/go.mod"),
    ),
    (
        "guest-go/README.md",
        include_bytes!("../../../../guest-go/README.md"),
    ),
    (
        "guest-go/build.sh",
        include_bytes!("../../../../guest-go/build.sh"),
    ),
    (
        "guest-go/abi_wasip1.go",
        include_bytes!("../../../../guest-go/abi_wasip1.go"),
    ),
    (
        "guest-go/adapter_wasip1.go",
        include_bytes!("../../../../guest-go/adapter_wasip1.go"),
    ),
    (
        "guest-go/capabilities.go",
        include_bytes!("../../../../guest-go/capabilities.go"),
    ),
    (
        "guest-go/context.go",
        include_bytes!("../../../../guest-go/context.go"),
    ),
    (
        "guest-go/errors.go",
        include_bytes!("../../../../guest-go/errors.go"),
    ),
    (
        "guest-go/export.go",
        include_bytes!("../../../../guest-go/export.go"),
    ),
    (
        "guest-go/export_optional_wasip1.go",
        include_bytes!("../../../../guest-go/export_optional_wasip1.go"),
    ),
    (
        "guest-go/export_wasip1.go",
        include_bytes!("../../../../guest-go/export_wasip1.go"),
    ),
    (
        "guest-go/host_other.go",
        include_bytes!("../../../../guest-go/host_other.go"),
    ),
    (
        "guest-go/host_wasip1.go",
        include_bytes!("../../../../guest-go/host_wasip1.go"),
    ),
    (
        "guest-go/inspect.go",
        include_bytes!("../../../../guest-go/inspect.go"),
    ),
    (
        "guest-go/keys.go",
        include_bytes!("../../../../guest-go/keys.go"),
    ),
    (
        "guest-go/layout.go",
        include_bytes!("../../../../guest-go/layout.go"),
    ),
    (
        "guest-go/log.go",
        include_bytes!("../../../../guest-go/log.go"),
    ),
    (
        "guest-go/module.go",
        include_bytes!("../../../../guest-go/module.go"),
    ),
    (
        "guest-go/nodes.go",
        include_bytes!("../../../../guest-go/nodes.go"),
    ),
    (
        "guest-go/readiness.go",
        include_bytes!("../../../../guest-go/readiness.go"),
    ),
    (
        "guest-go/readiness_other.go",
        include_bytes!("../../../../guest-go/readiness_other.go"),
    ),
    (
        "guest-go/reservations.go",
        include_bytes!("../../../../guest-go/reservations.go"),
    ),
    (
        "guest-go/store.go",
        include_bytes!("../../../../guest-go/store.go"),
    ),
    (
        "guest-go/types.go",
        include_bytes!("../../../../guest-go/types.go"),
    ),
    (
        "guest-go/usage.go",
        include_bytes!("../../../../guest-go/usage.go"),
    ),
    (
        "guest-go/adapter/README.md",
        include_bytes!("../../../../guest-go/adapter/README.md"),
    ),
    (
        "guest-go/adapter/wasi_snapshot_preview1.reactor.wasm",
        include_bytes!("../../../../guest-go/adapter/wasi_snapshot_preview1.reactor.wasm"),
    ),
    ("wit/ipam.wit", include_bytes!("../../../../wit/ipam.wit")),
];

const GO: &[Template] = &[
    file("go.mod", include_str!("new/go/go.mod")),
    file("main.go", include_str!("new/go/main.go")),
    file("main_test.go", include_str!("new/go/main_test.go")),
    Template {
        path: "build.sh",
        text: include_str!("new/go/build.sh"),
        executable: true,
    },
    file("net.json", include_str!("new/go/net.json")),
    file("README.md", include_str!("new/go/README.md")),
    file(".gitignore", include_str!("new/go/gitignore")),
];

impl NewCommand {
    pub fn run(self) -> Result<crate::operator::args::Output, CniError> {
        let (text, notes) = new(&self)?;
        Ok(crate::operator::args::Output {
            text,
            notes,
            failed: false,
        })
    }
}

/// Makes the project in `./NAME`; answers what it wrote and what to run next, and a
/// note naming the SDK a Rust crate uses.
pub fn new(args: &NewCommand) -> Result<(String, Vec<String>), CniError> {
    new_in(Path::new("."), args)
}

/// `new`, making the project in `parent`.
fn new_in(parent: &Path, args: &NewCommand) -> Result<(String, Vec<String>), CniError> {
    let name = &args.name;
    refuse_invalid_name(name)?;
    let lib = name.replace('-', "_");
    let dir = parent.join(name);
    if dir.exists() {
        return Err(CniError::new(
            code::IO_FAILURE,
            format!("{name} already exists; nothing was written"),
        ));
    }
    let mut notes = Vec::new();
    let (templates, sdk) = templates_and_sdk(args, &mut notes)?;
    let mut text = format!("made {name}/:\n");
    for template in templates {
        let path = dir.join(template.path);
        let contents = template
            .text
            .replace("{{name}}", name)
            .replace("{{lib}}", &lib)
            .replace("{{sdk}}", &sdk)
            .replace("{{host_keys}}", &host_keys());
        write(&path, contents.as_bytes(), template.executable)?;
        text.push_str(&format!("  {}\n", template.path));
    }
    if args.lang == Lang::Go && args.sdk.is_none() {
        for (path, bytes) in GO_SDK_COPY {
            write(&dir.join(path), bytes, path.ends_with(".sh"))?;
        }
        text.push_str("  guest-go/ (the Go SDK)\n  wit/ipam.wit\n");
    }
    text.push_str("next:\n");
    for step in next_steps(args.lang, name, &lib) {
        text.push_str(&format!("  {step}\n"));
    }
    Ok((text, notes))
}

/// Refuses a name that cannot name a module (and its crate, package or file): a
/// letter, then letters, digits, - or _, at most 64.
fn refuse_invalid_name(name: &str) -> Result<(), CniError> {
    let valid = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid {
        return Err(CniError::new(
            code::INVALID_NETWORK_CONFIG,
            format!(
                "{name:?} cannot name a module: a letter, then letters, digits, - or _ (at most 64)"
            ),
        ));
    }
    Ok(())
}

/// The templates of `args.lang`, and what `{{sdk}}` stands for in them: the SDK a
/// Rust crate uses (a note names it), a Go SDK given with `--sdk` (likewise), else
/// the copy of the Go SDK made in the project.
fn templates_and_sdk(
    args: &NewCommand,
    notes: &mut Vec<String>,
) -> Result<(&'static [Template], String), CniError> {
    Ok(match args.lang {
        Lang::Rust => {
            let sdk = sdk_dir(args.sdk.as_deref(), &RUST_SDK)?;
            notes.push(format!("the SDK: {}", sdk.display()));
            (RUST, format!("path = {:?}", sdk.to_string_lossy()))
        }
        Lang::Python => (PYTHON, String::new()),
        Lang::Go => match &args.sdk {
            Some(given) => {
                let sdk = sdk_dir(Some(given), &GO_SDK)?;
                notes.push(format!("the SDK: {}", sdk.display()));
                (GO, sdk.to_string_lossy().into_owned())
            }
            None => (GO, "./guest-go".to_string()),
        },
    })
}

/// What to run next in a new `lang` project `name` (its library `lib`): test it,
/// build it, make its first ADD.
fn next_steps(lang: Lang, name: &str, lib: &str) -> Vec<String> {
    match lang {
        Lang::Rust => vec![
            format!("cd {name}"),
            "cargo test".into(),
            "cargo build --target wasm32-wasip2 --release".into(),
            format!(
                "wasm-ipam try {}/wasm32-wasip2/release/{lib}.wasm ADD --config net.json",
                cargo_target_dir(std::env::var("CARGO_TARGET_DIR").ok())
            ),
        ],
        Lang::Python => vec![
            format!("cd {name}"),
            "python3 -m unittest".into(),
            "./build.sh".into(),
            format!("wasm-ipam try {lib}.wasm ADD --config net.json"),
        ],
        Lang::Go => vec![
            format!("cd {name}"),
            "go test ./...".into(),
            "./build.sh".into(),
            format!("wasm-ipam try {lib}.wasm ADD --config net.json"),
        ],
    }
}

/// The host's `ipam` keys as a Python set literal, for the Python template.
fn host_keys() -> String {
    let quoted: Vec<String> = wasm_ipam_codes::HOST_IPAM_KEYS
        .iter()
        .map(|k| format!("{k:?}"))
        .collect();
    format!("{{{}}}", quoted.join(", "))
}

/// Where cargo puts a crate's build, given `CARGO_TARGET_DIR`'s value: it when set (as
/// cargo reads it), else `target` in the crate.
fn cargo_target_dir(env: Option<String>) -> String {
    env.filter(|dir| !dir.is_empty())
        .unwrap_or_else(|| "target".into())
}

/// How an SDK is found and recognised.
struct Sdk {
    built_with: &'static str,
    manifest: &'static str,
    names: &'static str,
    what: &'static str,
    folder: &'static str,
}

const RUST_SDK: Sdk = Sdk {
    built_with: BUILT_WITH_SDK,
    manifest: "Cargo.toml",
    names: "name = \"wasm-ipam-guest\"",
    what: "the wasm-ipam-guest crate",
    folder: "guest/",
};

const GO_SDK: Sdk = Sdk {
    built_with: BUILT_WITH_GO_SDK,
    manifest: "go.mod",
    names: "module wasm-ipam.dev/guest-go",
    what: "the Go SDK (module wasm-ipam.dev/guest-go)",
    folder: "guest-go/",
};

/// The SDK a module depends on: `--sdk`, else the one this binary was built with, if
/// it is still there.
fn sdk_dir(given: Option<&Path>, sdk: &Sdk) -> Result<PathBuf, CniError> {
    let (dir, whence) = match given {
        Some(dir) => (dir.to_path_buf(), "--sdk"),
        None => (
            PathBuf::from(sdk.built_with),
            "the SDK this binary was built with",
        ),
    };
    let manifest = std::fs::read_to_string(dir.join(sdk.manifest)).unwrap_or_default();
    if !manifest.contains(sdk.names) {
        return Err(CniError::new(
            code::IO_FAILURE,
            format!(
                "{whence}, {}, is not {}; pass --sdk PATH ({} of a wasm-ipam checkout)",
                dir.display(),
                sdk.what,
                sdk.folder
            ),
        ));
    }
    dir.canonicalize()
        .map_err(|e| CniError::new(code::IO_FAILURE, format!("{}: {e}", dir.display())))
}

fn write(path: &Path, contents: &[u8], executable: bool) -> Result<(), CniError> {
    let failed = |e: std::io::Error| {
        CniError::new(code::IO_FAILURE, format!("cannot write {}", path.display())).with_details(e)
    };
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(failed)?;
    }
    std::fs::write(path, contents).map_err(failed)?;
    if executable {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).map_err(failed)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_python_template_carries_this_binarys_contract() {
        let wit = PYTHON.iter().find(|t| t.path == "wit/ipam.wit").unwrap();
        let current = crate::module::contract::Contract::CURRENT.name();
        let package = current.replace("cni:ipam@", "package cni:ipam@");
        assert!(wit.text.contains(&package), "{package}");
    }

    #[test]
    fn the_sdk_this_binary_was_built_with_is_found() {
        let sdk = sdk_dir(None, &RUST_SDK).unwrap();
        assert!(sdk.join("src/lib.rs").exists(), "{}", sdk.display());
        let err = sdk_dir(Some(Path::new("/nonexistent")), &RUST_SDK).unwrap_err();
        assert!(err.msg.contains("pass --sdk PATH (guest/"), "{}", err.msg);
        let go = sdk_dir(None, &GO_SDK).unwrap();
        assert!(go.join("build.sh").exists(), "{}", go.display());
        let err = sdk_dir(Some(&sdk), &GO_SDK).unwrap_err();
        assert!(err.msg.contains("is not the Go SDK"), "{}", err.msg);
    }

    /// The copy is the SDK's every file but its tests and their fixtures: a file added
    /// to the SDK fails this until it is copied too (or named a fixture here).
    #[test]
    fn the_go_sdk_copy_is_the_whole_sdk() {
        let sdk = Path::new(BUILT_WITH_GO_SDK);
        let fixtures = ["contract.golden", "wasip1-run"];
        let mut on_disk = Vec::new();
        for dir in [sdk.to_path_buf(), sdk.join("adapter")] {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_string_lossy().into_owned();
                if path.is_file() && !name.ends_with("_test.go") && !fixtures.contains(&&*name) {
                    on_disk.push(format!(
                        "guest-go/{}",
                        path.strip_prefix(sdk).unwrap().display()
                    ));
                }
            }
        }
        let mut copied: Vec<String> = GO_SDK_COPY
            .iter()
            .map(|(path, _)| path.to_string())
            .filter(|path| path.starts_with("guest-go/"))
            .collect();
        on_disk.sort();
        copied.sort();
        assert_eq!(copied, on_disk);
    }

    /// Without `--sdk`, a Go project names its own copy of the SDK: nothing of the
    /// machine that built this binary.
    #[test]
    fn a_go_project_names_no_path_of_this_machine() {
        let dir = tempfile::tempdir().unwrap();
        let args = NewCommand {
            name: "portable".into(),
            lang: Lang::Go,
            sdk: None,
        };
        let (text, notes) = new_in(dir.path(), &args).unwrap();
        assert!(notes.is_empty(), "{notes:?}");
        assert!(text.contains("guest-go/ (the Go SDK)"), "{text}");
        let project = dir.path().join("portable");
        let go_mod = std::fs::read_to_string(project.join("go.mod")).unwrap();
        assert!(
            go_mod.contains("replace wasm-ipam.dev/guest-go => ./guest-go\n"),
            "{go_mod}"
        );
        let built_from = crate::test_support::workspace_root();
        for entry in walk(&project) {
            let text = std::fs::read(&entry).unwrap();
            let needle = built_from.to_string_lossy();
            assert!(
                !String::from_utf8_lossy(&text).contains(&*needle),
                "{} names {needle}",
                entry.display()
            );
        }
        let build = std::fs::metadata(project.join("guest-go/build.sh")).unwrap();
        assert_eq!(build.permissions().mode() & 0o111, 0o111, "build.sh is run");
        assert!(project.join("wit/ipam.wit").is_file());
    }

    fn walk(dir: &Path) -> Vec<PathBuf> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            match path.is_dir() {
                true => files.extend(walk(&path)),
                false => files.push(path),
            }
        }
        files
    }

    #[test]
    fn the_next_steps_follow_cargo_target_dir() {
        assert_eq!(
            cargo_target_dir(Some("/tmp/elsewhere".into())),
            "/tmp/elsewhere"
        );
        assert_eq!(cargo_target_dir(Some(String::new())), "target");
        assert_eq!(cargo_target_dir(None), "target");
    }
}
