//! What a repository holds, for a refusal that must say it: a reference whose tag or
//! digest the registry does not have, or a `TAG@DIGEST` whose tag now names another
//! manifest. An operator reading the refusal sees what was asked beside what is there,
//! and which reference to use instead.

use crate::error::{CniError, code};
use crate::operator::modules::oci;
use oci_client::errors::{OciDistributionError, OciErrorCode};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};

/// At most this many tags are named (each costs a request for its digest).
const TAGS_SHOWN: usize = 10;

/// Whether `e` is the registry saying it has no such manifest (or repository).
pub fn is_unknown(e: &OciDistributionError) -> bool {
    match e {
        OciDistributionError::ImageManifestNotFoundError(_) => true,
        OciDistributionError::RegistryError { envelope, .. } => envelope.errors.iter().any(|e| {
            matches!(
                e.code,
                OciErrorCode::ManifestUnknown | OciErrorCode::NameUnknown
            )
        }),
        _ => false,
    }
}

/// What a repository holds, as a refusal says it.
enum Held {
    /// `the tags 1 (sha256:…), 2 (sha256:…)`.
    Tags(String),
    NoTags,
    NoRepository,
    Unlisted(String),
}

impl Held {
    /// What the repository holds, and what to do: for a refusal's end.
    fn advice(&self, repository: &str) -> String {
        match self {
            Held::Tags(tags) => {
                format!("it holds {tags}: pull one of those, or push the module first")
            }
            Held::NoTags => format!("{repository} holds no tags: push the module first"),
            Held::NoRepository => format!(
                "there is no repository {repository}: push the module first, or correct the name"
            ),
            Held::Unlisted(e) => format!("its tags cannot be listed ({e})"),
        }
    }
}

/// The tags of `reference`'s repository, as the registry lists them now, each with the
/// digest of the manifest it names.
async fn held(client: &Client, reference: &Reference, auth: &RegistryAuth) -> Held {
    let listed = match client.list_tags(reference, auth, None, None).await {
        Ok(listed) => listed.tags,
        Err(e) if is_unknown(&e) => return Held::NoRepository,
        Err(e) => return Held::Unlisted(e.to_string()),
    };
    if listed.is_empty() {
        return Held::NoTags;
    }
    let mut named = Vec::new();
    for tag in listed.iter().take(TAGS_SHOWN) {
        match client
            .fetch_manifest_digest(&tagged(reference, tag), auth)
            .await
        {
            Ok(digest) => named.push(format!("{tag} ({digest})")),
            Err(_) => named.push(tag.clone()),
        }
    }
    let more = match listed.len() > TAGS_SHOWN {
        true => format!(" and {} more", listed.len() - TAGS_SHOWN),
        false => String::new(),
    };
    Held::Tags(format!("the tags {}{more}", named.join(", ")))
}

/// The refusal of a reference whose manifest the registry does not have (code 7: the
/// reference is wrong), with what the repository holds.
pub async fn unknown(
    client: &Client,
    reference: &Reference,
    auth: &RegistryAuth,
    e: OciDistributionError,
) -> CniError {
    let asked = match (reference.digest(), reference.tag()) {
        (Some(digest), _) => format!("no manifest {digest}"),
        (None, Some(tag)) => format!("no tag {tag}"),
        (None, None) => "no manifest".into(),
    };
    let repository = format!("oci://{}/{}", reference.registry(), reference.repository());
    CniError::new(
        code::INVALID_NETWORK_CONFIG,
        format!(
            "{}: the registry has {asked} in {}; {}",
            oci::display(reference, None),
            reference.repository(),
            held(client, reference, auth).await.advice(&repository)
        ),
    )
    .with_details(e)
}

/// For `TAG@DIGEST`: refuses (code 101) when the tag names another manifest than the
/// digest (or none), which the pull would otherwise pass over in silence (a digest
/// wins over a tag): the tag moved since the reference was written, or the two were
/// never one.
pub async fn tag_agrees(
    client: &Client,
    reference: &Reference,
    auth: &RegistryAuth,
) -> Result<(), CniError> {
    let (Some(tag), Some(digest)) = (reference.tag(), reference.digest()) else {
        return Ok(());
    };
    let shown = oci::display(reference, None);
    let repository = format!("oci://{}/{}", reference.registry(), reference.repository());
    let pinned = format!("pull {repository}@{digest} for the module that digest pins");
    let (names, fix) = match client
        .fetch_manifest_digest(&tagged(reference, tag), auth)
        .await
    {
        Ok(now) if now == digest => return Ok(()),
        Ok(now) => (
            format!("the tag {tag} names {now}, not {digest}"),
            format!("{pinned}, or {repository}:{tag} for what the tag names now"),
        ),
        Err(e) if is_unknown(&e) => (
            format!(
                "the registry has no tag {tag} in {}",
                reference.repository()
            ),
            format!(
                "{pinned}; {}",
                held(client, reference, auth).await.advice(&repository)
            ),
        ),
        Err(e) => {
            return Err(oci::registry_error(
                format!("cannot resolve the tag {tag} of {shown}"),
                e,
            ));
        }
    };
    Err(CniError::new(
        code::MODULE_DIGEST_MISMATCH,
        format!("{shown}: {names}: {fix}"),
    ))
}

fn tagged(reference: &Reference, tag: &str) -> Reference {
    Reference::with_tag(
        reference.registry().to_string(),
        reference.repository().to_string(),
        tag.to_string(),
    )
}
