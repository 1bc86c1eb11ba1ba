//! Who may speak to a [`KubeApi`]: the certificates it is started with (its CA, the
//! apiserver's serving certificate, the admin's client certificate, the
//! service-account key pair) and the kubeconfigs a test speaks as (the admin, a user
//! in groups, one trusting another CA, one with a bad token), each minted once.

use super::KubeApi;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

/// `openssl ARGS` in `dir`, panicking with its stderr if it fails.
fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("openssl runs");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
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

impl KubeApi {
    /// The CA, the apiserver's serving certificate (for 127.0.0.1 and localhost), the
    /// admin's client certificate (group system:masters) and the service-account key
    /// pair, as scripts/kube-node.sh's `certificates` makes them; P-256 keys, which
    /// openssl makes in a moment where RSA takes a while on a loaded machine.
    pub(super) fn certificates(&self) {
        let pki = self.dir.join("pki");
        std::fs::create_dir(&pki).unwrap();
        self.make_ca("ca", "wasm-ipam-test-ca");
        self.issue(
            "apiserver",
            "/CN=kube-apiserver",
            "serverAuth",
            Some("IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"),
        );
        self.issue(
            "admin",
            &subject("wasm-ipam-test-admin", &["system:masters"]),
            "clientAuth",
            None,
        );
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
        );
        openssl(
            &pki,
            &["pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub"],
        );
    }

    /// A self-signed CA, `pki/NAME.crt` and `pki/NAME.key`.
    fn make_ca(&self, name: &str, common_name: &str) {
        let (key, crt) = (format!("{name}.key"), format!("{name}.crt"));
        openssl(
            &self.dir.join("pki"),
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-days",
                "30",
                "-subj",
                &format!("/CN={common_name}"),
                "-keyout",
                &key,
                "-out",
                &crt,
            ],
        );
    }

    /// `pki/NAME.key` and `pki/NAME.crt`, signed by the CA, for `subject`, for `usage`
    /// (serverAuth or clientAuth), with these subjectAltNames.
    fn issue(&self, name: &str, subject: &str, usage: &str, sans: Option<&str>) {
        /// Serial numbers, unique among the certificates one CA signs.
        static SERIAL: AtomicU64 = AtomicU64::new(2);
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
        std::fs::write(pki.join(&extfile), ext).unwrap();
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
        );
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed).to_string();
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
                &serial,
                "-days",
                "30",
                "-extfile",
                &extfile,
                "-out",
                &crt,
            ],
        );
    }

    /// Writes `NAME.kubeconfig` in the instance's directory: this apiserver, verified
    /// against `ca`, as `user` (a kubeconfig's user entry). JSON, which kubectl and
    /// client-go read as YAML, so no value needs quoting by hand.
    pub(super) fn write_kubeconfig(&self, name: &str, ca: &Path, user: Value) -> PathBuf {
        let config = json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kube-api", "cluster": {"server": self.url(), "certificate-authority": ca}}],
            "users": [{"name": name, "user": user}],
            "contexts": [{"name": "kube-api", "context": {"cluster": "kube-api", "user": name}}],
            "current-context": "kube-api",
        });
        let path = self.dir.join(format!("{name}.kubeconfig"));
        std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
        path
    }

    /// A kubeconfig as the cluster's admin (a client certificate in system:masters).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    /// A kubeconfig as `user` in `groups`: a client certificate with CN=user and one
    /// O per group, signed by the CA, which is how the apiserver names a client (e.g.
    /// `kubeconfig_for("system:node:node-a", &["system:nodes"])`, a node's kubelet).
    /// The apiserver adds system:authenticated. Minted once per user and groups.
    pub fn kubeconfig_for(&self, user: &str, groups: &[&str]) -> PathBuf {
        let key = (
            user.to_string(),
            groups.iter().map(|g| g.to_string()).collect(),
        );
        let mut identities = self
            .identities
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(path) = identities.get(&key) {
            return path.clone();
        }
        let name = format!("user-{}", identities.len());
        self.issue(&name, &subject(user, groups), "clientAuth", None);
        let pki = self.dir.join("pki");
        let path = self.write_kubeconfig(
            &name,
            &self.ca(),
            json!({
                "client-certificate": pki.join(format!("{name}.crt")),
                "client-key": pki.join(format!("{name}.key")),
            }),
        );
        identities.insert(key, path.clone());
        path
    }

    /// The admin's kubeconfig but trusting another CA, which did not sign the
    /// apiserver's certificate: the client must refuse the server.
    pub fn kubeconfig_wrong_ca(&self) -> PathBuf {
        self.wrong_ca
            .get_or_init(|| {
                self.make_ca("wrong-ca", "wasm-ipam-test-wrong-ca");
                let pki = self.dir.join("pki");
                self.write_kubeconfig(
                    "wrong-ca",
                    &pki.join("wrong-ca.crt"),
                    json!({
                        "client-certificate": pki.join("admin.crt"),
                        "client-key": pki.join("admin.key"),
                    }),
                )
            })
            .clone()
    }

    /// A kubeconfig with a bearer token the apiserver knows nothing of: every request
    /// is a 401 (anonymous requests are off, so it is not turned into a 403).
    pub fn kubeconfig_bad_token(&self) -> PathBuf {
        self.bad_token
            .get_or_init(|| {
                self.write_kubeconfig(
                    "bad-token",
                    &self.ca(),
                    json!({"token": "wasm-ipam-test-not-a-token"}),
                )
            })
            .clone()
    }
}
