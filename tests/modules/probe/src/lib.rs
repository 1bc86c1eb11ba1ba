//! A test module whose behaviour is chosen by its netconf (`ipam.probe`), so the
//! integration suite can make a guest trap, loop, sleep, flood the host, forge its
//! answer, or report the budget it sees, and check what the host does about it. It is
//! the hostile vendor's module, written to be configured rather than rewritten.

use serde::Deserialize;
use std::time::{Duration, Instant};
use wasm_ipam_guest::store::{HostStore, Store};
use wasm_ipam_guest::{
    Allocation, Attachment, Context, Dns, Error, IpConfig, IpamModule, IpamResult, Request, Route,
    deadline, export_module, log, readiness,
};

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Probe {
    /// Log the budget and what is left of it as the handler starts.
    report_budget: bool,
    /// Log the request's node name.
    report_node: bool,
    /// What `inspect.allocations` does: `write` (try a store write and fail with the
    /// refusal), `spin` (never return), `garbage` (answer what a terminal must not
    /// print as is); otherwise list `ip/<address>` entries.
    inspect: Option<String>,
    /// Store writes to stage before anything else, as `key=value`.
    write: Vec<String>,
    /// A history checker's register: read this key (a decimal number, absent as 0),
    /// write it back plus one, and answer the number read as the ADD's address.
    counter: Option<String>,
    /// A history checker's set: list this prefix, add the entry `<prefix><n>` where n
    /// is how many it held, and answer n as the ADD's address (a phantom missed by a
    /// store's isolation shows up as two calls answering the same n).
    append: Option<String>,
    /// Stage this many entries `flood/<n>` of `floodValueBytes` bytes each; a refused
    /// write fails the call with the SDK's error.
    flood_entries: u64,
    flood_value_bytes: usize,
    /// The first `<n>` of the flood's keys.
    flood_from: u64,
    /// Stop flooding at the first refused write and go on, instead of failing.
    flood_until_refused: bool,
    /// Call `list-prefix` on this prefix `listTimes` times, and log how many entries
    /// the last answer held.
    list_prefix: Option<String>,
    list_times: u32,
    /// Log this many messages of `logBytes` bytes.
    log_messages: u64,
    log_bytes: usize,
    /// Text to print on stdout and stderr (the host must keep it off its own stdout).
    print: Option<String>,
    /// Busy-wait this long (guest CPU time under the lock).
    spin_ms: u64,
    /// Busy-wait until this much of the budget is left (for a late answer).
    spin_until_remaining_ms: Option<u64>,
    /// Sleep this long (a blocking WASI call the host must bound).
    sleep_ms: u64,
    /// Grow linear memory by this many MiB.
    alloc_mib: usize,
    /// Recurse without end (a stack overflow).
    recurse: bool,
    /// Try to reach outside the sandbox (files, sockets, environment, arguments) and
    /// fail with code 199 naming whatever worked.
    escape: bool,
    /// The ADD result: this many addresses (default one), and extra DNS fields.
    result_ips: Option<usize>,
    result_routes: usize,
    nameservers: Vec<String>,
    search: Vec<String>,
    options: Vec<String>,
    /// The error `then: "error"` returns: its code (default 142) and a message of this
    /// many bytes (default a short one).
    error_code: Option<u32>,
    error_bytes: Option<usize>,
    /// How the handler ends: "ok" (default), "error", "trap", "loop", "exit",
    /// "host-call-loop".
    then: Option<String>,
    /// Report these conditions degraded (`readiness`), each `code:message`; with
    /// `degradedCopies`, the list repeated that many times (a flood).
    degraded: Option<Vec<String>>,
    degraded_copies: Option<usize>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Ipam {
    probe: Probe,
}

struct ProbeModule;

#[allow(unconditional_recursion)]
fn recurse(depth: u64) -> u64 {
    std::hint::black_box(recurse(std::hint::black_box(depth + 1))) + 1
}

/// What of the outside world this sandbox let the module see; empty when nothing.
fn escapes() -> Vec<String> {
    let mut escaped = Vec::new();
    for path in ["/etc/passwd", "/", ".", "/proc/self/environ"] {
        if std::fs::read_dir(path).is_ok() || std::fs::read(path).is_ok() {
            escaped.push(format!("read {path}"));
        }
    }
    if std::fs::write("/tmp/wasm-ipam-probe-escape", b"x").is_ok() {
        escaped.push("wrote /tmp".into());
    }
    for addr in ["127.0.0.1:22", "127.0.0.1:2379", "[::1]:80"] {
        if std::net::TcpStream::connect(addr).is_ok() {
            escaped.push(format!("connected to {addr}"));
        }
    }
    if std::net::UdpSocket::bind("0.0.0.0:0").is_ok() {
        escaped.push("bound a UDP socket".into());
    }
    if std::env::vars_os().next().is_some() {
        escaped.push("saw environment variables".into());
    }
    if std::env::args_os().next().is_some() {
        escaped.push("saw arguments".into());
    }
    escaped
}

fn run(request: &Request, store: &mut impl Store) -> Result<(Probe, Option<u64>), Error> {
    let probe = request.ipam::<Ipam>()?.probe;
    if probe.report_node {
        log::info(&format!("node_name={}", request.node_name()));
    }
    if probe.report_budget {
        log::info(&format!(
            "remaining_at_start_ns={} budget_ns={}",
            deadline::remaining().as_nanos(),
            deadline::budget().as_nanos()
        ));
    }
    for pair in &probe.write {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        store.put(key, value.as_bytes())?;
    }
    if let Some(degraded) = &probe.degraded {
        let conditions: Vec<Error> = degraded
            .iter()
            .map(|c| {
                let (code, msg) = c.split_once(':').unwrap_or(("140", c));
                Error::new(code.parse().unwrap_or(140), msg)
            })
            .collect();
        let copies = probe.degraded_copies.unwrap_or(1);
        let flood: Vec<Error> = (0..copies).flat_map(|_| conditions.clone()).collect();
        readiness::degraded(&flood);
    }
    let mut seen = None;
    if let Some(key) = &probe.counter {
        let n: u64 = match store.get(key) {
            Some(v) => String::from_utf8_lossy(&v).parse().unwrap_or(0),
            None => 0,
        };
        store.put(key, (n + 1).to_string().as_bytes())?;
        seen = Some(n);
    }
    if let Some(prefix) = &probe.append {
        let n = store.list(prefix).len() as u64;
        store.put(&format!("{prefix}{n:09}"), b"x")?;
        seen = Some(n);
    }
    let value = vec![b'v'; probe.flood_value_bytes];
    for n in probe.flood_from..probe.flood_from + probe.flood_entries {
        match store.put(&format!("flood/{n:09}"), &value) {
            Ok(()) => {}
            Err(_) if probe.flood_until_refused => break,
            Err(e) => return Err(e),
        }
    }
    if let Some(prefix) = &probe.list_prefix {
        let mut listed = 0;
        for _ in 0..probe.list_times.max(1) {
            listed = store.list(prefix).len();
        }
        log::info(&format!("listed={listed}"));
    }
    let message = "m".repeat(probe.log_bytes);
    for _ in 0..probe.log_messages {
        log::info(&message);
    }
    if let Some(text) = &probe.print {
        println!("{text}");
        eprintln!("{text}");
    }
    if probe.escape {
        let escaped = escapes();
        if !escaped.is_empty() {
            return Err(Error::new(199, "escaped the sandbox").with_details(escaped.join("; ")));
        }
    }
    if probe.recurse {
        recurse(0);
    }
    if probe.spin_ms > 0 {
        let until = Instant::now() + Duration::from_millis(probe.spin_ms);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    }
    if let Some(ms) = probe.spin_until_remaining_ms {
        while deadline::remaining() > Duration::from_millis(ms) {
            std::hint::spin_loop();
        }
    }
    if probe.sleep_ms > 0 {
        std::thread::sleep(Duration::from_millis(probe.sleep_ms));
    }
    if probe.alloc_mib > 0 {
        let block = vec![1u8; probe.alloc_mib << 20];
        std::hint::black_box(&block);
    }
    match probe.then.as_deref().unwrap_or("ok") {
        "ok" => Ok((probe, seen)),
        "error" => {
            let msg = match probe.error_bytes {
                Some(n) => "e".repeat(n),
                None => "probe asked to fail".into(),
            };
            Err(Error::new(probe.error_code.unwrap_or(142), msg).with_details("then=error"))
        }
        "trap" => panic!("probe asked to trap"),
        "loop" => loop {
            std::hint::black_box(());
        },
        "exit" => std::process::exit(3),
        "host-call-loop" => loop {
            std::hint::black_box(deadline::remaining());
        },
        other => Err(Error::invalid_config(format!(
            "unknown probe.then {other:?}"
        ))),
    }
}

/// CHECK and STATUS are read-only in the SDK's signatures, yet the probe's `write`
/// and `flood` must reach the host on every command (the host stages and discards
/// them like any other), so those two run on the host's store as the others do.
#[wasm_ipam_guest::ipam_module]
impl IpamModule for ProbeModule {
    fn add(request: &Request, store: &mut impl Store) -> Result<IpamResult, Error> {
        let (probe, seen) = run(request, store)?;
        let ips = match probe.result_ips {
            None if seen.is_some() => {
                let n = seen.unwrap_or_default();
                vec![IpConfig::new(format!(
                    "10.{}.{}.{}/8",
                    (n >> 16) & 255,
                    (n >> 8) & 255,
                    n & 255
                ))]
            }
            None => vec![IpConfig::new("10.99.0.2/24").gateway("10.99.0.1")],
            Some(n) => (0..n)
                .map(|i| {
                    IpConfig::new(format!(
                        "10.{}.{}.{}/8",
                        (i >> 16) & 255,
                        (i >> 8) & 255,
                        i & 255
                    ))
                    .gateway("10.99.0.1")
                })
                .collect(),
        };
        let routes = (0..probe.result_routes)
            .map(|i| Route::new(format!("192.168.{}.0/24", i & 255)))
            .collect();
        Ok(IpamResult {
            ips,
            routes,
            dns: Dns {
                nameservers: probe.nameservers,
                domain: None,
                search: probe.search,
                options: probe.options,
            },
        })
    }
    fn del(request: &Request, store: &mut impl Store) -> Result<(), Error> {
        run(request, store).map(drop)
    }
    fn check(request: &Request, _: &impl Store) -> Result<(), Error> {
        run(request, &mut HostStore).map(drop)
    }
    fn gc(request: &Request, _valid: &[Attachment], store: &mut impl Store) -> Result<(), Error> {
        run(request, store).map(drop)
    }
    fn allocations(context: &Context, store: &impl Store) -> Result<Vec<Allocation>, Error> {
        let probe = context.ipam::<Ipam>()?.map(|i| i.probe).unwrap_or_default();
        match probe.inspect.as_deref() {
            Some("write") => {
                HostStore.put("ip/10.99.0.9", b"inspect")?;
                Ok(Vec::new())
            }
            Some("spin") => loop {
                std::hint::black_box(deadline::remaining());
            },
            Some("garbage") => Ok(vec![
                Allocation::new("not-an-ip", "c1", "eth0"),
                Allocation::new("10.99.0.3", "evil\u{1b}[2J", "eth0").since(u64::MAX),
            ]),
            _ => Ok(store
                .list("ip/")
                .into_iter()
                .map(|(key, owner)| {
                    Allocation::new(&key["ip/".len()..], String::from_utf8_lossy(&owner), "")
                })
                .collect()),
        }
    }
}

export_module!(ProbeModule);
