//! What a cluster needs before its nodes use the Kubernetes store, as
//! `wasm-ipam kubernetes manifests` prints it for `kubectl apply -f -`: the CRD, and the
//! least RBAC for the nodes (the verbs the store's requests use on its one resource).
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

/// The CRD, the ClusterRole and its binding to `NODES_GROUP`, as YAML documents.
pub fn all() -> String {
    format!("{}---\n{}", crd(), rbac())
}

pub fn crd() -> String {
    let max_entries = super::objects::MAX_OBJECT_ENTRIES;
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
    - {{name: Network, type: string, jsonPath: .spec.network}}
    - {{name: Role, type: string, jsonPath: .spec.role}}
    - {{name: Group, type: string, jsonPath: .spec.group, description: "the entries' group, or the node of a node's record"}}
    - {{name: Entries, type: integer, jsonPath: .spec.size}}
    - {{name: Home, type: string, jsonPath: .spec.home, description: "the node whose home holds the group's entries"}}
    - {{name: Locked-By, type: string, jsonPath: .spec.lock.node}}
    - {{name: Age, type: date, jsonPath: .metadata.creationTimestamp}}
    schema:
      openAPIV3Schema:
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
              decided:
                type: object
                required: [commit]
                properties:
                  commit: {{type: string}}
                  changes:
                    type: object
                    additionalProperties:
                      type: array
                      items:
                        type: object
                        required: [key]
                        properties:
                          key: {{type: string}}
                          put:
                            type: object
                            required: [key]
                            properties:
                              key: {{type: string}}
                              value: {{type: string}}
                              valueBase64: {{type: string}}
                  homes:
                    type: object
                    additionalProperties: {{type: string}}
                  dropped:
                    type: object
                    additionalProperties:
                      type: array
                      items: {{type: string}}
              aborted:
                type: array
                maxItems: 64
                items: {{type: string}}
              servedBy: {{type: string}}
              home: {{type: string}}
              groups:
                type: array
                maxItems: {max_entries}
                items: {{type: string}}
"#
    )
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
  verbs: [get, list, create, update, delete]
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
