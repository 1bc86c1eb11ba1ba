//! One of `ipam.addresses` per attachment; CHECK, GC and stats: SDK defaults.
use wasm_ipam_guest::*;
#[derive(serde::Deserialize)]
struct Ipam {
    addresses: Vec<String>,
}
pub struct Minimal;
#[ipam_module]
impl IpamModule for Minimal {
    fn add(request: &Request, store: &mut impl Store) -> Result<IpamResult, Error> {
        let key = format!("a/{}/{}", request.container_id(), request.ifname());
        let held = store.list("a/");
        // A retried ADD: the attachment's own address again.
        let own = held
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| String::from_utf8_lossy(v));
        let mut all = request.ipam::<Ipam>()?.addresses.into_iter();
        let free = all.find(|cidr| held.iter().all(|(_, held)| held != cidr.as_bytes()));
        let cidr = own.map(|c| c.into_owned()).or(free);
        let cidr = cidr.ok_or_else(|| Error::new(error::code::MODULE_SPECIFIC, "pool full"))?;
        store.put(&key, cidr.as_bytes())?;
        Ok(IpamResult::default().ip(IpConfig::new(cidr)))
    }
    fn del(request: &Request, store: &mut impl Store) -> Result<(), Error> {
        let key = format!("a/{}/{}", request.container_id(), request.ifname());
        store.delete(&key).map(drop)
    }
    fn allocations(_: &Context, store: &impl Store) -> Result<Vec<Allocation>, Error> {
        let held = store.list("a/").into_iter().filter_map(|(key, cidr)| {
            let (id, ifname) = key["a/".len()..].split_once('/')?;
            Some(Allocation::new(String::from_utf8_lossy(&cidr), id, ifname))
        });
        Ok(held.collect())
    }
}
export_module!(Minimal);
