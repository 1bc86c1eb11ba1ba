//! `wasm-ipam pull oci://…`: fetch a module and its signatures, check every digest,
//! size and the trust policies, and only then write the module (and the signature
//! the policies accepted, as `MODULE.minisig`) into the module dir and compile it
//! into the cache. A refusal writes nothing.

use crate::error::{CniError, code};
use crate::files;
use crate::limits::Limits;
use crate::module::cache::ModuleCache;
use crate::module::instance::ModuleHost;
use crate::module::trust::{Policies, SignatureFile, Verdict, signature_path};
use crate::operator::modules::answers;
use crate::operator::modules::oci::{self, Descriptor, auth, holds};
use futures_util::StreamExt;
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde_json::Value;
use std::fs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// Where `pull` and `install` put modules by default: one constant, so a module
/// pulled by hand lies where an install would have put it.
pub const DEFAULT_MODULE_DIR: &str = "/opt/cni/wasm";

/// `wasm-ipam pull`'s arguments.
#[derive(Debug, Clone, PartialEq, clap::Args)]
#[group(skip)]
pub struct Pull {
    /// `oci://REGISTRY/REPO[:TAG][@sha256:DIGEST]` (the digest is the manifest's).
    pub reference: String,
    /// Where to write the module (`install`'s default).
    #[arg(long, default_value = DEFAULT_MODULE_DIR)]
    pub module_dir: PathBuf,
    /// The cache to compile it into (the netconf's `ipam.cacheDir`).
    #[arg(long, default_value = crate::config::DEFAULT_CACHE_DIR)]
    pub cache_dir: PathBuf,
    /// A trust policy the module must satisfy besides the node's
    /// (/etc/wasm-ipam/trust.json), as the netconf's `ipam.trustPolicy` would.
    #[arg(long)]
    pub trust_policy: Option<PathBuf>,
    /// Plain HTTP to a registry that is not on this machine.
    #[arg(long)]
    pub insecure: bool,
}

/// What a pull wrote.
#[derive(Debug, serde::Serialize)]
pub struct Pulled {
    pub reference: String,
    pub manifest_digest: String,
    pub module: PathBuf,
    pub module_sha256: String,
    pub signature: Option<PathBuf>,
    pub signed_by: Option<String>,
    pub trust: String,
    pub cache_dir: PathBuf,
}

impl Pulled {
    pub fn text(&self) -> String {
        let mut out = format!("pulled    {}\n", self.reference);
        out += &format!("module    {}\n", self.module.display());
        out += &format!("sha256    {}\n", self.module_sha256);
        match (&self.signature, &self.signed_by) {
            (Some(path), Some(key)) => {
                out += &format!("signature {} (key {key})\n", path.display())
            }
            _ => out += "signature none\n",
        }
        out += &format!("trust     {}\n", self.trust);
        out += &format!("compiled  into {}\n", self.cache_dir.display());
        out += &format!(
            "netconf   \"module\": \"{}\", \"moduleSha256\": \"{}\"\n",
            self.module.display(),
            self.module_sha256
        );
        out
    }
}

/// What came from the registry, checked, before anything is written.
struct Fetched {
    manifest_digest: String,
    name: String,
    module: Vec<u8>,
    module_sha256: String,
    signatures: Vec<SignatureFile>,
}

pub fn pull(args: &Pull, limits: &Limits) -> Result<Pulled, CniError> {
    let policies = Policies::for_call(args.trust_policy.as_deref())?;
    let reference = oci::reference(&args.reference)?;
    let fetched = oci::runtime()?.block_on(fetch(&reference, args.insecure, limits))?;
    let file_name = format!("{}-{}.wasm", fetched.name, fetched.module_sha256);
    let path = args.module_dir.join(&file_name);
    // Judged before anything is written: the first signature the policies accept,
    // else (no policy) the first one there is.
    let (signature, verdict) = choose(&policies, &path, &fetched).map_err(|refused| {
        match fetched.signatures.is_empty() {
            // The policy's own message names the local `.minisig` a call would read;
            // at a pull the signature would have come from the registry.
            true => CniError::new(
                refused.code,
                format!(
                    "{}: the registry holds no signature for manifest {}, and a trust policy requires one: the publisher signs the module (minisign -Sm MODULE) and pushes it with --signature",
                    args.reference, fetched.manifest_digest
                ),
            )
            .with_details(refused.msg),
            false => refused,
        }
    })?;
    write(&args.module_dir, &path, &fetched.module, signature)?;
    let compiled = ModuleCache::open(&args.cache_dir)
        .map_err(|e| CniError::new(code::IO_FAILURE, e.0))
        .and_then(|cache| {
            let loaded = ModuleHost::new()?.load(
                &path,
                Some(&fetched.module_sha256),
                &policies,
                Some(&cache),
                limits,
            )?;
            answers::refuse_unless_it_answers(&loaded, Some(&cache), limits)
        });
    if let Err(e) = compiled {
        // A module the host cannot run is not left where a netconf could name it.
        let _ = fs::remove_file(&path);
        let _ = fs::remove_file(signature_path(&path));
        return Err(e);
    }
    Ok(Pulled {
        reference: oci::display(&reference, Some(&fetched.manifest_digest)),
        manifest_digest: fetched.manifest_digest.clone(),
        signature: signature.map(|_| signature_path(&path)),
        signed_by: signature.map(|s| s.key_id().to_string()),
        module: path,
        module_sha256: fetched.module_sha256.clone(),
        trust: verdict.describe(),
        cache_dir: args.cache_dir.clone(),
    })
}

fn choose<'a>(
    policies: &Policies,
    path: &Path,
    fetched: &'a Fetched,
) -> Result<(Option<&'a SignatureFile>, Verdict), CniError> {
    let bytes = || Ok(fetched.module.clone());
    if policies.is_empty() {
        return Ok((fetched.signatures.first(), Verdict::NoPolicy));
    }
    let mut refusal = None;
    for signature in &fetched.signatures {
        match policies.check(path, &fetched.module_sha256, Some(signature), bytes, None) {
            Ok(verdict @ Verdict::Signed { .. }) => return Ok((Some(signature), verdict)),
            Ok(_) => {}
            Err(e) => refusal = Some(e),
        }
    }
    match policies.check(path, &fetched.module_sha256, None, bytes, None) {
        Ok(verdict) => Ok((None, verdict)),
        Err(unsigned) => Err(refusal.unwrap_or(unsigned)),
    }
}

/// Writes the signature, then the module, each to a temporary name renamed into
/// place: a call that finds the module finds its signature, and nothing ending in
/// `.wasm` is ever partial.
fn write(
    dir: &Path,
    path: &Path,
    module: &[u8],
    signature: Option<&SignatureFile>,
) -> Result<(), CniError> {
    let failed = |what: &Path, e: std::io::Error| {
        CniError::new(code::IO_FAILURE, format!("cannot write {}", what.display())).with_details(e)
    };
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(|e| failed(dir, e))?;
    let put = |target: &Path, bytes: &[u8]| {
        files::write_atomically(target, bytes, 0o644).map_err(|e| failed(target, e))
    };
    if let Some(signature) = signature {
        put(&signature_path(path), signature.text().as_bytes())?;
    }
    put(path, module)?;
    files::sync_dir(dir).map_err(|e| failed(dir, e))
}

async fn fetch(
    reference: &Reference,
    insecure: bool,
    limits: &Limits,
) -> Result<Fetched, CniError> {
    let client = oci::client(reference.registry(), insecure);
    let auth = auth::credentials(reference.registry(), reference.repository())?;
    let shown = oci::display(reference, None);
    let (manifest, manifest_digest) =
        manifest(&client, reference, &auth, oci::MANIFEST, &shown).await?;
    holds::tag_agrees(&client, reference, &auth).await?;
    let bad = |why: String| {
        CniError::new(
            code::MODULE_REJECTED,
            format!("{shown} is not a Wasm module artifact: {why}"),
        )
    };
    let config = manifest.get("config").and_then(Descriptor::of);
    if config.as_ref().map(|c| c.media_type.as_str()) != Some(oci::WASM_CONFIG) {
        return Err(bad(format!("its config is not {}", oci::WASM_CONFIG)));
    }
    let layers: Vec<Descriptor> = manifest
        .get("layers")
        .and_then(Value::as_array)
        .map(|layers| layers.iter().filter_map(Descriptor::of).collect())
        .unwrap_or_default();
    let [layer] = layers.as_slice() else {
        return Err(bad(format!("it has {} layers, not one", layers.len())));
    };
    if layer.media_type != oci::WASM_LAYER {
        return Err(bad(format!(
            "its layer is {}, not {}",
            layer.media_type,
            oci::WASM_LAYER
        )));
    }
    if layer.size > limits.module_bytes {
        return Err(CniError::new(
            code::MODULE_REJECTED,
            format!(
                "{shown}: its module is {} bytes, over moduleMaxMiB ({} MiB)",
                layer.size,
                limits.module_bytes >> 20
            ),
        ));
    }
    let module = blob(&client, reference, layer, limits.module_bytes, &shown).await?;
    let module_sha256 = oci::sha256_hex(&layer.digest)
        .expect("blob checked the digest")
        .to_string();
    let subject = Reference::with_digest(
        reference.registry().to_string(),
        reference.repository().to_string(),
        manifest_digest.clone(),
    );
    let signatures = signatures(&client, &subject, &auth, &manifest_digest, &shown).await?;
    let name = reference
        .repository()
        .rsplit('/')
        .next()
        .filter(|n| !n.is_empty())
        .unwrap_or("module")
        .to_string();
    Ok(Fetched {
        manifest_digest,
        name,
        module,
        module_sha256,
        signatures,
    })
}

/// A manifest (or index) of `media_type`: at most [`oci::MANIFEST_MAX`] bytes, its
/// digest checked against the reference's when it names one.
async fn manifest(
    client: &Client,
    reference: &Reference,
    auth: &RegistryAuth,
    media_type: &str,
    shown: &str,
) -> Result<(Value, String), CniError> {
    let fetched = client
        .pull_manifest_raw(reference, auth, &[media_type])
        .await;
    let (bytes, _) = match (fetched, reference.digest()) {
        (Ok(fetched), _) => fetched,
        // A digest that names a blob (the module's own sha256, as `ipam.moduleSha256`
        // pins it), not a manifest: some registries answer 500 UNKNOWN.
        (Err(e), Some(digest)) if client.blob_exists(reference, digest).await.unwrap_or(false) => {
            return Err(oci::registry_error(
                format!(
                    "{digest} is a blob in {} (a module's own sha256, as ipam.moduleSha256 pins it), not a manifest: pull by tag, or by the manifest digest `wasm-ipam push` printed (its `pull` line)",
                    reference.repository()
                ),
                e,
            ));
        }
        (Err(e), _) if holds::is_unknown(&e) => {
            return Err(holds::unknown(client, reference, auth, e).await);
        }
        (Err(e), _) => {
            return Err(oci::registry_error(
                format!("cannot fetch the manifest of {shown}"),
                e,
            ));
        }
    };
    if bytes.len() > oci::MANIFEST_MAX {
        return Err(CniError::new(
            code::MODULE_REJECTED,
            format!(
                "the manifest of {shown} is {} bytes, over {} MiB",
                bytes.len(),
                oci::MANIFEST_MAX >> 20
            ),
        ));
    }
    let digest = oci::digest(&bytes);
    if let Some(expected) = reference.digest()
        && expected != digest
    {
        return Err(CniError::new(
            code::MODULE_DIGEST_MISMATCH,
            format!("the manifest of {shown} does not have the digest asked for"),
        )
        .with_details(format!("expected {expected}, got {digest}")));
    }
    let json: Value = serde_json::from_slice(&bytes).map_err(|e| {
        CniError::new(
            code::DECODING_FAILURE,
            format!("the manifest of {shown} is not JSON"),
        )
        .with_details(e)
    })?;
    if json
        .get("mediaType")
        .and_then(Value::as_str)
        .is_some_and(|m| m != media_type)
    {
        return Err(CniError::new(
            code::MODULE_REJECTED,
            format!("{shown} is not an {media_type}"),
        ));
    }
    Ok((json, digest))
}

/// A blob: at most `max` bytes and exactly the descriptor's size and digest, read as
/// a stream so a registry sending more is cut off.
async fn blob(
    client: &Client,
    reference: &Reference,
    descriptor: &Descriptor,
    max: u64,
    shown: &str,
) -> Result<Vec<u8>, CniError> {
    let what = format!("{} of {shown}", descriptor.digest);
    if oci::sha256_hex(&descriptor.digest).is_none() {
        return Err(CniError::new(
            code::MODULE_REJECTED,
            format!("{what}: only sha256 digests are accepted"),
        ));
    }
    let layer = oci_client::manifest::OciDescriptor {
        media_type: descriptor.media_type.clone(),
        digest: descriptor.digest.clone(),
        size: descriptor.size as i64,
        ..Default::default()
    };
    let mut stream = client
        .pull_blob_stream(reference, &layer)
        .await
        .map_err(|e| oci::registry_error(format!("cannot fetch {what}"), e))?;
    let limit = descriptor.size.min(max);
    let mut bytes = Vec::with_capacity(limit as usize);
    while let Some(chunk) = stream.next().await {
        // The client checks the digest as the stream ends; a mismatch is a tampered
        // (or truncated) blob, not a network failure.
        let chunk = chunk.map_err(|e| {
            let tampered = e
                .get_ref()
                .is_some_and(|inner| inner.is::<oci_client::errors::DigestError>());
            match tampered {
                true => {
                    CniError::new(code::MODULE_DIGEST_MISMATCH, mismatch(&what)).with_details(e)
                }
                false => {
                    CniError::new(code::IO_FAILURE, format!("cannot fetch {what}")).with_details(e)
                }
            }
        })?;
        if (bytes.len() + chunk.len()) as u64 > limit {
            return Err(CniError::new(
                code::MODULE_REJECTED,
                format!(
                    "{what} is larger than its descriptor's {} bytes",
                    descriptor.size
                ),
            ));
        }
        bytes.extend_from_slice(&chunk);
    }
    let digest = oci::digest(&bytes);
    if bytes.len() as u64 != descriptor.size || digest != descriptor.digest {
        return Err(
            CniError::new(code::MODULE_DIGEST_MISMATCH, mismatch(&what)).with_details(format!(
                "expected {} bytes with {}, got {} bytes with {digest}",
                descriptor.size,
                descriptor.digest,
                bytes.len()
            )),
        );
    }
    Ok(bytes)
}

fn mismatch(what: &str) -> String {
    format!("{what} is not what its manifest describes (tampered, or truncated)")
}

/// The minisign signatures attached to the manifest `subject_digest`.
async fn signatures(
    client: &Client,
    subject: &Reference,
    auth: &RegistryAuth,
    subject_digest: &str,
    shown: &str,
) -> Result<Vec<SignatureFile>, CniError> {
    let index = client
        .pull_referrers(subject, Some(oci::SIGNATURE_TYPE))
        .await
        .map_err(|e| oci::registry_error(format!("cannot list the signatures of {shown}"), e))?;
    let mut found = Vec::new();
    for entry in index.manifests.iter().take(oci::SIGNATURES_MAX) {
        if entry.artifact_type.as_deref() != Some(oci::SIGNATURE_TYPE) {
            continue;
        }
        let at = Reference::with_digest(
            subject.registry().to_string(),
            subject.repository().to_string(),
            entry.digest.clone(),
        );
        let (manifest, _) = manifest(client, &at, auth, oci::MANIFEST, shown).await?;
        // A referrer names its subject; one that names another is not this module's.
        let names_subject = manifest
            .get("subject")
            .and_then(Descriptor::of)
            .is_some_and(|s| s.digest == subject_digest);
        let layer = manifest
            .get("layers")
            .and_then(Value::as_array)
            .and_then(|layers| layers.first())
            .and_then(Descriptor::of);
        let Some(layer) = layer.filter(|l| names_subject && l.media_type == oci::SIGNATURE_LAYER)
        else {
            continue;
        };
        let bytes = blob(client, &at, &layer, oci::SIGNATURE_MAX, shown).await?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        match SignatureFile::parse(PathBuf::from(&entry.digest), text) {
            Ok(signature) => found.push(signature),
            Err(e) => tracing::warn!("{shown}: skipping signature {}: {e}", entry.digest),
        }
    }
    Ok(found)
}

/// Fetch a module published in an OCI registry (the Wasm OCI artifact layout) and its
/// minisign signatures; check digests, sizes and the trust policies; write it into the
/// module dir as NAME-SHA256.wasm (and MODULE.minisig) and compile it into the cache.
/// Prints the path and digest to put in a netconf. A refusal writes nothing. See
/// docs/supply-chain.md.
#[derive(clap::Args, Debug, PartialEq)]
pub struct PullCommand {
    #[command(flatten)]
    pub pull: Pull,
    #[command(flatten)]
    pub compile: crate::operator::args::CompileArgs,
    /// JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

impl PullCommand {
    pub fn run(self) -> Result<crate::operator::args::Output, CniError> {
        let pulled = pull(&self.pull, &self.compile.limits()?)?;
        Ok(match self.json {
            true => crate::operator::args::Output::json(&pulled, Vec::new()),
            false => pulled.text().into(),
        })
    }
}
