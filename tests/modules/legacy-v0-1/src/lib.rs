//! A module built against `cni:ipam@0.1.0` (`wit/v0.1.0/`) with wit-bindgen alone, as
//! a vendor's module from before 0.2.0 is: it hands out the first free address of
//! `ipam.addresses` (CIDRs), keeping `ip/<cidr>` → container id, and exports no
//! `inspect` or `migrate` (0.1.0 had none).

wit_bindgen::generate!({ path: "../../../wit/v0.1.0/ipam.wit", world: "ipam-module" });

use cni::ipam::store;
use cni::ipam::types::{Attachment, Dns, Error, IpConfig, IpamResult, Request};
use exports::cni::ipam::handler::Guest;

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

impl Guest for Legacy {
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

export!(Legacy);
