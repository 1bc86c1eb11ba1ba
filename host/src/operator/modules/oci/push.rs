//! `wasm-ipam push MODULE oci://…:TAG [--signature FILE]`, for vendors: the module as
//! a Wasm OCI artifact (what `wkg oci push` writes, so Wasm tools pull it), and its
//! minisign signature as a referrer of that manifest.

use crate::error::{CniError, code};
use crate::limits::Limits;
use crate::module::file::ModuleFile;
use crate::module::trust::SignatureFile;
use crate::operator::modules::oci::{self, Descriptor, auth};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference, RegistryOperation};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// Publish a module to an OCI registry (the Wasm OCI artifact layout), and its
/// minisign signature (`--signature`) beside it; prints the reference and digest to
/// pull.
#[derive(Debug, Clone, clap::Args)]
pub struct PushCommand {
    /// The module's .wasm component.
    pub module: PathBuf,
    /// `oci://REGISTRY/REPO:TAG`.
    pub reference: String,
    /// The module's minisign signature (`minisign -Sm MODULE` writes MODULE.minisig),
    /// attached to the pushed manifest as an OCI referrer.
    #[arg(long)]
    pub signature: Option<PathBuf>,
    /// Plain HTTP to a registry that is not on this machine.
    #[arg(long)]
    pub insecure: bool,
}

/// A component's preamble: `\0asm`, version 0x0d, layer 1.
const COMPONENT_PREAMBLE: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x0d, 0x00, 0x01, 0x00];

impl PushCommand {
    pub fn run(self) -> Result<crate::operator::args::Output, CniError> {
        push(&self).map(Into::into)
    }
}

pub fn push(args: &PushCommand) -> Result<String, CniError> {
    let reference = oci::reference(&args.reference)?;
    if reference.digest().is_some() || reference.tag().is_none() {
        return Err(CniError::config(format!(
            "{}: push to a tag (oci://registry/repo:1.0); the registry gives the digest",
            args.reference
        )));
    }
    let module = ModuleFile::open(&args.module, Limits::default().module_bytes)?.read()?;
    if !module.starts_with(&COMPONENT_PREAMBLE) {
        return Err(CniError::new(
            code::MODULE_REJECTED,
            format!(
                "{} is not a WebAssembly component (a core module, or not Wasm)",
                args.module.display()
            ),
        ));
    }
    let signature = args
        .signature
        .as_ref()
        .map(|path| {
            let text = std::fs::read_to_string(path).map_err(|e| {
                CniError::new(code::IO_FAILURE, format!("cannot read {}", path.display()))
                    .with_details(e)
            })?;
            SignatureFile::parse(path.clone(), text)
        })
        .transpose()?;
    let title = args
        .module
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "module.wasm".into());
    oci::runtime()?.block_on(publish(
        &reference,
        args.insecure,
        &module,
        &title,
        signature.as_ref(),
        &args.module,
    ))
}

async fn publish(
    reference: &Reference,
    insecure: bool,
    module: &[u8],
    title: &str,
    signature: Option<&SignatureFile>,
    path: &Path,
) -> Result<String, CniError> {
    let client = oci::client(reference.registry(), insecure);
    let auth = auth::credentials(reference.registry(), reference.repository())?;
    let shown = oci::display(reference, None);
    client
        .auth(reference, &auth, RegistryOperation::Push)
        .await
        .map_err(|e| oci::registry_error(format!("cannot log in to push {shown}"), e))?;
    let layer = Descriptor {
        media_type: oci::WASM_LAYER.into(),
        digest: oci::digest(module),
        size: module.len() as u64,
    };
    let (config, config_descriptor) = artifact_config(&layer);
    upload(
        &client,
        reference,
        &config,
        &config_descriptor.digest,
        &shown,
    )
    .await?;
    upload(&client, reference, module, &layer.digest, &shown).await?;
    let manifest = artifact_manifest(&config_descriptor, &layer, title);
    let manifest_digest = oci::digest(&manifest);
    put_manifest(&client, reference, manifest.clone(), oci::MANIFEST, &shown).await?;
    let mut out = pushed_text(reference, &manifest_digest, path, &layer);
    if let Some(signature) = signature {
        let subject = Descriptor {
            media_type: oci::MANIFEST.into(),
            digest: manifest_digest.clone(),
            size: manifest.len() as u64,
        };
        let at = attach(&client, reference, &auth, signature, &subject, &shown).await?;
        out += &format!(
            "signature {} (key {}), a referrer of {}\n",
            oci::display(&at, None),
            signature.key_id(),
            manifest_digest
        );
    } else {
        out += "unsigned  nodes whose trust policy requires a signature refuse it: sign it (minisign -Sm MODULE) and push again with --signature\n";
    }
    Ok(out)
}

/// The CNCF Wasm OCI artifact's config for the module `layer`: what it runs on and
/// which layers it has; with its descriptor.
fn artifact_config(layer: &Descriptor) -> (Vec<u8>, Descriptor) {
    let config = serde_json::to_vec(&json!({
        "architecture": "wasm",
        "os": "wasip2",
        "layerDigests": [layer.digest],
    }))
    .expect("serialisable");
    let descriptor = Descriptor {
        media_type: oci::WASM_CONFIG.into(),
        digest: oci::digest(&config),
        size: config.len() as u64,
    };
    (config, descriptor)
}

/// The artifact's manifest: `config`, and the module `layer` titled with its file
/// name.
fn artifact_manifest(config: &Descriptor, layer: &Descriptor, title: &str) -> Vec<u8> {
    let mut layer_json = layer.json();
    layer_json["annotations"] = json!({"org.opencontainers.image.title": title});
    serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": oci::MANIFEST,
        "config": config.json(),
        "layers": [layer_json],
    }))
    .expect("serialisable")
}

/// What was pushed: the tag, the reference to pull by the manifest's digest, and the
/// module file (at `path`, the `layer`) with its own digest.
fn pushed_text(
    reference: &Reference,
    manifest_digest: &str,
    path: &Path,
    layer: &Descriptor,
) -> String {
    // Two digests, often confused: the manifest's (what a pull by digest names) and
    // the module file's (what `ipam.moduleSha256` pins).
    let pull_by_digest = Reference::with_digest(
        reference.registry().to_string(),
        reference.repository().to_string(),
        manifest_digest.to_string(),
    );
    format!(
        "pushed    {}\npull      {} (the manifest's digest)\nmodule    {} (sha256 {}: the file's, which ipam.moduleSha256 pins)\n",
        oci::display(reference, Some(manifest_digest)),
        oci::display(&pull_by_digest, None),
        path.display(),
        oci::sha256_hex(&layer.digest).unwrap_or_default()
    )
}

/// Pushes `signature` as an artifact whose subject is `subject`, and lists it in the
/// subject's referrers tag (`sha256-<hex>`) for registries without the referrers
/// API; registries with one list it on their own, and the tag does no harm there.
async fn attach(
    client: &Client,
    reference: &Reference,
    auth: &RegistryAuth,
    signature: &SignatureFile,
    subject: &Descriptor,
    shown: &str,
) -> Result<Reference, CniError> {
    let empty = b"{}";
    let config = Descriptor {
        media_type: oci::EMPTY_CONFIG.into(),
        digest: oci::digest(empty),
        size: empty.len() as u64,
    };
    let bytes = signature.text().as_bytes();
    let layer = Descriptor {
        media_type: oci::SIGNATURE_LAYER.into(),
        digest: oci::digest(bytes),
        size: bytes.len() as u64,
    };
    upload(client, reference, empty, &config.digest, shown).await?;
    upload(client, reference, bytes, &layer.digest, shown).await?;
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": oci::MANIFEST,
        "artifactType": oci::SIGNATURE_TYPE,
        "config": config.json(),
        "layers": [layer.json()],
        "subject": subject.json(),
        "annotations": {"org.opencontainers.image.description": format!("minisign signature by key {}", signature.key_id())},
    }))
    .expect("serialisable");
    let digest = oci::digest(&manifest);
    let at = Reference::with_digest(
        reference.registry().to_string(),
        reference.repository().to_string(),
        digest.clone(),
    );
    put_manifest(client, &at, manifest.clone(), oci::MANIFEST, shown).await?;
    // The referrers tag schema: an index of every referrer, under the subject's
    // digest with ':' as '-'.
    let tag = Reference::with_tag(
        reference.registry().to_string(),
        reference.repository().to_string(),
        subject.digest.replace(':', "-"),
    );
    let mut index = match client.pull_manifest_raw(&tag, auth, &[oci::INDEX]).await {
        Ok((bytes, _)) if bytes.len() <= oci::MANIFEST_MAX => {
            serde_json::from_slice::<Value>(&bytes).unwrap_or(Value::Null)
        }
        _ => Value::Null,
    };
    if !index.get("manifests").is_some_and(Value::is_array) {
        index = json!({"schemaVersion": 2, "mediaType": oci::INDEX, "manifests": []});
    }
    let entries = index["manifests"].as_array_mut().expect("checked");
    if !entries
        .iter()
        .any(|e| e.get("digest").and_then(Value::as_str) == Some(&digest))
    {
        let mut entry = Descriptor {
            media_type: oci::MANIFEST.into(),
            digest,
            size: manifest.len() as u64,
        }
        .json();
        entry["artifactType"] = oci::SIGNATURE_TYPE.into();
        entries.push(entry);
    }
    let index = serde_json::to_vec(&index).expect("serialisable");
    put_manifest(client, &tag, index, oci::INDEX, shown).await?;
    Ok(at)
}

async fn upload(
    client: &Client,
    reference: &Reference,
    bytes: &[u8],
    digest: &str,
    shown: &str,
) -> Result<(), CniError> {
    let exists = client.blob_exists(reference, digest).await.unwrap_or(false);
    if !exists {
        client
            .push_blob(reference, bytes.to_vec(), digest)
            .await
            .map_err(|e| oci::registry_error(format!("cannot push {digest} to {shown}"), e))?;
    }
    Ok(())
}

async fn put_manifest(
    client: &Client,
    reference: &Reference,
    bytes: Vec<u8>,
    media_type: &str,
    shown: &str,
) -> Result<(), CniError> {
    let content_type = media_type.parse().expect("a media type is a header value");
    client
        .push_manifest_raw(reference, bytes, content_type)
        .await
        .map_err(|e| oci::registry_error(format!("cannot push the manifest of {shown}"), e))?;
    Ok(())
}
