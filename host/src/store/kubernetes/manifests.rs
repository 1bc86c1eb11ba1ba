//! What a cluster needs before its nodes use the Kubernetes store, as
//! `wasm-ipam kubernetes manifests` prints it for `kubectl apply -f -`: the CRD, the
//! least RBAC for the nodes (the verbs the store's requests use on its one resource),
//! and a priority level of API Priority and Fairness with the flow schema that puts
//! the nodes' requests on that resource in it.
//!
//! Versioning: `v1alpha1` is served and stored. A later version adds fields only
//! (never renames or removes one), so the apiserver converts between versions with the
//! `None` strategy (only `apiVersion` changes) and no conversion webhook is needed;
//! the host reads any version it knows.

use super::objects::{GROUP, KIND, PLURAL, VERSION};

/// The group nodes are bound in: every kubelet's identity (`system:node:<name>`)
/// belongs to it, so a cluster binds every node at once.
pub const NODES_GROUP: &str = "system:nodes";
/// The ClusterRole (and its binding) the manifests create.
pub const ROLE_NAME: &str = "wasm-ipam-node";

/// The PriorityLevelConfiguration and the FlowSchema (same name) the manifests create.
pub const FLOW_NAME: &str = "wasm-ipam";
/// The FlowSchema's matchingPrecedence: below (ahead of) the built-in `system-nodes`
/// (500), which takes every other request of `NODES_GROUP`; the built-in schemas
/// ahead of it (`system-node-high` at 400 and the leader-election ones) match other
/// resources, and a cluster's own schema below 450 still wins over this one.
pub const FLOW_PRECEDENCE: u32 = 450;
/// The verbs the store's requests use on its resource (RBAC and flow schema alike).
const VERBS: &str = "[get, list, create, update, delete]";

/// The CRD, the ClusterRole and its binding to `NODES_GROUP`, and the priority level
/// with its flow schema, as YAML documents.
pub fn all() -> String {
    format!("{}---\n{}---\n{}", crd(), rbac(), flow_control())
}

/// The CRD of the store's one resource: its names, its one version with the columns
/// `kubectl get` shows, and the schema of its objects.
pub fn crd() -> String {
    format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {PLURAL}.{GROUP}
spec:
  group: {GROUP}
  scope: Cluster
  names:
    kind: {KIND}
    listKind: {KIND}List
    plural: {PLURAL}
    singular: ipamshard
    shortNames: [ipams]
  versions:
  - name: {VERSION}
    served: true
    storage: true
    additionalPrinterColumns:
{columns}    schema:
{schema}"#,
        columns = printer_columns(),
        schema = schema(),
    )
}

/// The columns `kubectl get` shows for the store's objects, under the version's
/// `additionalPrinterColumns`.
fn printer_columns() -> &'static str {
    r#"    - {name: Network, type: string, jsonPath: .spec.network}
    - {name: Role, type: string, jsonPath: .spec.role}
    - {name: Group, type: string, jsonPath: .spec.group, description: "the entries' group, or the node of a node's record"}
    - {name: Entries, type: integer, jsonPath: .spec.size}
    - {name: Home, type: string, jsonPath: .spec.home, description: "the node whose home holds the group's entries"}
    - {name: Locked-By, type: string, jsonPath: .spec.lock.node}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
"#
}

/// The schema of an object (`openAPIV3Schema`), under the version's `schema`; a
/// decision's part is [`decided_schema`].
fn schema() -> String {
    let max_entries = super::objects::MAX_OBJECT_ENTRIES;
    format!(
        r#"      openAPIV3Schema:
        type: object
        required: [spec]
        properties:
          spec:
            type: object
            required: [role, network]
            properties:
              role: {{type: string, enum: [entries, node]}}
              network: {{type: string, maxLength: 253}}
              group: {{type: string, maxLength: 1024}}
              size: {{type: integer, minimum: 0}}
              entries:
                type: array
                maxItems: {max_entries}
                x-kubernetes-list-type: map
                x-kubernetes-list-map-keys: [key]
                items:
                  type: object
                  required: [key]
                  properties:
                    key: {{type: string, maxLength: 1024}}
                    value: {{type: string, maxLength: 262144}}
                    valueBase64: {{type: string, maxLength: 349528}}
              lock:
                type: object
                required: [node, commit, until]
                properties:
                  node: {{type: string}}
                  commit: {{type: string}}
                  until: {{type: integer}}
              commit: {{type: string}}
              usage:
                type: object
                properties:
                  entries: {{type: integer}}
                  bytes: {{type: integer}}
                  last: {{type: integer}}
{decided}              aborted:
                type: array
                maxItems: 64
                items: {{type: string}}
              servedBy: {{type: string}}
              home: {{type: string}}
              groups:
                type: array
                maxItems: {max_entries}
                items: {{type: string}}
"#,
        decided = decided_schema(),
    )
}

/// The schema of `spec.decided`, a commit across objects as its node's home records
/// it (the commit, each object's changes, the groups it homes and drops).
fn decided_schema() -> &'static str {
    r#"              decided:
                type: object
                required: [commit]
                properties:
                  commit: {type: string}
                  changes:
                    type: object
                    additionalProperties:
                      type: array
                      items:
                        type: object
                        required: [key]
                        properties:
                          key: {type: string}
                          put:
                            type: object
                            required: [key]
                            properties:
                              key: {type: string}
                              value: {type: string}
                              valueBase64: {type: string}
                  homes:
                    type: object
                    additionalProperties: {type: string}
                  dropped:
                    type: object
                    additionalProperties:
                      type: array
                      items: {type: string}
"#
}

pub fn rbac() -> String {
    format!(
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {ROLE_NAME}
rules:
- apiGroups: [{GROUP}]
  resources: [{PLURAL}]
  verbs: {VERBS}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: {ROLE_NAME}
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: ClusterRole
  name: {ROLE_NAME}
subjects:
- apiGroup: rbac.authorization.k8s.io
  kind: Group
  name: {NODES_GROUP}
"#
    )
}

/// API Priority and Fairness for the nodes' requests on the store's resource: a
/// priority level of their own, so a herd of pod starts neither waits behind the
/// kubelets' other requests in the built-in `system` level (where `system-nodes` puts
/// everything of `NODES_GROUP`) nor takes that level's seats from node heartbeats
/// and pod status.
///
/// The values, against the levels the apiserver ships (`system` 30 shares, `node-high`
/// 40, `workload-high` 40, `workload-low` 100, `global-default` 20, `leader-election`
/// 10; queues 64 or 128, hand 6, 50 long, except leader-election's 16, 4, 50):
/// - 10 shares, leader-election's: about 4% of the apiserver's seats (24 of the
///   default 600). A request reads or writes one object, and a node makes at most
///   `qps` (default 5) a second, so the level serves hundreds of nodes' steady calls
///   at once; a cluster that needs more raises the shares.
/// - `lendablePercent` 50, as `global-default` and `workload-high`: half its seats go
///   to busier levels while the nodes are quiet. Borrowing is left unlimited: a level
///   only borrows seats another lends while idle.
/// - Queue, not Reject, so a burst waits a moment instead of failing; 16 queues with
///   hands of 4, leader-election's, for the nodes' flows (`ByUser`: one per node),
///   so a node that floods has all 4 of its queues shared with a given other node
///   in 1 of 1820 deals;
///   and short queues (10): a call has seconds (`timeoutSeconds`, default 5), a
///   request queued longer is one the node has given up on, and a full queue answers
///   429 with a Retry-After the store waits out within the call's budget.
pub fn flow_control() -> String {
    format!(
        r#"apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata:
  name: {FLOW_NAME}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 10
    lendablePercent: 50
    limitResponse:
      type: Queue
      queuing:
        queues: 16
        handSize: 4
        queueLengthLimit: 10
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata:
  name: {FLOW_NAME}
spec:
  priorityLevelConfiguration:
    name: {FLOW_NAME}
  matchingPrecedence: {FLOW_PRECEDENCE}
  distinguisherMethod:
    type: ByUser
  rules:
  - subjects:
    - kind: Group
      group:
        name: {NODES_GROUP}
    resourceRules:
    - apiGroups: [{GROUP}]
      resources: [{PLURAL}]
      verbs: {VERBS}
      clusterScope: true
"#
    )
}

#[cfg(test)]
mod tests {
    /// docs/kubernetes-store.md shows what `wasm-ipam kubernetes manifests` prints with
    /// the CRD's schema left out (its text says so): every other line as printed, in
    /// order, none missing.
    #[test]
    fn the_setup_guide_shows_the_manifests_as_printed() {
        let doc = include_str!("../../../../docs/kubernetes-store.md");
        let shown = doc
            .split("```output excerpt\n")
            .nth(1)
            .and_then(|rest| rest.split("```\n").next())
            .expect("docs/kubernetes-store.md has an output excerpt of the manifests");
        let printed = super::all();
        let (crd, rest) = printed
            .split_once("    schema:\n")
            .expect("the CRD has a schema");
        let (_schema, rest) = rest.split_once("---\n").expect("the RBAC follows the CRD");
        let expected = format!("{crd}---\n{rest}");
        assert_eq!(
            shown, expected,
            "docs/kubernetes-store.md's excerpt of `wasm-ipam kubernetes manifests` differs from what it prints"
        );
    }
}
