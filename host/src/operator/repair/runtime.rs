//! What the container runtime knows is alive, for `gc`: the pod sandboxes it has,
//! asked over the CRI API as `crictl pods` asks (ListPodSandbox with no filter, so
//! every state: a NotReady sandbox still owns its address), or, for a runtime without
//! CRI (podman), a file of live container ids. A runtime that cannot be reached,
//! answers an error or runs out of time is an error: `gc` then releases nothing.

use crate::error::{CniError, code, with_causes};
use k8s_cri::v1::ListPodSandboxRequest;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::transport::{Endpoint, Uri};

/// Where the runtime is asked when neither `--runtime-endpoint` nor
/// `CONTAINER_RUNTIME_ENDPOINT` says: containerd's socket, then CRI-O's, as crictl
/// tries them.
pub const DEFAULT_ENDPOINTS: &[&str] = &[
    "unix:///run/containerd/containerd.sock",
    "unix:///run/crio/crio.sock",
];

/// The most live ids read from a `--valid-from` file (a node runs hundreds of pods).
const MAX_VALID_IDS: usize = 1 << 20;

/// Who says which containers are alive.
#[derive(Debug, Clone)]
pub enum Runtime {
    /// A CRI runtime's Unix socket.
    Cri(PathBuf),
    /// A file of live container ids, one per line (`podman ps -aq --no-trunc`).
    File(PathBuf),
}

impl Runtime {
    /// The CRI endpoint: `flag`, else `CONTAINER_RUNTIME_ENDPOINT`, else the first of
    /// [`DEFAULT_ENDPOINTS`] whose socket exists. Only `unix://` endpoints (or a bare
    /// socket path) are accepted: the runtime is on this node.
    pub fn cri(flag: Option<&str>) -> Result<Runtime, CniError> {
        let from_env = std::env::var("CONTAINER_RUNTIME_ENDPOINT")
            .ok()
            .filter(|e| !e.is_empty());
        let endpoint = match flag.map(str::to_string).or(from_env) {
            Some(endpoint) => endpoint,
            None => DEFAULT_ENDPOINTS
                .iter()
                .find(|e| Path::new(socket_path(e)).exists())
                .map(|e| e.to_string())
                .ok_or_else(|| {
                    CniError::config(format!(
                        "no container runtime socket found ({}): pass --runtime-endpoint, or --valid-from for a runtime without CRI",
                        DEFAULT_ENDPOINTS.join(", ")
                    ))
                })?,
        };
        if endpoint.contains("://") && !endpoint.starts_with("unix://") {
            return Err(CniError::config(format!(
                "--runtime-endpoint {endpoint}: only unix:// endpoints are supported (the runtime runs on this node)"
            )));
        }
        Ok(Runtime::Cri(PathBuf::from(socket_path(&endpoint))))
    }

    /// What an operator named: the file of live ids (`--valid-from`) when given, else
    /// the CRI runtime ([`Runtime::cri`]).
    pub fn chosen(valid_from: Option<&Path>, endpoint: Option<&str>) -> Result<Runtime, CniError> {
        match valid_from {
            Some(path) => Ok(Runtime::File(path.to_path_buf())),
            None => Runtime::cri(endpoint),
        }
    }

    /// The ids of every sandbox (or container) the runtime has, in any state.
    pub fn live(&self, timeout: Duration) -> Result<BTreeSet<String>, CniError> {
        match self {
            Runtime::Cri(socket) => list_pod_sandboxes(socket, timeout),
            Runtime::File(path) => read_ids(path),
        }
    }

    /// For messages: where the answer came from.
    pub fn describe(&self) -> String {
        match self {
            Runtime::Cri(socket) => format!("unix://{}", socket.display()),
            Runtime::File(path) => path.display().to_string(),
        }
    }
}

fn socket_path(endpoint: &str) -> &str {
    endpoint.strip_prefix("unix://").unwrap_or(endpoint)
}

fn runtime_error(socket: &Path, what: impl std::fmt::Display) -> CniError {
    CniError::new(
        code::TRY_AGAIN_LATER,
        format!(
            "cannot list the pod sandboxes of the runtime at unix://{}; nothing was released",
            socket.display()
        ),
    )
    .with_details(what.to_string())
}

/// ListPodSandbox over the runtime's socket, within `timeout` for connecting and
/// answering together.
fn list_pod_sandboxes(socket: &Path, timeout: Duration) -> Result<BTreeSet<String>, CniError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| runtime_error(socket, e))?;
    let path = socket.to_path_buf();
    let answer = runtime.block_on(async {
        tokio::time::timeout(timeout, async {
            // The URI is a placeholder: the connector dials the socket.
            let channel = Endpoint::from_static("http://[::]:50051")
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let path = path.clone();
                    async move {
                        let stream = tokio::net::UnixStream::connect(path).await?;
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                    }
                }))
                .await
                .map_err(|e| with_causes(&e))?;
            let mut request = tonic::Request::new(ListPodSandboxRequest { filter: None });
            request.set_timeout(timeout);
            RuntimeServiceClient::new(channel)
                .list_pod_sandbox(request)
                .await
                .map(tonic::Response::into_inner)
                .map_err(|status| format!("{}: {}", status.code(), status.message()))
        })
        .await
    });
    match answer {
        Ok(Ok(list)) => Ok(list.items.into_iter().map(|s| s.id).collect()),
        Ok(Err(e)) => Err(runtime_error(socket, e)),
        Err(_) => Err(runtime_error(
            socket,
            format!("no answer within {}", humantime::format_duration(timeout)),
        )),
    }
}

/// Ids one per line; blank lines and `#` comments skipped.
fn read_ids(path: &Path) -> Result<BTreeSet<String>, CniError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        CniError::new(
            code::IO_FAILURE,
            format!("cannot read {}; nothing was released", path.display()),
        )
        .with_details(e)
    })?;
    let ids: BTreeSet<String> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect();
    if ids.len() > MAX_VALID_IDS {
        return Err(CniError::config(format!(
            "{} lists more than {MAX_VALID_IDS} ids",
            path.display()
        )));
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_unix_sockets_from_the_flag_first() {
        match Runtime::cri(Some("unix:///tmp/x.sock")).unwrap() {
            Runtime::Cri(path) => assert_eq!(path, Path::new("/tmp/x.sock")),
            other => panic!("{other:?}"),
        }
        match Runtime::cri(Some("/tmp/y.sock")).unwrap() {
            Runtime::Cri(path) => assert_eq!(path, Path::new("/tmp/y.sock")),
            other => panic!("{other:?}"),
        }
        let err = Runtime::cri(Some("tcp://10.0.0.1:1234")).unwrap_err();
        assert!(err.msg.contains("only unix://"), "{err}");
    }

    #[test]
    fn an_unreachable_runtime_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let runtime = Runtime::Cri(dir.path().join("absent.sock"));
        let err = runtime.live(Duration::from_secs(5)).unwrap_err();
        assert_eq!(err.code, code::TRY_AGAIN_LATER, "{err}");
        assert!(err.msg.contains("nothing was released"), "{err}");
    }

    #[test]
    fn a_valid_from_file_lists_ids_one_per_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("live");
        std::fs::write(&path, "# podman ps -aq --no-trunc\nabc\n\n  def  \nabc\n").unwrap();
        let ids = Runtime::File(path).live(Duration::ZERO).unwrap();
        assert_eq!(ids, BTreeSet::from(["abc".to_string(), "def".to_string()]));
    }
}
