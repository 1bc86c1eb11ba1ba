//! A module in another language: `examples/static-py`, the reference `static` IPAM
//! plugin written in Python and built with componentize-py, side by side with the real
//! one (`/usr/lib/cni/static`, Debian's containernetworking-plugins): the same configs,
//! CNI_ARGS and capabilities give the same result JSON, and the same error code and
//! message where static refuses. Where the two legitimately differ (an answer static
//! prints that is not valid CNI, the empty `ips` list the host prints, a version
//! Debian's static does not speak, CNI_ARGS the host parses before any module) the
//! difference has a test of its own.

use crate::harness::*;
use serde_json::{Value, json};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const REFERENCE: &str = "/usr/lib/cni/static";

/// The host limits the Python component needs beyond the defaults (measured in
/// examples/static-py/README.md): the component is 17.5 MiB, over the default
/// `moduleMaxMiB` of 16; compiling it takes 7–14 s on a shared 2-core machine, close to
/// the default `compileTimeoutSeconds` of 30 once the machine is loaded, so the tests
/// allow ten times that. Its memory (13 MiB), the compiler's (under 448 MiB) and the
/// host's stay within their defaults.
fn limits() -> Value {
    json!({"moduleMaxMiB": 32, "compileTimeoutSeconds": 300})
}

fn reference() -> &'static Path {
    let path = Path::new(REFERENCE);
    assert!(
        path.exists(),
        "{REFERENCE} is missing: install Debian's containernetworking-plugins (scripts/test.sh does)"
    );
    path
}

/// The component, built with componentize-py into `target/modules/static-py/`, and
/// compiled into the shared cache (`wasm-ipam precompile`) so the tests that run it in
/// parallel load it rather than each compile it. componentize-py's output differs from
/// build to build (a new digest, so a new compile and a new 35 MiB cache entry each
/// run), so a build is kept and reused while its inputs are unchanged: the sources,
/// the WIT, the build script and componentize-py's version.
fn static_py_module() -> &'static Path {
    static MODULE: OnceLock<PathBuf> = OnceLock::new();
    MODULE.get_or_init(|| {
        // Building and compiling load both cores for seconds: not while a test that
        // measures time runs.
        let _heavy = exclusive();
        let dir = workspace().join("target/modules/static-py");
        let module = dir.join(build_inputs_digest()).join("static_py.wasm");
        if !module.exists() {
            build(&dir, &module);
        }
        let limit = |key: &str| limits()[key].to_string();
        operator_command([
            OsStr::new("precompile"),
            OsStr::new("--cache-dir"),
            shared_cache_dir().as_os_str(),
            OsStr::new("--module-max-mib"),
            OsStr::new(&limit("moduleMaxMiB")),
            OsStr::new("--compile-timeout-seconds"),
            OsStr::new(&limit("compileTimeoutSeconds")),
            module.as_os_str(),
        ]);
        let node = Node::new();
        let conf = with_limits(node.netconf("1.0.0", &module, json!({})));
        Call::new("ADD", "warm").run(&conf).ok();
        assert_eq!(
            node.log_lines("invocation")[0]["module_cached"],
            true,
            "the precompiled component was not in the cache: every call would compile it"
        );
        module
    })
}

/// What the component is built from, as a short hex digest.
fn build_inputs_digest() -> String {
    use sha2::Digest;
    let example = workspace().join("examples/static-py");
    let mut inputs: Vec<PathBuf> = std::fs::read_dir(example.join("src"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "py"))
        .collect();
    inputs.sort();
    inputs.extend([example.join("build.sh"), workspace().join("wit/ipam.wit")]);
    let mut digest = sha2::Sha256::new();
    let version = Command::new("componentize-py")
        .arg("--version")
        .output()
        .expect("run componentize-py: install 0.25.1 (scripts/test.sh does)");
    digest.update(&version.stdout);
    for path in inputs {
        digest.update(path.file_name().unwrap().as_encoded_bytes());
        digest.update(std::fs::read(&path).unwrap());
    }
    digest.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Builds `module`, removing the other builds in `dir`; written under another name
/// and renamed, so a concurrent run never sees half a file.
fn build(dir: &Path, module: &Path) {
    if let Ok(builds) = std::fs::read_dir(dir) {
        for old in builds {
            let old = old.unwrap().path();
            let _ = if old.is_dir() {
                std::fs::remove_dir_all(old)
            } else {
                std::fs::remove_file(old)
            };
        }
    }
    let partial = module.with_extension(format!("wasm.{}", std::process::id()));
    let status = Command::new("bash")
        .arg(workspace().join("examples/static-py/build.sh"))
        .arg(&partial)
        .status()
        .expect("run examples/static-py/build.sh");
    assert!(
        status.success(),
        "building examples/static-py failed: is componentize-py 0.25.1 installed? (scripts/test.sh installs it)"
    );
    std::fs::rename(&partial, module).unwrap();
}

fn with_limits(mut conf: Value) -> Value {
    for (key, value) in limits().as_object().unwrap() {
        conf["ipam"][key] = value.clone();
    }
    conf
}

/// One network configured for both plugins: the same module keys (`ipam`) and
/// top-level keys (`args`, `runtimeConfig`, `prevResult`).
struct Both {
    node: Node,
    ours: Value,
    theirs: Value,
}

impl Both {
    fn new(version: &str, ipam: Value) -> Self {
        let node = Node::new();
        let ours = with_limits(node.netconf(version, static_py_module(), ipam.clone()));
        let mut theirs =
            json!({"cniVersion": version, "name": "testnet", "type": "bridge", "ipam": ipam});
        theirs["ipam"]["type"] = "static".into();
        Both { node, ours, theirs }
    }

    /// Sets a top-level netconf key for both.
    fn with(mut self, key: &str, value: Value) -> Self {
        self.ours[key] = value.clone();
        self.theirs[key] = value;
        self
    }

    /// Runs `command` through both: (wasm-ipam, static).
    fn run(&self, command: &str, cni_args: &str) -> (Reply, Reply) {
        let mut call = Call::new(command, "c1");
        if !cni_args.is_empty() {
            call = call.env("CNI_ARGS", cni_args);
        }
        (
            call.run(&self.ours),
            call.run_plugin(reference(), &self.theirs),
        )
    }

    /// Runs `command` through both, asserting the same outcome: the same result JSON,
    /// or a failure with the same code and message. Returns static's reply.
    fn same(&self, command: &str, cni_args: &str) -> Reply {
        let (ours, theirs) = self.run(command, cni_args);
        let step = format!(
            "{command} with CNI_ARGS {cni_args:?} and netconf {}",
            self.theirs
        );
        assert_eq!(
            ours.success, theirs.success,
            "{step}: wasm-ipam {ours:?} vs static {theirs:?}"
        );
        if theirs.success {
            assert_eq!(ours.json, theirs.json, "{step}");
        } else {
            assert_eq!(
                (ours.error_code(), ours.msg()),
                (theirs.error_code(), theirs.msg()),
                "{step}"
            );
        }
        theirs
    }
}

/// ADD through both, then CHECK (from 0.4.0) with static's own result as
/// `prevResult`, then DEL: the same at every step. Returns static's ADD result.
fn add_check_del(version: &str, ipam: Value, top: Value, cni_args: &str) -> Value {
    let mut both = Both::new(version, ipam);
    for (key, value) in top.as_object().unwrap() {
        both = both.with(key, value.clone());
    }
    let result = both.same("ADD", cni_args).ok().json.clone().unwrap();
    if version == "0.4.0" || version == "1.0.0" {
        let both = both.with("prevResult", result.clone());
        both.same("CHECK", cni_args).ok();
        both.same("DEL", cni_args).ok();
    } else {
        both.same("DEL", cni_args).ok();
    }
    result
}

#[test]
fn addresses_gateways_routes_and_dns_under_every_version_static_speaks() {
    let ipam = json!({
        "addresses": [
            {"address": "10.50.0.5/24", "gateway": "10.50.0.1"},
            {"address": "fd50::5/64", "gateway": "fd50::1"}
        ],
        "routes": [
            {"dst": "0.0.0.0/0"},
            {"dst": "192.168.0.0/16", "gw": "10.50.0.254"},
            {"dst": "::/0", "gw": "fd50::1"}
        ],
        "dns": {
            "nameservers": ["10.50.0.53", "fd50::53"],
            "domain": "example.test",
            "search": ["a.example.test", "example.test"],
            "options": ["ndots:2", "edns0"]
        }
    });
    for version in ["0.3.0", "0.3.1", "0.4.0", "1.0.0"] {
        let result = add_check_del(version, ipam.clone(), json!({}), "");
        assert_eq!(result["ips"].as_array().unwrap().len(), 2, "{result}");
        assert_eq!(result["routes"].as_array().unwrap().len(), 3, "{result}");
        assert_eq!(result["dns"]["search"][1], "example.test", "{result}");
    }
}

#[test]
fn several_addresses_per_family() {
    let several = json!({"addresses": [
        {"address": "10.51.0.5/24", "gateway": "10.51.0.1"},
        {"address": "10.51.1.5/24"},
        {"address": "192.0.2.7/32"},
        {"address": "fd51::5/64", "gateway": "fd51::1"},
        {"address": "fd51:1::5/120"}
    ]});
    for version in ["0.3.1", "1.0.0"] {
        let result = add_check_del(version, several.clone(), json!({}), "");
        assert_eq!(result["ips"].as_array().unwrap().len(), 5, "{result}");
    }
}

/// With no address configured, libcni leaves `ips` out of static's result; the host
/// prints every result with an `ips` list (`host/src/cni.rs`), here empty. Both are
/// valid CNI; everything else is the same.
#[test]
fn an_answer_without_addresses_keeps_an_empty_ips_list() {
    let both = Both::new("1.0.0", json!({"routes": [{"dst": "10.0.0.0/8"}]}));
    let (ours, theirs) = both.run("ADD", "");
    let mut ours = ours.ok().json.clone().unwrap();
    let theirs = theirs.ok().json.clone().unwrap();
    assert!(theirs.get("ips").is_none(), "{theirs}");
    assert_eq!(ours["ips"], json!([]));
    ours.as_object_mut().unwrap().remove("ips");
    assert_eq!(ours, theirs);
    let both = both.with("prevResult", theirs);
    both.same("CHECK", "").ok();
    both.same("DEL", "").ok();
}

#[test]
fn cni_args_ip_and_gateway() {
    let ipam =
        json!({"addresses": [{"address": "10.52.0.5/24"}], "routes": [{"dst": "0.0.0.0/0"}]});
    for cni_args in [
        "IP=10.52.1.7/24",
        "IP=10.52.1.7/24,fd52::7/64;GATEWAY=10.52.1.1,fd52::1",
        // Extra spaces, other keys under IgnoreUnknown, and a gateway that lies in the
        // configured address's subnet too: it applies only to CNI_ARGS addresses.
        "IgnoreUnknown=1;K8S_POD_NAME=pod;IP= 10.52.0.8/16 ;GATEWAY= 10.52.0.1",
        // A gateway in no address's subnet is dropped.
        "IP=10.52.1.9/24;GATEWAY=10.99.0.1",
        "GATEWAY=10.52.0.1",
    ] {
        for version in ["0.4.0", "1.0.0"] {
            let result = add_check_del(version, ipam.clone(), json!({}), cni_args);
            assert!(!result["ips"].as_array().unwrap().is_empty(), "{result}");
        }
    }
}

#[test]
fn args_cni_ips_replace_every_other_address() {
    let ipam = json!({"addresses": [{"address": "10.53.0.5/24", "gateway": "10.53.0.1"}]});
    let top = json!({"args": {"cni": {"ips": ["10.53.1.5/24", "fd53::5/64"]}}});
    for version in ["0.3.1", "0.4.0", "1.0.0"] {
        let result = add_check_del(
            version,
            ipam.clone(),
            top.clone(),
            "IP=10.53.2.5/24;GATEWAY=10.53.2.1",
        );
        let ips: Vec<&str> = result["ips"]
            .as_array()
            .unwrap()
            .iter()
            .map(|ip| ip["address"].as_str().unwrap())
            .collect();
        assert_eq!(ips, ["10.53.1.5/24", "fd53::5/64"], "{result}");
    }
}

#[test]
fn runtime_config_ips_replace_them_last() {
    let ipam = json!({"addresses": [{"address": "10.54.0.5/24"}]});
    let capability = json!({"runtimeConfig": {"ips": ["10.54.9.9/16"]}});
    let result = add_check_del("1.0.0", ipam.clone(), capability, "");
    assert_eq!(result["ips"], json!([{"address": "10.54.9.9/16"}]));
    let both_ways = json!({
        "runtimeConfig": {"ips": ["10.54.9.9/16", "fd54::9/64"]},
        "args": {"cni": {"ips": ["10.54.1.1/24"]}}
    });
    for version in ["0.3.1", "0.4.0", "1.0.0"] {
        let result = add_check_del(version, ipam.clone(), both_ways.clone(), "IP=10.54.2.2/24");
        assert_eq!(result["ips"].as_array().unwrap().len(), 2, "{result}");
    }
}

#[test]
fn check_compares_configured_gateways_with_prev_result() {
    let ipam = json!({"addresses": [
        {"address": "10.55.0.5/24", "gateway": "10.55.0.1"},
        {"address": "fd55::5/64"}
    ]});
    for (version, prev_result) in [
        // The same address and gateway.
        (
            "1.0.0",
            json!({"cniVersion": "1.0.0", "ips": [{"address": "10.55.0.5/24", "gateway": "10.55.0.1"}]}),
        ),
        // Another gateway for a configured address: static fails.
        (
            "1.0.0",
            json!({"cniVersion": "1.0.0", "ips": [{"address": "10.55.0.5/24", "gateway": "10.55.0.2"}]}),
        ),
        (
            "1.0.0",
            json!({"cniVersion": "1.0.0", "ips": [{"address": "10.55.0.5/16"}]}),
        ),
        (
            "0.4.0",
            json!({"cniVersion": "0.4.0", "ips": [{"version": "4", "address": "10.55.0.5/24", "gateway": "10.55.0.9"}]}),
        ),
        // Addresses static does not know, and none at all, are no error.
        (
            "1.0.0",
            json!({"cniVersion": "1.0.0", "ips": [{"address": "10.55.7.7/24", "gateway": "10.55.7.1"}]}),
        ),
        ("1.0.0", json!({"cniVersion": "1.0.0"})),
        // No cniVersion in it: the config's is assumed.
        (
            "1.0.0",
            json!({"ips": [{"address": "fd55::5/64", "gateway": "fd55::1"}]}),
        ),
        // A result static cannot parse.
        (
            "1.0.0",
            json!({"cniVersion": "1.0.0", "ips": [{"address": "10.55.0.5"}]}),
        ),
        ("1.0.0", json!({"cniVersion": "0.4.0", "ips": []})),
        ("0.4.0", json!({"cniVersion": "1.0.0", "ips": []})),
        ("1.0.0", json!({"ips": "10.55.0.5/24"})),
        ("1.0.0", json!(null)),
    ] {
        Both::new(version, ipam.clone())
            .with("prevResult", prev_result)
            .same("CHECK", "");
    }
    Both::new("1.0.0", ipam).same("CHECK", "");
}

#[test]
fn address_syntax_as_go_parses_and_prints_it() {
    let ipam = json!({
        "addresses": [
            // IPv4-mapped: an IPv4 address, its prefix counted in the last 32 bits.
            {"address": "::ffff:10.56.0.5/120", "gateway": "::ffff:10.56.0.1"},
            // Go's parser takes a group of five hex digits, and a prefix with zeros.
            {"address": "fd56:00001::5/064"},
            {"address": "2001:db8:0:0:1:0:0:1/64"}
        ],
        // Host bits stay in a route's destination.
        "routes": [{"dst": "10.56.3.4/16", "gw": "10.56.0.1"}, {"dst": "::ffff:10.0.0.0/104"}]
    });
    for version in ["0.3.1", "1.0.0"] {
        let result = add_check_del(version, ipam.clone(), json!({}), "");
        assert_eq!(result["ips"][0]["address"], "10.56.0.5/24", "{result}");
        assert_eq!(result["ips"][1]["address"], "fd56:1::5/64", "{result}");
        assert_eq!(result["routes"][0]["dst"], "10.56.3.4/16", "{result}");
    }
}

#[test]
fn invalid_configs_fail_alike() {
    let nothing = json!({});
    for (ipam, top, cni_args) in [
        (
            json!({"addresses": [{"address": "10.57.0.5"}]}),
            &nothing,
            "",
        ),
        (
            json!({"addresses": [{"address": "10.57.0.5/24", "gateway": "10.57.0.300"}]}),
            &nothing,
            "",
        ),
        (
            json!({"addresses": [{"address": "10.57.0.5/24"}, {"address": "fd57::5/129"}]}),
            &nothing,
            "",
        ),
        (json!({"addresses": "10.57.0.5/24"}), &nothing, ""),
        (
            json!({"addresses": [{"address": 5}], "dns": {"nameservers": "10.57.0.53"}}),
            &nothing,
            "",
        ),
        (json!({"routes": [{"dst": "10.57.0.0"}]}), &nothing, ""),
        (json!({"routes": ["0.0.0.0/0"]}), &nothing, ""),
        (
            json!({"routes": [{"dst": "0.0.0.0/0", "gw": 1}]}),
            &nothing,
            "",
        ),
        (json!({}), &nothing, "IP=10.57.0.5"),
        (
            json!({}),
            &nothing,
            "IP=10.57.0.5/24;GATEWAY=10.57.0.1,gateway",
        ),
        (json!({}), &nothing, "K8S_POD_NAME=pod"),
        (json!({}), &nothing, "IgnoreUnknown=maybe"),
        (json!({}), &nothing, "IP=10.57.0.5/24=x"),
        (
            json!({}),
            &json!({"args": {"cni": {"ips": ["10.57.0.5"]}}}),
            "",
        ),
        (json!({}), &json!({"args": {"cni": "10.57.0.5/24"}}), ""),
        (json!({}), &json!({"runtimeConfig": {"ips": [1]}}), ""),
    ] {
        let mut both = Both::new("1.0.0", ipam);
        for (key, value) in top.as_object().unwrap() {
            both = both.with(key, value.clone());
        }
        let theirs = both.same("ADD", cni_args);
        assert_eq!(theirs.error_code(), 999, "skel's code for static's errors");
    }
}

/// static prints what its config says even when that is not valid CNI; the host checks
/// every module's result (`host/src/call/answer.rs`) and refuses it with code 106.
#[test]
fn answers_static_prints_but_cni_forbids_are_refused() {
    for ipam in [
        json!({"addresses": [{"address": "10.58.0.5/24", "gateway": "fd58::1"}]}),
        json!({"dns": {"nameservers": ["dns.example.test"]}}),
        json!({"routes": [{"gw": "10.58.0.1"}]}),
    ] {
        let (ours, theirs) = Both::new("1.0.0", ipam.clone()).run("ADD", "");
        theirs.ok();
        assert_eq!(ours.error_code(), 106, "{ipam}: {ours:?}");
    }
}

/// Debian's static (libcni 1.1) refuses cniVersion 1.1.0; the module speaks it, as
/// upstream static does since libcni 1.2: the 1.0.0 answer, GC and STATUS succeed
/// (nothing to collect, always ready). Route attributes are not read, as in Debian's.
#[test]
fn cni_1_1_0_where_debian_static_refuses_it() {
    let ipam = json!({
        "addresses": [{"address": "10.59.0.5/24", "gateway": "10.59.0.1"}],
        "routes": [{"dst": "0.0.0.0/0", "mtu": 1400}]
    });
    let (ours, theirs) = Both::new("1.1.0", ipam.clone()).run("ADD", "");
    assert_eq!(
        (theirs.error_code(), theirs.msg()),
        (1, "incompatible CNI versions")
    );
    let mut expected = Both::new("1.0.0", ipam.clone())
        .same("ADD", "")
        .json
        .unwrap();
    expected["cniVersion"] = "1.1.0".into();
    assert_eq!(ours.ok().json.as_ref(), Some(&expected));

    let both = Both::new("1.1.0", ipam)
        .with("prevResult", expected)
        .with("cni.dev/valid-attachments", json!([]));
    for command in ["CHECK", "GC", "STATUS", "DEL"] {
        let reply = Call::new(command, "c1").run(&both.ours);
        assert!(reply.ok().json.is_none(), "{command}: {reply:?}");
    }
}

/// The host parses CNI_ARGS before any module sees them: it drops empty pairs, which
/// libcni's LoadArgs (static's, host-local's) refuses, and refuses a pair without `=`
/// itself, as an environment error (code 4) where static's is code 999.
#[test]
fn cni_args_the_host_parses_first() {
    let both = Both::new("1.0.0", json!({}));
    let (ours, theirs) = both.run("ADD", "IP=10.60.0.5/24;");
    assert_eq!(theirs.msg(), "ARGS: invalid pair \"\"");
    assert_eq!(
        ours.ok().json.as_ref().unwrap()["ips"][0]["address"],
        "10.60.0.5/24"
    );
    let (ours, theirs) = both.run("ADD", "IP=10.60.0.5/24;IgnoreUnknown");
    assert_eq!(
        (theirs.error_code(), theirs.msg()),
        (999, "ARGS: invalid pair \"IgnoreUnknown\"")
    );
    assert_eq!(ours.error_code(), 4, "{ours:?}");
    assert!(ours.msg().contains("invalid pair"), "{ours:?}");
}

/// Why the netconf raises `moduleMaxMiB`: at the default the host refuses the
/// component before reading it whole.
#[test]
fn the_default_module_size_limit_refuses_the_component() {
    let module = static_py_module();
    let size = std::fs::metadata(module).unwrap().len();
    assert!(
        (16 << 20..32 << 20).contains(&size),
        "the component is {size} bytes: update limits() and the README"
    );
    let node = Node::new();
    let conf = node.netconf("1.0.0", module, json!({}));
    let reply = Call::new("ADD", "c1").run(&conf);
    assert_eq!(reply.error_code(), 100);
    assert!(
        reply.msg().contains("moduleMaxMiB (16 MiB)"),
        "{}",
        reply.msg()
    );
}

/// static allocates nothing it remembers: `list` shows no address and `stats` no pool
/// for the network, and there is nothing to import from host-local.
#[test]
fn operators_see_nothing_allocated_and_nothing_to_import() {
    let both = Both::new("1.0.0", json!({"addresses": [{"address": "10.61.0.5/24"}]}));
    both.same("ADD", "").ok();
    let node = &both.node;
    let netconf = node.dir.path().join("netconf.json");
    std::fs::write(&netconf, both.ours.to_string()).unwrap();
    let data_dir = node.data_dir();
    let lock_file = node.lock_file();
    let path = |p: &Path| p.to_string_lossy().into_owned();
    let list = operator_command([
        "list",
        "--json",
        "--netconf",
        &path(&netconf),
        "--data-dir",
        &path(&data_dir),
        "--lock-file",
        &path(&lock_file),
    ]);
    assert_eq!(serde_json::from_str::<Value>(&list).unwrap(), json!([]));

    let host_local = node.dir.path().join("host-local");
    std::fs::create_dir_all(host_local.join("testnet")).unwrap();
    std::fs::write(host_local.join("testnet/10.61.0.9"), "c9\r\neth0").unwrap();
    let import = Command::new(bin())
        .arg("import-host-local")
        .arg("--network=testnet")
        .arg("--data-dir")
        .arg(&host_local)
        .arg("--netconf")
        .arg(&netconf)
        .arg("--store-dir")
        .arg(&data_dir)
        .arg("--lock-file")
        .arg(&lock_file)
        .output()
        .unwrap();
    assert!(!import.status.success());
    let stderr = String::from_utf8_lossy(&import.stderr);
    assert!(
        stderr.contains(
            "code 121: network testnet: static keeps no state: nothing to import from 'host-local'"
        ),
        "{stderr}"
    );
}

/// The module's logic under plain CPython: static's recorded answers replayed
/// (examples/static-py/tests).
#[test]
fn python_unit_tests_pass() {
    let out = Command::new("python3")
        .args(["-m", "unittest", "discover", "-s"])
        .arg(workspace().join("examples/static-py/tests"))
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The median of `values`, with their range.
fn spread(mut values: Vec<f64>) -> String {
    values.sort_by(f64::total_cmp);
    format!(
        "{:.1} ({:.1}–{:.1})",
        values[values.len() / 2],
        values[0],
        values[values.len() - 1]
    )
}

/// The last logged call's `key`, in milliseconds.
fn logged_ms(node: &Node, key: &str) -> f64 {
    node.log_lines("invocation").last().unwrap()[key]
        .as_f64()
        .unwrap()
}

/// `runs` warm calls of `command` to `module` (after one that fills the cache), each
/// for a container of its own: the log's `load_ms`, `store_open_ms`,
/// `budget_used_ms` and `total_ms`, and from outside the wall time (under GNU time)
/// and peak RSS.
fn warm_calls(module: &Path, ipam: &Value, command: &str, runs: usize) -> String {
    let node = Node::new();
    let conf = with_limits(node.netconf("1.0.0", module, ipam.clone()));
    let (mut load, mut store_open, mut budget, mut total, mut wall, mut rss) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for i in 0..=runs {
        let container = format!("c{i}");
        let (reply, measured) = Call::new(command, &container).run_measured(&conf);
        reply.ok();
        if i > 0 {
            load.push(logged_ms(&node, "load_ms"));
            store_open.push(logged_ms(&node, "store_open_ms"));
            budget.push(logged_ms(&node, "budget_used_ms"));
            total.push(logged_ms(&node, "total_ms"));
            wall.push(measured.wall.as_secs_f64() * 1000.0);
            rss.push(measured.peak_rss_mib);
        }
    }
    format!(
        "load_ms {}, store_open_ms {}, budget_used_ms {}, total_ms {}, wall ms {}, peak RSS MiB {}",
        spread(load),
        spread(store_open),
        spread(budget),
        spread(total),
        spread(wall),
        spread(rss)
    )
}

/// The figures in examples/static-py/README.md, each the median (and range) of
/// `RUNS`: the component's size; first calls, each compiling it into an empty cache;
/// warm ADDs, and DELs (which do nothing: instantiating the module is most of
/// them), with the Rust host-local module's ADDs through the same binary for scale;
/// the guest memory the component starts with; and static's own calls (wall time from
/// spawn to exit). Run alone:
/// `cargo test --test integration static_py::measure -- --ignored --nocapture`.
#[test]
#[ignore = "measurements for the README, not a check; run on its own"]
fn measure() {
    const RUNS: usize = 7;
    let module = static_py_module();
    let host_local = host_local_module();
    let _alone = exclusive();
    let ipam = json!({
        "addresses": [{"address": "10.62.0.5/24", "gateway": "10.62.0.1"}, {"address": "fd62::5/64"}],
        "routes": [{"dst": "0.0.0.0/0"}],
        "dns": {"nameservers": ["10.62.0.53"]}
    });
    let (mut compile_ms, mut first_rss) = (vec![], vec![]);
    for _ in 0..RUNS {
        let node = Node::new();
        let mut conf = with_limits(node.netconf("1.0.0", module, ipam.clone()));
        conf["ipam"]["cacheDir"] = node.dir.path().join("cache").to_string_lossy().into();
        let (reply, measured) = Call::new("ADD", "c1").run_measured(&conf);
        reply.ok();
        assert_eq!(node.log_lines("invocation")[0]["module_cached"], false);
        compile_ms.push(logged_ms(&node, "load_ms"));
        first_rss.push(measured.peak_rss_mib);
    }
    let warm = warm_calls(module, &ipam, "ADD", RUNS);
    let warm_del = warm_calls(module, &ipam, "DEL", RUNS);
    let host_local_ipam = json!({"subnet": "10.63.0.0/24"});
    let warm_host_local = warm_calls(&host_local, &host_local_ipam, "ADD", RUNS);
    let node = Node::new();
    let mut starved = with_limits(node.netconf("1.0.0", module, ipam.clone()));
    starved["ipam"]["memoryLimitMiB"] = 1.into();
    let refused = Call::new("ADD", "c1").run(&starved);
    let theirs = json!({"cniVersion": "1.0.0", "name": "testnet", "type": "bridge", "ipam": ipam});
    let (mut static_ms, mut static_rss) = (vec![], vec![]);
    for _ in 0..RUNS {
        let started = std::time::Instant::now();
        Call::new("ADD", "c1").run_plugin(reference(), &theirs).ok();
        static_ms.push(started.elapsed().as_secs_f64() * 1000.0);
        let report = tempfile::NamedTempFile::new().unwrap();
        let mut time = Command::new("/usr/bin/time");
        time.arg("--format=%M")
            .arg("--output")
            .arg(report.path())
            .arg(reference());
        let out = Call::new("ADD", "c1")
            .spawn_command(time, theirs.to_string().as_bytes())
            .wait_with_output()
            .unwrap();
        assert!(out.status.success());
        let kib = std::fs::read_to_string(report.path()).unwrap();
        static_rss.push(kib.trim().parse::<f64>().unwrap() / 1024.0);
    }
    let size = std::fs::metadata(module).unwrap().len() as f64 / (1 << 20) as f64;
    println!("component: {size:.1} MiB");
    println!(
        "first call: load_ms (compiling) {}, peak RSS MiB {}",
        spread(compile_ms),
        spread(first_rss)
    );
    println!("warm ADD: {warm}");
    println!("warm DEL (instantiating, then a handler that does nothing): {warm_del}");
    println!("warm ADD, host-local module: {warm_host_local}");
    println!("at memoryLimitMiB 1: {}", refused.msg());
    println!(
        "static: wall ms {}, peak RSS MiB {}",
        spread(static_ms),
        spread(static_rss)
    );
}
