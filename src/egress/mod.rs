//! `network: restricted`: each such sandbox sits on an internal Docker network
//! of its own (no route out, no DNS), whose only way out is one egress proxy
//! per FORAGE_HOME: forage itself (`forage-ctl egress-proxy`) in a container
//! of its own, joined to every restricted sandbox's network and to an outside
//! one. This module holds what both sides share: the allowlist (`policy`), the
//! map of networks to sandboxes the proxy reads (`map`), its decision log
//! (`log`), its name lookups (`names`), the TLS peek (`tls`), subnet choice
//! (`subnet`) and the proxy itself (`proxy`, its tunnels moved by `splice`).

pub mod dns;
pub mod inject;
pub mod intercept;
pub mod log;
pub mod map;
pub mod names;
pub mod policy;
pub mod proxy;
pub mod splice;
pub mod subnet;
pub mod tls;

/// The port the proxy listens on, on every network it is joined to.
pub const PROXY_PORT: u16 = 3128;
/// Where it answers DNS (NXDOMAIN, always): a sandbox's resolver forwards there.
pub const DNS_PORT: u16 = 53;
/// Where the proxy's container mounts FORAGE_HOME/egress/policy (read-only)
/// and FORAGE_HOME/egress/log.
pub const POLICY_INSIDE: &str = "/forage-egress/policy";
pub const LOG_INSIDE: &str = "/forage-egress/log";
/// The prefix of a sandbox network's size: 16 addresses, of which the first
/// is the gateway's (Docker's, on no interface: `inhibit_ipv4`; Podman's
/// sandbox networks have none), the proxy takes the second and the sandbox
/// the third.
pub const SANDBOX_SUBNET_BITS: u8 = 28;
pub const OUTSIDE_SUBNET_BITS: u8 = 24;
pub const PROXY_HOST: u32 = 2;
pub const SANDBOX_HOST: u32 = 3;
/// The sandbox's port forwarder (`crate::ports`), when it publishes ports.
pub const FORWARDER_HOST: u32 = 4;
