//! A CRI v1 client as kubelet is one: gRPC over the runtime's Unix socket, one
//! connection shared by every caller, each request with a deadline. Blocking methods
//! over a tokio runtime, so plain threads can call it at once, as kubelet's pod
//! workers do.

use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    ImageSpec, ImageStatusRequest, ListPodSandboxRequest, PodSandbox, PodSandboxConfig,
    PodSandboxStatusRequest, RemovePodSandboxRequest, RunPodSandboxRequest, StatusRequest,
    StatusResponse, StopPodSandboxRequest, VersionRequest, VersionResponse,
};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::transport::{Channel, Endpoint, Uri};

/// kubelet's default `--runtime-request-timeout`.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);

pub struct Cri {
    runtime: tokio::runtime::Runtime,
    channel: Channel,
}

impl Cri {
    /// A client of the runtime listening on `socket`; it connects on first use and
    /// again after a failed connection (the socket may not exist yet).
    pub fn new(socket: &Path) -> Self {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let socket: PathBuf = socket.to_path_buf();
        let channel = {
            let _context = runtime.enter();
            // The URI is a placeholder: the connector below ignores it.
            Endpoint::from_static("http://[::]:50051")
                .connect_timeout(Duration::from_secs(10))
                .connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                    let socket = socket.clone();
                    async move {
                        let stream = tokio::net::UnixStream::connect(socket).await?;
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
                    }
                }))
        };
        Cri { runtime, channel }
    }

    fn runtime_service(&self) -> RuntimeServiceClient<Channel> {
        RuntimeServiceClient::new(self.channel.clone())
    }

    fn image_service(&self) -> ImageServiceClient<Channel> {
        ImageServiceClient::new(self.channel.clone())
    }

    /// `message` as a request whose deadline (`grpc-timeout`) is `timeout`: the client
    /// gives up then, and the runtime's context for the call is cancelled.
    fn request<T>(message: T, timeout: Duration) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.set_timeout(timeout);
        request
    }

    pub fn version(&self, timeout: Duration) -> Result<VersionResponse, tonic::Status> {
        let request = Self::request(VersionRequest::default(), timeout);
        self.runtime
            .block_on(self.runtime_service().version(request))
            .map(tonic::Response::into_inner)
    }

    pub fn status(&self) -> Result<StatusResponse, tonic::Status> {
        let request = Self::request(StatusRequest { verbose: false }, REQUEST_TIMEOUT);
        self.runtime
            .block_on(self.runtime_service().status(request))
            .map(tonic::Response::into_inner)
    }

    /// Whether the runtime's image service knows `image` (by name).
    pub fn has_image(&self, image: &str) -> Result<bool, tonic::Status> {
        let request = Self::request(
            ImageStatusRequest {
                image: Some(ImageSpec {
                    image: image.to_string(),
                    ..Default::default()
                }),
                verbose: false,
            },
            REQUEST_TIMEOUT,
        );
        self.runtime
            .block_on(self.image_service().image_status(request))
            .map(|reply| reply.into_inner().image.is_some())
    }

    /// Runs a pod sandbox; its id.
    pub fn run_pod_sandbox(
        &self,
        config: PodSandboxConfig,
        timeout: Duration,
    ) -> Result<String, tonic::Status> {
        let request = Self::request(
            RunPodSandboxRequest {
                config: Some(config),
                runtime_handler: String::new(),
            },
            timeout,
        );
        self.runtime
            .block_on(self.runtime_service().run_pod_sandbox(request))
            .map(|reply| reply.into_inner().pod_sandbox_id)
    }

    /// The sandbox's IP as the runtime reports it (`PodSandboxStatus` network.ip).
    pub fn pod_ip(&self, sandbox_id: &str) -> Result<String, tonic::Status> {
        let request = Self::request(
            PodSandboxStatusRequest {
                pod_sandbox_id: sandbox_id.to_string(),
                verbose: false,
            },
            REQUEST_TIMEOUT,
        );
        self.runtime
            .block_on(self.runtime_service().pod_sandbox_status(request))
            .map(|reply| {
                reply
                    .into_inner()
                    .status
                    .and_then(|status| status.network)
                    .map(|network| network.ip)
                    .unwrap_or_default()
            })
    }

    pub fn stop_pod_sandbox(&self, sandbox_id: &str) -> Result<(), tonic::Status> {
        let request = Self::request(
            StopPodSandboxRequest {
                pod_sandbox_id: sandbox_id.to_string(),
            },
            REQUEST_TIMEOUT,
        );
        self.runtime
            .block_on(self.runtime_service().stop_pod_sandbox(request))
            .map(drop)
    }

    pub fn remove_pod_sandbox(&self, sandbox_id: &str) -> Result<(), tonic::Status> {
        let request = Self::request(
            RemovePodSandboxRequest {
                pod_sandbox_id: sandbox_id.to_string(),
            },
            REQUEST_TIMEOUT,
        );
        self.runtime
            .block_on(self.runtime_service().remove_pod_sandbox(request))
            .map(drop)
    }

    /// Every sandbox the runtime knows, in any state.
    pub fn list_pod_sandboxes(&self) -> Result<Vec<PodSandbox>, tonic::Status> {
        let request = Self::request(ListPodSandboxRequest { filter: None }, REQUEST_TIMEOUT);
        self.runtime
            .block_on(self.runtime_service().list_pod_sandbox(request))
            .map(|reply| reply.into_inner().items)
    }
}
