use std::net::Ipv4Addr;
use wasm_ipam_guest::error::code;
use wasm_ipam_guest::store::Store;
use wasm_ipam_guest::{Allocation, Context, Error, IpConfig, IpamModule, IpamResult, Pool};
use wasm_ipam_guest::{Request, export_module, ipam_module};

/// The netconf's `ipam` keys this module reads (the host reads its own beside them).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Range {
    start: Ipv4Addr,
    end: Ipv4Addr,
    prefix_len: u8,
    /// The pods' namespaces the range serves; every namespace when absent.
    #[serde(default)]
    namespaces: Option<Vec<String>>,
}

impl Range {
    fn addresses(&self) -> impl Iterator<Item = Ipv4Addr> {
        (u32::from(self.start)..=u32::from(self.end)).map(Ipv4Addr::from)
    }
}

fn key(ip: Ipv4Addr) -> String {
    format!("ip/{ip}")
}

/// Refuses a pod of a namespace the range does not serve. The runtime names the pod in
/// CNI_ARGS (`K8S_POD_NAMESPACE`, `K8S_POD_NAME`), as kubelet's runtimes do.
fn serves(range: &Range, request: &Request) -> Result<(), Error> {
    let Some(namespaces) = &range.namespaces else {
        return Ok(());
    };
    let namespace = request.arg("K8S_POD_NAMESPACE").unwrap_or_default();
    match namespaces.iter().any(|n| n == namespace) {
        true => Ok(()),
        false => Err(Error::new(
            code::MODULE_SPECIFIC,
            format!("the range serves the namespaces {namespaces:?}, not {namespace:?}"),
        )),
    }
}

fn owner(request: &Request) -> String {
    format!("{}/{}", request.container_id(), request.ifname())
}

pub struct Module;

// #[ipam_module] records which functions this impl writes, so `wasm-ipam inspect`
// can tell them from the SDK's defaults.
#[ipam_module]
impl IpamModule for Module {
    fn add(request: &Request, store: &mut impl Store) -> Result<IpamResult, Error> {
        let range: Range = request.ipam()?;
        serves(&range, request)?;
        let owner = owner(request);
        // The attachment's own address again if it has one (a retried ADD), else the
        // first free one.
        let ip = range
            .addresses()
            .find(|ip| store.get(&key(*ip)).is_some_and(|held| held == owner.as_bytes()))
            .or_else(|| range.addresses().find(|ip| store.get(&key(*ip)).is_none()))
            .ok_or_else(|| Error::new(code::MODULE_SPECIFIC, "no address left in the range"))?;
        store.put(&key(ip), owner.as_bytes())?;
        let address = format!("{ip}/{}", range.prefix_len);
        Ok(IpamResult::default().ip(IpConfig::new(address)))
    }

    fn del(request: &Request, store: &mut impl Store) -> Result<(), Error> {
        let owner = owner(request);
        for (key, held) in store.list("ip/") {
            if held == owner.as_bytes() {
                store.delete(&key)?;
            }
        }
        Ok(())
    }

    fn allocations(_: &Context, store: &impl Store) -> Result<Vec<Allocation>, Error> {
        let mut held = Vec::new();
        for (key, value) in store.list("ip/") {
            let owner = String::from_utf8_lossy(&value);
            let (id, ifname) = owner.split_once('/').unwrap_or((&owner, ""));
            held.push(Allocation::new(&key["ip/".len()..], id, ifname));
        }
        Ok(held)
    }

    fn pools(context: &Context, store: &impl Store) -> Result<Vec<Pool>, Error> {
        let Some(range) = context.ipam::<Range>()? else {
            return Ok(Vec::new());
        };
        let capacity = range.addresses().count() as u64;
        let in_use = Self::allocations(context, store)?.len() as u64;
        let name = format!("{}-{}", range.start, range.end);
        Ok(vec![Pool::new(name).capacity(capacity).in_use(in_use).free_from_capacity()])
    }
}

export_module!(Module);

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_ipam_guest::Command;
    use wasm_ipam_guest::store::MemoryStore;

    #[test]
    fn hands_out_the_range_in_order_and_takes_it_back() {
        let config = serde_json::json!({"cniVersion": "1.1.0", "name": "n",
            "ipam": {"start": "10.99.0.10", "end": "10.99.0.11", "prefixLen": 24}});
        let request = |id: &str| Request::for_test(Command::Add, id, "eth0", config.clone());
        let mut store = MemoryStore::default();
        let first = Module::add(&request("a"), &mut store).unwrap();
        assert_eq!(first.ips[0].address, "10.99.0.10/24");
        assert_eq!(Module::add(&request("a"), &mut store).unwrap(), first);
        Module::add(&request("b"), &mut store).unwrap();
        assert!(Module::add(&request("c"), &mut store).is_err());
        Module::del(&request("a"), &mut store).unwrap();
        let again = Module::add(&request("c"), &mut store).unwrap();
        assert_eq!(again.ips[0].address, "10.99.0.10/24");
    }

    #[test]
    fn serves_only_the_namespaces_it_lists() {
        let config = serde_json::json!({"cniVersion": "1.1.0", "name": "n",
            "ipam": {"start": "10.99.0.10", "end": "10.99.0.11", "prefixLen": 24,
                     "namespaces": ["team-a"]}});
        let pod = |namespace: &str| {
            Request::for_test(Command::Add, namespace, "eth0", config.clone())
                .with_args(&[("K8S_POD_NAMESPACE", namespace)])
        };
        let mut store = MemoryStore::default();
        assert!(Module::add(&pod("team-a"), &mut store).is_ok());
        assert!(Module::add(&pod("team-b"), &mut store).is_err());
    }
}
