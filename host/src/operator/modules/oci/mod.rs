//! Modules in OCI registries, for `wasm-ipam pull` and `push`: the CNCF Wasm OCI
//! artifact layout (`wkg oci push` and `oras push` write it) and minisign signatures
//! attached to a module's manifest as OCI 1.1 referrers.
//!
//! A module's manifest is a plain Wasm artifact: config
//! `application/vnd.wasm.config.v0+json`, one `application/wasm` layer, so Wasm tools
//! pull it unchanged. A signature is a separate artifact (type [`SIGNATURE_TYPE`], one
//! layer: the `.minisig` file's bytes) whose `subject` is the module's manifest; it is
//! found through the referrers API or, on registries without one, the referrers tag
//! schema (`sha256-<hex>`), as cosign and ORAS do.
//!
//! Only operators reach this code: a CNI call never touches the network.

pub mod auth;
pub mod holds;
pub mod pull;
pub mod push;

use crate::error::{CniError, code};
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::{Client, Reference};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::net::IpAddr;
use std::time::Duration;

/// The Wasm OCI artifact's config and layer media types.
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
pub const WASM_LAYER: &str = "application/wasm";
/// The OCI image manifest and index media types.
pub const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const INDEX: &str = "application/vnd.oci.image.index.v1+json";
/// A minisign signature attached to a module's manifest: the artifact's type and its
/// one layer's media type.
pub const SIGNATURE_TYPE: &str = "application/vnd.wasm-ipam.signature.minisign.v1";
pub const SIGNATURE_LAYER: &str = "application/vnd.wasm-ipam.signature.minisign.v1+text";
/// OCI 1.1's empty config, for artifacts that have none.
pub const EMPTY_CONFIG: &str = "application/vnd.oci.empty.v1+json";
/// The largest manifest (or referrers index) accepted: a module's has three
/// descriptors, far from it.
pub const MANIFEST_MAX: usize = 1 << 20;
/// The largest signature blob accepted (a `.minisig` is about 300 bytes).
pub const SIGNATURE_MAX: u64 = 64 << 10;
/// At most this many signatures are fetched for one module.
pub const SIGNATURES_MAX: usize = 16;

/// `oci://REGISTRY/REPO[:TAG][@sha256:DIGEST]`, parsed.
pub fn reference(text: &str) -> Result<Reference, CniError> {
    let bad = |why: String| CniError::config(format!("{text:?} is not a module reference: {why}"));
    let rest = text
        .strip_prefix("oci://")
        .ok_or_else(|| bad("it must start with oci://".into()))?;
    // Without a registry the OCI client would assume Docker Hub; a module's place
    // is always named in full.
    let registry = rest.split('/').next().unwrap_or_default();
    if !rest.contains('/')
        || !(registry.contains('.') || registry.contains(':') || registry == "localhost")
    {
        return Err(bad(
            "name the registry (oci://registry.example:5000/vendor/module:1.0)".into(),
        ));
    }
    if let Some((_, digest)) = rest.rsplit_once('@')
        && sha256_hex(digest).is_none()
    {
        return Err(bad(format!(
            "its digest {digest:?} is malformed: a module's digest is `sha256:` and 64 lower-case hex digits, as `wasm-ipam push` prints it on its `pull` line"
        )));
    }
    rest.parse::<Reference>().map_err(|e| bad(e.to_string()))
}

/// `oci://…` for messages, with the digest when known.
pub fn display(reference: &Reference, digest: Option<&str>) -> String {
    let mut text = format!("oci://{}/{}", reference.registry(), reference.repository());
    if let Some(tag) = reference.tag() {
        text.push(':');
        text.push_str(tag);
    }
    if let Some(digest) = digest.or(reference.digest()) {
        text.push('@');
        text.push_str(digest);
    }
    text
}

/// Whether `registry` (`host[:port]`) is on this machine, where plain HTTP is safe.
fn is_loopback(registry: &str) -> bool {
    let host = match registry.rsplit_once(':') {
        Some((host, port)) if port.bytes().all(|b| b.is_ascii_digit()) => host,
        _ => registry,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost" || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// A client for `registry`: HTTPS, or plain HTTP for a loopback registry or with
/// `insecure`; bounded connect and read times, so a registry that hangs fails.
pub fn client(registry: &str, insecure: bool) -> Client {
    // reqwest is built without a crypto provider of its own: rustls uses ring, the
    // provider etcd's TLS already brings. Installing twice is harmless.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let protocol = if insecure || is_loopback(registry) {
        ClientProtocol::Http
    } else {
        ClientProtocol::Https
    };
    Client::new(ClientConfig {
        protocol,
        connect_timeout: Some(Duration::from_secs(10)),
        read_timeout: Some(Duration::from_secs(60)),
        max_concurrent_download: 1,
        max_concurrent_upload: 1,
        ..ClientConfig::default()
    })
}

/// A runtime for the client's requests (the operator command is otherwise blocking).
pub fn runtime() -> Result<tokio::runtime::Runtime, CniError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| CniError::new(code::IO_FAILURE, "cannot start an I/O runtime").with_details(e))
}

/// A registry's answer (or the lack of one) as a CNI error naming what was asked.
pub fn registry_error(what: String, e: OciDistributionError) -> CniError {
    CniError::new(code::IO_FAILURE, what).with_details(e)
}

/// `sha256:<hex>` of `bytes`.
pub fn digest(bytes: &[u8]) -> String {
    format!(
        "sha256:{}",
        crate::module::cache::hex(&Sha256::digest(bytes))
    )
}

/// The hex of a `sha256:<hex>` digest, checked (it becomes part of a file name).
pub fn sha256_hex(digest: &str) -> Option<&str> {
    digest.strip_prefix("sha256:").filter(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    })
}

/// A descriptor in a manifest, read from its JSON: media type, digest, size.
#[derive(Debug, Clone)]
pub struct Descriptor {
    pub media_type: String,
    pub digest: String,
    pub size: u64,
}

impl Descriptor {
    pub fn of(value: &Value) -> Option<Self> {
        Some(Descriptor {
            media_type: value.get("mediaType")?.as_str()?.to_string(),
            digest: value.get("digest")?.as_str()?.to_string(),
            size: value.get("size")?.as_u64()?,
        })
    }

    pub fn json(&self) -> Value {
        serde_json::json!({
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": self.size,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_name_their_registry_and_plain_http_is_only_for_loopback() {
        let r = reference("oci://127.0.0.1:5000/vendor/ipam:1.0").unwrap();
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.repository(), "vendor/ipam");
        assert_eq!(r.tag(), Some("1.0"));
        assert!(reference("127.0.0.1:5000/vendor/ipam:1.0").is_err());
        assert!(
            reference("oci://vendor/ipam:1.0").is_err(),
            "Docker Hub by accident"
        );
        let d = format!("sha256:{}", "a".repeat(64));
        let r = reference(&format!("oci://registry.example/ipam@{d}")).unwrap();
        assert_eq!(r.digest(), Some(d.as_str()));
        assert!(
            is_loopback("127.0.0.1:5000") && is_loopback("localhost") && is_loopback("[::1]:5000")
        );
        assert!(!is_loopback("registry.example:5000") && !is_loopback("10.0.0.1"));
        assert_eq!(sha256_hex(&d), Some("a".repeat(64).as_str()));
        assert_eq!(sha256_hex("sha256:../../etc"), None);
    }
}
