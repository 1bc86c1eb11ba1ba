//! `wasm-ipam install --kubeconfig FILE`: the credentials a node's calls use on a
//! Kubernetes store (`"store": {"type": "kubernetes"}`), written beside the conflist
//! so that the runtime's calls never depend on a file install did not check.
//!
//! On a node these are typically the kubelet's own (identity `system:node:<name>` in
//! `system:nodes`, which the RBAC of `wasm-ipam kubernetes manifests` binds). The copy
//! holds only the context the store uses (its cluster and user), with every file path
//! made absolute against the kubeconfig's directory, as kube reads it: the store reads
//! the kubeconfig on every call, so a certificate or token that is rotated by
//! rewriting the file it names is still picked up, wherever the runtime runs the
//! plugin from.
//!
//! Before anything is written, the kubeconfig must parse, its context, cluster and
//! user must exist, each file it names must be readable, and its identity must be able
//! to list the store's objects on the apiserver (one read-only request, made by the
//! store's own code): an install that exits 0 leaves no node whose every ADD is
//! refused for its credentials.

use crate::config::KubernetesConfig;
use crate::error::{CniError, with_causes};
use crate::store::Store;
use crate::store::kubernetes::KubernetesStore;
use crate::store::kubernetes::objects::{GROUP, PLURAL, VERSION};
use kube::config::{Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext};
use std::path::{Path, PathBuf};

/// The key of the module's ipam config that names the store's kind.
const KUBERNETES: &str = "kubernetes";

/// Where install writes the node's kubeconfig: beside the conflist, named after it
/// (`00-wasm-ipam.conflist` → `00-wasm-ipam.kubeconfig`, which no runtime reads as a
/// network configuration).
pub fn copy_path(conf_dir: &Path, conflist_name: &str) -> PathBuf {
    let stem = Path::new(conflist_name)
        .file_stem()
        .unwrap_or_default()
        .to_string_lossy();
    conf_dir.join(format!("{stem}.kubeconfig"))
}

/// Points the conflist's `ipam.store` at `copy` when `--kubeconfig` was given, which
/// only a Kubernetes store takes; refuses the ipam config that sets the kubeconfig
/// itself alongside it, and a Kubernetes store with no kubeconfig from either.
pub fn point_store_at(
    ipam: &mut serde_json::Value,
    given: Option<&Path>,
    keys_flag: &str,
    copy: &Path,
) -> Result<(), CniError> {
    let kind = match ipam.get("store") {
        None => "the embedded store",
        Some(store) => match store["type"].as_str() {
            Some(KUBERNETES) => KUBERNETES,
            Some("etcd") => "etcd",
            _ => "not the Kubernetes API",
        },
    };
    let Some(given) = given else {
        if kind == KUBERNETES && ipam["store"].get("kubeconfig").is_none() {
            return Err(CniError::config(format!(
                "{keys_flag}: its store is the Kubernetes API but names no kubeconfig: pass --kubeconfig FILE (the node's credentials, e.g. the kubelet's kubeconfig), which install checks and copies beside the conflist"
            )));
        }
        return Ok(());
    };
    if kind != KUBERNETES {
        return Err(CniError::config(format!(
            "--kubeconfig {}: the network's store is {kind} ({keys_flag}); --kubeconfig is for a Kubernetes store, \"store\": {{\"type\": \"kubernetes\"}} in --ipam-config",
            given.display()
        )));
    }
    if ipam["store"].get("kubeconfig").is_some() {
        return Err(CniError::config(format!(
            "{keys_flag} sets ipam.store.kubeconfig, which install writes itself with --kubeconfig: leave it out of the file"
        )));
    }
    ipam["store"]["kubeconfig"] = serde_json::json!(copy);
    Ok(())
}

/// The node's kubeconfig as install writes it, and what it was made from.
pub struct NodeKubeconfig {
    /// `--kubeconfig`, absolute.
    pub source: PathBuf,
    /// The context the store uses.
    pub context: String,
    /// Its cluster's apiserver.
    pub server: String,
    /// The copy: that context, its cluster and user, file paths absolute (JSON, which
    /// every kubeconfig reader takes as YAML).
    pub text: Vec<u8>,
}

/// Reads `given` as the store will (`context`, else its current-context), checks
/// that every file the context's cluster and user name is readable, and makes the
/// copy.
pub fn read(given: &Path, context: Option<&str>) -> Result<NodeKubeconfig, CniError> {
    let shown = given.display();
    let source = std::path::absolute(given).map_err(|e| {
        CniError::config(format!("--kubeconfig {shown}: cannot be resolved")).with_details(e)
    })?;
    // read_from makes the paths in it absolute against its directory.
    let read = Kubeconfig::read_from(&source).map_err(|e| {
        CniError::config(format!(
            "--kubeconfig {shown}: cannot be read as a kubeconfig"
        ))
        .with_details(with_causes(&e))
    })?;
    let (name, whose) = context_name(&read, context, given)?;
    let (context_of, cluster, user) = context_parts(&read, &name, whose, given)?;
    for (key, path) in files(&cluster, &user) {
        if let Err(e) = std::fs::read(&path) {
            return Err(CniError::config(format!(
                "--kubeconfig {shown}: its {key} {path} cannot be read, and every call would read it"
            ))
            .with_details(e));
        }
    }
    let server = cluster
        .cluster
        .as_ref()
        .and_then(|c| c.server.clone())
        .unwrap_or_default();
    let copy = Kubeconfig {
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        clusters: vec![cluster],
        auth_infos: vec![user],
        contexts: vec![context_of],
        current_context: Some(name.clone()),
        ..Kubeconfig::default()
    };
    let mut text = serde_json::to_vec_pretty(&copy).expect("serialisable");
    text.push(b'\n');
    Ok(NodeKubeconfig {
        source,
        context: name,
        server,
        text,
    })
}

/// The context the store uses in `read` (the kubeconfig `given`): `context`, else
/// its current-context; with what named it, for messages.
fn context_name(
    read: &Kubeconfig,
    context: Option<&str>,
    given: &Path,
) -> Result<(String, &'static str), CniError> {
    match context {
        Some(name) => Ok((name.to_string(), "ipam.store.context")),
        None => match &read.current_context {
            Some(name) if !name.is_empty() => Ok((name.clone(), "its current-context")),
            _ => Err(CniError::config(format!(
                "--kubeconfig {}: it has no current-context: name one with \"context\" in --ipam-config's store",
                given.display()
            ))),
        },
    }
}

/// Context `name` of `read` (the kubeconfig `given`, where `whose` named it), with
/// the cluster and the user it names; refused naming what is missing and what there
/// is instead.
fn context_parts(
    read: &Kubeconfig,
    name: &str,
    whose: &str,
    given: &Path,
) -> Result<(NamedContext, NamedCluster, NamedAuthInfo), CniError> {
    let shown = given.display();
    let named = |kind: &str, names: Vec<&str>| {
        CniError::config(format!(
            "--kubeconfig {shown}: {whose} names context {name:?}, whose {kind} it does not have (it has: {})",
            match names.is_empty() {
                true => "none".to_string(),
                false => names.join(", "),
            }
        ))
    };
    let context_of: NamedContext = read
        .contexts
        .iter()
        .find(|c| c.name == name)
        .cloned()
        .ok_or_else(|| {
            CniError::config(format!(
                "--kubeconfig {shown}: it has no context {name:?}, which {whose} names (it has: {})",
                read.contexts
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
    let inner = context_of.context.clone().unwrap_or_default();
    let cluster: NamedCluster = read
        .clusters
        .iter()
        .find(|c| c.name == inner.cluster)
        .cloned()
        .ok_or_else(|| {
            named(
                &format!("cluster {:?}", inner.cluster),
                read.clusters.iter().map(|c| c.name.as_str()).collect(),
            )
        })?;
    let user_name = inner.user.clone().unwrap_or_default();
    let user: NamedAuthInfo = read
        .auth_infos
        .iter()
        .find(|u| u.name == user_name)
        .cloned()
        .ok_or_else(|| {
            named(
                &format!("user {user_name:?}"),
                read.auth_infos.iter().map(|u| u.name.as_str()).collect(),
            )
        })?;
    Ok((context_of, cluster, user))
}

/// The files kube reads for `cluster` and `user` (a file whose `-data` is given is
/// not read), with the key naming each.
fn files(cluster: &NamedCluster, user: &NamedAuthInfo) -> Vec<(&'static str, String)> {
    let mut files = Vec::new();
    if let Some(c) = &cluster.cluster
        && c.certificate_authority_data.is_none()
        && let Some(path) = &c.certificate_authority
    {
        files.push(("certificate-authority", path.clone()));
    }
    if let Some(u) = &user.auth_info {
        if u.client_certificate_data.is_none()
            && let Some(path) = &u.client_certificate
        {
            files.push(("client-certificate", path.clone()));
        }
        if u.client_key_data.is_none()
            && let Some(path) = &u.client_key
        {
            files.push(("client-key", path.clone()));
        }
        if u.token.is_none()
            && let Some(path) = &u.token_file
        {
            files.push(("tokenFile", path.clone()));
        }
        // A command without a path is looked up on the PATH of whoever runs it.
        if let Some(command) = u.exec.as_ref().and_then(|e| e.command.as_ref())
            && Path::new(command).is_absolute()
        {
            files.push(("exec command", command.clone()));
        }
    }
    files
}

/// Lists the store's objects on the apiserver as the node's calls will, with
/// `kubeconfig`'s identity (one read-only request, made by the store's own code, on a
/// rate limiter private to the check): the line saying it passed, or the store's
/// refusal (a missing CRD, a 401 or 403, an apiserver not answering) naming
/// `--kubeconfig`.
pub fn check_apiserver(
    kubeconfig: &NodeKubeconfig,
    store: &KubernetesConfig,
    node: &str,
) -> Result<String, CniError> {
    let private = tempfile::Builder::new()
        .prefix("wasm-ipam-install-")
        .tempdir()
        .map_err(|e| {
            CniError::new(
                crate::error::code::IO_FAILURE,
                "cannot make a private directory",
            )
            .with_details(e)
        })?;
    let config = KubernetesConfig {
        kubeconfig: kubeconfig.source.clone(),
        context: Some(kubeconfig.context.clone()),
        ..store.clone()
    };
    let refused = |e: CniError| CniError {
        msg: format!(
            "--kubeconfig {}: every call would fail: {}",
            kubeconfig.source.display(),
            e.msg
        ),
        ..e
    };
    let opened =
        KubernetesStore::open(&config, node, private.path(), store.timeout).map_err(refused)?;
    let networks = match opened.served_by() {
        Ok(records) => records.len(),
        // An apiserver that never heard of ipamshards refuses a node's list with 403
        // (authorization comes before routing): say what is missing.
        Err(e) if crd_served(&config) == Some(false) => {
            return Err(CniError::config(format!(
                "--kubeconfig {}: the apiserver {} does not serve {PLURAL}.{GROUP}: apply the store's CRD and the nodes' RBAC first (wasm-ipam kubernetes manifests | kubectl apply -f -)",
                kubeconfig.source.display(),
                kubeconfig.server
            ))
            .with_details(e.msg));
        }
        Err(e) => return Err(refused(e)),
    };
    Ok(format!(
        "checked --kubeconfig {} (context {}): it may list {PLURAL}.{GROUP} on {} ({networks} network(s) recorded there)",
        kubeconfig.source.display(),
        kubeconfig.context,
        kubeconfig.server
    ))
}

/// Whether the apiserver serves the store's API group, as its discovery says (which
/// every authenticated identity may read); none when it cannot be asked.
fn crd_served(config: &KubernetesConfig) -> Option<bool> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .ok()?;
    runtime.block_on(async {
        let options = kube::config::KubeConfigOptions {
            context: config.context.clone(),
            ..Default::default()
        };
        let read = Kubeconfig::read_from(&config.kubeconfig).ok()?;
        let mut client_config = kube::Config::from_custom_kubeconfig(read, &options)
            .await
            .ok()?;
        client_config.connect_timeout = Some(config.timeout);
        client_config.read_timeout = Some(config.timeout);
        let client = kube::Client::try_from(client_config).ok()?;
        let groups = tokio::time::timeout(config.timeout, client.list_api_groups())
            .await
            .ok()?
            .ok()?;
        Some(
            groups
                .groups
                .iter()
                .any(|g| g.name == GROUP && g.versions.iter().any(|v| v.version == VERSION)),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn kubeconfig(dir: &Path, user: &str) -> PathBuf {
        let path = dir.join("kubelet.conf");
        fs::write(
            &path,
            format!(
                "apiVersion: v1
kind: Config
clusters:
- name: local
  cluster:
    server: \"https://10.0.0.1:6443\"
    certificate-authority: pki/ca.crt
- name: other
  cluster:
    server: \"https://10.0.0.2:6443\"
users:
- name: node
  user: {{client-certificate: pki/node.crt, client-key: {user}}}
- name: admin
  user: {{token: secret-of-the-admin}}
contexts:
- name: node@local
  context: {{cluster: local, user: node}}
- name: admin@other
  context: {{cluster: other, user: admin}}
current-context: node@local
"
            ),
        )
        .unwrap();
        path
    }

    #[test]
    fn the_copy_holds_one_context_with_absolute_paths_and_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("pki")).unwrap();
        for file in ["ca.crt", "node.crt", "node.key"] {
            fs::write(dir.path().join("pki").join(file), "pem").unwrap();
        }
        let path = kubeconfig(dir.path(), "pki/node.key");
        let made = read(&path, None).unwrap();
        assert_eq!(made.context, "node@local");
        let text = String::from_utf8(made.text.clone()).unwrap();
        assert!(!text.contains("secret-of-the-admin"), "{text}");
        let back = Kubeconfig::from_yaml(&text).unwrap();
        assert_eq!(back.contexts.len(), 1);
        assert_eq!(back.current_context.as_deref(), Some("node@local"));
        let cluster = back.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(
            cluster.certificate_authority.as_deref(),
            Some(dir.path().join("pki/ca.crt").to_str().unwrap())
        );
        let user = back.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(
            user.client_key.as_deref(),
            Some(dir.path().join("pki/node.key").to_str().unwrap())
        );
    }

    #[test]
    fn a_missing_context_or_file_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = kubeconfig(dir.path(), "/nonexistent/node.key");
        let missing = read(&path, Some("nowhere")).err().unwrap();
        assert!(
            missing.msg.contains("no context \"nowhere\"")
                && missing.msg.contains("ipam.store.context")
                && missing.msg.contains("node@local, admin@other"),
            "{}",
            missing.msg
        );
        let unreadable = read(&path, None).err().unwrap();
        assert!(
            unreadable.msg.contains("certificate-authority")
                && unreadable
                    .msg
                    .contains(&dir.path().join("pki/ca.crt").display().to_string()),
            "{}",
            unreadable.msg
        );
    }

    #[test]
    fn only_a_kubernetes_store_takes_the_option_and_gets_the_copy() {
        let copy = copy_path(Path::new("/etc/cni/net.d"), "00-wasm-ipam.conflist");
        assert_eq!(copy, Path::new("/etc/cni/net.d/00-wasm-ipam.kubeconfig"));
        let given = Some(Path::new("/var/lib/kubelet/kubeconfig"));
        let mut ipam = serde_json::json!({"store": {"type": "kubernetes"}});
        point_store_at(&mut ipam, given, "--ipam-config k.json", &copy).unwrap();
        assert_eq!(
            ipam["store"]["kubeconfig"],
            "/etc/cni/net.d/00-wasm-ipam.kubeconfig"
        );
        for (mut ipam, says) in [
            (serde_json::json!({}), "the embedded store"),
            (serde_json::json!({"store": {"type": "etcd"}}), "is etcd"),
            (
                serde_json::json!({"store": {"type": "kubernetes", "kubeconfig": "/k"}}),
                "which install writes itself with --kubeconfig",
            ),
        ] {
            let e = point_store_at(&mut ipam, given, "--ipam-config k.json", &copy)
                .err()
                .unwrap();
            assert!(e.msg.contains(says), "{}", e.msg);
        }
        let mut bare = serde_json::json!({"store": {"type": "kubernetes"}});
        let e = point_store_at(&mut bare, None, "--ipam-config k.json", &copy)
            .err()
            .unwrap();
        assert!(e.msg.contains("pass --kubeconfig FILE"), "{}", e.msg);
    }
}
