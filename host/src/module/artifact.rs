//! What a file that is not a module the host runs is instead, and which build makes
//! the right one: the mistakes a vendor makes (a native build, a core wasip1 module,
//! a WASI command, a component built on another contract) each answered with the
//! command that fixes it, not the parser's message alone.

/// How each SDK makes a component of the contract, as a fix for a wrong artifact.
pub const BUILD_COMMANDS: &str = "build a component: Rust `cargo build --target wasm32-wasip2 --release` (a cdylib on wasm-ipam-guest), Go the SDK's `build.sh` (guest-go/build.sh PACKAGE OUT.wasm), Python `componentize-py -w ipam-module componentize app` (each is `./build.sh` or the printed next step in a `wasm-ipam new` project)";

/// What `bytes`, which the component parser refused, are, and how to make the module
/// instead; `None` when they are none of the known mistakes.
pub fn misbuilt(bytes: &[u8]) -> Option<String> {
    let what = match bytes {
        [0x7f, b'E', b'L', b'F', ..] => "a native ELF program or library",
        [b'M', b'Z', ..] | [0xcf, 0xfa, 0xed, 0xfe, ..] | [0xfe, 0xed, 0xfa, 0xcf, ..] => {
            "a native program"
        }
        [0, b'a', b's', b'm', 1, 0, 0, 0, ..] => {
            return Some(format!(
                "it is a core WebAssembly module (what wasm32-wasip1, wasm32-unknown-unknown or GOOS=wasip1 make), not a component: {BUILD_COMMANDS}; the Go SDK's build.sh makes the component from Go's wasip1 module, and a Rust module is built for wasm32-wasip2, not wasip1"
            ));
        }
        [0x1f, 0x8b, ..] => {
            "gzip-compressed data (an image layer or an archive, not the module in it: `wasm-ipam pull` fetches a module from a registry)"
        }
        [b'#', b'!', ..] => "a script",
        [b'<', ..] | [b'{', ..] => {
            "text (an HTML or JSON page: an error page saved in place of the module?)"
        }
        _ => return None,
    };
    Some(format!("it is {what}, not WebAssembly: {BUILD_COMMANDS}"))
}

/// Why a component that exports no handler the host runs is not a module, and what to
/// build instead, from its exports.
pub fn foreign_component(exports: &[String], runs: &str) -> String {
    let targets: Vec<&str> = exports
        .iter()
        .filter_map(|e| e.strip_prefix("cni:ipam/handler@"))
        .collect();
    if let Some(version) = targets.first() {
        return format!(
            "it targets cni:ipam@{version}, which this host does not run ({runs}): rebuild it on the SDK of the wasm-ipam the nodes run (`wasm-ipam new` writes a project on it; docs/wit-versions.md), or run a wasm-ipam that runs {version}"
        );
    }
    if exports.iter().any(|e| e.starts_with("wasi:cli/run@")) {
        return format!(
            "it is a WASI command (it exports wasi:cli/run: a program with a `main`), not an IPAM module, which is a library component exporting cni:ipam/handler: {BUILD_COMMANDS}"
        );
    }
    match exports.is_empty() {
        // Built as a component, but its handler never registered.
        true => "it exports nothing: a Rust module ends with `export_module!(Type);` (wasm-ipam-guest), a Go module calls ipam.Export from an init function and is built by guest-go/build.sh, a Python one is componentized for world ipam-module".into(),
        false => format!(
            "it exports {}, a component for another world: {BUILD_COMMANDS}",
            exports.join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_known_mistake_is_named_with_its_build() {
        let elf = misbuilt(b"\x7fELF\x02\x01\x01").unwrap();
        assert!(elf.starts_with("it is a native ELF"), "{elf}");
        assert!(elf.contains("--target wasm32-wasip2"), "{elf}");
        let core = misbuilt(b"\0asm\x01\0\0\0\x01").unwrap();
        assert!(
            core.starts_with("it is a core WebAssembly module"),
            "{core}"
        );
        assert!(
            misbuilt(b"\x1f\x8b\x08")
                .unwrap()
                .contains("wasm-ipam pull")
        );
        assert!(misbuilt(b"<html>").unwrap().contains("error page"));
        // A component (layer 1) the parser refused is damaged, not misbuilt.
        assert_eq!(misbuilt(b"\0asm\x0d\0\x01\0"), None);
        assert_eq!(misbuilt(b""), None);
    }

    #[test]
    fn a_foreign_component_says_what_it_is() {
        let newer = foreign_component(&["cni:ipam/handler@0.3.0".into()], "0.2.0 to 0.2.5");
        assert!(newer.starts_with("it targets cni:ipam@0.3.0"), "{newer}");
        let command = foreign_component(&["wasi:cli/run@0.2.3".into()], "");
        assert!(command.contains("a WASI command"), "{command}");
        let other = foreign_component(&["example:x/y@1.0.0".into()], "");
        assert!(other.contains("another world"), "{other}");
    }
}
