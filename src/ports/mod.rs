//! Published ports: a sandbox's `PORT`s reachable from the host at
//! `127.0.0.1:HOSTPORT` only. The sandbox's own container publishes nothing
//! (changing what a container publishes means recreating it); a small
//! forwarder of forage's own per sandbox (`forward`, run as the hidden
//! `forage-ctl port-forward` in the egress proxy's image) publishes them and
//! is the one recreated when the set changes.

pub mod forward;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// `[HOSTPORT:]PORT`: a port in the sandbox, and the host's port for it
/// (`None`: forage lets the engine pick a free one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PortSpec {
    pub host: Option<u16>,
    pub port: u16,
}

impl FromStr for PortSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let one = |word: &str| -> Result<u16, String> {
            match word.parse::<u16>() {
                Ok(0) | Err(_) => Err(format!("{s:?} is not [HOSTPORT:]PORT: {word:?} is not a port (1 to 65535)")),
                Ok(p) => Ok(p),
            }
        };
        match s.split_once(':') {
            Some((host, port)) => Ok(PortSpec { host: Some(one(host)?), port: one(port)? }),
            None => Ok(PortSpec { host: None, port: one(s)? }),
        }
    }
}

impl fmt::Display for PortSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.host {
            Some(h) => write!(f, "{h}:{}", self.port),
            None => write!(f, "{}", self.port),
        }
    }
}

/// A published port as it is: the sandbox's port, and the host port bound
/// on 127.0.0.1 for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Published {
    pub port: u16,
    pub host_port: u16,
}

impl fmt::Display for Published {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "127.0.0.1:{}->{}", self.host_port, self.port)
    }
}

/// Where forwarders' own networks are carved from (/29 each), not Docker's
/// default address pools (about 30 networks in all): sixteen agents
/// publishing must not use them up. Never reached through the egress proxy.
pub const PORTS_RANGE: (std::net::Ipv4Addr, u8) = (std::net::Ipv4Addr::new(10, 215, 0, 0), 16);
pub const PORTS_SUBNET_BITS: u8 = 29;

/// The most ports one sandbox publishes: each is a listener in its forwarder.
pub const MAX_PORTS: usize = 64;

/// The forwarder's container of a sandbox, and its network (the same name:
/// the engine keeps the two apart). The capital letters keep it from ever
/// being a sandbox's container (`forage-NAME`, NAME lower-case).
pub fn forwarder_name(sandbox: &crate::names::SandboxName) -> String {
    format!("{}-Ports", sandbox.container())
}

/// `--publish` asks what the sandbox's network allows: none for `network:
/// none`, and each sandbox port once.
pub fn check_publish(publish: &[PortSpec], network: crate::runtime::Network) -> crate::error::Result<()> {
    use crate::error::Error;
    let Some(first) = publish.first() else { return Ok(()) };
    if network == crate::runtime::Network::None {
        return Err(Error::usage(format!(
            "--publish {first} needs a network, and this sandbox's network is none (nothing can reach it)"
        ))
        .hint("add --network full or --network restricted, or drop --publish"));
    }
    if publish.len() > MAX_PORTS {
        return Err(Error::usage(format!(
            "{} ports to publish; a sandbox publishes at most {MAX_PORTS}",
            publish.len()
        )));
    }
    for (i, p) in publish.iter().enumerate() {
        if let Some(twice) = publish[..i].iter().find(|q| q.port == p.port || (q.host.is_some() && q.host == p.host)) {
            return Err(
                Error::usage(format!("--publish {p} and --publish {twice} share a port")).hint("give each port once")
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_specs_parse_and_name_a_bad_one() {
        assert_eq!("3000".parse::<PortSpec>().unwrap(), PortSpec { host: None, port: 3000 });
        assert_eq!("8080:3000".parse::<PortSpec>().unwrap(), PortSpec { host: Some(8080), port: 3000 });
        assert_eq!("8080:3000".parse::<PortSpec>().unwrap().to_string(), "8080:3000");
        for bad in ["0", "x", "70000", "1:2:3", ":3000", "3000:", ""] {
            let err = bad.parse::<PortSpec>().unwrap_err();
            assert!(err.contains("[HOSTPORT:]PORT"), "{bad}: {err}");
        }
    }
}
