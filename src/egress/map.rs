//! The map from each restricted sandbox's network to its name and allowlist:
//! written by forage (atomically, from the records) into
//! FORAGE_HOME/egress/policy, which the proxy mounts read-only and re-reads
//! when it changes.

use std::net::Ipv4Addr;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::policy::Allowlist;

/// The file in the policy directory.
pub const FILE: &str = "map.json";
/// The most the proxy reads of it (about 10,000 sandboxes of 100 entries).
pub const MAX_BYTES: u64 = 32 << 20;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EgressMap {
    pub sandboxes: Vec<Entry>,
    /// The engine's default network's subnets (`a.b.c.d/n`): `full`
    /// sandboxes and port forwarders are there, and no restricted sandbox
    /// reaches them through the proxy, whatever its allowlist says.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<String>,
}

/// One sandbox: connections that arrive on `proxy_ip` from `sandbox_ip` are its.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    pub name: String,
    pub proxy_ip: Ipv4Addr,
    pub sandbox_ip: Ipv4Addr,
    pub allow: Allowlist,
    /// The hosts whose keys the proxy sets for it (their values are in its keys file).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inject: Vec<String>,
}

impl EgressMap {
    /// The sandbox a connection belongs to: it arrived on `local` from `peer`.
    pub fn sandbox(&self, local: Ipv4Addr, peer: Ipv4Addr) -> Option<&Entry> {
        self.sandboxes.iter().find(|e| e.proxy_ip == local && e.sandbox_ip == peer)
    }

    /// Whether `ip` is on the engine's default network. A subnet that does
    /// not parse refuses everything: forage wrote it, so the map is not
    /// the one it meant.
    pub fn refuses(&self, ip: Ipv4Addr) -> bool {
        self.refused.iter().any(|s| match super::subnet::Subnet::parse(s) {
            Some(s) => super::policy::in_range(ip, (s.base, s.bits)),
            None => true,
        })
    }

    /// Writes the map into `dir` atomically (a temporary file renamed over it:
    /// the proxy never reads half a map).
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let tmp = dir.join(format!(".{FILE}.{}", std::process::id()));
        std::fs::write(&tmp, serde_json::to_vec_pretty(self)?)?;
        std::fs::rename(&tmp, dir.join(FILE))
    }

    /// Reads the map in `dir` (empty when there is none).
    pub fn read(dir: &Path) -> std::io::Result<EgressMap> {
        use std::io::Read;
        let file = match std::fs::File::open(dir.join(FILE)) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(EgressMap::default()),
            Err(e) => return Err(e),
        };
        let mut bytes = Vec::new();
        file.take(MAX_BYTES).read_to_end(&mut bytes)?;
        serde_json::from_slice(&bytes).map_err(std::io::Error::other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_networks_addresses_are_refused_and_a_subnet_that_does_not_parse_refuses_all() {
        let map = EgressMap { refused: vec!["172.17.0.0/16".into()], ..Default::default() };
        assert!(map.refuses(Ipv4Addr::new(172, 17, 0, 5)));
        assert!(!map.refuses(Ipv4Addr::new(172, 18, 0, 5)));
        assert!(!EgressMap::default().refuses(Ipv4Addr::new(172, 17, 0, 5)));
        let garbled = EgressMap { refused: vec!["172.17.0.0/40".into()], ..Default::default() };
        assert!(garbled.refuses(Ipv4Addr::new(8, 8, 8, 8)));
        // A map written before the field reads as refusing nothing more.
        let old: EgressMap = serde_json::from_str(r#"{"sandboxes": []}"#).unwrap();
        assert!(old.refused.is_empty());
    }
}
