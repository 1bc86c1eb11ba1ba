//! Which pool an ADD draws from, as Cilium's multi-pool chooses: the pool the pod
//! names, else the pool of its namespace, else the default pool.

use crate::codes;
use crate::conf::{Conf, NamedPool};
use wasm_ipam_guest::{Error, Request};

/// The pod annotation naming a pool; containerd delivers pod annotations in
/// `runtimeConfig` when the conflist declares this capability.
pub const ANNOTATION: &str = "wasm-ipam.io/pool";
pub const ANNOTATIONS_CAPABILITY: &str = "io.kubernetes.cri.pod-annotations";
/// The CNI_ARGS key naming a pool, for runtimes that let a caller set CNI_ARGS.
pub const POOL_ARG: &str = "IPAM_POOL";

/// The pool this ADD draws from.
pub fn pool_for<'c>(conf: &'c Conf, request: &Request) -> Result<&'c NamedPool, Error> {
    let annotated = request.config()["runtimeConfig"][ANNOTATIONS_CAPABILITY][ANNOTATION]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(|name| (name, format!("pod annotation {ANNOTATION}")));
    let argued = request
        .arg(POOL_ARG)
        .filter(|s| !s.is_empty())
        .map(|name| (name, format!("CNI_ARGS {POOL_ARG}")));
    if let Some((name, source)) = annotated.or(argued) {
        return conf.pools.iter().find(|p| p.name == name).ok_or_else(|| {
            let known: Vec<&str> = conf.pools.iter().map(|p| p.name.as_str()).collect();
            Error::new(
                codes::UNKNOWN_POOL,
                format!(
                    "{source} names pool {name:?}, which ipam.pools does not have (it has {})",
                    known.join(", ")
                ),
            )
        });
    }
    let namespace = request.arg("K8S_POD_NAMESPACE").filter(|s| !s.is_empty());
    if let Some(pool) = namespace.and_then(|ns| {
        conf.pools
            .iter()
            .find(|p| p.namespaces.iter().any(|n| n == ns))
    }) {
        return Ok(pool);
    }
    conf.pools.iter().find(|p| p.default).ok_or_else(|| {
        let whose = match namespace {
            Some(ns) => format!("namespace {ns:?}"),
            None => "a call without K8S_POD_NAMESPACE".to_string(),
        };
        Error::new(
            codes::NO_POOL,
            format!(
                "no pool of ipam.pools serves {whose} and none is the default; name one with the pod annotation {ANNOTATION} or CNI_ARGS {POOL_ARG}"
            ),
        )
    })
}
