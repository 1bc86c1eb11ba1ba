//! A real kube-apiserver with an etcd of its own, on loopback, for tests that speak to
//! Kubernetes: the peers scripts/kube-peers.sh builds (the versions the node tests run),
//! started as scripts/kube-node.sh starts them (openssl certificates, a service-account
//! key pair, RBAC and the Node authorizer), without a node: no kubelet, no containerd,
//! no network namespace, so any test may use one.
//!
//! [`KubeApi::shared`] is one apiserver for the whole test binary, started on first
//! use; [`KubeApi::start`] is one of a test's own, which it may stop, freeze and
//! restart (outage tests).
//!
//! Cleanup does not rely on the test process ending well: each instance has a small
//! supervisor (a `bash` script, its own process group) that starts etcd and the
//! apiserver as its children and reads commands from a pipe whose writing end only
//! the test process holds. When that pipe reaches EOF (the instance was dropped, or
//! the process ended, however: a normal exit, a panic, a signal, SIGKILL), the
//! supervisor kills both, reaps them and removes the instance's directory.
//! Why not PR_SET_PDEATHSIG: it fires when the *thread* that spawned the child exits,
//! and a libtest test's thread ends with its test, while the shared apiserver must
//! outlive it. Why the supervisor is their parent rather than the test process: an
//! orphan here is reparented to a PID 1 that does not reap, so processes the test
//! process started would linger as zombies after it exited; the supervisor reaps them.

mod identities;

use crate::harness::{exclusive, free_port};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long an apiserver may take to answer `/readyz`: a cold start on a loaded
/// 2-core machine, with the rest of the suite running beside it.
const READY_LIMIT: Duration = Duration::from_secs(120);

/// The Service range the apiserver is given (it needs one; nothing here allocates).
const SERVICE_RANGE: &str = "10.96.0.0/16";

/// The supervisor: `$1` is the instance's directory. It reads commands, one a line:
///
/// - `start NAME`: runs the command whose arguments `DIR/NAME.args` holds (each
///   ended by a NUL), stdin from /dev/null, stdout and stderr appended to
///   `DIR/NAME.log`; answers its pid.
/// - `kill NAME`: SIGKILLs it and reaps it; answers `killed`.
///
/// At EOF (or on SIGTERM, which ends the `read`) it SIGKILLs every command it runs,
/// reaps them and removes `DIR`. It ignores SIGINT and SIGHUP, which a terminal sends
/// to a whole session, and SIGPIPE, so an answer to a test process that is gone does
/// not end it before it cleans up; its commands get the default dispositions back.
const SUPERVISOR: &str = r#"
set -u
dir=$1
trap '' INT HUP PIPE
trap ':' TERM
declare -A pids=()
while read -r verb name; do
  case $verb in
  start)
    mapfile -d '' -t argv <"$dir/$name.args"
    ( trap - INT HUP PIPE TERM; exec "${argv[@]}" ) </dev/null >>"$dir/$name.log" 2>&1 &
    pids[$name]=$!
    echo "$!"
    ;;
  kill)
    kill -KILL "${pids[$name]}" 2>/dev/null
    wait "${pids[$name]}" 2>/dev/null
    unset "pids[$name]"
    echo killed
    ;;
  esac
done
for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
wait
rm -rf "$dir"
"#;

/// The directory holding `etcd`, `kube-apiserver` and `kubectl`: scripts/kube-peers.sh
/// (cached, it only checks its files; otherwise it builds them, which takes minutes),
/// run once per test binary from the repository's root.
pub fn peers() -> &'static Path {
    static PEERS: OnceLock<PathBuf> = OnceLock::new();
    PEERS.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let out = Command::new(root.join("scripts/kube-peers.sh"))
            .current_dir(root)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .expect("scripts/kube-peers.sh runs");
        assert!(
            out.status.success(),
            "scripts/kube-peers.sh failed ({}); its progress is on stderr above",
            out.status
        );
        let dir = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        for peer in ["etcd", "kube-apiserver", "kubectl"] {
            assert!(
                dir.join(peer).is_file(),
                "scripts/kube-peers.sh printed {}, which holds no {peer}",
                dir.display()
            );
        }
        dir
    })
}

/// Whether process `pid` runs (a zombie is dead). The supervisor reaps its commands at
/// once, so a dead one soon has no /proc entry at all.
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => false,
    }
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

/// One kube-apiserver and its etcd, on loopback, and the certificates and kubeconfigs
/// to speak to it as whom a test needs.
pub struct KubeApi {
    /// Certificates (`pki/`), kubeconfigs, etcd's data and every log; the supervisor
    /// removes it.
    dir: PathBuf,
    port: u16,
    supervisor: Child,
    /// Commands to the supervisor; dropping it is what makes the supervisor clean up.
    commands: Option<ChildStdin>,
    answers: BufReader<ChildStdout>,
    etcd: u32,
    /// None while stopped.
    apiserver: Option<u32>,
    /// The apiserver's arguments, to start it again alike.
    apiserver_args: Vec<OsString>,
    /// Whether the test owns it ([`KubeApi::start`]) and so may stop or freeze it.
    own: bool,
    /// The kubeconfigs minted so far, by user and groups.
    identities: Mutex<HashMap<(String, Vec<String>), PathBuf>>,
    wrong_ca: OnceLock<PathBuf>,
    bad_token: OnceLock<PathBuf>,
}

impl KubeApi {
    /// The apiserver every test of this binary shares, started by the first test that
    /// asks (the others wait for it). Tests must not assume it is empty: each names
    /// its objects (its own namespace, or names of its own). It is never stopped
    /// before the process ends, and then its supervisor removes everything. A start
    /// that failed is not retried by every later caller: they fail with its reason.
    pub fn shared() -> &'static KubeApi {
        static SHARED: OnceLock<Result<KubeApi, String>> = OnceLock::new();
        match SHARED.get_or_init(|| KubeApi::launch(false, &[])) {
            Ok(api) => api,
            Err(why) => panic!("the shared kube-apiserver did not start: {why}"),
        }
    }

    /// An apiserver and etcd of the calling test's own, which it may stop, freeze and
    /// restart. Dropping it kills both and removes its directory (and a test that
    /// panics drops it too; a process that dies leaves it to the supervisor).
    pub fn start() -> KubeApi {
        KubeApi::start_with(&[])
    }

    /// [`KubeApi::start`] with apiserver flags of the test's own, each `--name=value`:
    /// it replaces the flag of that name (e.g. `--enable-priority-and-fairness=true`)
    /// or is added after them.
    pub fn start_with(flags: &[&str]) -> KubeApi {
        KubeApi::launch(true, flags)
            .unwrap_or_else(|why| panic!("a kube-apiserver did not start: {why}"))
    }

    /// Starts an instance; a port taken by someone else between [`free_port`] and the
    /// bind is retried on fresh ports, any other failure is the error.
    fn launch(own: bool, flags: &[&str]) -> Result<KubeApi, String> {
        let mut attempt = 1;
        loop {
            match KubeApi::try_launch(own, flags) {
                Err(why) if why.contains("address already in use") && attempt < 3 => {
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    fn try_launch(own: bool, flags: &[&str]) -> Result<KubeApi, String> {
        let started = Instant::now();
        let peers = peers();
        let dir = tempfile::Builder::new()
            .prefix("wasm-ipam-kube-api-")
            .tempdir()
            .unwrap()
            .keep();
        let mut supervisor = Command::new("bash")
            .arg("-c")
            .arg(SUPERVISOR)
            .arg("kube-api-supervisor")
            .arg(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join("supervisor.log")).unwrap())
            // Its own process group, so a Ctrl-C for the tests (which signals their
            // group) does not reach it: it outlives the test process to clean up.
            .process_group(0)
            .spawn()
            .expect("bash runs");
        let commands = supervisor.stdin.take();
        let answers = BufReader::new(supervisor.stdout.take().unwrap());
        let (port, client, peer) = (free_port(), free_port(), free_port());
        let client_url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let pki = dir.join("pki");
        let path = |name: &str| pki.join(name);
        let mut apiserver_args: Vec<OsString> = vec![
            peers.join("kube-apiserver").into(),
            "--bind-address=127.0.0.1".into(),
            format!("--secure-port={port}").into(),
            format!("--etcd-servers={client_url}").into(),
            flag("--tls-cert-file=", path("apiserver.crt")),
            flag("--tls-private-key-file=", path("apiserver.key")),
            flag("--client-ca-file=", path("ca.crt")),
            // Nobody unauthenticated gets in, so a bad credential is a 401, never
            // system:anonymous's 403.
            "--anonymous-auth=false".into(),
            "--authorization-mode=Node,RBAC".into(),
            "--enable-admission-plugins=NodeRestriction".into(),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            flag("--service-account-key-file=", path("sa.pub")),
            flag("--service-account-signing-key-file=", path("sa.key")),
            format!("--service-cluster-ip-range={SERVICE_RANGE}").into(),
            // Not needed here, and each is work at start: the `kubernetes` Service's
            // endpoints (a loopback address is no valid endpoint anyway), and the
            // flow schemas of priority and fairness.
            "--endpoint-reconciler-type=none".into(),
            "--enable-priority-and-fairness=false".into(),
            "--profiling=false".into(),
            // Unused (the serving certificate is given); not /var/run/kubernetes.
            flag("--cert-dir=", &pki),
        ];
        for given in flags {
            let name = given.split_once('=').map_or(*given, |(name, _)| name);
            let same = |arg: &OsString| {
                let arg = arg.to_string_lossy();
                arg == name || arg.starts_with(&format!("{name}="))
            };
            match apiserver_args.iter().position(same) {
                Some(at) => apiserver_args[at] = given.into(),
                None => apiserver_args.push(given.into()),
            }
        }
        let mut api = KubeApi {
            dir,
            port,
            supervisor,
            commands,
            answers,
            etcd: 0,
            apiserver: None,
            apiserver_args,
            own,
            identities: Mutex::new(HashMap::new()),
            wrong_ca: OnceLock::new(),
            bad_token: OnceLock::new(),
        };
        // From here, dropping `api` on an error kills what runs and removes the dir.
        api.certificates();
        api.write_kubeconfig(
            "admin",
            &api.ca(),
            json!({
                "client-certificate": pki.join("admin.crt"),
                "client-key": pki.join("admin.key"),
            }),
        );

        let etcd_args: Vec<OsString> = vec![
            peers.join("etcd").into(),
            "--name=kube-api".into(),
            flag("--data-dir=", api.dir.join("etcd")),
            format!("--listen-client-urls={client_url}").into(),
            format!("--advertise-client-urls={client_url}").into(),
            format!("--listen-peer-urls={peer_url}").into(),
            format!("--initial-advertise-peer-urls={peer_url}").into(),
            format!("--initial-cluster=kube-api={peer_url}").into(),
            // A test's data need not survive the machine: no fsync, so a loaded disk
            // does not slow the apiserver's every write.
            "--unsafe-no-fsync".into(),
            "--log-level=warn".into(),
        ];
        api.etcd = api.run("etcd", &etcd_args);
        api.wait_etcd(client)?;

        let args = api.apiserver_args.clone();
        api.apiserver = Some(api.run("kube-apiserver", &args));
        api.wait_ready()?;
        eprintln!(
            "kube-api: {} ready in {:.1} s ({})",
            api.url(),
            started.elapsed().as_secs_f64(),
            api.dir.display()
        );
        Ok(api)
    }

    /// Has the supervisor run `args` as NAME; answers its pid.
    fn run(&mut self, name: &str, args: &[OsString]) -> u32 {
        let mut file = Vec::new();
        for arg in args {
            file.extend_from_slice(arg.as_bytes());
            file.push(0);
        }
        std::fs::write(self.dir.join(format!("{name}.args")), file).unwrap();
        self.ask(&format!("start {name}"))
            .parse()
            .unwrap_or_else(|e| panic!("the supervisor answered no pid for {name}: {e}"))
    }

    /// Sends the supervisor one command; answers its one-line answer.
    fn ask(&mut self, command: &str) -> String {
        let commands = self.commands.as_mut().expect("the supervisor runs");
        writeln!(commands, "{command}")
            .and_then(|()| commands.flush())
            .unwrap_or_else(|e| panic!("the supervisor took no `{command}`: {e}"));
        let mut answer = String::new();
        self.answers.read_line(&mut answer).unwrap();
        assert!(
            !answer.is_empty(),
            "the supervisor ended at `{command}`: {}",
            tail(&self.dir.join("supervisor.log"), 20)
        );
        answer.trim().to_string()
    }

    /// Waits until etcd answers its /health (a plain HTTP GET on its client port).
    fn wait_etcd(&self, client: u16) -> Result<(), String> {
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
            if !alive(self.etcd) {
                return Err(format!(
                    "etcd exited; the end of its log:\n{}",
                    tail(&self.dir.join("etcd.log"), 30)
                ));
            }
            if started.elapsed() > Duration::from_secs(60) {
                return Err(format!(
                    "etcd did not answer in 60 s; the end of its log:\n{}",
                    tail(&self.dir.join("etcd.log"), 30)
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits (at most [`READY_LIMIT`]) until `kubectl get --raw /readyz` says ok;
    /// fails at once, with the logs' end, if etcd or the apiserver exits.
    pub fn wait_ready(&self) -> Result<(), String> {
        let started = Instant::now();
        loop {
            let out = self.kubectl(&["--request-timeout=5s", "get", "--raw", "/readyz"]);
            if out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ok" {
                return Ok(());
            }
            let apiserver = self.apiserver.expect("the apiserver was started");
            for (name, pid) in [("kube-apiserver", apiserver), ("etcd", self.etcd)] {
                if !alive(pid) {
                    return Err(format!(
                        "{name} exited; the end of its log:\n{}",
                        tail(&self.dir.join(format!("{name}.log")), 40)
                    ));
                }
            }
            if started.elapsed() > READY_LIMIT {
                return Err(format!(
                    "the apiserver was not ready in {} s (kubectl: {}); the end of its log:\n{}",
                    READY_LIMIT.as_secs(),
                    String::from_utf8_lossy(&out.stderr).trim(),
                    tail(&self.dir.join("kube-apiserver.log"), 40)
                ));
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The apiserver's address, `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The CA that signed the apiserver's certificate and that it trusts for clients.
    pub fn ca(&self) -> PathBuf {
        self.dir.join("pki/ca.crt")
    }

    /// The instance's directory: `pki/`, the kubeconfigs, etcd's data, and the logs
    /// (`etcd.log`, `kube-apiserver.log`). Gone once the instance is.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `kubectl ARGS` as the admin.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_with(&self.admin_kubeconfig(), args)
    }

    /// `kubectl ARGS` with `kubeconfig` (one of this instance's), its discovery cache
    /// in the instance's directory rather than ~/.kube.
    pub fn kubectl_with(&self, kubeconfig: &Path, args: &[&str]) -> Output {
        Command::new(peers().join("kubectl"))
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.join("kubectl-cache"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("kubectl runs")
    }

    /// `kubectl apply -f -` of `yaml` as the admin; panics with kubectl's stderr if it
    /// fails.
    pub fn apply(&self, yaml: &str) {
        let mut child = Command::new(peers().join("kubectl"))
            .arg("--kubeconfig")
            .arg(self.admin_kubeconfig())
            .arg("--cache-dir")
            .arg(self.dir.join("kubectl-cache"))
            .args(["apply", "-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl runs");
        // Written whole before reading: kubectl reads all of stdin before it answers.
        // A write kubectl cut short (it exited) shows in its status and stderr below.
        let _ = child.stdin.take().unwrap().write_all(yaml.as_bytes());
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "kubectl apply failed: {}\n{yaml}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn assert_own(&self, what: &str) {
        assert!(
            self.own,
            "{what}: only an apiserver of the test's own (KubeApi::start) may be"
        );
    }

    fn signal(&self, signal: libc::c_int) {
        let pid = self.apiserver.expect("the apiserver runs");
        let pid = libc::pid_t::try_from(pid).unwrap();
        // SAFETY: kill(2) on the apiserver the supervisor started and has not reaped.
        assert_eq!(
            unsafe { libc::kill(pid, signal) },
            0,
            "signal {signal} to {pid}"
        );
    }

    /// Kills the apiserver at once (SIGKILL), as a crash would; etcd keeps running.
    pub fn stop(&mut self) {
        self.assert_own("stopped");
        if self.apiserver.take().is_some() {
            assert_eq!(self.ask("kill kube-apiserver"), "killed");
        }
    }

    /// Stops the apiserver (SIGSTOP): the kernel still accepts connections on its
    /// port, and nothing answers them.
    pub fn freeze(&self) {
        self.assert_own("frozen");
        self.signal(libc::SIGSTOP);
    }

    /// Lets a frozen apiserver run again (SIGCONT).
    pub fn thaw(&self) {
        self.assert_own("thawed");
        self.signal(libc::SIGCONT);
    }

    /// Starts the apiserver again (killing it first if it runs) on the same port, with
    /// the same certificates and etcd, and waits until it is ready.
    pub fn restart(&mut self) {
        self.assert_own("restarted");
        self.stop();
        let args = self.apiserver_args.clone();
        self.apiserver = Some(self.run("kube-apiserver", &args));
        if let Err(why) = self.wait_ready() {
            panic!("the restarted kube-apiserver: {why}");
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

/// The processes whose command line names `dir`.
fn processes_under(dir: &Path) -> Vec<String> {
    let needle = dir.as_os_str().as_bytes();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        if cmdline.windows(needle.len()).any(|w| w == needle) {
            found.push(format!(
                "{}: {}",
                entry.file_name().to_string_lossy(),
                String::from_utf8_lossy(&cmdline).replace('\0', " ")
            ));
        }
    }
    found
}

fn stderr_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn the_admin_writes_a_configmap_others_are_forbidden_unauthenticated_or_refuse_the_server() {
    let api = KubeApi::shared();
    let name = format!("kube-api-harness-{}", std::process::id());
    api.apply(&format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: default\ndata:\n  said: hello\n"
    ));
    let jsonpath = "jsonpath={.data.said}";
    let get = ["get", "configmap", &name, "-n", "default", "-o", jsonpath];
    let out = api.kubectl(&get);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello");

    // A client certificate names the user and its groups, as the apiserver sees them.
    let node = api.kubeconfig_for("system:node:node-a", &["system:nodes"]);
    assert_eq!(
        api.kubeconfig_for("system:node:node-a", &["system:nodes"]),
        node,
        "minted once"
    );
    let teams = api.kubeconfig_for("someone", &["team-a", "team-b"]);
    for (kubeconfig, user, groups) in [
        (&node, "system:node:node-a", vec!["system:nodes"]),
        (&teams, "someone", vec!["team-a", "team-b"]),
    ] {
        let out = api.kubectl_with(kubeconfig, &["auth", "whoami", "-o", "json"]);
        assert!(out.status.success(), "{}", stderr_of(&out));
        let review: Value = serde_json::from_slice(&out.stdout).unwrap();
        let info = &review["status"]["userInfo"];
        assert_eq!(info["username"], user, "{review}");
        let have: Vec<&str> = info["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g.as_str().unwrap())
            .collect();
        for group in groups.iter().chain(&["system:authenticated"]) {
            assert!(have.contains(group), "{group} in {have:?}");
        }
    }

    // Authenticated but granted nothing: 403.
    let someone = api.kubeconfig_for("someone", &[]);
    assert_ne!(someone, teams);
    let out = api.kubectl_with(&someone, &get);
    assert!(
        !out.status.success() && stderr_of(&out).contains("Forbidden"),
        "{}",
        stderr_of(&out)
    );
    // Not authenticated: 401.
    let out = api.kubectl_with(&api.kubeconfig_bad_token(), &get);
    assert!(
        !out.status.success() && stderr_of(&out).contains("Unauthorized"),
        "{}",
        stderr_of(&out)
    );
    // The server's certificate is not from the CA the client trusts.
    let out = api.kubectl_with(&api.kubeconfig_wrong_ca(), &get);
    assert!(
        !out.status.success()
            && stderr_of(&out).contains("certificate signed by unknown authority"),
        "{}",
        stderr_of(&out)
    );
}

#[test]
fn an_apiserver_of_a_tests_own_freezes_thaws_stops_restarts_and_leaves_nothing_behind() {
    // Two apiserver starts: not beside tests that measure time.
    let _heavy = exclusive();
    let mut api = KubeApi::start();
    let dir = api.dir().to_path_buf();
    let readyz = ["--request-timeout=2s", "get", "--raw", "/readyz"];
    api.apply("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: kept\n  namespace: default\ndata:\n  said: before\n");

    api.freeze();
    let asked = Instant::now();
    let out = api.kubectl(&readyz);
    assert!(
        !out.status.success(),
        "a frozen apiserver answered: {:?}",
        out
    );
    assert!(
        asked.elapsed() < Duration::from_secs(60),
        "the request timeout did not end the request: {:?}",
        asked.elapsed()
    );
    api.thaw();
    api.wait_ready().unwrap();

    api.stop();
    let out = api.kubectl(&readyz);
    assert!(!out.status.success(), "a stopped apiserver answered");
    api.restart();
    // Same port, certificates and etcd: the admin's kubeconfig reads what was written.
    let out = api.kubectl(&[
        "get",
        "configmap",
        "kept",
        "-n",
        "default",
        "-o",
        "jsonpath={.data.said}",
    ]);
    assert!(out.status.success(), "{}", stderr_of(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "before");

    let pids = [api.etcd, api.apiserver.unwrap()];
    drop(api);
    assert!(!dir.exists(), "{} is left", dir.display());
    assert!(pids.iter().all(|pid| !alive(*pid)), "{pids:?} still run");
    let left = processes_under(&dir);
    assert!(left.is_empty(), "left running: {left:?}");
}
