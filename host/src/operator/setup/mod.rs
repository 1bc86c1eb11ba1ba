/// Which CNI versions `install` writes into the conflist.
pub mod cni_versions;
pub mod import;
pub mod install;
pub mod kubernetes;
pub mod node_kubeconfig;
