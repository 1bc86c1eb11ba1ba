//! `wasm-ipam kubernetes`: what a cluster needs before its nodes keep their addresses
//! in the Kubernetes API (`"store": {"type": "kubernetes"}`).

use crate::error::CniError;
use crate::operator::args::Output;
use crate::store::kubernetes::manifests;

/// What a cluster whose networks keep their state in the Kubernetes API needs
/// (`manifests`); see docs/kubernetes-store.md.
#[derive(clap::Subcommand, Debug, PartialEq)]
pub enum KubernetesCommand {
    /// Print the CustomResourceDefinition of the store's objects, the least RBAC for
    /// the nodes (a ClusterRole bound to the group system:nodes) and a priority level
    /// of API Priority and Fairness for the nodes' requests (a
    /// PriorityLevelConfiguration and its FlowSchema), as YAML for `kubectl apply -f -`.
    Manifests,
}

impl KubernetesCommand {
    pub fn run(self) -> Result<Output, CniError> {
        match self {
            KubernetesCommand::Manifests => Ok(manifests::all().into()),
        }
    }
}
