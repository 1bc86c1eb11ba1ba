//! A real kube-apiserver with an etcd of its own, on loopback, for the scenario on the
//! Kubernetes store: the peers scripts/kube-peers.sh builds (the versions the node
//! tests run), started as tests/integration/kube_api.rs starts them (openssl
//! certificates from a CA made here, a service-account key pair, RBAC and the Node
//! authorizer, no anonymous requests), and kubeconfigs for the admin and for a node.
//! Unlike the tests' instance, its etcd keeps its default fsync, as the etcd store's
//! member does: the two stores' commits wait on the same kind of disk write.
//!
//! Cleanup does not rely on the driver ending well: a small supervisor (a `bash`
//! script, its own process group) starts etcd and the apiserver as its children and
//! reads commands from a pipe whose writing end only the driver holds. When that pipe
//! reaches EOF (the instance was dropped, or the driver ended however it did, SIGKILL
//! included), the supervisor kills both, reaps them and removes the directory.

use serde_json::{Value, json};
use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// How long the apiserver may take to answer `/readyz` on a loaded 2-core machine.
const READY_LIMIT: Duration = Duration::from_secs(120);
/// How long its etcd may take to answer `/health`.
const ETCD_LIMIT: Duration = Duration::from_secs(60);
/// The Service range the apiserver is given (it needs one; nothing here allocates).
const SERVICE_RANGE: &str = "10.96.0.0/16";

/// The supervisor: `$1` is the instance's directory. It reads `start NAME` lines, runs
/// the command whose arguments `DIR/NAME.args` holds (each ended by a NUL), stdin from
/// /dev/null, stdout and stderr appended to `DIR/NAME.log`, and answers its pid. At
/// EOF (or on SIGTERM, which ends the `read`) it SIGKILLs every command it runs, reaps
/// them and removes `DIR`. It ignores SIGINT and SIGHUP, which a terminal sends to a
/// whole session, and SIGPIPE, so an answer to a driver that is gone does not end it
/// before it cleans up; its commands get the default dispositions back.
const SUPERVISOR: &str = r#"
set -u
dir=$1
trap '' INT HUP PIPE
trap ':' TERM
pids=()
while read -r verb name; do
  if [ "$verb" = start ]; then
    mapfile -d '' -t argv <"$dir/$name.args"
    ( trap - INT HUP PIPE TERM; exec "${argv[@]}" ) </dev/null >>"$dir/$name.log" 2>&1 &
    pids+=("$!")
    echo "$!"
  fi
done
for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
wait
rm -rf "$dir"
"#;

/// The audit policy of [`KubeApi::start_audited`]: every request at level Metadata,
/// one event per request (the stage when it was answered; a request's arrival is in
/// the event as `requestReceivedTimestamp`).
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted]
rules:
- level: Metadata
";

/// One request the apiserver answered, from its audit log.
#[derive(Clone, Debug)]
pub struct AuditEvent {
    /// The authenticated user, e.g. `system:node:bench-node`.
    pub user: String,
    /// `get`, `list`, `create`, `update`, `patch`, `delete`, `watch`, ...
    pub verb: String,
    /// The resource asked for (empty for a non-resource URL such as `/readyz`).
    pub resource: String,
    /// When the request arrived, by the apiserver's clock (this machine's).
    pub received: SystemTime,
}

/// The directory holding `etcd`, `kube-apiserver` and `kubectl`: scripts/kube-peers.sh
/// (cached, it only checks its files; otherwise it builds them, which takes minutes).
pub fn peers() -> io::Result<PathBuf> {
    let dir = crate::setup::script_dir("scripts/kube-peers.sh")?;
    match ["etcd", "kube-apiserver", "kubectl"]
        .iter()
        .find(|peer| !dir.join(peer).is_file())
    {
        Some(peer) => Err(io::Error::other(format!(
            "scripts/kube-peers.sh printed {}, which holds no {peer}",
            dir.display()
        ))),
        None => Ok(dir),
    }
}

/// A port nobody listens on now. Another process may take it before ours binds it: a
/// start that fails that way is retried on fresh ports.
fn free_port() -> io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Whether process `pid` runs (a zombie is dead).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        !stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'))
    })
}

/// The last `lines` lines of `path` (or why there are none).
fn tail(path: &Path, lines: usize) -> String {
    match std::fs::read(path) {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            all[all.len().saturating_sub(lines)..].join("\n")
        }
        Err(e) => format!("({}: {e})", path.display()),
    }
}

/// `NAME=PATH`, a flag naming a path (which need not be UTF-8).
fn flag(name: &str, path: impl AsRef<Path>) -> OsString {
    let mut flag = OsString::from(name);
    flag.push(path.as_ref());
    flag
}

/// `openssl ARGS` in `dir`; its stderr is the error if it fails.
fn openssl(dir: &Path, args: &[&str]) -> io::Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()?;
    match out.status.success() {
        true => Ok(()),
        false => Err(io::Error::other(format!(
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        ))),
    }
}

/// An openssl `-subj` value: `/O=group/.../CN=name`, `/` and `\` escaped.
fn subject(common_name: &str, organizations: &[&str]) -> String {
    let escape = |s: &str| s.replace('\\', "\\\\").replace('/', "\\/");
    let mut subject: String = organizations
        .iter()
        .map(|o| format!("/O={}", escape(o)))
        .collect();
    subject.push_str(&format!("/CN={}", escape(common_name)));
    subject
}

/// Starts the supervisor (`SUPERVISOR`) over `dir`, logging to its
/// `supervisor.log`, its stdin and stdout piped for commands and answers.
fn spawn_supervisor(dir: &Path) -> io::Result<Child> {
    std::fs::File::create(dir.join("supervisor.log")).and_then(|log| {
        Command::new("bash")
            .arg("-c")
            .arg(SUPERVISOR)
            .arg("kube-api-supervisor")
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            // Its own process group, so a Ctrl-C for the driver (which signals its
            // group) does not reach it: it outlives the driver to clean up.
            .process_group(0)
            .spawn()
    })
}

/// One kube-apiserver and its etcd on loopback, with the certificates and kubeconfigs
/// to speak to it as the admin or as a node.
pub struct KubeApi {
    /// Certificates (`pki/`), kubeconfigs, etcd's data and every log; the supervisor
    /// removes it.
    dir: PathBuf,
    peers: PathBuf,
    port: u16,
    supervisor: Child,
    /// Commands to the supervisor; dropping it is what makes the supervisor clean up.
    commands: Option<ChildStdin>,
    answers: BufReader<ChildStdout>,
    etcd: u32,
    apiserver: u32,
    /// Serial numbers of the certificates the CA signs.
    serial: u64,
}

impl KubeApi {
    /// Starts etcd and the apiserver and waits until the apiserver is ready; a port
    /// taken by someone else before the bind is retried on fresh ports.
    pub fn start() -> io::Result<KubeApi> {
        KubeApi::start_with(false)
    }

    /// [`KubeApi::start`], with the apiserver writing an audit log: one line per
    /// request answered, at level Metadata (who, what, when; no bodies), read back by
    /// [`KubeApi::audit_events`]. It counts every client's requests the same way,
    /// whatever the client logs of its own.
    pub fn start_audited() -> io::Result<KubeApi> {
        KubeApi::start_with(true)
    }

    fn start_with(audit: bool) -> io::Result<KubeApi> {
        let peers = peers()?;
        let mut attempt = 1;
        loop {
            match KubeApi::try_start(&peers, audit) {
                Err(e) if e.to_string().contains("address already in use") && attempt < 3 => {
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    fn try_start(peers: &Path, audit: bool) -> io::Result<KubeApi> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let started = Instant::now();
        let dir = std::env::temp_dir().join(format!(
            "wasm-ipam-bench-{}-kube-api-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(dir.join("pki"))?;
        let mut supervisor = match spawn_supervisor(&dir) {
            Ok(child) => child,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        let commands = supervisor.stdin.take();
        let answers = BufReader::new(supervisor.stdout.take().expect("piped"));
        // From here, dropping `api` on an error kills what runs and removes the dir.
        let mut api = KubeApi {
            dir,
            peers: peers.to_path_buf(),
            port: free_port()?,
            supervisor,
            commands,
            answers,
            etcd: 0,
            apiserver: 0,
            serial: 2,
        };
        let (client, peer) = (free_port()?, free_port()?);
        api.certificates()?;
        let pki = api.dir.join("pki");
        api.write_kubeconfig(
            "admin",
            json!({
                "client-certificate": pki.join("admin.crt"),
                "client-key": pki.join("admin.key"),
            }),
        )?;
        let client_url = api.start_etcd(client, peer)?;
        api.start_apiserver(&client_url, audit)?;
        eprintln!(
            "  kube-apiserver on {} ready in {:.1} s",
            api.url(),
            started.elapsed().as_secs_f64()
        );
        Ok(api)
    }

    /// Starts etcd on loopback ports `client` and `peer`, with its data in the dir,
    /// and waits until it answers; its client URL.
    fn start_etcd(&mut self, client: u16, peer: u16) -> io::Result<String> {
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let etcd_args: Vec<OsString> = vec![
            self.peers.join("etcd").into(),
            "--name=kube-api".into(),
            flag("--data-dir=", self.dir.join("etcd")),
            format!("--listen-client-urls={client_url}").into(),
            format!("--advertise-client-urls={client_url}").into(),
            format!("--listen-peer-urls={peer_url}").into(),
            format!("--initial-advertise-peer-urls={peer_url}").into(),
            format!("--initial-cluster=kube-api={peer_url}").into(),
            "--log-level=warn".into(),
        ];
        self.etcd = self.run("etcd", &etcd_args)?;
        self.wait_etcd(client)?;
        Ok(client_url)
    }

    /// Starts the apiserver on etcd at `client_url`, with the certificates of the
    /// dir's `pki/` and, when `audit`, its audit log; waits until it is ready.
    fn start_apiserver(&mut self, client_url: &str, audit: bool) -> io::Result<()> {
        let pki = self.dir.join("pki");
        let path = |name: &str| pki.join(name);
        let mut apiserver_args: Vec<OsString> = vec![
            self.peers.join("kube-apiserver").into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={}", self.port).into(),
            format!("--etcd-servers={client_url}").into(),
            flag("--tls-cert-file=", path("apiserver.crt")),
            flag("--tls-private-key-file=", path("apiserver.key")),
            flag("--client-ca-file=", path("ca.crt")),
            "--anonymous-auth=false".into(),
            "--authorization-mode=Node,RBAC".into(),
            "--enable-admission-plugins=NodeRestriction".into(),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            flag("--service-account-key-file=", path("sa.pub")),
            flag("--service-account-signing-key-file=", path("sa.key")),
            format!("--service-cluster-ip-range={SERVICE_RANGE}").into(),
            // The `kubernetes` Service's endpoints: a loopback address is no valid
            // endpoint, and nothing here uses it.
            "--endpoint-reconciler-type=none".into(),
            // Unused (the serving certificate is given); not /var/run/kubernetes.
            flag("--cert-dir=", &pki),
        ];
        if audit {
            std::fs::write(self.dir.join("audit-policy.yaml"), AUDIT_POLICY)?;
            apiserver_args.extend([
                flag("--audit-policy-file=", self.dir.join("audit-policy.yaml")),
                flag("--audit-log-path=", self.audit_log()),
                // Each event written before the request's handler returns, so a
                // call's requests are all in the file once the call has exited.
                "--audit-log-mode=blocking".into(),
                "--audit-log-maxsize=0".into(),
            ]);
        }
        self.apiserver = self.run("kube-apiserver", &apiserver_args)?;
        self.wait_ready()
    }

    /// The CA, the apiserver's serving certificate (for 127.0.0.1 and localhost), the
    /// admin's client certificate (group system:masters) and the service-account key
    /// pair; P-256 keys, which openssl makes in a moment.
    fn certificates(&mut self) -> io::Result<()> {
        let pki = self.dir.join("pki");
        openssl(
            &pki,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=wasm-ipam-bench-ca",
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
            ],
        )?;
        self.issue(
            "apiserver",
            "/CN=kube-apiserver",
            "serverAuth",
            Some("IP:127.0.0.1,DNS:localhost"),
        )?;
        self.issue(
            "admin",
            &subject("wasm-ipam-bench-admin", &["system:masters"]),
            "clientAuth",
            None,
        )?;
        openssl(
            &pki,
            &[
                "genpkey",
                "-algorithm",
                "EC",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-out",
                "sa.key",
            ],
        )?;
        openssl(
            &pki,
            &["pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub"],
        )
    }

    /// `pki/NAME.key` and `pki/NAME.crt`, signed by the CA, for `subject`, for `usage`
    /// (serverAuth or clientAuth), with these subjectAltNames.
    fn issue(
        &mut self,
        name: &str,
        subject: &str,
        usage: &str,
        sans: Option<&str>,
    ) -> io::Result<()> {
        let pki = self.dir.join("pki");
        let mut ext = format!(
            "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage={usage}\n"
        );
        if let Some(sans) = sans {
            ext.push_str(&format!("subjectAltName={sans}\n"));
        }
        let (key, csr, crt, extfile) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.crt"),
            format!("{name}.ext"),
        );
        std::fs::write(pki.join(&extfile), ext)?;
        openssl(
            &pki,
            &[
                "req",
                "-new",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-subj",
                subject,
                "-keyout",
                &key,
                "-out",
                &csr,
            ],
        )?;
        self.serial += 1;
        openssl(
            &pki,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-set_serial",
                &self.serial.to_string(),
                "-days",
                "2",
                "-extfile",
                &extfile,
                "-out",
                &crt,
            ],
        )
    }

    /// Writes `NAME.kubeconfig` in the instance's directory: this apiserver, verified
    /// against the CA, as `user` (a kubeconfig's user entry). JSON, which kubectl,
    /// client-go and kube-rs read as YAML.
    fn write_kubeconfig(&self, name: &str, user: Value) -> io::Result<PathBuf> {
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "bench", "cluster": {"server": self.url(), "certificate-authority": self.dir.join("pki/ca.crt")}}],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": name}}],
            "current-context": "bench",
        });
        let path = self.dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&path, config.to_string())?;
        Ok(path)
    }

    /// Has the supervisor run `args` as NAME; answers its pid.
    fn run(&mut self, name: &str, args: &[OsString]) -> io::Result<u32> {
        let mut file = Vec::new();
        for arg in args {
            file.extend_from_slice(arg.as_bytes());
            file.push(0);
        }
        std::fs::write(self.dir.join(format!("{name}.args")), file)?;
        let commands = self.commands.as_mut().expect("the supervisor runs");
        writeln!(commands, "start {name}")?;
        commands.flush()?;
        let mut answer = String::new();
        self.answers.read_line(&mut answer)?;
        answer.trim().parse().map_err(|_| {
            io::Error::other(format!(
                "the supervisor answered no pid for {name}: {}",
                tail(&self.dir.join("supervisor.log"), 20)
            ))
        })
    }

    /// Waits until etcd answers its /health (a plain HTTP GET on its client port).
    fn wait_etcd(&self, client: u16) -> io::Result<()> {
        let started = Instant::now();
        loop {
            let healthy = TcpStream::connect(("127.0.0.1", client))
                .and_then(|mut s| {
                    s.set_read_timeout(Some(Duration::from_secs(5)))?;
                    s.write_all(b"GET /health HTTP/1.0\r\n\r\n")?;
                    let mut reply = String::new();
                    s.read_to_string(&mut reply)?;
                    Ok(reply.contains(r#""health":"true""#))
                })
                .unwrap_or(false);
            if healthy {
                return Ok(());
            }
            let why = if !alive(self.etcd) {
                "exited"
            } else if started.elapsed() > ETCD_LIMIT {
                "did not answer in time"
            } else {
                std::thread::sleep(Duration::from_millis(100));
                continue;
            };
            return Err(io::Error::other(format!(
                "the apiserver's etcd {why}; the end of its log:\n{}",
                tail(&self.dir.join("etcd.log"), 30)
            )));
        }
    }

    /// Waits until `kubectl get --raw /readyz` says ok; fails at once, with the logs'
    /// end, if etcd or the apiserver exits.
    fn wait_ready(&self) -> io::Result<()> {
        let started = Instant::now();
        loop {
            let out = self.kubectl(&["--request-timeout=5s", "get", "--raw", "/readyz"])?;
            if out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok" {
                return Ok(());
            }
            for (name, pid) in [("kube-apiserver", self.apiserver), ("etcd", self.etcd)] {
                if !alive(pid) {
                    return Err(io::Error::other(format!(
                        "{name} exited; the end of its log:\n{}",
                        tail(&self.dir.join(format!("{name}.log")), 40)
                    )));
                }
            }
            if started.elapsed() > READY_LIMIT {
                return Err(io::Error::other(format!(
                    "the apiserver was not ready in {} s (kubectl: {}); the end of its log:\n{}",
                    READY_LIMIT.as_secs(),
                    String::from_utf8_lossy(&out.stderr).trim(),
                    tail(&self.dir.join("kube-apiserver.log"), 40)
                )));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The peer binary `name` (e.g. `etcd`) this instance runs.
    pub fn peer(&self, name: &str) -> PathBuf {
        self.peers.join(name)
    }

    /// The apiserver's address, `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// A kubeconfig as the cluster's admin (a client certificate in system:masters).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    /// A kubeconfig as node `node`'s kubelet is: a client certificate with
    /// CN=system:node:NODE and O=system:nodes, signed by the CA.
    pub fn node_kubeconfig(&mut self, node: &str) -> io::Result<PathBuf> {
        self.client_kubeconfig(
            &format!("node-{node}"),
            &format!("system:node:{node}"),
            &["system:nodes"],
        )
    }

    /// A kubeconfig `NAME.kubeconfig` as `user` in `groups`: a client certificate
    /// with CN=user and an O for each group, signed by the CA.
    pub fn client_kubeconfig(
        &mut self,
        name: &str,
        user: &str,
        groups: &[&str],
    ) -> io::Result<PathBuf> {
        self.issue(name, &subject(user, groups), "clientAuth", None)?;
        let pki = self.dir.join("pki");
        self.write_kubeconfig(
            name,
            json!({
                "client-certificate": pki.join(format!("{name}.crt")),
                "client-key": pki.join(format!("{name}.key")),
            }),
        )
    }

    fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.log")
    }

    /// Every request the apiserver has answered so far, in the order it logged them;
    /// empty unless started by [`KubeApi::start_audited`].
    pub fn audit_events(&self) -> io::Result<Vec<AuditEvent>> {
        let text = match std::fs::read_to_string(self.audit_log()) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            read => read?,
        };
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|line| {
                let event: Value = serde_json::from_str(line).map_err(|e| {
                    io::Error::other(format!(
                        "the audit log holds a line that is not JSON ({e}): {line}"
                    ))
                })?;
                let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
                let received = humantime::parse_rfc3339(
                    event["requestReceivedTimestamp"]
                        .as_str()
                        .unwrap_or_default(),
                )
                .map_err(|e| io::Error::other(format!("an audit event's time: {e}: {line}")))?;
                Ok(AuditEvent {
                    user: text(&event["user"]["username"]),
                    verb: text(&event["verb"]),
                    resource: text(&event["objectRef"]["resource"]),
                    received,
                })
            })
            .collect()
    }

    fn kubectl_command(&self, kubeconfig: &Path) -> Command {
        let mut command = Command::new(self.peers.join("kubectl"));
        command
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.join("kubectl-cache"));
        command
    }

    /// `kubectl ARGS` as the admin.
    pub fn kubectl(&self, args: &[&str]) -> io::Result<Output> {
        self.kubectl_with(&self.admin_kubeconfig(), args)
    }

    /// `kubectl ARGS` with `kubeconfig`.
    pub fn kubectl_with(&self, kubeconfig: &Path, args: &[&str]) -> io::Result<Output> {
        self.kubectl_command(kubeconfig)
            .args(args)
            .stdin(Stdio::null())
            .output()
    }

    /// `kubectl apply -f -` of `yaml` as the admin.
    pub fn apply(&self, yaml: &str) -> io::Result<()> {
        let mut child = self
            .kubectl_command(&self.admin_kubeconfig())
            .args(["apply", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        // Written whole before reading: kubectl reads all of stdin before it answers.
        // A write cut short (kubectl exited) shows in its status and stderr below.
        let _ = child
            .stdin
            .take()
            .expect("piped")
            .write_all(yaml.as_bytes());
        let out = child.wait_with_output()?;
        match out.status.success() {
            true => Ok(()),
            false => Err(io::Error::other(format!(
                "kubectl apply: {}",
                String::from_utf8_lossy(&out.stderr)
            ))),
        }
    }
}

impl Drop for KubeApi {
    /// Closes the supervisor's commands, so it kills etcd and the apiserver and removes
    /// the directory, and waits until it has.
    fn drop(&mut self) {
        drop(self.commands.take());
        let _ = self.supervisor.wait();
    }
}
