//! The sandbox ("pause") image, made here rather than pulled: Debian's static busybox
//! as one layer, running `sleep`, written as an OCI image-layout tarball that
//! `ctr images import` takes. The CRI plugin then finds it locally and never reaches
//! for a registry.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::process::Command;

/// The name the image is imported under, and the CRI plugin's `sandbox_image`.
pub const PAUSE_IMAGE: &str = "localhost/wasm-ipam-test/pause:1";

/// busybox-static's binary.
const BUSYBOX: &str = "/bin/busybox";

/// Writes the pause image to `tarball`.
pub fn write_pause_image(tarball: &Path) {
    let busybox = std::fs::read(BUSYBOX).unwrap_or_else(|e| {
        panic!("{BUSYBOX}: {e}: install busybox-static (scripts/test.sh does)")
    });
    // A dynamic busybox would need a libc the image does not carry.
    let ldd = Command::new("ldd").arg(BUSYBOX).output().expect("run ldd");
    assert!(
        !ldd.status.success(),
        "{BUSYBOX} is dynamically linked ({}): install busybox-static (scripts/test.sh does)",
        String::from_utf8_lossy(&ldd.stdout).trim()
    );

    let mut layer = tar::Builder::new(Vec::new());
    for dir in ["bin", "dev", "etc", "proc", "sys", "tmp"] {
        append(&mut layer, tar::EntryType::Directory, dir, 0o755, &[]);
    }
    append(
        &mut layer,
        tar::EntryType::Regular,
        "bin/busybox",
        0o755,
        &busybox,
    );
    let layer = layer.into_inner().unwrap();

    let platform = json!({"architecture": oci_architecture(), "os": "linux"});
    let config = json!({
        "architecture": platform["architecture"],
        "os": "linux",
        "config": {"Entrypoint": ["/bin/busybox", "sleep", "86400"]},
        "rootfs": {"type": "layers", "diff_ids": [digest(&layer)]},
    })
    .to_string()
    .into_bytes();
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": descriptor("application/vnd.oci.image.config.v1+json", &config),
        "layers": [descriptor("application/vnd.oci.image.layer.v1.tar", &layer)],
    })
    .to_string()
    .into_bytes();
    let mut manifest_descriptor =
        descriptor("application/vnd.oci.image.manifest.v1+json", &manifest);
    manifest_descriptor["platform"] = platform;
    manifest_descriptor["annotations"] = json!({
        "io.containerd.image.name": PAUSE_IMAGE,
        "org.opencontainers.image.ref.name": "1",
    });
    let index = json!({"schemaVersion": 2, "manifests": [manifest_descriptor]});

    let mut archive = tar::Builder::new(Vec::new());
    append(
        &mut archive,
        tar::EntryType::Regular,
        "oci-layout",
        0o644,
        br#"{"imageLayoutVersion":"1.0.0"}"#,
    );
    append(
        &mut archive,
        tar::EntryType::Regular,
        "index.json",
        0o644,
        index.to_string().as_bytes(),
    );
    for dir in ["blobs", "blobs/sha256"] {
        append(&mut archive, tar::EntryType::Directory, dir, 0o755, &[]);
    }
    for blob in [&layer, &config, &manifest] {
        let name = format!("blobs/sha256/{}", hex(&Sha256::digest(blob)));
        append(&mut archive, tar::EntryType::Regular, &name, 0o644, blob);
    }
    std::fs::write(tarball, archive.into_inner().unwrap()).unwrap();
}

fn append(
    archive: &mut tar::Builder<Vec<u8>>,
    kind: tar::EntryType,
    path: &str,
    mode: u32,
    data: &[u8],
) {
    let mut header = tar::Header::new_ustar();
    header.set_entry_type(kind);
    header.set_mode(mode);
    header.set_size(data.len() as u64);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    archive.append_data(&mut header, path, data).unwrap();
}

fn descriptor(media_type: &str, blob: &[u8]) -> Value {
    json!({"mediaType": media_type, "digest": digest(blob), "size": blob.len()})
}

fn digest(blob: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(blob)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// This machine's architecture as OCI names it.
fn oci_architecture() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}
