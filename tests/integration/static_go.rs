//! A module in Go: `examples/static-go`, the reference `static` IPAM plugin written on
//! the Go SDK, side by side with the real one (`/usr/lib/cni/static`) in the cases of
//! `static_parity.rs`, and with the Python one (`examples/static-py`) where the host
//! makes both differ from Debian's; all within the host's default limits.

use crate::go_sdk::go_module;
use crate::harness::*;
use crate::static_parity::{Both, Static, parity_tests};
use serde_json::{Value, json};

/// The Go module: it needs no limit beyond the defaults.
pub fn go_static() -> Static {
    Static {
        module: go_module("examples/static-go", "static_go"),
        limits: json!({}),
    }
}

parity_tests!(go_static());

/// Where Debian's static cannot be the reference (what the host refuses or parses
/// before any module, a version Debian's static does not speak, the host's empty `ips`
/// list), the Go and Python modules answer alike: the same exit, the same JSON.
#[test]
fn where_debian_differs_the_go_and_python_modules_answer_alike() {
    let python = crate::static_py::python();
    let go = go_static();
    let cases: Vec<(&str, &str, Value, Value)> = vec![
        (
            "ADD",
            "",
            json!({"addresses": [{"address": "10.58.0.5/24", "gateway": "fd58::1"}]}),
            json!({}),
        ),
        (
            "ADD",
            "",
            json!({"dns": {"nameservers": ["dns.example.test"]}}),
            json!({}),
        ),
        (
            "ADD",
            "",
            json!({"routes": [{"gw": "10.58.0.1"}]}),
            json!({}),
        ),
        ("ADD", "", json!({"routes": [null]}), json!({})),
        (
            "ADD",
            "",
            json!({"routes": [{"dst": "10.0.0.0/8"}]}),
            json!({}),
        ),
        ("ADD", "IP=10.60.0.5/24;", json!({}), json!({})),
        ("ADD", "IP=10.60.0.5/24;IgnoreUnknown", json!({}), json!({})),
        (
            "ADD",
            "",
            json!({"addresses": [{"address": "10.59.0.5/24"}], "routes": [{"dst": "0.0.0.0/0", "mtu": 1400}]}),
            json!({}),
        ),
        (
            "CHECK",
            "",
            json!({"addresses": [{"address": "10.59.0.5/24"}]}),
            json!({"prevResult": {"cniVersion": "1.1.0", "ips": [null]}}),
        ),
        (
            "CHECK",
            "",
            json!({"addresses": [{"address": "10.59.0.5/24"}]}),
            json!({"prevResult": {"cniVersion": "1.1.0", "ips": [{"address": "10.59.0.5/24"}]}}),
        ),
        (
            "GC",
            "",
            json!({}),
            json!({"cni.dev/valid-attachments": []}),
        ),
        ("STATUS", "", json!({}), json!({})),
        (
            "DEL",
            "",
            json!({"addresses": "not even a list"}),
            json!({}),
        ),
    ];
    for (command, cni_args, ipam, top) in cases {
        let replies: Vec<Reply> = [&python, &go]
            .iter()
            .map(|subject| {
                let mut both = Both::new(subject, "1.1.0", ipam.clone());
                for (key, value) in top.as_object().unwrap() {
                    both = both.with(key, value.clone());
                }
                let mut call = Call::new(command, "c1");
                if !cni_args.is_empty() {
                    call = call.env("CNI_ARGS", cni_args);
                }
                call.run(&both.ours)
            })
            .collect();
        let [py, go] = &replies[..] else {
            unreachable!()
        };
        let step = format!("{command} {cni_args:?} {ipam} {top}");
        assert_eq!((py.success, &py.json), (go.success, &go.json), "{step}");
    }
}

/// The Go component is a few MiB: within the default `moduleMaxMiB` (16), unlike the
/// Python one, and every parity case above runs at the default limits.
#[test]
fn the_component_fits_the_default_module_size() {
    let size = std::fs::metadata(go_static().module).unwrap().len();
    assert!(
        size < 8 << 20,
        "the component is {size} bytes: update guest-go/README.md"
    );
}

/// The median of `values`, with their range.
fn spread(values: Vec<f64>) -> (f64, String) {
    let (median, low, high) = median_and_range(values);
    (median, format!("{median:.2} ({low:.2}–{high:.2})"))
}

/// The figures in guest-go/README.md: warm ADD+DEL cycles (spawn to exit of both
/// calls) of the Rust host-local module, static-go and static-py through the same
/// binary, interleaved so they share the machine's noise; the Go component's first
/// call, compiling it into an empty cache (`load_ms`), and its warm calls' split from
/// the log. Run alone:
/// `cargo test --test integration static_go::measure -- --ignored --nocapture`.
#[test]
#[ignore = "measurements for the README, not a check; run on its own"]
fn measure() {
    const CYCLES: usize = 21;
    let python = crate::static_py::python();
    let go = go_static();
    let host_local = Static {
        module: host_local_module(),
        limits: json!({}),
    };
    let _alone = exclusive();
    let peers = [
        (
            "host-local (Rust)",
            &host_local,
            json!({"subnet": "10.64.0.0/24"}),
        ),
        (
            "static-go",
            &go,
            json!({"addresses": [{"address": "10.65.0.5/24", "gateway": "10.65.0.1"}]}),
        ),
        (
            "static-py",
            &python,
            json!({"addresses": [{"address": "10.66.0.5/24", "gateway": "10.66.0.1"}]}),
        ),
    ];
    let nodes: Vec<(Node, Value)> = peers
        .iter()
        .map(|(_, subject, ipam)| {
            let node = Node::new();
            let conf = crate::static_parity::with_limits(
                subject,
                node.netconf("1.0.0", &subject.module, ipam.clone()),
            );
            (node, conf)
        })
        .collect();
    let mut cycles: Vec<Vec<f64>> = vec![Vec::new(); peers.len()];
    for i in 0..=CYCLES {
        for (p, (_, conf)) in nodes.iter().enumerate() {
            let id = format!("c{i}");
            let started = std::time::Instant::now();
            Call::new("ADD", &id).run(conf).assert_ok();
            Call::new("DEL", &id).run(conf).assert_ok();
            if i > 0 {
                cycles[p].push(started.elapsed().as_secs_f64() * 1000.0);
            }
        }
    }
    let rust = spread(cycles[0].clone()).0;
    for ((name, _, _), samples) in peers.iter().zip(&cycles) {
        let (median, text) = spread(samples.clone());
        println!(
            "warm ADD+DEL cycle, {name}: {text} ms, {:.2}x the Rust module's",
            median / rust
        );
    }
    let (go_node, _) = &nodes[1];
    let logged = |key: &str, command: &str| {
        let values: Vec<f64> = go_node
            .log_lines("invocation")
            .iter()
            .filter(|l| l["command"] == command)
            .skip(1)
            .filter_map(|l| l[key].as_f64())
            .collect();
        spread(values).1
    };
    for key in ["load_ms", "store_open_ms", "budget_used_ms", "total_ms"] {
        println!("static-go warm ADD {key}: {}", logged(key, "ADD"));
    }
    let mut compile = Vec::new();
    for _ in 0..5 {
        let node = Node::new();
        let mut conf = node.netconf("1.0.0", &go.module, peers[1].2.clone());
        conf["ipam"]["cacheDir"] = node.dir.path().join("cache").to_string_lossy().into();
        Call::new("ADD", "c1").run(&conf).assert_ok();
        let line = &node.log_lines("invocation")[0];
        assert_eq!(line["module_cached"], false);
        compile.push(line["load_ms"].as_f64().unwrap());
    }
    println!(
        "static-go first call, compiling (load_ms): {}",
        spread(compile).1
    );
}
