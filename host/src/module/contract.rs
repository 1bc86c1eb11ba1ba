//! The `cni:ipam` contract versions the host runs (docs/wit-versions.md): which
//! interfaces a module may import and how each is linked, what it exports, whether the
//! host can run it, and the conversions a 0.1.0 module's handler needs.

use crate::module::bindings::{self, v0_1};
use crate::module::host::GuestState;
use crate::module::wasi::Link;
use wasmtime::Engine;
use wasmtime::component::{Component, HasSelf, types::ComponentItem};

/// A version of the `cni:ipam` contract the host runs (docs/wit-versions.md). The
/// patch versions of one 0.x line only add optional exports, so the host runs every
/// 0.2.x up to its own with one set of bindings: wasmtime looks an export or import
/// up by its semver-compatible name (`…@0.2`), whichever 0.2.x the module names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Contract {
    V0_1,
    V0_2 { patch: u32 },
}

impl Contract {
    /// `wit/ipam.wit`: what the host's bindings, the SDK and the examples are built from.
    pub const CURRENT: Contract = Contract::V0_2 { patch: 5 };

    pub fn version(self) -> String {
        match self {
            Contract::V0_1 => "0.1.0".into(),
            Contract::V0_2 { patch } => format!("0.2.{patch}"),
        }
    }

    /// `cni:ipam@0.2.5`.
    pub fn name(self) -> String {
        format!("cni:ipam@{}", self.version())
    }

    /// The line a version belongs to: interfaces of one line link to one
    /// implementation.
    fn line(self) -> &'static str {
        match self {
            Contract::V0_1 => "0.1",
            Contract::V0_2 { .. } => "0.2",
        }
    }

    /// The contract `version` names, if the host runs it: 0.1.0, or 0.2.0 up to
    /// [`Contract::CURRENT`] (a newer patch may export what this host cannot call).
    fn parse(version: &str) -> Option<Contract> {
        let Contract::V0_2 { patch: newest } = Contract::CURRENT else {
            unreachable!("the current contract is on the 0.2 line")
        };
        match version.split('.').collect::<Vec<_>>()[..] {
            ["0", "1", "0"] => Some(Contract::V0_1),
            ["0", "2", patch] => patch
                .parse::<u32>()
                .ok()
                .filter(|p| *p <= newest && patch == p.to_string())
                .map(|patch| Contract::V0_2 { patch }),
            _ => None,
        }
    }

    /// The interface and contract a `cni:ipam` import or export is named by
    /// (`cni:ipam/store@0.2.0` → `store`, 0.2.0), if the host runs that contract.
    pub fn of_name(name: &str) -> Option<(&str, Contract)> {
        let (interface, version) = name.strip_prefix("cni:ipam/")?.split_once('@')?;
        Some((interface, Contract::parse(version)?))
    }
}

/// The `cni:ipam` interfaces a module may import, with the contract line each belongs
/// to and how it is linked: once per line, whichever patch versions of it a module
/// imports (0.1.0's are forwarded to 0.2's implementations, `module/host/v0_1.rs`).
/// Besides these and `types` (types only, nothing to link), it may import WASI 0.2
/// (linked with no capabilities; see [`crate::module::wasi`]), which Rust's std for
/// wasm32-wasip2 imports as soon as a module formats or panics.
pub const CNI_INTERFACES: &[(&str, &str, Link)] = &[
    ("store", "0.2", |l| {
        bindings::store::add_to_linker::<_, HasSelf<_>>(l, |s: &mut GuestState| &mut s.store)
    }),
    ("deadline", "0.2", |l| {
        bindings::deadline::add_to_linker::<_, HasSelf<_>>(l, |s: &mut GuestState| &mut s.deadline)
    }),
    ("log", "0.2", |l| {
        bindings::log::add_to_linker::<_, HasSelf<_>>(l, |s: &mut GuestState| &mut s.log)
    }),
    ("readiness", "0.2", |l| {
        bindings::readiness::add_to_linker::<_, HasSelf<_>>(l, |s: &mut GuestState| {
            &mut s.readiness
        })
    }),
    ("store", "0.1", |l| {
        v0_1::store::add_to_linker::<_, HasSelf<_>>(l, |s: &mut GuestState| &mut s.store)
    }),
    ("deadline", "0.1", |l| {
        v0_1::deadline::add_to_linker::<_, HasSelf<_>>(l, |s: &mut GuestState| &mut s.deadline)
    }),
    ("log", "0.1", |l| {
        v0_1::log::add_to_linker::<_, HasSelf<_>>(l, |s: &mut GuestState| &mut s.log)
    }),
];

/// The `cni:ipam` import `name` (`cni:ipam/store@0.2.0`), if the host provides it:
/// the entry of [`CNI_INTERFACES`] that links it, or `None` inside for `types`.
pub fn cni_import(name: &str) -> Option<Option<&'static (&'static str, &'static str, Link)>> {
    let (interface, contract) = Contract::of_name(name)?;
    if interface == "types" {
        return Some(None);
    }
    CNI_INTERFACES
        .iter()
        .find(|(i, line, _)| *i == interface && *line == contract.line())
        .map(Some)
}

/// What a component imports and exports, and whether the host can run it: everything
/// `wasm-ipam inspect` shows, and what [`ModuleHost::load`] refuses a module for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interfaces {
    /// Each import, with whether the host provides it.
    pub imports: Vec<(String, bool)>,
    pub exports: Vec<String>,
    /// The newest contract whose handler it exports.
    pub contract: Option<Contract>,
    pub inspect: bool,
    pub migrate: bool,
    /// `nodes` (since 0.2.1), for `release-node`.
    pub nodes: bool,
    /// `capabilities` (since 0.2.2): which functions it implements, for `inspect`.
    pub capabilities: bool,
    /// `reservations` (since 0.2.3), for `reserve`, `unreserve` and `list`.
    pub reservations: bool,
    /// `usage` (since 0.2.3), for `stats` in detail.
    pub usage: bool,
    /// `wide-usage` (since 0.2.5): `usage` with exact counts.
    pub wide_usage: bool,
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
                        || cni_import(name).is_some());
                (name.to_string(), provided)
            })
            .collect();
        let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
        let exported: Vec<(&str, Contract)> = exports
            .iter()
            .filter_map(|n| Contract::of_name(n))
            .collect();
        // Optional exports are 0.2's: found at any 0.2.x, as the bindings look them up.
        let on_0_2 = |interface: &str| {
            exported
                .iter()
                .any(|(i, c)| *i == interface && matches!(c, Contract::V0_2 { .. }))
        };
        Interfaces {
            contract: exported
                .iter()
                .filter(|(i, _)| *i == "handler")
                .map(|(_, c)| *c)
                .max(),
            inspect: on_0_2("inspect"),
            migrate: on_0_2("migrate"),
            nodes: on_0_2("nodes"),
            capabilities: on_0_2("capabilities"),
            reservations: on_0_2("reservations"),
            usage: on_0_2("usage"),
            wide_usage: on_0_2("wide-usage"),
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
        let current = Contract::CURRENT.version();
        if !missing.is_empty() {
            return Some((
                format!(
                    "imports what the host does not provide: {}",
                    missing.join(", ")
                ),
                format!(
                    "the host provides cni:ipam/{{store,deadline,log}} at 0.2.0 to {current} and 0.1.0, cni:ipam/readiness from 0.2.5, and WASI 0.2 with no capabilities"
                ),
            ));
        }
        if self.contract.is_none() {
            return Some((
                format!(
                    "does not export a cni:ipam/handler the host runs (0.2.0 to {current}, or 0.1.0): {}",
                    super::artifact::foreign_component(
                        &self.exports,
                        &format!("0.2.0 to {current}, or 0.1.0"),
                    )
                ),
                format!("it exports: [{}]", self.exports.join(", ")),
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
