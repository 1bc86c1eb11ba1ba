//! Which modules may run on this node: trust policies and minisign signatures.
//!
//! A policy is a JSON file, `{"requireSignature": true, "keys": ["RWQ…"]}`, each key a
//! minisign public key (the second line of its `.pub` file). The node's policy is
//! [`NODE_POLICY`]; a netconf may name one more (`ipam.trustPolicy`). A module runs
//! only if every policy present accepts it, so a netconf can add requirements and
//! never weaken the node's. With no policy at all a module runs as it always did.
//!
//! A policy accepts a module when:
//! - its signature (`MODULE.minisig`, beside it) is by a key the policy lists and
//!   verifies for the module's bytes; or
//! - the policy does not require a signature and the module carries none by a key the
//!   policy lists (unsigned, or signed by a key it does not know: both unverified).
//!
//! A signature by a listed key that does not verify is always refused: the module was
//! changed after signing, or the signature is another module's.
//!
//! Verifying hashes the whole module (BLAKE2b), so a verdict is remembered in the
//! compiled-module cache under a name derived from everything it depends on: the
//! module's sha256, the signature's bytes and every policy's path and bytes. Replacing
//! the module, its signature or a policy changes the name, so the next call verifies
//! again; a warm call reads two small files and looks for one name.

use crate::error::{CniError, code};
use crate::module::cache::{ModuleCache, hex};
use base64::Engine as _;
use minisign_verify::{PublicKey, Signature};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The node's policy: where an operator says which keys the node trusts.
pub const NODE_POLICY: &str = "/etc/wasm-ipam/trust.json";

/// A policy or signature file larger than this is not one.
const MAX_FILE: u64 = 64 << 10;

/// Where a module's detached signature lives: beside it, as `MODULE.minisig`.
pub fn signature_path(module: &Path) -> PathBuf {
    let mut name = module.as_os_str().to_os_string();
    name.push(".minisig");
    PathBuf::from(name)
}

/// The key id minisign prints (`minisign public key 5B2A…`): the 8 id bytes, read
/// as a little-endian number, in upper-case hex without leading zeros (minisign's
/// `%PRIX64`: a key whose id starts with a zero digit prints 15 digits or fewer).
fn key_id(id: &[u8]) -> String {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&id[..8]);
    format!("{:X}", u64::from_le_bytes(bytes))
}

/// The key id in a minisign key or signature line (base64 of algorithm, id, …).
fn key_id_of(base64_line: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(base64_line.trim())
        .ok()?;
    (bytes.len() >= 10).then(|| key_id(&bytes[2..10]))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct PolicyFile {
    #[serde(default)]
    require_signature: bool,
    #[serde(default)]
    keys: Vec<String>,
}

struct TrustedKey {
    id: String,
    key: PublicKey,
}

/// One policy file, read and checked.
pub struct Policy {
    path: PathBuf,
    require_signature: bool,
    keys: Vec<TrustedKey>,
}

/// The policies a module must satisfy (none: it runs as it always did).
#[derive(Default)]
pub struct Policies {
    list: Vec<Policy>,
    /// sha256 over every policy's path and bytes, for the verdict's cache name.
    fingerprint: Sha256,
}

/// A signature file beside the module, read.
pub struct SignatureFile {
    path: PathBuf,
    text: String,
    signature: Signature,
    key_id: String,
}

impl SignatureFile {
    /// Reads `MODULE.minisig`, if there is one.
    pub fn beside(module: &Path) -> Result<Option<Self>, CniError> {
        let path = signature_path(module);
        let Some(text) = read_small(&path, "signature", false)? else {
            return Ok(None);
        };
        Self::parse(path, text).map(Some)
    }

    pub fn parse(path: PathBuf, text: String) -> Result<Self, CniError> {
        let bad = |why: &str| {
            CniError::new(
                code::MODULE_UNTRUSTED,
                format!("{} is not a minisign signature: {why}", path.display()),
            )
        };
        let signature = Signature::decode(&text).map_err(|e| bad(&e.to_string()))?;
        let key_id = text
            .lines()
            .nth(1)
            .and_then(key_id_of)
            .ok_or_else(|| bad("no signature line"))?;
        Ok(SignatureFile {
            path,
            text,
            signature,
            key_id,
        })
    }

    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    pub fn text(&self) -> &str {
        &self.text
    }
}

/// What the policies said of a module they accept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No policy applies: the module runs as it would have without signatures.
    NoPolicy,
    /// Signed by this key, which a policy lists, and the signature verified.
    Signed { key_id: String },
    /// Accepted unverified: no policy requires a signature, and none it could check
    /// was there (`signer`: the key id of a signature by a key no policy lists).
    Unverified { signer: Option<String> },
}

impl Verdict {
    /// For `inspect` and `pull`: one line.
    pub fn describe(&self) -> String {
        match self {
            Verdict::NoPolicy => "no trust policy applies (runs unchecked)".into(),
            Verdict::Signed { key_id } => format!("trusted: signed by key {key_id}"),
            Verdict::Unverified { signer: None } => {
                "accepted unsigned: no policy requires a signature".into()
            }
            Verdict::Unverified {
                signer: Some(key_id),
            } => format!(
                "accepted unverified: signed by key {key_id}, which no policy lists, and no policy requires a signature"
            ),
        }
    }

    fn cache_line(&self) -> String {
        match self {
            Verdict::Signed { key_id } => format!("signed {key_id}\n"),
            Verdict::Unverified { .. } | Verdict::NoPolicy => String::new(),
        }
    }
}

impl Policies {
    /// No policy: what inspect and precompile use when asked for none.
    pub fn none() -> Self {
        Policies::default()
    }

    /// The node's policy (if the file exists) and `extra` (which must exist: a
    /// netconf or an operator named it).
    pub fn load(node: &Path, extra: Option<&Path>) -> Result<Self, CniError> {
        let mut policies = Policies::default();
        if let Some(text) = read_small(node, "trust policy", true)? {
            policies.add(node, &text)?;
        }
        if let Some(extra) = extra {
            let text = read_small(extra, "trust policy", true)?.ok_or_else(|| {
                CniError::config(format!("trust policy {} does not exist", extra.display()))
            })?;
            policies.add(extra, &text)?;
        }
        Ok(policies)
    }

    /// The node's policy and the one the netconf names.
    pub fn for_call(netconf_policy: Option<&Path>) -> Result<Self, CniError> {
        Self::load(Path::new(NODE_POLICY), netconf_policy)
    }

    fn add(&mut self, path: &Path, text: &str) -> Result<(), CniError> {
        let invalid = |why: String| {
            CniError::config(format!(
                "trust policy {} is not valid: {why}",
                path.display()
            ))
        };
        let file: PolicyFile = serde_json::from_str(text).map_err(|e| invalid(e.to_string()))?;
        if file.require_signature && file.keys.is_empty() {
            return Err(invalid(
                "requireSignature is true and no key is listed, so nothing could run".into(),
            ));
        }
        let mut keys = Vec::new();
        for line in &file.keys {
            let key = PublicKey::from_base64(line.trim())
                .map_err(|e| invalid(format!("key {line:?} is not a minisign public key: {e}")))?;
            let id =
                key_id_of(line).ok_or_else(|| invalid(format!("key {line:?} is too short")))?;
            keys.push(TrustedKey { id, key });
        }
        self.fingerprint.update(path.as_os_str().as_encoded_bytes());
        self.fingerprint.update([0]);
        self.fingerprint.update(text.as_bytes());
        self.fingerprint.update([0]);
        self.list.push(Policy {
            path: path.to_path_buf(),
            require_signature: file.require_signature,
            keys,
        });
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The policies' paths, for messages.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.list.iter().map(|p| p.path.clone()).collect()
    }

    /// Whether every policy accepts the module at `module` (sha256 `sha256`) with
    /// `signature`; `bytes` reads the module, called only if a signature must be
    /// verified and `cache` holds no verdict for exactly these inputs.
    pub fn check(
        &self,
        module: &Path,
        sha256: &str,
        signature: Option<&SignatureFile>,
        bytes: impl FnOnce() -> Result<Vec<u8>, CniError>,
        cache: Option<&ModuleCache>,
    ) -> Result<Verdict, CniError> {
        if self.list.is_empty() {
            return Ok(Verdict::NoPolicy);
        }
        let verdict_name = self.verdict_name(sha256, signature);
        if let (Some(cache), Some(signature)) = (cache, signature)
            && cache.has_verdict(
                &verdict_name,
                &Verdict::Signed {
                    key_id: signature.key_id.clone(),
                }
                .cache_line(),
            )
        {
            return Ok(Verdict::Signed {
                key_id: signature.key_id.clone(),
            });
        }
        let verified = self.verify_against_each(module, signature, bytes)?;
        let verdict = match (signature, verified) {
            (Some(signature), true) => Verdict::Signed {
                key_id: signature.key_id.clone(),
            },
            (signature, _) => Verdict::Unverified {
                signer: signature.map(|s| s.key_id.clone()),
            },
        };
        if let (Some(cache), Verdict::Signed { .. }) = (cache, &verdict)
            && let Err(e) = cache.record_verdict(&verdict_name, &verdict.cache_line())
        {
            tracing::warn!(target: "cache", "{e}");
        }
        Ok(verdict)
    }

    /// Puts the module at `module` with `signature` to each policy: refused by one
    /// that requires a signature it lacks or a key it does not list; whether the
    /// signature was verified, once, with the first listed key it claims (`bytes`
    /// reads the module then).
    fn verify_against_each(
        &self,
        module: &Path,
        signature: Option<&SignatureFile>,
        bytes: impl FnOnce() -> Result<Vec<u8>, CniError>,
    ) -> Result<bool, CniError> {
        let untrusted = |why: String| {
            CniError::new(
                code::MODULE_UNTRUSTED,
                format!("module {} is not trusted: {why}", module.display()),
            )
        };
        // Which key, listed by some policy, the signature claims; verified once.
        let mut verified = false;
        let mut bytes = Some(bytes);
        for policy in &self.list {
            let listed = signature.and_then(|s| policy.keys.iter().find(|k| k.id == s.key_id));
            match (signature, listed) {
                (Some(signature), Some(trusted)) if !verified => {
                    let module_bytes = (bytes.take().expect("read once"))()?;
                    trusted
                        .key
                        .verify(&module_bytes, &signature.signature, true)
                        .map_err(|e| {
                            untrusted(format!(
                                "its signature {} by key {} does not verify ({e}): the module changed after it was signed, or the signature is another module's",
                                signature.path.display(),
                                signature.key_id
                            ))
                        })?;
                    verified = true;
                }
                (None, _) if policy.require_signature => {
                    return Err(untrusted(format!(
                        "it has no signature ({} is missing) and {} requires one",
                        signature_path(module).display(),
                        policy.path.display()
                    )));
                }
                (Some(signature), None) if policy.require_signature => {
                    return Err(untrusted(format!(
                        "it is signed by key {}, which {} does not trust (it trusts {})",
                        signature.key_id,
                        policy.path.display(),
                        policy.key_ids().join(", ")
                    )));
                }
                _ => {}
            }
        }
        Ok(verified)
    }

    /// The verdict's name in the cache: a digest of every input it depends on.
    fn verdict_name(&self, sha256: &str, signature: Option<&SignatureFile>) -> String {
        let mut all = self.fingerprint.clone();
        all.update(sha256.as_bytes());
        all.update([0]);
        if let Some(signature) = signature {
            all.update(signature.text.as_bytes());
        }
        hex(&all.finalize())
    }
}

impl Policy {
    fn key_ids(&self) -> Vec<String> {
        match self.keys.is_empty() {
            true => vec!["no key".into()],
            false => self.keys.iter().map(|k| k.id.clone()).collect(),
        }
    }
}

/// Reads a small file the operator controls: `None` if it does not exist. A policy
/// that another user could write is refused: it decides what runs as root.
fn read_small(path: &Path, what: &str, decides_trust: bool) -> Result<Option<String>, CniError> {
    let file = match File::options()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(CniError::new(
                code::IO_FAILURE,
                format!("cannot read {what} {}", path.display()),
            )
            .with_details(e));
        }
    };
    let refused = |why: String| {
        CniError::new(
            code::MODULE_UNTRUSTED,
            format!("{what} {} {why}", path.display()),
        )
    };
    let meta = file.metadata().map_err(|e| {
        CniError::new(
            code::IO_FAILURE,
            format!("cannot inspect {}", path.display()),
        )
        .with_details(e)
    })?;
    if !meta.is_file() {
        return Err(refused("is not a regular file".into()));
    }
    if meta.len() > MAX_FILE {
        return Err(refused(format!("is over {} KiB", MAX_FILE >> 10)));
    }
    // SAFETY: geteuid has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    if decides_trust && ((meta.uid() != euid && meta.uid() != 0) || meta.mode() & 0o022 != 0) {
        return Err(refused(format!(
            "may be changed by another user (owner uid {}, mode {:o}); it must be owned by root or this user and writable by nobody else",
            meta.uid(),
            meta.mode() & 0o7777
        )));
    }
    let mut text = String::new();
    (&file)
        .take(MAX_FILE)
        .read_to_string(&mut text)
        .map_err(|e| refused(format!("cannot be read as text: {e}")))?;
    Ok(Some(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// minisign's own test vector (minisign-verify's README): key id, key, signature
    /// of "test".
    const PUBLIC: &str = "RWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3";
    const SIGNATURE: &str = "untrusted comment: signature from minisign secret key
RWQf6LRCGA9i59SLOFxz6NxvASXDJeRtuZykwQepbDEGt87ig1BNpWaVWuNrm73YiIiJbq71Wi+dP9eKL8OC351vwIasSSbXxwA=
trusted comment: timestamp:1555779966\tfile:test
QtKMXWyYcwdpZAlPF7tE2ENJkRd1ujvKjlj1m9RtHTBnZPa5WKU5uWRs5GoP5M/VqE81QFuMKI5k/SfNQUaOAA==
";

    fn policy(dir: &Path, require: bool, keys: &[&str]) -> PathBuf {
        let path = dir.join(format!("policy-{require}-{}.json", keys.len()));
        let json = serde_json::json!({"requireSignature": require, "keys": keys});
        std::fs::write(&path, json.to_string()).unwrap();
        path
    }

    fn signature() -> SignatureFile {
        SignatureFile::parse("m.wasm.minisig".into(), SIGNATURE.into()).unwrap()
    }

    #[test]
    fn key_ids_read_as_minisign_prints_them() {
        assert_eq!(key_id_of(PUBLIC).unwrap(), "E7620F1842B4E81F");
        assert_eq!(signature().key_id(), "E7620F1842B4E81F");
        // minisign printed `2EC12B489011CAE` for a key whose id's top digit is 0.
        let id = 0x02EC_12B4_8901_1CAEu64.to_le_bytes();
        assert_eq!(key_id(&id), "2EC12B489011CAE");
    }

    #[test]
    fn a_signature_by_a_trusted_key_verifies_and_anything_else_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let strict = Policies::load(
            Path::new("/nonexistent"),
            Some(&policy(dir.path(), true, &[PUBLIC])),
        )
        .unwrap();
        let module = Path::new("m.wasm");
        let sig = signature();
        let ok = strict.check(module, "x", Some(&sig), || Ok(b"test".to_vec()), None);
        assert_eq!(
            ok.unwrap(),
            Verdict::Signed {
                key_id: "E7620F1842B4E81F".into()
            }
        );
        let tampered = strict
            .check(module, "x", Some(&sig), || Ok(b"tes".to_vec()), None)
            .unwrap_err();
        assert_eq!(tampered.code, code::MODULE_UNTRUSTED);
        assert!(tampered.msg.contains("does not verify"), "{}", tampered.msg);
        let unsigned = strict
            .check(module, "x", None, || unreachable!(), None)
            .unwrap_err();
        assert!(
            unsigned.msg.contains("has no signature"),
            "{}",
            unsigned.msg
        );
        // Another key (same algorithm, other id): listed nowhere, so refused.
        let other =
            "RWQf6LRCGA9i53mlYecO4IzT51TGPpvWucNSCh1CBM0QTaLn73Y7GFO3".replace("RWQf", "RWQg");
        let by_other = Policies::load(
            Path::new("/nonexistent"),
            Some(&policy(dir.path(), true, &[&other])),
        )
        .unwrap();
        let err = by_other
            .check(module, "x", Some(&sig), || unreachable!(), None)
            .unwrap_err();
        assert!(
            err.msg.contains("which") && err.msg.contains("does not trust"),
            "{}",
            err.msg
        );
    }

    #[test]
    fn a_lenient_policy_runs_unsigned_modules_but_never_a_bad_signature() {
        let dir = tempfile::tempdir().unwrap();
        let lenient = Policies::load(
            Path::new("/nonexistent"),
            Some(&policy(dir.path(), false, &[PUBLIC])),
        )
        .unwrap();
        let module = Path::new("m.wasm");
        assert_eq!(
            lenient
                .check(module, "x", None, || unreachable!(), None)
                .unwrap(),
            Verdict::Unverified { signer: None }
        );
        let bad = lenient
            .check(
                module,
                "x",
                Some(&signature()),
                || Ok(b"other".to_vec()),
                None,
            )
            .unwrap_err();
        assert_eq!(bad.code, code::MODULE_UNTRUSTED);
    }

    #[test]
    fn policies_others_may_write_or_that_trust_nothing_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = policy(dir.path(), false, &[PUBLIC]);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let err = Policies::load(Path::new("/nonexistent"), Some(&path))
            .err()
            .unwrap();
        assert!(err.msg.contains("writable by nobody else"), "{}", err.msg);
        let empty = policy(dir.path(), true, &[]);
        let err = Policies::load(Path::new("/nonexistent"), Some(&empty))
            .err()
            .unwrap();
        assert_eq!(err.code, code::INVALID_NETWORK_CONFIG);
        let missing = Policies::load(
            Path::new("/nonexistent"),
            Some(Path::new("/nonexistent/p.json")),
        );
        assert!(missing.is_err());
        assert!(
            Policies::load(Path::new("/nonexistent"), None)
                .unwrap()
                .is_empty()
        );
    }
}
