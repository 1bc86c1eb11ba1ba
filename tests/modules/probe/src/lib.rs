//! A test module whose behaviour is chosen by its netconf (`ipam.probe`), so the
//! integration suite can make a guest trap, loop, sleep, write then fail, or report
//! the budget it sees, and check what the host does about it.

use serde::Deserialize;
use std::time::{Duration, Instant};
use wasm_ipam_guest::store::{HostStore, Store};
use wasm_ipam_guest::{
    Attachment, Dns, Error, IpConfig, IpamModule, IpamResult, Request, deadline, export_module, log,
};

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Probe {
    /// Log the budget and what is left of it as the handler starts.
    report_budget: bool,
    /// Store writes to stage before anything else, as `key=value`.
    write: Vec<String>,
    /// Text to print on stdout and stderr (the host must keep it off its own stdout).
    print: Option<String>,
    /// Busy-wait this long (guest CPU time under the lock).
    spin_ms: u64,
    /// Sleep this long (a blocking WASI call the host must bound).
    sleep_ms: u64,
    /// Grow linear memory by this many MiB.
    alloc_mib: usize,
    /// How the handler ends: "ok" (default), "error", "trap", "loop".
    then: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Ipam {
    probe: Probe,
}

struct ProbeModule;

fn run(request: &Request) -> Result<(), Error> {
    let probe = request.ipam::<Ipam>()?.probe;
    if probe.report_budget {
        log::info(&format!(
            "remaining_at_start_ns={} budget_ns={}",
            deadline::remaining().as_nanos(),
            deadline::budget().as_nanos()
        ));
    }
    let mut store = HostStore;
    for pair in &probe.write {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        store.put(key, value.as_bytes())?;
    }
    if let Some(text) = &probe.print {
        println!("{text}");
        eprintln!("{text}");
    }
    if probe.spin_ms > 0 {
        let until = Instant::now() + Duration::from_millis(probe.spin_ms);
        while Instant::now() < until {
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
        "ok" => Ok(()),
        "error" => Err(Error::new(142, "probe asked to fail").with_details("then=error")),
        "trap" => panic!("probe asked to trap"),
        "loop" => loop {
            std::hint::black_box(());
        },
        other => Err(Error::invalid_config(format!(
            "unknown probe.then {other:?}"
        ))),
    }
}

impl IpamModule for ProbeModule {
    fn add(request: &Request) -> Result<IpamResult, Error> {
        run(request)?;
        Ok(IpamResult {
            ips: vec![IpConfig {
                address: "10.99.0.2/24".into(),
                gateway: Some("10.99.0.1".into()),
            }],
            routes: vec![],
            dns: Dns {
                nameservers: vec![],
                domain: None,
                search: vec![],
                options: vec![],
            },
        })
    }
    fn del(request: &Request) -> Result<(), Error> {
        run(request)
    }
    fn check(request: &Request) -> Result<(), Error> {
        run(request)
    }
    fn gc(request: &Request, _valid: &[Attachment]) -> Result<(), Error> {
        run(request)
    }
    fn status(request: &Request) -> Result<(), Error> {
        run(request)
    }
}

export_module!(ProbeModule);
