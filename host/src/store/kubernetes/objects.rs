//! How the store's entries lie in the Kubernetes API: custom resources of kind
//! `IPAMShard` in the group `ipam.wasm-ipam.dev`, cluster-scoped.
//!
//! A network's entries are grouped by their key's first two `/`-separated segments
//! (cluster-pool's `own/<node>/<pod>/<if>` is in group `own/<node>`, its
//! `blk/10.244.0.0/26` in `blk/10.244.0.0`). Each group has an object of its own
//! (`role: entries`), which holds the group's entries or, for a group a node's
//! runtime call started, names that node (`home`): then the entries lie in the
//! node's home, its one object per network (`role: node`), beside the node's net
//! change to the network's size, when it last committed, its last commit's decision
//! and which module served it. So a steady call reads and writes one object, and a
//! node's records never share an object with another node's. Entries are a list
//! keyed by `key` (`x-kubernetes-list-type: map`), so the apiserver itself refuses a
//! doubled key.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

pub const GROUP: &str = "ipam.wasm-ipam.dev";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "IPAMShard";
pub const PLURAL: &str = "ipamshards";
/// The collection's path under the apiserver.
pub const COLLECTION: &str = "/apis/ipam.wasm-ipam.dev/v1alpha1/ipamshards";

/// Labels that let a call list one network's objects, or one role's, or the groups
/// under one first segment, without reading the others. Hashes: a label value is at
/// most 63 characters of a narrow alphabet, and a network or key is any string.
pub const NETWORK_LABEL: &str = "ipam.wasm-ipam.dev/network";
pub const ROLE_LABEL: &str = "ipam.wasm-ipam.dev/role";
pub const FIRST_LABEL: &str = "ipam.wasm-ipam.dev/first";
pub const NODE_LABEL: &str = "ipam.wasm-ipam.dev/node";

/// The most bytes one object's entries may take: far under etcd's 1.5 MiB request
/// limit and the apiserver's 3 MiB, so a whole object is read and written in one
/// request at any size. A commit that would grow a group's object past it is
/// refused (code 105) naming the group; see docs/kubernetes-store.md.
pub const MAX_OBJECT_BYTES: usize = 256 * 1024;
/// The most entries one object holds: the CRD's `maxItems` for `entries`, so a list
/// of that many keys is checked by the apiserver in bounded time. A commit that
/// would put more in one group's object is refused (code 105) like one over
/// [`MAX_OBJECT_BYTES`], before anything is written.
pub const MAX_OBJECT_ENTRIES: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A group of the module's entries.
    Entries,
    /// One node's record in one network: its usage, its last decision, and which
    /// module it ran for the network.
    Node,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Entries => "entries",
            Role::Node => "node",
        }
    }
}

/// Where an object lives: its role, network and group (for a node's record, the
/// node's name; for the network's record, empty).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Place {
    pub role: Role,
    pub network: String,
    pub group: String,
}

impl Place {
    pub fn entries(network: &str, group: &str) -> Self {
        Place {
            role: Role::Entries,
            network: network.into(),
            group: group.into(),
        }
    }

    pub fn node(network: &str, node: &str) -> Self {
        Place {
            role: Role::Node,
            network: network.into(),
            group: node.into(),
        }
    }

    /// The object's name: readable where the network and group allow, made unique
    /// by a hash of all three (two places never share a name).
    pub fn name(&self) -> String {
        let hash = short_hash(&[self.role.as_str(), &self.network, &self.group]);
        let readable = sanitize(&format!("{}.{}", self.network, self.group));
        let readable: String = readable.chars().take(60).collect();
        // An RFC 1123 subdomain: each dot-separated label starts and ends with a letter
        // or digit (a network named `a-` must not make a name the apiserver refuses).
        let readable = readable
            .split('.')
            .map(|label| label.trim_matches('-'))
            .filter(|label| !label.is_empty())
            .collect::<Vec<_>>()
            .join(".");
        match readable.is_empty() {
            true => format!("{}-{hash}", self.role.as_str()),
            false => format!("{readable}-{hash}"),
        }
    }

    pub fn labels(&self) -> BTreeMap<String, String> {
        let mut labels = BTreeMap::from([
            (NETWORK_LABEL.to_string(), short_hash(&[&self.network])),
            (ROLE_LABEL.to_string(), self.role.as_str().to_string()),
        ]);
        match self.role {
            Role::Entries => {
                let first = self.group.split('/').next().unwrap_or_default();
                labels.insert(FIRST_LABEL.into(), short_hash(&[first]));
            }
            Role::Node => {
                labels.insert(NODE_LABEL.into(), short_hash(&[&self.group]));
            }
        }
        labels
    }
}

/// The group a key lies in: its first two `/`-separated segments.
pub fn group_of(key: &str) -> &str {
    match key.match_indices('/').nth(1) {
        Some((at, _)) => &key[..at],
        None => key,
    }
}

/// How to find every entry whose key starts with `prefix`: the one group that holds
/// them all, or the label selector of the objects that may (filtered by group after).
pub enum Scope {
    Group(String),
    Select(String),
}

pub fn scope_of(network: &str, prefix: &str) -> Scope {
    // Two whole segments: every key under the prefix is in one group.
    if prefix.match_indices('/').nth(1).is_some() {
        return Scope::Group(group_of(prefix).to_string());
    }
    let mut selector = format!(
        "{NETWORK_LABEL}={},{ROLE_LABEL}=entries",
        short_hash(&[network])
    );
    if let Some((first, _)) = prefix.split_once('/') {
        selector.push_str(&format!(",{FIRST_LABEL}={}", short_hash(&[first])));
    }
    Scope::Select(selector)
}

/// The selector of every object of `role` in `network` (or in every network).
/// Every object of `network`, whatever its role.
pub fn select_network(network: &str) -> String {
    format!("{NETWORK_LABEL}={}", short_hash(&[network]))
}

pub fn select(role: Role, network: Option<&str>) -> String {
    let mut selector = format!("{ROLE_LABEL}={}", role.as_str());
    if let Some(network) = network {
        selector.push_str(&format!(",{NETWORK_LABEL}={}", short_hash(&[network])));
    }
    selector
}

/// The first 16 hex digits of the SHA-256 of `parts`, each length-prefixed so no two
/// lists of parts hash alike by concatenation.
fn short_hash(parts: &[&str]) -> String {
    let mut hasher = Sha256::new();
    for part in parts {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    hasher.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Lower-case letters, digits, `-` and `.`, as a name allows; the rest become `-`.
fn sanitize(text: &str) -> String {
    text.chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '.') => c,
            _ => '-',
        })
        .collect()
}

/// One stored entry: its value as text when it is UTF-8 (readable in `kubectl get
/// -o yaml`), else in base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value_base64: Option<String>,
}

impl Entry {
    pub fn new(key: &str, value: &[u8]) -> Self {
        use base64::Engine as _;
        match std::str::from_utf8(value) {
            Ok(text) => Entry {
                key: key.into(),
                value: Some(text.into()),
                value_base64: None,
            },
            Err(_) => Entry {
                key: key.into(),
                value: None,
                value_base64: Some(base64::engine::general_purpose::STANDARD.encode(value)),
            },
        }
    }

    pub fn bytes(&self) -> Result<Vec<u8>, String> {
        use base64::Engine as _;
        match (&self.value, &self.value_base64) {
            (Some(text), None) => Ok(text.clone().into_bytes()),
            (None, Some(encoded)) => base64::engine::general_purpose::STANDARD
                .decode(encoded)
                .map_err(|e| format!("entry {:?}: valueBase64 is not base64: {e}", self.key)),
            _ => Err(format!(
                "entry {:?} must hold exactly one of value and valueBase64",
                self.key
            )),
        }
    }
}

/// A commit in flight: every object it writes carries it while it holds them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lock {
    /// The node whose call took it.
    pub node: String,
    /// The commit's id.
    pub commit: String,
    /// Unix seconds by the node's clock after which its call can no longer decide:
    /// its deadline.
    pub until: u64,
}

pub use crate::store::commit::NodeUsage;

/// A node's last decided commit: what it changes in each object it locked, so
/// whoever finds one of those objects still locked can finish it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    pub commit: String,
    /// Object name → its changes: key → new value (absent: deleted).
    pub changes: BTreeMap<String, Vec<Change>>,
    /// A group's object → the node whose home now holds the group's entries.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub homes: BTreeMap<String, String>,
    /// A node's home → the groups it no longer holds (moved to the deciding node's).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub dropped: BTreeMap<String, Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Change {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub put: Option<Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    pub role: Role,
    pub network: String,
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub entries: Vec<Entry>,
    /// How many entries: what `kubectl get` shows.
    #[serde(default)]
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<Lock>,
    /// The last commit that wrote this object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<NodeUsage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided: Option<Decision>,
    /// Commits of this node that another call gave up on (found their locks after
    /// their deadline, undecided): a late decision of one of them must not land.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aborted: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_by: Option<String>,
    /// A group's object whose entries lie in a node's home: that node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<String>,
    /// A node's home: the groups whose entries it holds, sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
}

impl Spec {
    pub fn empty(place: &Place) -> Self {
        Spec {
            role: place.role,
            network: place.network.clone(),
            group: place.group.clone(),
            entries: Vec::new(),
            size: 0,
            lock: None,
            commit: None,
            usage: None,
            decided: None,
            aborted: Vec::new(),
            served_by: None,
            home: None,
            groups: Vec::new(),
        }
    }

    /// Whether this home holds `group`.
    pub fn holds(&self, group: &str) -> bool {
        self.groups
            .binary_search_by(|g| g.as_str().cmp(group))
            .is_ok()
    }

    pub fn place(&self) -> Place {
        Place {
            role: self.role,
            network: self.network.clone(),
            group: self.group.clone(),
        }
    }

    /// The entries as a map, refusing a doubled key or an undecodable value (an
    /// object edited by hand) with `name` and what to do.
    pub fn entry_map(&self, name: &str) -> Result<BTreeMap<String, Vec<u8>>, String> {
        let mut map = BTreeMap::new();
        for entry in &self.entries {
            let value = entry.bytes().map_err(|e| format!("{KIND} {name}: {e}"))?;
            if map.insert(entry.key.clone(), value).is_some() {
                return Err(format!(
                    "{KIND} {name} holds key {:?} twice; it was edited by hand: remove one (kubectl edit {PLURAL} {name})",
                    entry.key
                ));
            }
            if self.role == Role::Node && !self.holds(group_of(&entry.key)) {
                return Err(format!(
                    "{KIND} {name} (the home of node {:?}) holds key {:?} of group {:?}, which is not among its groups; it was edited by hand: move or remove it",
                    self.group,
                    entry.key,
                    group_of(&entry.key)
                ));
            }
            if self.role == Role::Entries && group_of(&entry.key) != self.group {
                return Err(format!(
                    "{KIND} {name} (group {:?}) holds key {:?}, which belongs to group {:?}; it was edited by hand: move or remove it",
                    self.group,
                    entry.key,
                    group_of(&entry.key)
                ));
            }
        }
        Ok(map)
    }

    /// Applies `changes` to the entries; a home takes the group of each key put.
    pub fn apply(&mut self, changes: &[Change]) {
        let mut map: BTreeMap<String, Entry> =
            self.entries.drain(..).map(|e| (e.key.clone(), e)).collect();
        for change in changes {
            match &change.put {
                Some(entry) => {
                    if self.role == Role::Node {
                        let group = group_of(&change.key);
                        if let Err(at) = self.groups.binary_search_by(|g| g.as_str().cmp(group)) {
                            self.groups.insert(at, group.to_string());
                        }
                    }
                    map.insert(change.key.clone(), entry.clone())
                }
                None => map.remove(&change.key),
            };
        }
        self.entries = map.into_values().collect();
        self.size = self.entries.len() as u64;
    }
}

/// One object as the API holds it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Shard {
    #[serde(default)]
    pub api_version: String,
    #[serde(default)]
    pub kind: String,
    pub metadata: Metadata,
    pub spec: Spec,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Metadata {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

impl Shard {
    pub fn new(place: &Place, spec: Spec) -> Self {
        Shard {
            api_version: format!("{GROUP}/{VERSION}"),
            kind: KIND.into(),
            metadata: Metadata {
                name: place.name(),
                resource_version: None,
                labels: place.labels(),
            },
            spec,
        }
    }

    pub fn rv(&self) -> String {
        self.metadata.resource_version.clone().unwrap_or_default()
    }
}

/// A list answer.
#[derive(Debug, Deserialize)]
pub struct ShardList {
    pub items: Vec<Shard>,
    #[serde(default)]
    pub metadata: ListMetadata,
}

#[derive(Debug, Default, Deserialize)]
pub struct ListMetadata {
    #[serde(default, rename = "continue")]
    pub continue_: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_group_by_their_first_two_segments() {
        assert_eq!(group_of("own/node-a/pod/eth0"), "own/node-a");
        assert_eq!(group_of("blk/10.244.0.0/26"), "blk/10.244.0.0");
        assert_eq!(group_of("aff/node-a/"), "aff/node-a");
        assert_eq!(group_of("flat"), "flat");
        assert_eq!(group_of("one/two"), "one/two");
        assert!(matches!(scope_of("n", "own/a/"), Scope::Group(g) if g == "own/a"));
        assert!(matches!(scope_of("n", "blk/"), Scope::Select(s) if s.contains(FIRST_LABEL)));
        assert!(matches!(scope_of("n", ""), Scope::Select(s) if !s.contains(FIRST_LABEL)));
    }

    #[test]
    fn names_are_valid_and_distinct_for_every_place() {
        let places = [
            Place::entries("net", "own/Node_A"),
            Place::entries("net", "own/node-a"),
            Place::entries("net/x", "y"),
            Place::entries("net", "x/y"),
            Place::node("net", "own/node-a"),
            Place::entries("", ""),
            Place::entries("a-", "-b/c"),
            Place::entries("x_", "_y/z"),
            Place::entries("a..b", "./."),
            Place::node(".", "-"),
        ];
        let names: std::collections::BTreeSet<String> = places.iter().map(Place::name).collect();
        assert_eq!(names.len(), places.len());
        for name in names {
            assert!(name.len() <= 253, "{name}");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.'),
                "{name}"
            );
            // The apiserver's rule for a name: RFC 1123 subdomain labels.
            for label in name.split('.') {
                assert!(
                    label.starts_with(|c: char| c.is_ascii_alphanumeric())
                        && label.ends_with(|c: char| c.is_ascii_alphanumeric()),
                    "{name}"
                );
            }
        }
    }

    #[test]
    fn a_doubled_or_misplaced_key_edited_by_hand_is_named() {
        let place = Place::entries("net", "blk/10.0.0.0");
        let mut spec = Spec::empty(&place);
        spec.entries = vec![
            Entry::new("blk/10.0.0.0/24", b"a"),
            Entry::new("blk/10.0.0.0/24", b"b"),
        ];
        let err = spec.entry_map("x").unwrap_err();
        assert!(
            err.contains("twice") && err.contains("kubectl edit"),
            "{err}"
        );
        spec.entries = vec![Entry::new("own/n/p/eth0", b"a")];
        assert!(
            spec.entry_map("x")
                .unwrap_err()
                .contains("belongs to group")
        );
        spec.entries = vec![Entry::new("blk/10.0.0.0/24", &[0xff, 0])];
        assert_eq!(
            spec.entry_map("x").unwrap()["blk/10.0.0.0/24"],
            vec![0xff, 0]
        );
    }
}
