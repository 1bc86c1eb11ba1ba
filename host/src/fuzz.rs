//! The inputs a runtime hands the host before any module runs — the netconf on stdin,
//! the CNI_* environment, CNI_ARGS — as fuzz targets: `fuzz/` drives these with
//! cargo-fuzz (nightly), and the test suite replays `fuzz/corpus/` through them on
//! stable, so a crash found once stays tested.
//!
//! Each must return for every input, and an input it refuses must be refused with a
//! CNI error the host defines (a named code, a message), never a panic.

use crate::cni::{self, Invocation};
use crate::config::{self, NetConf};
use crate::error::{CniError, code};

fn check_refusal(err: &CniError) {
    assert!(
        code::NAMED.iter().any(|(c, _)| *c == err.code),
        "unnamed code {}",
        err.code
    );
    assert!(!err.msg.is_empty(), "an error without a message");
}

/// The netconf as `call::handle` decodes and validates it.
pub fn netconf(data: &[u8]) {
    match config::decode(data).and_then(|json| NetConf::from_json(json, data)) {
        Ok(conf) => {
            assert!(!conf.name.is_empty() && !conf.cni_version.is_empty());
            assert!(conf.ipam.lock_file.is_absolute() && conf.ipam.data_dir.is_absolute());
            assert!(!conf.ipam.deadline.is_zero());
            let _ = conf.valid_attachments().map_err(|e| check_refusal(&e));
        }
        Err(err) => check_refusal(&err),
    }
}

/// The CNI_* environment: `data` is `NAME=VALUE` pairs separated by NUL bytes.
pub fn environment(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let pairs: Vec<(&str, &str)> = text
        .split('\0')
        .filter_map(|pair| pair.split_once('='))
        .collect();
    let env = |name: &str| {
        pairs
            .iter()
            .rev()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    };
    match Invocation::from_env(env) {
        Ok(call) => {
            if call.command.as_str() != "VERSION" && call.command.as_str() != "STATUS" {
                assert!(!call.ifname.is_empty() || call.command.as_str() == "GC");
            }
        }
        Err(err) => check_refusal(&err),
    }
}

/// CNI_ARGS (`K=V;K2=V2`).
pub fn cni_args(data: &[u8]) {
    match cni::parse_args(&String::from_utf8_lossy(data)) {
        Ok(pairs) => assert!(pairs.iter().all(|(k, _)| !k.is_empty())),
        Err(err) => check_refusal(&err),
    }
}
