//! A module built against `cni:ipam@0.2.0` (`wit/v0.2.0/`) with wit-bindgen alone, as
//! a vendor's module from before 0.2.1 is: it hands out the first free address of
//! `ipam.addresses` (CIDRs), keeping `ip/<cidr>` → container id, lists them through
//! `inspect`, and exports no `nodes` (0.2.0 had none). The host, built from 0.2.1,
//! must find its 0.2.0 exports and serve its 0.2.0 imports.

wit_bindgen::generate!({ path: "../../../wit/v0.2.0/ipam.wit", world: "ipam-module" });

use cni::ipam::store;
use cni::ipam::types::{Attachment, Dns, Error, IpConfig, IpamResult, Request};
use exports::cni::ipam::inspect::{Allocation, Context, Pool};
use exports::cni::ipam::migrate::{ImportReport, StateFile};
use exports::cni::ipam::{handler, inspect, migrate};

struct Legacy;

fn error(code: u32, msg: &str) -> Error {
    Error {
        code,
        msg: msg.into(),
        details: String::new(),
    }
}

fn addresses(request: &Request) -> Result<Vec<String>, Error> {
    let config: serde_json::Value =
        serde_json::from_str(&request.config).map_err(|e| error(6, &e.to_string()))?;
    let list = config["ipam"]["addresses"]
        .as_array()
        .ok_or_else(|| error(7, "ipam.addresses must be a list of CIDRs"))?;
    Ok(list
        .iter()
        .filter_map(|a| a.as_str().map(String::from))
        .collect())
}

fn held_by(id: &str) -> Option<String> {
    store::list_prefix("ip/")
        .into_iter()
        .find(|(_, owner)| owner == id.as_bytes())
        .map(|(key, _)| key)
}

impl handler::Guest for Legacy {
    fn add(request: Request) -> Result<IpamResult, Error> {
        let free = addresses(&request)?
            .into_iter()
            .find(|a| store::get(&format!("ip/{a}")).is_none())
            .ok_or_else(|| error(11, "no address left"))?;
        store::put(&format!("ip/{free}"), request.container_id.as_bytes())
            .map_err(|_| error(140, "store refused the write"))?;
        Ok(IpamResult {
            ips: vec![IpConfig {
                address: free,
                gateway: None,
            }],
            routes: Vec::new(),
            dns: Dns {
                nameservers: Vec::new(),
                domain: None,
                search: Vec::new(),
                options: Vec::new(),
            },
        })
    }

    fn del(request: Request) -> Result<(), Error> {
        if let Some(key) = held_by(&request.container_id) {
            store::delete(&key).map_err(|_| error(140, "store refused the delete"))?;
        }
        Ok(())
    }

    fn check(request: Request) -> Result<(), Error> {
        held_by(&request.container_id)
            .map(|_| ())
            .ok_or_else(|| error(3, "no address held"))
    }

    fn gc(_request: Request, _valid: Vec<Attachment>) -> Result<(), Error> {
        Ok(())
    }

    fn status(_request: Request) -> Result<(), Error> {
        Ok(())
    }
}

impl inspect::Guest for Legacy {
    fn allocations(_context: Context) -> Result<Vec<Allocation>, Error> {
        Ok(store::list_prefix("ip/")
            .into_iter()
            .map(|(key, owner)| Allocation {
                address: key["ip/".len()..]
                    .split('/')
                    .next()
                    .unwrap_or_default()
                    .into(),
                container_id: String::from_utf8_lossy(&owner).into_owned(),
                ifname: String::new(),
                since: None,
                attributes: Vec::new(),
            })
            .collect())
    }

    fn pools(_context: Context) -> Result<Vec<Pool>, Error> {
        Err(error(121, "this module does not report pools"))
    }
}

impl migrate::Guest for Legacy {
    fn import_state(
        format: String,
        _network_name: String,
        _config: Option<String>,
        _files: Vec<StateFile>,
    ) -> Result<ImportReport, Error> {
        Err(error(
            121,
            &format!("this module cannot import format {format:?}"),
        ))
    }
}

export!(Legacy);
