//! The reference `static` IPAM plugin's behaviour, asked of a module that implements
//! it (`examples/static-py` in Python, `examples/static-go` in Go) side by side with
//! the real one (`/usr/lib/cni/static`, Debian's containernetworking-plugins): the same
//! configs, CNI_ARGS and capabilities give the same result JSON, and the same error
//! code and message where static refuses. Where the two legitimately differ (an answer
//! static prints that is not valid CNI, the empty `ips` list the host prints, a version
//! Debian's static does not speak, CNI_ARGS the host parses before any module) the
//! difference has a case of its own. Each case takes the module as a [`Static`];
//! `parity_tests!` makes one test per case in the module's own test file.

use crate::harness::*;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

const REFERENCE: &str = "/usr/lib/cni/static";

/// A module implementing static, and the host limits it needs beyond the defaults.
pub struct Static {
    pub module: PathBuf,
    pub limits: Value,
}

pub fn reference() -> &'static Path {
    let path = Path::new(REFERENCE);
    assert!(
        path.exists(),
        "{REFERENCE} is missing: install Debian's containernetworking-plugins (scripts/test.sh does)"
    );
    path
}

pub fn with_limits(subject: &Static, mut conf: Value) -> Value {
    for (key, value) in subject.limits.as_object().unwrap() {
        conf["ipam"][key] = value.clone();
    }
    conf
}

/// One network configured for both plugins: the same module keys (`ipam`) and
/// top-level keys (`args`, `runtimeConfig`, `prevResult`).
pub struct Both {
    pub node: Node,
    pub ours: Value,
    pub theirs: Value,
}

impl Both {
    pub fn new(subject: &Static, version: &str, ipam: Value) -> Self {
        let node = Node::new();
        let ours = with_limits(
            subject,
            node.netconf(version, &subject.module, ipam.clone()),
        );
        let mut theirs =
            json!({"cniVersion": version, "name": "testnet", "type": "bridge", "ipam": ipam});
        theirs["ipam"]["type"] = "static".into();
        Both { node, ours, theirs }
    }

    /// Sets a top-level netconf key for both.
    pub fn with(mut self, key: &str, value: Value) -> Self {
        self.ours[key] = value.clone();
        self.theirs[key] = value;
        self
    }

    /// Runs `command` through both: (wasm-ipam, static).
    pub fn run(&self, command: &str, cni_args: &str) -> (Reply, Reply) {
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
    pub fn same(&self, command: &str, cni_args: &str) -> Reply {
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
fn add_check_del(
    subject: &Static,
    version: &str,
    ipam: Value,
    top: Value,
    cni_args: &str,
) -> Value {
    let mut both = Both::new(subject, version, ipam);
    for (key, value) in top.as_object().unwrap() {
        both = both.with(key, value.clone());
    }
    let result = both.same("ADD", cni_args).assert_ok().json.clone().unwrap();
    if version == "0.4.0" || version == "1.0.0" {
        let both = both.with("prevResult", result.clone());
        both.same("CHECK", cni_args).assert_ok();
        both.same("DEL", cni_args).assert_ok();
    } else {
        both.same("DEL", cni_args).assert_ok();
    }
    result
}

pub fn addresses_gateways_routes_and_dns_under_every_version_static_speaks(subject: &Static) {
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
        let result = add_check_del(subject, version, ipam.clone(), json!({}), "");
        assert_eq!(result["ips"].as_array().unwrap().len(), 2, "{result}");
        assert_eq!(result["routes"].as_array().unwrap().len(), 3, "{result}");
        assert_eq!(result["dns"]["search"][1], "example.test", "{result}");
    }
}

pub fn several_addresses_per_family(subject: &Static) {
    let several = json!({"addresses": [
        {"address": "10.51.0.5/24", "gateway": "10.51.0.1"},
        {"address": "10.51.1.5/24"},
        {"address": "192.0.2.7/32"},
        {"address": "fd51::5/64", "gateway": "fd51::1"},
        {"address": "fd51:1::5/120"}
    ]});
    for version in ["0.3.1", "1.0.0"] {
        let result = add_check_del(subject, version, several.clone(), json!({}), "");
        assert_eq!(result["ips"].as_array().unwrap().len(), 5, "{result}");
    }
}

/// With no address configured, libcni leaves `ips` out of static's result; the host
/// prints every result with an `ips` list (`host/src/cni.rs`), here empty. Both are
/// valid CNI; everything else is the same.
pub fn an_answer_without_addresses_keeps_an_empty_ips_list(subject: &Static) {
    let both = Both::new(subject, "1.0.0", json!({"routes": [{"dst": "10.0.0.0/8"}]}));
    let (ours, theirs) = both.run("ADD", "");
    let mut ours = ours.assert_ok().json.clone().unwrap();
    let theirs = theirs.assert_ok().json.clone().unwrap();
    assert!(theirs.get("ips").is_none(), "{theirs}");
    assert_eq!(ours["ips"], json!([]));
    ours.as_object_mut().unwrap().remove("ips");
    assert_eq!(ours, theirs);
    let both = both.with("prevResult", theirs);
    both.same("CHECK", "").assert_ok();
    both.same("DEL", "").assert_ok();
}

pub fn cni_args_ip_and_gateway(subject: &Static) {
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
            let result = add_check_del(subject, version, ipam.clone(), json!({}), cni_args);
            assert!(!result["ips"].as_array().unwrap().is_empty(), "{result}");
        }
    }
}

pub fn args_cni_ips_replace_every_other_address(subject: &Static) {
    let ipam = json!({"addresses": [{"address": "10.53.0.5/24", "gateway": "10.53.0.1"}]});
    let top = json!({"args": {"cni": {"ips": ["10.53.1.5/24", "fd53::5/64"]}}});
    for version in ["0.3.1", "0.4.0", "1.0.0"] {
        let result = add_check_del(
            subject,
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

pub fn runtime_config_ips_replace_them_last(subject: &Static) {
    let ipam = json!({"addresses": [{"address": "10.54.0.5/24"}]});
    let capability = json!({"runtimeConfig": {"ips": ["10.54.9.9/16"]}});
    let result = add_check_del(subject, "1.0.0", ipam.clone(), capability, "");
    assert_eq!(result["ips"], json!([{"address": "10.54.9.9/16"}]));
    let both_ways = json!({
        "runtimeConfig": {"ips": ["10.54.9.9/16", "fd54::9/64"]},
        "args": {"cni": {"ips": ["10.54.1.1/24"]}}
    });
    for version in ["0.3.1", "0.4.0", "1.0.0"] {
        let result = add_check_del(
            subject,
            version,
            ipam.clone(),
            both_ways.clone(),
            "IP=10.54.2.2/24",
        );
        assert_eq!(result["ips"].as_array().unwrap().len(), 2, "{result}");
    }
}

pub fn check_compares_configured_gateways_with_prev_result(subject: &Static) {
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
        Both::new(subject, version, ipam.clone())
            .with("prevResult", prev_result)
            .same("CHECK", "");
    }
    Both::new(subject, "1.0.0", ipam).same("CHECK", "");
}

pub fn address_syntax_as_go_parses_and_prints_it(subject: &Static) {
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
        let result = add_check_del(subject, version, ipam.clone(), json!({}), "");
        assert_eq!(result["ips"][0]["address"], "10.56.0.5/24", "{result}");
        assert_eq!(result["ips"][1]["address"], "fd56:1::5/64", "{result}");
        assert_eq!(result["routes"][0]["dst"], "10.56.3.4/16", "{result}");
    }
}

pub fn invalid_configs_fail_alike(subject: &Static) {
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
        let mut both = Both::new(subject, "1.0.0", ipam);
        for (key, value) in top.as_object().unwrap() {
            both = both.with(key, value.clone());
        }
        let theirs = both.same("ADD", cni_args);
        assert_eq!(theirs.error_code(), 999, "skel's code for static's errors");
    }
}

/// static prints what its config says even when that is not valid CNI; the host checks
/// every module's result (`host/src/call/answer.rs`) and refuses it with code 106.
pub fn answers_static_prints_but_cni_forbids_are_refused(subject: &Static) {
    for ipam in [
        json!({"addresses": [{"address": "10.58.0.5/24", "gateway": "fd58::1"}]}),
        json!({"dns": {"nameservers": ["dns.example.test"]}}),
        json!({"routes": [{"gw": "10.58.0.1"}]}),
    ] {
        let (ours, theirs) = Both::new(subject, "1.0.0", ipam.clone()).run("ADD", "");
        theirs.assert_ok();
        assert_eq!(ours.error_code(), 106, "{ipam}: {ours:?}");
    }
}

/// Debian's static (libcni 1.1) refuses cniVersion 1.1.0; the module speaks it, as
/// upstream static does since libcni 1.2: the 1.0.0 answer, GC and STATUS succeed
/// (nothing to collect, always ready). Route attributes are not read, as in Debian's.
pub fn cni_1_1_0_where_debian_static_refuses_it(subject: &Static) {
    let ipam = json!({
        "addresses": [{"address": "10.59.0.5/24", "gateway": "10.59.0.1"}],
        "routes": [{"dst": "0.0.0.0/0", "mtu": 1400}]
    });
    let (ours, theirs) = Both::new(subject, "1.1.0", ipam.clone()).run("ADD", "");
    assert_eq!(
        (theirs.error_code(), theirs.msg()),
        (1, "incompatible CNI versions")
    );
    let mut expected = Both::new(subject, "1.0.0", ipam.clone())
        .same("ADD", "")
        .json
        .unwrap();
    expected["cniVersion"] = "1.1.0".into();
    assert_eq!(ours.assert_ok().json.as_ref(), Some(&expected));

    let both = Both::new(subject, "1.1.0", ipam)
        .with("prevResult", expected)
        .with("cni.dev/valid-attachments", json!([]));
    for command in ["CHECK", "GC", "STATUS", "DEL"] {
        let reply = Call::new(command, "c1").run(&both.ours);
        assert!(reply.assert_ok().json.is_none(), "{command}: {reply:?}");
    }
}

/// The host parses CNI_ARGS before any module sees them: it drops empty pairs, which
/// libcni's LoadArgs (static's, host-local's) refuses, and refuses a pair without `=`
/// itself, as an environment error (code 4) where static's is code 999.
pub fn cni_args_the_host_parses_first(subject: &Static) {
    let both = Both::new(subject, "1.0.0", json!({}));
    let (ours, theirs) = both.run("ADD", "IP=10.60.0.5/24;");
    assert_eq!(theirs.msg(), "ARGS: invalid pair \"\"");
    assert_eq!(
        ours.assert_ok().json.as_ref().unwrap()["ips"][0]["address"],
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

/// One `#[test]` per case, each asking `$subject` (an expression giving a [`Static`]).
macro_rules! parity_tests {
    ($subject:expr) => {
        #[test]
        fn addresses_gateways_routes_and_dns_under_every_version_static_speaks() {
            crate::static_parity::addresses_gateways_routes_and_dns_under_every_version_static_speaks(&$subject)
        }
        #[test]
        fn several_addresses_per_family() {
            crate::static_parity::several_addresses_per_family(&$subject)
        }
        #[test]
        fn an_answer_without_addresses_keeps_an_empty_ips_list() {
            crate::static_parity::an_answer_without_addresses_keeps_an_empty_ips_list(&$subject)
        }
        #[test]
        fn cni_args_ip_and_gateway() {
            crate::static_parity::cni_args_ip_and_gateway(&$subject)
        }
        #[test]
        fn args_cni_ips_replace_every_other_address() {
            crate::static_parity::args_cni_ips_replace_every_other_address(&$subject)
        }
        #[test]
        fn runtime_config_ips_replace_them_last() {
            crate::static_parity::runtime_config_ips_replace_them_last(&$subject)
        }
        #[test]
        fn check_compares_configured_gateways_with_prev_result() {
            crate::static_parity::check_compares_configured_gateways_with_prev_result(&$subject)
        }
        #[test]
        fn address_syntax_as_go_parses_and_prints_it() {
            crate::static_parity::address_syntax_as_go_parses_and_prints_it(&$subject)
        }
        #[test]
        fn invalid_configs_fail_alike() {
            crate::static_parity::invalid_configs_fail_alike(&$subject)
        }
        #[test]
        fn answers_static_prints_but_cni_forbids_are_refused() {
            crate::static_parity::answers_static_prints_but_cni_forbids_are_refused(&$subject)
        }
        #[test]
        fn cni_1_1_0_where_debian_static_refuses_it() {
            crate::static_parity::cni_1_1_0_where_debian_static_refuses_it(&$subject)
        }
        #[test]
        fn cni_args_the_host_parses_first() {
            crate::static_parity::cni_args_the_host_parses_first(&$subject)
        }
    };
}
pub(crate) use parity_tests;
