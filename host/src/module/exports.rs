//! The exports of a linked module that a call reaches, looked up once per load: its
//! handler (of 0.1 or 0.2), and each optional interface of 0.2 it has. Looking them up
//! at link time refuses a module that names an interface without its functions before
//! anything waits for the lock; a question needing an export the module lacks is
//! refused by [`Export`] before it is asked.

use crate::error::CniError;
use crate::module::bindings::{
    capabilities, handler, inspect, migrate, nodes, reservations, usage, v0_1, wide_usage,
};
use crate::module::contract::{Contract, Interfaces};
use crate::module::host::GuestState;
use wasmtime::component::InstancePre;

/// The handler export a call reaches.
pub enum Handler {
    V0_1(v0_1::handler::GuestIndices),
    V0_2(handler::GuestIndices),
}

/// An optional export a question may need, and the contract version that added it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Export {
    Inspect,
    Migrate,
    Nodes,
    Capabilities,
    Reservations,
    Usage,
}

impl Export {
    /// Its interface's name in `cni:ipam`.
    pub fn interface(self) -> &'static str {
        match self {
            Export::Inspect => "inspect",
            Export::Migrate => "migrate",
            Export::Nodes => "nodes",
            Export::Capabilities => "capabilities",
            Export::Reservations => "reservations",
            Export::Usage => "usage",
        }
    }

    /// The `cni:ipam` version that added it.
    pub fn since(self) -> &'static str {
        match self {
            Export::Inspect | Export::Migrate => "0.2.0",
            Export::Nodes => "0.2.1",
            Export::Capabilities => "0.2.2",
            Export::Reservations | Export::Usage => "0.2.3",
        }
    }
}

/// Why a module cannot be linked: what it does, and wasmtime's error.
pub type Rejected<'a> = &'a dyn Fn(&str, wasmtime::Error) -> CniError;

/// The indices of each export a call reaches.
pub struct Exports {
    pub handler: Handler,
    pub inspect: Option<inspect::GuestIndices>,
    pub migrate: Option<migrate::GuestIndices>,
    pub nodes: Option<nodes::GuestIndices>,
    pub capabilities: Option<capabilities::GuestIndices>,
    pub reservations: Option<reservations::GuestIndices>,
    pub usage: Option<usage::GuestIndices>,
    /// `wide-usage` (0.2.5): `usage` with exact counts, asked instead when present.
    pub wide_usage: Option<wide_usage::GuestIndices>,
}

impl Exports {
    /// Looks up `contract`'s handler and each optional export `interfaces` lists.
    /// Generated from the current contract, the indices find a 0.2.x export by its
    /// semver-compatible name, so one set serves every 0.2 patch version.
    pub fn look_up(
        pre: &InstancePre<GuestState>,
        contract: Contract,
        interfaces: &Interfaces,
        rejected: Rejected,
    ) -> Result<Exports, CniError> {
        let handler_export = format!("does not export cni:ipam/handler@{}", contract.version());
        let handler = match contract {
            Contract::V0_1 => Handler::V0_1(
                v0_1::handler::GuestIndices::new(pre).map_err(|e| rejected(&handler_export, e))?,
            ),
            Contract::V0_2 { .. } => Handler::V0_2(
                handler::GuestIndices::new(pre).map_err(|e| rejected(&handler_export, e))?,
            ),
        };
        let optional = Optional { pre, rejected };
        Ok(Exports {
            handler,
            inspect: optional.look_up(interfaces.inspect, "inspect", inspect::GuestIndices::new)?,
            migrate: optional.look_up(interfaces.migrate, "migrate", migrate::GuestIndices::new)?,
            nodes: optional.look_up(interfaces.nodes, "nodes", nodes::GuestIndices::new)?,
            capabilities: optional.look_up(
                interfaces.capabilities,
                "capabilities",
                capabilities::GuestIndices::new,
            )?,
            reservations: optional.look_up(
                interfaces.reservations,
                "reservations",
                reservations::GuestIndices::new,
            )?,
            usage: optional.look_up(interfaces.usage, "usage", usage::GuestIndices::new)?,
            wide_usage: optional.look_up(
                interfaces.wide_usage,
                "wide-usage",
                wide_usage::GuestIndices::new,
            )?,
        })
    }

    /// Whether the module has `export`.
    pub fn has(&self, export: Export) -> bool {
        match export {
            Export::Inspect => self.inspect.is_some(),
            Export::Migrate => self.migrate.is_some(),
            Export::Nodes => self.nodes.is_some(),
            Export::Capabilities => self.capabilities.is_some(),
            Export::Reservations => self.reservations.is_some(),
            Export::Usage => self.usage.is_some(),
        }
    }
}

/// Looks up an optional export in one linked module.
struct Optional<'a> {
    pre: &'a InstancePre<GuestState>,
    rejected: Rejected<'a>,
}

impl Optional<'_> {
    /// The indices of `interface` if the module exports it (`exported`), found by
    /// `new`; a module that names the interface without its functions is refused.
    fn look_up<T>(
        &self,
        exported: bool,
        interface: &str,
        new: fn(&InstancePre<GuestState>) -> wasmtime::Result<T>,
    ) -> Result<Option<T>, CniError> {
        exported
            .then(|| {
                new(self.pre).map_err(|e| {
                    let without = format!("exports cni:ipam/{interface} without its functions");
                    (self.rejected)(&without, e)
                })
            })
            .transpose()
    }
}

/// The indices of an optional export the module has: a question of a module without
/// it is refused before it is asked ([`Export`]).
pub fn present<T>(indices: &Option<T>) -> &T {
    indices
        .as_ref()
        .expect("a question of a missing export is refused before")
}
