//! The requests the Kubernetes store sends, each bounded twice: by
//! `ipam.store.timeoutSeconds` (an apiserver stopped, frozen or answering 5xx costs a
//! call that long, then code 11, so the host-wide lock is freed for the node's other
//! networks) and by the call's post-lock budget (a token of the node's rate limiter,
//! a 429's `Retry-After`, that cannot come within what is left is code 11 at once).
//!
//! kube's client reads the kubeconfig (certificates, tokens, exec plugins) and speaks
//! HTTPS; its own retries are off, since only this layer knows the call's budget. The
//! client runs on a runtime thread of its own because the store is called from inside
//! the engine's runtime, which must not block on another.

use super::objects::{COLLECTION, PLURAL, Shard, ShardList};
use crate::config::KubernetesConfig;
use crate::error::{CniError, code, with_causes};
use crate::store::Figures;
use crate::store::rate::RateLimiter;
use http::{Method, Request, StatusCode};
use std::cell::RefCell;
use std::path::Path;
use std::time::{Duration, Instant};

/// The pause before sending a read again after a transient failure.
const RESEND_PAUSE: Duration = Duration::from_millis(200);
/// Objects per page of a list.
const PAGE: usize = 500;

/// The node's Kubernetes rate limiter's state, in `dataDir`.
pub const RATE_FILE: &str = "kubernetes-rate";

/// How an error ends when a write's answer never came (or was a 5xx): the caller
/// looks the write up, or the next call does.
const OUTCOME_UNKNOWN: &str = "the write's outcome is unknown; the next call finishes or undoes it";
const NOTHING_COMMITTED: &str = "nothing was committed";

pub struct Api {
    runtime: Option<tokio::runtime::Runtime>,
    client: kube::Client,
    kubeconfig: String,
    server: String,
    until: Instant,
    timeout: Duration,
    limiter: RefCell<RateLimiter>,
    pub figures: RefCell<Figures>,
    /// Writes answered so far, for the test suite's hooks ([`crate::test_hook`]).
    writes: std::cell::Cell<u64>,
    /// Whether the last request was answered (for CNI STATUS).
    pub reached: RefCell<Option<bool>>,
}

/// A write's outcome other than success.
pub enum WriteFailure {
    /// 409 (or 404 for an object a precondition named): another writer was first.
    Conflict,
    /// The write may have been applied but its answer was lost.
    Unknown(CniError),
    Failed(CniError),
}

impl From<CniError> for WriteFailure {
    fn from(e: CniError) -> Self {
        WriteFailure::Failed(e)
    }
}

struct Answer {
    status: StatusCode,
    body: Vec<u8>,
}

/// Why one try of a request failed before an answer came.
#[derive(Debug)]
enum TryFailure {
    /// No connection was made: the request never left.
    NotSent(String),
    /// Sent (or maybe sent) and no answer within the try's time.
    NoAnswer(String),
    /// The server's certificate or the client's own TLS setup was refused.
    Tls(String),
}

impl Api {
    /// Reads `config.kubeconfig` (every call: a rotated token or certificate is
    /// picked up by rewriting the file) and makes the client.
    pub fn open(
        config: &KubernetesConfig,
        data_dir: &Path,
        wait: Duration,
    ) -> Result<Self, CniError> {
        let until = Instant::now() + wait;
        let kubeconfig = config.kubeconfig.display().to_string();
        let read = kube::config::Kubeconfig::read_from(&config.kubeconfig).map_err(|e| {
            CniError::config(format!(
                "ipam.store.kubeconfig {kubeconfig}: cannot be read as a kubeconfig; point kubeconfig at a readable kubeconfig (docs/kubernetes-store.md, \"Credentials\")"
            ))
            .with_details(with_causes(&e))
        })?;
        let options = kube::config::KubeConfigOptions {
            context: config.context.clone(),
            ..Default::default()
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| {
                CniError::new(
                    code::IO_FAILURE,
                    "kubernetes: cannot start the client's runtime",
                )
                .with_details(e)
            })?;
        let timeout = config.timeout.min(wait);
        let mut client_config = runtime
            .block_on(kube::Config::from_custom_kubeconfig(read, &options))
            .map_err(|e| {
                let context = match &config.context {
                    Some(c) => format!(" (context {c:?})"),
                    None => String::new(),
                };
                CniError::config(format!(
                    "ipam.store.kubeconfig {kubeconfig}{context}: not a usable kubeconfig; check its current-context, cluster and user (kubectl --kubeconfig {kubeconfig} config view)"
                ))
                .with_details(with_causes(&e))
            })?;
        if client_config.accept_invalid_certs {
            return Err(CniError::config(format!(
                "ipam.store.kubeconfig {kubeconfig}: insecure-skip-tls-verify is set; the store refuses an apiserver whose certificate it cannot check: give the cluster's certificate-authority instead"
            )));
        }
        client_config.default_retry = false;
        client_config.connect_timeout = Some(timeout);
        client_config.read_timeout = Some(timeout);
        client_config.write_timeout = Some(timeout);
        let server = client_config.cluster_url.to_string();
        let client = {
            let _entered = runtime.enter();
            kube::Client::try_from(client_config).map_err(|e| {
                CniError::config(format!(
                    "ipam.store.kubeconfig {kubeconfig}: cannot make a client of it"
                ))
                .with_details(with_causes(&e))
            })?
        };
        let limiter =
            RateLimiter::open(data_dir, "kubernetes", RATE_FILE, config.qps, config.burst)?;
        Ok(Api {
            runtime: Some(runtime),
            client,
            kubeconfig,
            server,
            until,
            timeout,
            limiter: RefCell::new(limiter),
            figures: RefCell::new(Figures::default()),
            writes: std::cell::Cell::new(0),
            reached: RefCell::new(None),
        })
    }

    pub fn describe(&self) -> String {
        format!("Kubernetes store {} ({})", self.server, self.kubeconfig)
    }

    pub fn until(&self) -> Instant {
        self.until
    }

    pub fn get(&self, name: &str) -> Result<Option<Shard>, CniError> {
        let path = format!("{COLLECTION}/{name}");
        let answer = self.read(&format!("get {PLURAL}/{name}"), &path)?;
        match answer.status {
            StatusCode::NOT_FOUND => Ok(None),
            s if s.is_success() => self.decode(name, &answer.body).map(Some),
            _ => Err(self.refused("get", name, &answer)),
        }
    }

    /// Every object `selector` selects, page by page.
    pub fn list(&self, selector: &str) -> Result<Vec<Shard>, CniError> {
        let mut items = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let mut path = format!(
                "{COLLECTION}?labelSelector={}&limit={PAGE}",
                encode(selector)
            );
            if let Some(token) = &next {
                path.push_str(&format!("&continue={}", encode(token)));
            }
            let answer = self.read(&format!("list {PLURAL}"), &path)?;
            if !answer.status.is_success() {
                return Err(self.refused("list", PLURAL, &answer));
            }
            let page: ShardList = serde_json::from_slice(&answer.body).map_err(|e| {
                CniError::new(
                    code::STORE_FAILURE,
                    format!("kubernetes: unreadable list of {PLURAL}"),
                )
                .with_details(e)
            })?;
            items.extend(page.items);
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => next = Some(token),
                None => return Ok(items),
            }
        }
    }

    pub fn create(&self, shard: &Shard) -> Result<Shard, WriteFailure> {
        let body = serde_json::to_vec(shard).expect("serialisable");
        let name = &shard.metadata.name;
        let answer = self.write(Method::POST, COLLECTION, body, name)?;
        match answer.status {
            StatusCode::CONFLICT => Err(WriteFailure::Conflict),
            s if s.is_success() => Ok(self.decode(name, &answer.body)?),
            _ => Err(self.refused("create", name, &answer).into()),
        }
    }

    /// Replaces `shard` if it still has its `resourceVersion`.
    pub fn replace(&self, shard: &Shard) -> Result<Shard, WriteFailure> {
        let body = serde_json::to_vec(shard).expect("serialisable");
        let name = &shard.metadata.name;
        let path = format!("{COLLECTION}/{name}");
        let answer = self.write(Method::PUT, &path, body, name)?;
        match answer.status {
            StatusCode::CONFLICT | StatusCode::NOT_FOUND => Err(WriteFailure::Conflict),
            s if s.is_success() => Ok(self.decode(name, &answer.body)?),
            _ => Err(self.refused("update", name, &answer).into()),
        }
    }

    /// Deletes `name` if it still has `rv`.
    pub fn delete(&self, name: &str, rv: &str) -> Result<(), WriteFailure> {
        let body = serde_json::json!({
            "apiVersion": "v1", "kind": "DeleteOptions",
            "preconditions": {"resourceVersion": rv},
        });
        let path = format!("{COLLECTION}/{name}");
        let answer = self.write(Method::DELETE, &path, body.to_string().into_bytes(), name)?;
        match answer.status {
            StatusCode::CONFLICT | StatusCode::NOT_FOUND => Err(WriteFailure::Conflict),
            s if s.is_success() => Ok(()),
            _ => Err(self.refused("delete", name, &answer).into()),
        }
    }

    fn decode(&self, name: &str, body: &[u8]) -> Result<Shard, CniError> {
        serde_json::from_slice(body).map_err(|e| {
            CniError::new(
                code::STORE_FAILURE,
                format!(
                    "kubernetes: {PLURAL}/{name} does not hold what wasm-ipam writes (edited by hand?); look at it with kubectl get {PLURAL} {name} -o yaml"
                ),
            )
            .with_details(e)
        })
    }

    /// A read, sent again after a transient failure (a read changes nothing) until
    /// it is answered or its time runs out.
    fn read(&self, what: &str, path: &str) -> Result<Answer, CniError> {
        let bound = (Instant::now() + self.timeout).min(self.until);
        loop {
            let failure = match self.send(what, Method::GET, path, Vec::new(), bound)? {
                Ok(answer) if transient(answer.status) => {
                    self.wait_retry_after(what, &answer, bound)?;
                    continue;
                }
                Ok(answer) => return Ok(answer),
                Err(TryFailure::Tls(e)) => return Err(self.tls_refused(&e)),
                Err(TryFailure::NotSent(e) | TryFailure::NoAnswer(e)) => e,
            };
            let pause = RESEND_PAUSE.min(bound.saturating_duration_since(Instant::now()));
            std::thread::sleep(pause);
            if Instant::now() >= bound {
                return Err(self.gave_up(what, bound, false, &failure));
            }
        }
    }

    /// A write: sent again only when it surely never left or was refused unapplied
    /// (429, 503 before it was served); a write whose answer was lost is the caller's
    /// to look up.
    fn write(
        &self,
        method: Method,
        path: &str,
        body: Vec<u8>,
        name: &str,
    ) -> Result<Answer, WriteFailure> {
        let what = format!("{} {PLURAL}/{name}", method.as_str().to_lowercase());
        let bound = (Instant::now() + self.timeout).min(self.until);
        loop {
            match self.send(&what, method.clone(), path, body.clone(), bound)? {
                Ok(answer) if answer.status == StatusCode::TOO_MANY_REQUESTS => {
                    self.wait_retry_after(&what, &answer, bound)?;
                }
                // 5xx of a write: it may have been applied (a 504 after etcd took
                // it); the caller looks.
                Ok(answer) if transient(answer.status) => {
                    return Err(WriteFailure::Unknown(self.gave_up(
                        &what,
                        bound,
                        true,
                        &format!("HTTP {}: {}", answer.status, status_message(&answer.body)),
                    )));
                }
                Ok(answer) => {
                    self.writes.set(self.writes.get() + 1);
                    if crate::test_hook::after_write(self.writes.get())
                        == crate::test_hook::WriteHook::LoseAnswer
                    {
                        return Err(WriteFailure::Unknown(self.gave_up(
                            &what,
                            bound,
                            true,
                            "the answer was lost (WASM_IPAM_TEST_LOSE_ANSWER_OF_WRITE)",
                        )));
                    }
                    return Ok(answer);
                }
                Err(TryFailure::Tls(e)) => return Err(self.tls_refused(&e).into()),
                Err(TryFailure::NotSent(e)) => {
                    std::thread::sleep(
                        RESEND_PAUSE.min(bound.saturating_duration_since(Instant::now())),
                    );
                    if Instant::now() >= bound {
                        return Err(self.gave_up(&what, bound, false, &e).into());
                    }
                }
                Err(TryFailure::NoAnswer(e)) => {
                    return Err(WriteFailure::Unknown(self.gave_up(&what, bound, true, &e)));
                }
            }
        }
    }

    /// Waits out a 429's or 503's `Retry-After` (a short pause when it names none),
    /// counted with the rate limiter's waits in the call's figures; code 11 at once
    /// when the retry cannot come before `bound`.
    fn wait_retry_after(
        &self,
        what: &str,
        answer: &Answer,
        bound: Instant,
    ) -> Result<(), CniError> {
        let pause = retry_after_seconds(&answer.body).map_or(RESEND_PAUSE, Duration::from_secs);
        if Instant::now() + pause >= bound {
            return Err(self.gave_up(
                what,
                bound,
                false,
                &format!(
                    "HTTP {}: the apiserver asks to retry after {} s",
                    answer.status,
                    pause.as_secs()
                ),
            ));
        }
        std::thread::sleep(pause);
        self.figures.borrow_mut().rate_wait += pause;
        Ok(())
    }

    /// One try: the limiter's token, then the request, answered before `bound`.
    fn send(
        &self,
        what: &str,
        method: Method,
        path: &str,
        body: Vec<u8>,
        bound: Instant,
    ) -> Result<Result<Answer, TryFailure>, CniError> {
        let waited = self.limiter.borrow_mut().take(self.until, what)?;
        let left = bound.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Err(TryFailure::NoAnswer("no time left".into())));
        }
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json")
            .body(kube::client::Body::from(body))
            .expect("a valid request");
        let client = self.client.clone();
        let started = Instant::now();
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let runtime = self.runtime.as_ref().expect("taken only by drop");
        runtime.spawn(async move {
            let answered = tokio::time::timeout(left, async move {
                let response = client.send(request).await?;
                let status = response.status();
                let retry = response
                    .headers()
                    .get(http::header::RETRY_AFTER)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok());
                let body = response.into_body().collect_bytes().await?;
                Ok::<_, kube::Error>((status, retry, body.to_vec()))
            })
            .await;
            let _ = tx.send(answered);
        });
        let answer = rx.recv_timeout(left + Duration::from_millis(100));
        {
            let mut figures = self.figures.borrow_mut();
            figures.requests += 1;
            figures.time += started.elapsed();
            figures.rate_wait += waited;
        }
        let result = match answer {
            Ok(Ok(Ok((status, retry, mut body)))) => {
                if let Some(seconds) = retry
                    && retry_after_seconds(&body).is_none()
                {
                    // Keep the header's pause where retry_after_seconds finds it.
                    body = serde_json::json!({"details": {"retryAfterSeconds": seconds}})
                        .to_string()
                        .into_bytes();
                }
                Ok(Answer { status, body })
            }
            Ok(Ok(Err(e))) => Err(classify(&e)),
            Ok(Err(_)) | Err(_) => Err(TryFailure::NoAnswer(format!(
                "no answer within {:.1} s",
                left.as_secs_f64()
            ))),
        };
        tracing::debug!(
            target: "store",
            "kubernetes: {what}: {} after {:.1} ms",
            match &result {
                Ok(answer) => answer.status.to_string(),
                Err(e) => format!("{e:?}"),
            },
            started.elapsed().as_secs_f64() * 1000.0
        );
        let reached = matches!(&result, Ok(a) if !transient(a.status));
        if reached {
            crate::store::silence::answered();
        }
        *self.reached.borrow_mut() = Some(reached);
        Ok(result)
    }

    /// A failed write's error once the caller looked and found the write not applied.
    pub fn not_applied(e: CniError) -> CniError {
        match e.msg.strip_suffix(OUTCOME_UNKNOWN) {
            Some(head) => CniError {
                msg: format!(
                    "{head}{NOTHING_COMMITTED} (the write was looked up and had not landed)"
                ),
                ..e
            },
            None => e,
        }
    }

    fn gave_up(&self, what: &str, bound: Instant, unknown: bool, last: &str) -> CniError {
        let server = &self.server;
        // Only a failure that took the whole bound is remembered: one answered at once
        // (a 500 of a write) costs the calls behind it nothing.
        if bound < self.until && Instant::now() >= bound {
            crate::store::silence::silent();
        }
        let waited = match (last.strip_prefix("HTTP "), bound >= self.until) {
            (Some(answered), _) if Instant::now() >= bound => format!(
                "the apiserver answered {what} with HTTP {answered} until ipam.store.timeoutSeconds ({} s) ran out ({server})",
                self.timeout.as_secs_f64()
            ),
            (Some(answered), _) => {
                format!("the apiserver answered {what} with HTTP {answered} ({server})")
            }
            (None, true) => format!("the call's budget ran out waiting for {what} ({server})"),
            (None, false) => format!(
                "the apiserver did not answer {what} within ipam.store.timeoutSeconds ({} s) ({server})",
                self.timeout.as_secs_f64()
            ),
        };
        let outcome = match unknown {
            true => OUTCOME_UNKNOWN,
            false => NOTHING_COMMITTED,
        };
        CniError::new(
            code::TRY_AGAIN_LATER,
            format!("kubernetes: {waited}; {outcome}"),
        )
        .with_details(last.to_string())
    }

    /// An answer that is neither success nor a conflict: 401 and 403 name what to
    /// fix; anything else is the apiserver's refusal, with its message.
    fn refused(&self, verb: &str, name: &str, answer: &Answer) -> CniError {
        let message = status_message(&answer.body);
        let kubeconfig = &self.kubeconfig;
        match answer.status {
            StatusCode::UNAUTHORIZED => CniError::new(
                code::STORE_FAILURE,
                format!(
                    "kubernetes: the apiserver {} does not accept the credentials of ipam.store.kubeconfig {kubeconfig} (401 Unauthorized): its token or client certificate is unknown or expired; write the node's kubeconfig anew (docs/kubernetes-store.md, \"Credentials\")",
                    self.server
                ),
            ),
            StatusCode::FORBIDDEN => CniError::new(
                code::STORE_FAILURE,
                format!(
                    "kubernetes: the identity of ipam.store.kubeconfig {kubeconfig} may not {verb} {PLURAL}.{} (403 Forbidden); as a cluster admin, apply the RBAC that `wasm-ipam kubernetes manifests` prints, with its CRD if the cluster has none yet (a 403 comes before the apiserver looks for the resource): wasm-ipam kubernetes manifests | kubectl apply -f -",
                    super::objects::GROUP
                ),
            ),
            StatusCode::NOT_FOUND if name == PLURAL => CniError::new(
                code::STORE_FAILURE,
                format!(
                    "kubernetes: the apiserver {} does not serve {PLURAL}.{}: apply the CRD first (wasm-ipam kubernetes manifests | kubectl apply -f -)",
                    self.server,
                    super::objects::GROUP
                ),
            ),
            StatusCode::UNPROCESSABLE_ENTITY => CniError::new(
                code::STORE_FAILURE,
                format!(
                    "kubernetes: the apiserver refused to {verb} {PLURAL}/{name} (422 Invalid): {message}; nothing was committed"
                ),
            ),
            status => CniError::new(
                code::STORE_FAILURE,
                format!("kubernetes: {verb} {PLURAL}/{name} answered {status}: {message}"),
            ),
        }
        .with_details(message)
    }

    fn tls_refused(&self, detail: &str) -> CniError {
        CniError::new(
            code::STORE_FAILURE,
            format!(
                "kubernetes: the apiserver {}'s certificate is not signed by the certificate-authority of ipam.store.kubeconfig {} (or TLS failed); the store never talks to an apiserver it cannot check: fix the kubeconfig's certificate-authority",
                self.server, self.kubeconfig
            ),
        )
        .with_details(detail.to_string())
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// Answers worth sending a read again for: the apiserver overloaded or between its
/// etcd and us.
fn transient(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS
            | StatusCode::INTERNAL_SERVER_ERROR
            | StatusCode::BAD_GATEWAY
            | StatusCode::SERVICE_UNAVAILABLE
            | StatusCode::GATEWAY_TIMEOUT
    )
}

fn classify(e: &kube::Error) -> TryFailure {
    let text = with_causes(e);
    let lower = text.to_lowercase();
    if lower.contains("certificate") || lower.contains("unknownissuer") || lower.contains("tls") {
        TryFailure::Tls(text)
    } else if lower.contains("connection refused")
        || lower.contains("tcp connect error")
        || lower.contains("dns error")
    {
        TryFailure::NotSent(text)
    } else {
        TryFailure::NoAnswer(text)
    }
}

/// The `message` of a `Status` answer, or the body as text.
fn status_message(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(String::from))
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(300).collect())
}

/// A `Status` answer's `details.retryAfterSeconds` (or the `Retry-After` header put
/// there by [`Api::send`]).
fn retry_after_seconds(body: &[u8]) -> Option<u64> {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()?
        .pointer("/details/retryAfterSeconds")?
        .as_u64()
}

/// Percent-encodes a query value.
fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
