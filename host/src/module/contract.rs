//! The `cni:ipam` contract versions the host runs (docs/wit-versions.md): which
//! interfaces a module may import and how each is linked, what it exports, whether the
//! host can run it, and the conversions a 0.1.0 module's handler needs.

use crate::module::bindings::{self, v0_1};
use crate::module::host::GuestState;
use crate::module::wasi::Link;
use wasmtime::Engine;
use wasmtime::component::{Component, HasSelf, types::ComponentItem};

/// A version of the `cni:ipam` contract the host runs (docs/wit-versions.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Contract {
    V0_1,
    V0_2,
}

impl Contract {
    /// Newest first: a module exporting both handlers is run as the newer.
    pub const RUN: [Contract; 2] = [Contract::V0_2, Contract::V0_1];

    pub fn version(self) -> &'static str {
        match self {
            Contract::V0_1 => "0.1.0",
            Contract::V0_2 => "0.2.0",
        }
    }

    /// `cni:ipam@0.2.0`.
    pub fn name(self) -> String {
        format!("cni:ipam@{}", self.version())
    }

    pub fn export(self, interface: &str) -> String {
        format!("cni:ipam/{interface}@{}", self.version())
    }
}

/// The `cni:ipam` interfaces a module may import, by full name, with how to link each
/// (0.1.0's are forwarded to 0.2.0's implementations, `module/host/v0_1.rs`). Besides
/// these and `types` (types only, nothing to link), it may import WASI 0.2 (linked
/// with no capabilities; see [`crate::module::wasi`]), which Rust's std for
/// wasm32-wasip2 imports as soon as a module formats or panics.
pub const CNI_INTERFACES: &[(&str, Link)] = &[
    ("cni:ipam/store@0.2.0", |l| {
        bindings::store::add_to_linker::<_, HasSelf<_>>(l, |s: &mut GuestState| &mut s.store)
    }),
    ("cni:ipam/deadline@0.2.0", |l| {
        bindings::deadline::add_to_linker::<_, HasSelf<_>>(l, |s: &mut GuestState| &mut s.deadline)
    }),
    ("cni:ipam/log@0.2.0", |l| {
        bindings::log::add_to_linker::<_, HasSelf<_>>(l, |s: &mut GuestState| &mut s.log)
    }),
    ("cni:ipam/store@0.1.0", |l| {
        v0_1::store::add_to_linker::<_, HasSelf<_>>(l, |s: &mut GuestState| &mut s.store)
    }),
    ("cni:ipam/deadline@0.1.0", |l| {
        v0_1::deadline::add_to_linker::<_, HasSelf<_>>(l, |s: &mut GuestState| &mut s.deadline)
    }),
    ("cni:ipam/log@0.1.0", |l| {
        v0_1::log::add_to_linker::<_, HasSelf<_>>(l, |s: &mut GuestState| &mut s.log)
    }),
];
const CNI_TYPES: &[&str] = &["cni:ipam/types@0.2.0", "cni:ipam/types@0.1.0"];

/// What a component imports and exports, and whether the host can run it: everything
/// `wasm-ipam inspect` shows, and what [`ModuleHost::load`] refuses a module for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interfaces {
    /// Each import, with whether the host provides it.
    pub imports: Vec<(String, bool)>,
    pub exports: Vec<String>,
    /// The contract whose handler it exports, newest first.
    pub contract: Option<Contract>,
    pub inspect: bool,
    pub migrate: bool,
}

impl Interfaces {
    pub fn of(engine: &Engine, component: &Component) -> Self {
        let ty = component.component_type();
        let imports: Vec<(String, bool)> = ty
            .imports(engine)
            .map(|(name, item)| {
                let instance = matches!(item.ty, ComponentItem::ComponentInstance(_));
                let provided = instance
                    && (crate::module::wasi::interface(name).is_some()
                        || CNI_INTERFACES.iter().any(|(n, _)| *n == name)
                        || CNI_TYPES.contains(&name));
                (name.to_string(), provided)
            })
            .collect();
        let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
        let exported = |name: String| exports.contains(&name);
        let contract = Contract::RUN
            .into_iter()
            .find(|c| exported(c.export("handler")));
        Interfaces {
            contract,
            inspect: exported(Contract::V0_2.export("inspect")),
            migrate: exported(Contract::V0_2.export("migrate")),
            imports,
            exports,
        }
    }

    /// Why the host refuses the module, if it does.
    pub fn refusal(&self) -> Option<(String, String)> {
        let missing: Vec<&str> = self
            .imports
            .iter()
            .filter(|(_, provided)| !provided)
            .map(|(name, _)| name.as_str())
            .collect();
        if !missing.is_empty() {
            return Some((
                format!("imports what the host does not provide: {}", missing.join(", ")),
                "the host provides cni:ipam/{store,deadline,log} at 0.2.0 and 0.1.0, and WASI 0.2 with no capabilities".into(),
            ));
        }
        if self.contract.is_none() {
            return Some((
                "does not export cni:ipam/handler@0.2.0 (or @0.1.0)".into(),
                format!("it exports: {}", self.exports.join(", ")),
            ));
        }
        None
    }
}

/// 0.2.0's types to 0.1.0's and back, for a 0.1.0 module's handler.
pub mod v0_1_convert {
    use crate::module::bindings::{types, v0_1::types as old};

    pub fn request(r: types::Request) -> old::Request {
        old::Request {
            command: match r.command {
                types::Command::Add => old::Command::Add,
                types::Command::Del => old::Command::Del,
                types::Command::Check => old::Command::Check,
                types::Command::Gc => old::Command::Gc,
                types::Command::Status => old::Command::Status,
            },
            container_id: r.container_id,
            netns: r.netns,
            ifname: r.ifname,
            args: r.args,
            network_name: r.network_name,
            cni_version: r.cni_version,
            config: r.config,
            prev_result: r.prev_result,
            lock_granted_at: old::WallInstant {
                seconds: r.lock_granted_at.seconds,
                nanoseconds: r.lock_granted_at.nanoseconds,
            },
        }
    }

    pub fn attachment(a: types::Attachment) -> old::Attachment {
        old::Attachment {
            container_id: a.container_id,
            ifname: a.ifname,
        }
    }

    pub fn result(r: old::IpamResult) -> types::IpamResult {
        types::IpamResult {
            ips: r
                .ips
                .into_iter()
                .map(|i| types::IpConfig {
                    address: i.address,
                    gateway: i.gateway,
                })
                .collect(),
            routes: r
                .routes
                .into_iter()
                .map(|r| types::Route {
                    dst: r.dst,
                    gw: r.gw,
                    mtu: None,
                    advmss: None,
                    priority: None,
                    table: None,
                    scope: None,
                })
                .collect(),
            dns: types::Dns {
                nameservers: r.dns.nameservers,
                domain: r.dns.domain,
                search: r.dns.search,
                options: r.dns.options,
            },
        }
    }

    pub fn error(e: old::Error) -> types::Error {
        types::Error {
            code: e.code,
            msg: e.msg,
            details: e.details,
        }
    }
}
