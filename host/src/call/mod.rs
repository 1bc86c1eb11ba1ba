//! One CNI call from start to finish: decode and validate the call, then run it
//! through the one locked pipeline ([`crate::pipeline`], where the order that is the
//! point of wasm-ipam is written), then answer. STATUS alone is answered without the
//! lock ([`status`]).

mod status;
mod status_log;

use crate::caller;
use crate::cni::{self, Command, Invocation};
use crate::config::{self, NetConf};
use crate::error::CniError;
use crate::module::bindings::types;
use crate::module::question::{Call, Handle};
use crate::pipeline::{self, Label, Network, Writes};
use serde_json::Value;

/// The most runs one CNI GC makes of a module that fills its store's transaction each
/// time: past it, the rest waits for the runtime's next GC.
const MAX_GC_BATCHES: u32 = 100;

/// What to print: the result (if any) or the error, tagged with the config's version.
pub struct Reply {
    pub cni_version: String,
    pub outcome: Result<Option<Value>, CniError>,
}

/// The cniVersion this process answers in, once [`handle`] has decoded the netconf:
/// for an answer that must be made without a [`Reply`] (a panic's).
static REPLY_VERSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();

pub fn reply_version() -> String {
    REPLY_VERSION
        .get()
        .cloned()
        .unwrap_or_else(|| cni::CURRENT_VERSION.to_string())
}

/// Handles one invocation: `env` looks up the CNI_* variables, `stdin` is the netconf.
pub fn handle(env: impl Fn(&str) -> Option<String>, stdin: &[u8]) -> Reply {
    let json = config::decode(stdin);
    let cni_version = json
        .as_ref()
        .ok()
        .map(config::cni_version_of)
        .filter(|v| cni::SUPPORTED_VERSIONS.contains(&v.as_str()))
        .unwrap_or_else(|| cni::CURRENT_VERSION.to_string());
    let _ = REPLY_VERSION.set(cni_version.clone());
    Reply {
        cni_version,
        outcome: Invocation::from_env(env).and_then(|invocation| run(&invocation, json, stdin)),
    }
}

/// `json` is the netconf as [`handle`] decoded it, once; VERSION needs no netconf, so
/// only the other commands fail on a netconf that does not decode.
fn run(
    invocation: &Invocation,
    json: Result<Value, CniError>,
    stdin: &[u8],
) -> Result<Option<Value>, CniError> {
    if invocation.command == Command::Version {
        return Ok(Some(cni::version_info()));
    }
    let json = json?;
    cni::check_version(invocation.command, &config::cni_version_of(&json))?;
    let conf = NetConf::from_json(json, stdin)?;
    if invocation.command == Command::Status {
        if let Some(path) = &conf.ipam.log_file {
            crate::logging::init(path, conf.ipam.limits.log_rotation, conf.ipam.log_level);
        }
        return status::answer(&conf.name, &conf.ipam).map(|()| None);
    }
    let module_config = conf.module_config()?;
    let call = match invocation.command {
        Command::Add => Call::Add,
        Command::Del => Call::Del,
        Command::Check => Call::Check,
        Command::Status => unreachable!("answered above"),
        Command::Gc => Call::Gc(
            conf.valid_attachments()?
                .into_iter()
                .map(|a| types::Attachment {
                    container_id: a.container_id,
                    ifname: a.ifname,
                })
                .collect(),
        ),
        Command::Version => unreachable!("answered above"),
    };
    let work = Handle {
        request: guest_request(invocation, &conf, module_config),
        call,
    };
    let label = Label {
        command: invocation.command.as_str().to_string(),
        container_id: invocation.container_id.clone(),
        ifname: invocation.ifname.clone(),
        operator: false,
    };
    let network = Network::of(&conf);
    let run = || {
        pipeline::run(&network, &label, &caller::gone, |session| {
            session.ask(work.clone(), Writes::Commit)
        })
    };
    let mut ran = run();
    // A GC that outgrows one transaction of the store goes in batches, each its own
    // locked run (so the node's other calls go on between them) and each atomic.
    let mut batches = 1;
    while invocation.command == Command::Gc && ran.commit_was_full && batches < MAX_GC_BATCHES {
        ran = run();
        batches += 1;
    }
    // The process exits once it has answered.
    ran.leave_loaded_to_exit();
    Ok(ran.result?.map(|r| r.to_json(&conf.cni_version)))
}

/// The request as the runtime made it; the pipeline stamps it with the grant.
fn guest_request(invocation: &Invocation, conf: &NetConf, config: String) -> types::Request {
    types::Request {
        command: match invocation.command {
            Command::Add => types::Command::Add,
            Command::Del => types::Command::Del,
            Command::Check => types::Command::Check,
            Command::Gc => types::Command::Gc,
            Command::Status | Command::Version => types::Command::Status,
        },
        container_id: invocation.container_id.clone(),
        netns: invocation.netns.clone(),
        ifname: invocation.ifname.clone(),
        args: invocation.args.clone(),
        network_name: conf.name.clone(),
        cni_version: conf.cni_version.clone(),
        config,
        prev_result: conf.prev_result.clone(),
        lock_granted_at: pipeline::UNTIL_GRANTED,
        node_name: conf.ipam.node_name(),
    }
}
