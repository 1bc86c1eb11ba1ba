//! `wasm-ipam conform MODULE [--netconf FILE]`: the promises a runtime relies on,
//! checked on any module before a node finds out. Each check runs the module as a
//! runtime runs the plugin (this binary, `CNI_*` and the netconf on stdin: the lock,
//! the deadline, the store, the commit), on a scratch store of its own, and prints
//! one line: passed, or what was asked, what came back and what the CNI spec or the
//! module contract says. The command fails when one check does.
//!
//! The module is compiled once, into a cache shared by the checks, before any runs,
//! so the calls' times are the module's own.

use crate::cni::SUPPORTED_VERSIONS;
use crate::error::{CniError, code};
use crate::operator::args::Output;
use crate::operator::modules::try_call::{CniCommand, invoke, list_state};
use serde_json::{Value, json};
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Check a module against the promises a runtime relies on: ADD, CHECK and DEL of
/// one attachment and DEL again, DEL of a container never added, a repeated ADD, two
/// interfaces, exhaustion, state across processes, every CNI version, STATUS, GC,
/// `list` against what was handed out, and time within the budget; one line each,
/// on scratch state. Exits 1 if one fails.
#[derive(Debug, Clone, clap::Args)]
pub struct ConformCommand {
    /// The module's .wasm component.
    pub module: PathBuf,
    /// A network configuration whose `ipam` holds the module's keys (a small range
    /// makes the exhaustion check quick); the module and the state paths are set
    /// over it. Default: one with no keys of the module's.
    #[arg(long)]
    pub netconf: Option<PathBuf>,
    /// The exhaustion check gives up (not run) after this many ADDs.
    #[arg(long, default_value_t = 256)]
    pub max_adds: usize,
}

/// One check: its run on the session.
type CheckFn = fn(&Session) -> Result<Verdict, Ended>;

/// Why a check ended before its last step: the verdict of the step that failed, or an
/// error running the plugin at all (which ends the command).
enum Ended {
    Verdict(Verdict),
    Error(CniError),
}

impl From<CniError> for Ended {
    fn from(e: CniError) -> Self {
        Ended::Error(e)
    }
}

/// One check's verdict.
enum Verdict {
    Passed(String),
    /// What was asked, what came back, and what the spec or contract says.
    Failed {
        asked: String,
        got: String,
        rule: &'static str,
    },
    NotRun(String),
}

/// What the spec or the contract says, for a failure's line.
const DEL_IDEMPOTENT: &str = "the CNI spec: a plugin should complete a DEL without error even if resources are missing (a DEL may come twice, or for an ADD that never happened)";
const CHECK_AFTER_ADD: &str = "the CNI spec: CHECK of an attachment ADD set up succeeds; after its DEL the module answers 3 (the contract's UNKNOWN_CONTAINER) or any error";
const ADD_RETRIED: &str = "the module contract: an ADD repeated for the same container and interface (a runtime retrying after a timeout) answers the same addresses, and holds no second one";
const PER_INTERFACE: &str = "the CNI spec: an attachment is (CNI_CONTAINERID, CNI_IFNAME): two interfaces of one container get addresses of their own, and a DEL of one leaves the other";
const EXHAUSTION: &str = "the module contract: an exhausted range answers an error of the module's own codes (140 and up; 100 to 139 are the host's and the SDK's), and a DEL frees an address for the next ADD";
const SURVIVES: &str = "a node runs each call in a new process: what an ADD handed out is in the store the next process reads";
const VERSIONS: &str = "the CNI spec: a result is written in the cniVersion of the request, with that version's fields";
const STATUS: &str = "the CNI spec (1.1): STATUS answers 0 while the plugin can serve ADDs";
const GC: &str = "the CNI spec (1.1): GC releases every attachment not in cni.dev/valid-attachments, and keeps those in it";
const INSPECT: &str = "the module contract: inspect.allocations (what `wasm-ipam list` shows) is every address handed out, with its container and interface";
const BUDGET: &str = "a call has ipam.deadlineSeconds from the lock's grant, and a node's calls queue behind one another: a call well inside it (a quarter) leaves the queue room";

impl ConformCommand {
    pub fn run(self) -> Result<Output, CniError> {
        let session = Session::new(&self)?;
        let checks: [(&str, CheckFn); 11] = [
            ("add-check-del-del", add_check_del_del),
            ("del-never-added", del_never_added),
            ("add-repeated", add_repeated),
            ("two-interfaces", two_interfaces),
            ("exhaustion", exhaustion),
            ("state-across-processes", state_across_processes),
            ("cni-versions", cni_versions),
            ("status", status),
            ("gc", gc),
            ("list-agrees", list_agrees),
            ("within-budget", within_budget),
        ];
        let mut text = String::new();
        let mut failed = 0;
        for (name, check) in checks {
            let verdict = match check(&session) {
                Ok(verdict) | Err(Ended::Verdict(verdict)) => verdict,
                Err(Ended::Error(e)) => return Err(e),
            };
            let line = match verdict {
                Verdict::Passed(what) => format!("passed   {name}: {what}"),
                Verdict::NotRun(why) => format!("not run  {name}: {why}"),
                Verdict::Failed { asked, got, rule } => {
                    failed += 1;
                    format!("FAILED   {name}: asked {asked}; got {got}; {rule}")
                }
            };
            let _ = writeln!(text, "{line}");
        }
        let _ = writeln!(
            text,
            "{} of {} checks failed",
            failed,
            session.checks_run.get()
        );
        Ok(Output {
            text,
            notes: Vec::new(),
            failed: failed > 0,
        })
    }
}

/// What one plugin run answered.
struct Reply {
    failed: bool,
    json: Value,
    text: String,
}

impl Reply {
    fn shown(&self) -> String {
        match self.text.trim() {
            "" if self.failed => "a failure with nothing on stdout".into(),
            "" => "success".into(),
            text => text.to_string(),
        }
    }

    fn code(&self) -> u64 {
        self.json["code"].as_u64().unwrap_or_default()
    }

    /// The addresses of an ADD's result, without their prefix length.
    fn addresses(&self) -> Vec<String> {
        let mut found = Vec::new();
        if let Some(ips) = self.json["ips"].as_array() {
            found.extend(ips.iter().filter_map(|ip| ip["address"].as_str()));
        }
        for old in ["ip4", "ip6"] {
            found.extend(self.json[old]["ip"].as_str());
        }
        found
            .into_iter()
            .map(|cidr| cidr.split('/').next().unwrap_or(cidr).to_string())
            .collect()
    }
}

/// The checks' shared setting: the module, the netconf they start from, the cache
/// the module is compiled into once, and the slowest call seen.
struct Session {
    module: PathBuf,
    base: Value,
    max_adds: usize,
    deadline: Duration,
    scratch: tempfile::TempDir,
    states: std::cell::Cell<usize>,
    checks_run: std::cell::Cell<usize>,
    slowest: std::cell::Cell<(Duration, &'static str)>,
}

/// One check's own store, lock and log.
struct State {
    dir: PathBuf,
}

impl Session {
    fn new(args: &ConformCommand) -> Result<Self, CniError> {
        let module = std::path::absolute(&args.module).map_err(|e| {
            CniError::new(code::IO_FAILURE, format!("{}: {e}", args.module.display()))
        })?;
        let mut base: Value = match &args.netconf {
            Some(path) => {
                let text = std::fs::read(path).map_err(|e| {
                    CniError::new(code::IO_FAILURE, format!("{}: {e}", path.display()))
                })?;
                crate::config::decode(&text)?
            }
            None => json!({}),
        };
        let object = base
            .as_object_mut()
            .ok_or_else(|| CniError::config("--netconf must hold a JSON object"))?;
        object.insert("cniVersion".into(), "1.1.0".into());
        object.entry("name").or_insert_with(|| "conform".into());
        object.insert("type".into(), "wasm-ipam".into());
        if !object.get("ipam").is_some_and(Value::is_object) {
            object.insert("ipam".into(), json!({}));
        }
        base["ipam"]["type"] = "wasm-ipam".into();
        base["ipam"]["module"] = module.to_string_lossy().into();
        let deadline = base["ipam"]["deadlineSeconds"]
            .as_f64()
            .map_or(crate::config::DEFAULT_DEADLINE, Duration::from_secs_f64);
        let scratch = tempfile::Builder::new()
            .prefix("wasm-ipam-conform-")
            .tempdir()
            .map_err(|e| {
                CniError::new(code::IO_FAILURE, "cannot make a scratch directory").with_details(e)
            })?;
        let session = Session {
            module,
            base,
            max_adds: args.max_adds,
            deadline,
            scratch,
            states: Default::default(),
            checks_run: Default::default(),
            slowest: std::cell::Cell::new((Duration::ZERO, "")),
        };
        session.precompile()?;
        Ok(session)
    }

    /// Compiles the module into the checks' cache (as `precompile` does, within the
    /// netconf's limits, refusing a module the host cannot run), so no check's call
    /// pays for it.
    fn precompile(&self) -> Result<(), CniError> {
        let cache = crate::module::cache::ModuleCache::open(&self.cache_dir())
            .map_err(|e| CniError::new(code::IO_FAILURE, e.0))?;
        let conf = self.netconf(&self.state(), "1.1.0");
        self.checks_run.set(0);
        let limits = crate::config::NetConf::parse(conf.to_string().as_bytes())?
            .ipam
            .limits;
        let loaded = crate::module::instance::ModuleHost::new()?.load(
            &self.module,
            None,
            &crate::module::trust::Policies::for_call(None)?,
            Some(&cache),
            &limits,
        )?;
        super::answers::refuse_unless_it_answers(&loaded, Some(&cache), &limits)
    }

    fn cache_dir(&self) -> PathBuf {
        self.scratch.path().join("cache")
    }

    /// A fresh store for one check.
    fn state(&self) -> State {
        self.checks_run.set(self.checks_run.get() + 1);
        let n = self.states.get();
        self.states.set(n + 1);
        State {
            dir: self.scratch.path().join(format!("state-{n}")),
        }
    }

    /// The netconf of a call on `state` in `version`.
    fn netconf(&self, state: &State, version: &str) -> Value {
        let mut conf = self.base.clone();
        conf["cniVersion"] = version.into();
        let ipam = &mut conf["ipam"];
        ipam["lockFile"] = path(&state.dir.join("ipam.lock"));
        ipam["dataDir"] = path(&state.dir.join("data"));
        ipam["logFile"] = path(&state.dir.join("ipam.log"));
        ipam["cacheDir"] = path(&self.cache_dir());
        conf
    }

    fn call(
        &self,
        state: &State,
        command: CniCommand,
        id: &str,
        ifname: &str,
    ) -> Result<Reply, CniError> {
        self.call_with(state, command, id, ifname, self.netconf(state, "1.1.0"))
    }

    fn call_with(
        &self,
        _state: &State,
        command: CniCommand,
        id: &str,
        ifname: &str,
        netconf: Value,
    ) -> Result<Reply, CniError> {
        let args = format!(
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=conform;K8S_POD_NAME={id};K8S_POD_INFRA_CONTAINER_ID={id}"
        );
        let started = Instant::now();
        let (text, failed) = invoke(command, id, ifname, &args, &netconf)?;
        let took = started.elapsed();
        if took > self.slowest.get().0 {
            self.slowest.set((took, command.name()));
        }
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Ok(Reply { failed, json, text })
    }

    /// What `list --json` shows of `state`'s store: (address, container, ifname).
    fn listed(&self, state: &State) -> Result<Vec<(String, String, String)>, CniError> {
        let text = list_state(&state.dir, true)?;
        let rows: Vec<Value> = serde_json::from_str(&text).unwrap_or_default();
        let mut listed: Vec<(String, String, String)> = rows
            .iter()
            .map(|row| {
                let field = |k: &str| row[k].as_str().unwrap_or_default().to_string();
                (field("address"), field("containerID"), field("ifname"))
            })
            .collect();
        listed.sort();
        Ok(listed)
    }
}

fn path(p: &Path) -> Value {
    p.to_string_lossy().into()
}

fn failed(
    asked: impl Into<String>,
    got: impl Into<String>,
    rule: &'static str,
) -> Result<Verdict, Ended> {
    Ok(Verdict::Failed {
        asked: asked.into(),
        got: got.into(),
        rule,
    })
}

/// An ADD that must succeed with an address; else the verdict to print.
fn added(reply: &Reply, asked: &str, rule: &'static str) -> Result<Vec<String>, Ended> {
    let addresses = reply.addresses();
    match (reply.failed, addresses.is_empty()) {
        (false, false) => Ok(addresses),
        _ => Err(Ended::Verdict(Verdict::Failed {
            asked: asked.into(),
            got: reply.shown(),
            rule,
        })),
    }
}

use CniCommand::{Add, Check, Del};

fn add_check_del_del(s: &Session) -> Result<Verdict, Ended> {
    let st = s.state();
    let add = s.call(&st, Add, "c1", "eth0")?;
    let ips = added(&add, "ADD c1/eth0", CHECK_AFTER_ADD)?;
    let check = s.call(&st, Check, "c1", "eth0")?;
    if check.failed {
        return failed(
            "CHECK c1/eth0 after its ADD",
            check.shown(),
            CHECK_AFTER_ADD,
        );
    }
    for (n, what) in [(1, "DEL c1/eth0"), (2, "DEL c1/eth0 a second time")] {
        let del = s.call(&st, Del, "c1", "eth0")?;
        if del.failed {
            return failed(what, del.shown(), DEL_IDEMPOTENT);
        }
        if n == 1 {
            let check = s.call(&st, Check, "c1", "eth0")?;
            if !check.failed {
                return failed("CHECK c1/eth0 after its DEL", "success", CHECK_AFTER_ADD);
            }
        }
    }
    Ok(Verdict::Passed(format!(
        "handed out {}, checked, released, released again",
        ips.join(", ")
    )))
}

fn del_never_added(s: &Session) -> Result<Verdict, Ended> {
    let st = s.state();
    let del = s.call(&st, Del, "never-added", "eth0")?;
    match del.failed {
        true => failed(
            "DEL of container never-added, on an empty store",
            del.shown(),
            DEL_IDEMPOTENT,
        ),
        false => Ok(Verdict::Passed("succeeded".into())),
    }
}

fn add_repeated(s: &Session) -> Result<Verdict, Ended> {
    let st = s.state();
    let first = added(&s.call(&st, Add, "c1", "eth0")?, "ADD c1/eth0", ADD_RETRIED)?;
    let again = added(
        &s.call(&st, Add, "c1", "eth0")?,
        "ADD c1/eth0 again",
        ADD_RETRIED,
    )?;
    if again != first {
        return failed(
            "ADD c1/eth0 twice",
            format!("{} then {}", first.join(", "), again.join(", ")),
            ADD_RETRIED,
        );
    }
    let held: Vec<_> = s.listed(&st)?.into_iter().map(|(ip, _, _)| ip).collect();
    if held != first {
        return failed(
            "ADD c1/eth0 twice, then list",
            format!("list shows {held:?}"),
            ADD_RETRIED,
        );
    }
    Ok(Verdict::Passed(format!(
        "{} both times, held once",
        first.join(", ")
    )))
}

fn two_interfaces(s: &Session) -> Result<Verdict, Ended> {
    let st = s.state();
    let eth0 = added(
        &s.call(&st, Add, "c1", "eth0")?,
        "ADD c1/eth0",
        PER_INTERFACE,
    )?;
    let net1 = added(
        &s.call(&st, Add, "c1", "net1")?,
        "ADD c1/net1",
        PER_INTERFACE,
    )?;
    if eth0.iter().any(|ip| net1.contains(ip)) {
        return failed(
            "ADD c1/eth0 and c1/net1",
            format!("{} and {}", eth0.join(", "), net1.join(", ")),
            PER_INTERFACE,
        );
    }
    let del = s.call(&st, Del, "c1", "eth0")?;
    if del.failed {
        return failed("DEL c1/eth0", del.shown(), PER_INTERFACE);
    }
    let check = s.call(&st, Check, "c1", "net1")?;
    if check.failed {
        return failed(
            "CHECK c1/net1 after DEL c1/eth0",
            check.shown(),
            PER_INTERFACE,
        );
    }
    Ok(Verdict::Passed(format!(
        "{} and {}, apart",
        eth0.join(", "),
        net1.join(", ")
    )))
}

fn exhaustion(s: &Session) -> Result<Verdict, Ended> {
    let st = s.state();
    let mut handed = 0;
    let refusal = loop {
        if handed == s.max_adds {
            return Ok(Verdict::NotRun(format!(
                "{handed} ADDs all succeeded: give --netconf a smaller range (or raise --max-adds)"
            )));
        }
        let reply = s.call(&st, Add, &format!("c{handed}"), "eth0")?;
        if reply.failed {
            break reply;
        }
        handed += 1;
    };
    let asked = format!("ADD c{handed}/eth0 after {handed} ADDs");
    let code = refusal.code();
    if handed == 0 {
        return failed("the first ADD", refusal.shown(), EXHAUSTION);
    }
    if code < u64::from(code::MODULE_SPECIFIC)
        || refusal.json["msg"].as_str().unwrap_or("").is_empty()
    {
        return failed(asked, refusal.shown(), EXHAUSTION);
    }
    let del = s.call(&st, Del, "c0", "eth0")?;
    if del.failed {
        return failed("DEL c0/eth0 of a full range", del.shown(), EXHAUSTION);
    }
    let again = s.call(&st, Add, &format!("c{handed}"), "eth0")?;
    if again.failed {
        return failed(
            format!("ADD c{handed}/eth0 after DEL c0/eth0"),
            again.shown(),
            EXHAUSTION,
        );
    }
    Ok(Verdict::Passed(format!(
        "full after {handed} ADDs with code {code}; a DEL freed one"
    )))
}

fn state_across_processes(s: &Session) -> Result<Verdict, Ended> {
    let st = s.state();
    let ips = added(&s.call(&st, Add, "c1", "eth0")?, "ADD c1/eth0", SURVIVES)?;
    let other = added(
        &s.call(&st, Add, "c2", "eth0")?,
        "ADD c2/eth0 in a new process",
        SURVIVES,
    )?;
    if other.iter().any(|ip| ips.contains(ip)) {
        return failed(
            "ADD c1/eth0, then ADD c2/eth0 in a new process",
            format!("both got {}", ips.join(", ")),
            SURVIVES,
        );
    }
    let check = s.call(&st, Check, "c1", "eth0")?;
    if check.failed {
        return failed("CHECK c1/eth0 in a third process", check.shown(), SURVIVES);
    }
    Ok(Verdict::Passed(
        "a new process saw what the last one handed out".into(),
    ))
}

fn cni_versions(s: &Session) -> Result<Verdict, Ended> {
    let st = s.state();
    for version in SUPPORTED_VERSIONS {
        let conf = s.netconf(&st, version);
        let reply = s.call_with(&st, Add, "c1", "eth0", conf.clone())?;
        let asked = format!("ADD in cniVersion {version}");
        if reply.failed {
            return failed(asked, reply.shown(), VERSIONS);
        }
        let shaped = reply.json["cniVersion"] == *version
            && reply.json["ips"].as_array().is_some_and(|ips| {
                !ips.is_empty()
                    && ips.iter().all(|ip| {
                        ip["address"].as_str().is_some_and(|a| a.parse::<ipnet::IpNet>().is_ok())
                            // 0.3.x results name each address's version.
                            && (!version.starts_with("0.3") || ip["version"].is_string())
                    })
            });
        if !shaped {
            return failed(asked, reply.shown(), VERSIONS);
        }
        let del = s.call_with(&st, Del, "c1", "eth0", conf)?;
        if del.failed {
            return failed(
                format!("DEL in cniVersion {version}"),
                del.shown(),
                DEL_IDEMPOTENT,
            );
        }
    }
    Ok(Verdict::Passed(format!(
        "ADD and DEL in {}",
        SUPPORTED_VERSIONS.join(", ")
    )))
}

fn status(s: &Session) -> Result<Verdict, Ended> {
    let st = s.state();
    let reply = s.call(&st, CniCommand::Status, "", "")?;
    match reply.failed {
        true => failed("STATUS on an empty store", reply.shown(), STATUS),
        false => Ok(Verdict::Passed("ready".into())),
    }
}

fn gc(s: &Session) -> Result<Verdict, Ended> {
    let st = s.state();
    let mut handed = Vec::new();
    for id in ["kept", "gone"] {
        handed.push(added(
            &s.call(&st, Add, id, "eth0")?,
            &format!("ADD {id}/eth0"),
            GC,
        )?);
    }
    let mut conf = s.netconf(&st, "1.1.0");
    conf["cni.dev/valid-attachments"] = json!([{"containerID": "kept", "ifname": "eth0"}]);
    let reply = s.call_with(&st, CniCommand::Gc, "", "", conf)?;
    if reply.failed {
        return failed("GC with kept/eth0 valid", reply.shown(), GC);
    }
    let left: Vec<(String, String)> = s
        .listed(&st)?
        .into_iter()
        .map(|(ip, id, _)| (ip, id))
        .collect();
    let expected: Vec<(String, String)> = handed[0]
        .iter()
        .map(|ip| (ip.clone(), "kept".to_string()))
        .collect();
    if left != expected {
        return failed(
            "GC with kept/eth0 valid, then list",
            format!("list shows {left:?}"),
            GC,
        );
    }
    Ok(Verdict::Passed(format!(
        "released {}, kept {}",
        handed[1].join(", "),
        handed[0].join(", ")
    )))
}

fn list_agrees(s: &Session) -> Result<Verdict, Ended> {
    let st = s.state();
    let mut expected = Vec::new();
    for (id, ifname) in [("c1", "eth0"), ("c2", "eth0"), ("c2", "net1")] {
        let ips = added(
            &s.call(&st, Add, id, ifname)?,
            &format!("ADD {id}/{ifname}"),
            INSPECT,
        )?;
        expected.extend(
            ips.into_iter()
                .map(|ip| (ip, id.to_string(), ifname.to_string())),
        );
    }
    expected.sort();
    let listed = s.listed(&st)?;
    match listed == expected {
        true => Ok(Verdict::Passed(format!(
            "{} allocations, as handed out",
            listed.len()
        ))),
        false => failed(
            "list after ADD c1/eth0, c2/eth0, c2/net1",
            format!("{listed:?}, where the ADDs handed out {expected:?}"),
            INSPECT,
        ),
    }
}

fn within_budget(s: &Session) -> Result<Verdict, Ended> {
    s.checks_run.set(s.checks_run.get() + 1);
    let (slowest, command) = s.slowest.get();
    let bound = s.deadline / 4;
    match slowest <= bound {
        true => Ok(Verdict::Passed(format!(
            "slowest call {} ms ({command}), within {} ms",
            slowest.as_millis(),
            bound.as_millis()
        ))),
        false => failed(
            format!(
                "every call above (deadlineSeconds {})",
                s.deadline.as_secs_f64()
            ),
            format!("a {command} took {} ms", slowest.as_millis()),
            BUDGET,
        ),
    }
}
