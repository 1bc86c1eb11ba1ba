//! Builders for the ADD result, so a module states what it hands out in one
//! expression and leaves every field it does not name empty.
//!
//! Each builder method takes anything that prints as the value (`&str`, `String`,
//! `std::net::IpAddr`, `ipnet::IpNet`, ...), so addresses need no `to_string()`:
//!
//! ```
//! use std::net::IpAddr;
//! use wasm_ipam_guest::{Dns, IpConfig, IpamResult, Route};
//!
//! let gateway: IpAddr = "10.0.0.1".parse().unwrap();
//! let result = IpamResult::default()
//!     .ip(IpConfig::new("10.0.0.2/24").gateway(gateway))
//!     .route(Route::new("0.0.0.0/0").gw(gateway).mtu(1400))
//!     .dns(Dns::default().nameserver("10.0.0.53").search("example.org"));
//! assert_eq!(result.ips[0].address, "10.0.0.2/24");
//! assert_eq!(result.ips[0].gateway.as_deref(), Some("10.0.0.1"));
//! assert_eq!(result.routes[0].mtu, Some(1400));
//! assert_eq!(result.routes[0].scope, None);
//! assert_eq!(result.dns.search, ["example.org"]);
//! ```

use crate::{Dns, IpConfig, IpamResult, Route};
use std::fmt::Display;

impl IpamResult {
    /// Adds an address handed out.
    pub fn ip(mut self, ip: IpConfig) -> Self {
        self.ips.push(ip);
        self
    }

    /// Adds a route.
    pub fn route(mut self, route: Route) -> Self {
        self.routes.push(route);
        self
    }

    /// Sets the DNS settings (none by default).
    pub fn dns(mut self, dns: Dns) -> Self {
        self.dns = dns;
        self
    }
}

impl IpConfig {
    /// An address as a CIDR (`10.1.2.3/24`, `fd00::3/64`), without a gateway.
    pub fn new(address: impl Display) -> Self {
        IpConfig {
            address: address.to_string(),
            gateway: None,
        }
    }

    /// Sets the gateway (an address without a prefix length).
    pub fn gateway(mut self, gateway: impl Display) -> Self {
        self.gateway = Some(gateway.to_string());
        self
    }
}

/// The CNI 1.1 attributes (`mtu`, `advmss`, `priority`, `table`, `scope`) are printed
/// by the host only for a configuration at cniVersion 1.1.0 or later.
impl Route {
    /// A route to `dst` (a CIDR) through the interface's default gateway.
    pub fn new(dst: impl Display) -> Self {
        Route {
            dst: dst.to_string(),
            ..Route::default()
        }
    }

    /// Sets the next hop.
    pub fn gw(mut self, gw: impl Display) -> Self {
        self.gw = Some(gw.to_string());
        self
    }

    /// Sets the route's MTU.
    pub fn mtu(mut self, mtu: u32) -> Self {
        self.mtu = Some(mtu);
        self
    }

    /// Sets the TCP maximum segment size advertised on the route.
    pub fn advmss(mut self, advmss: u32) -> Self {
        self.advmss = Some(advmss);
        self
    }

    /// Sets the route's priority (metric).
    pub fn priority(mut self, priority: u32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Sets the routing table the route goes in.
    pub fn table(mut self, table: u32) -> Self {
        self.table = Some(table);
        self
    }

    /// Sets the scope as `ip route` numbers it (0 universe, 253 link, 254 host).
    pub fn scope(mut self, scope: u8) -> Self {
        self.scope = Some(scope);
        self
    }
}

impl Dns {
    /// Adds a name server.
    pub fn nameserver(mut self, address: impl Display) -> Self {
        self.nameservers.push(address.to_string());
        self
    }

    /// Sets the local domain.
    pub fn domain(mut self, domain: impl Display) -> Self {
        self.domain = Some(domain.to_string());
        self
    }

    /// Adds a search domain.
    pub fn search(mut self, domain: impl Display) -> Self {
        self.search.push(domain.to_string());
        self
    }

    /// Adds a resolver option (`ndots:5`).
    pub fn option(mut self, option: impl Display) -> Self {
        self.options.push(option.to_string());
        self
    }
}
