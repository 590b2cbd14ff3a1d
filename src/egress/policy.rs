//! The allowlist of a `network: restricted` sandbox: host names, `*.` globs and
//! IPv4 literals, each optionally pinned to one port (default: 80 and 443),
//! and the rule for which resolved addresses a match may reach.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

/// The ports an entry without `:PORT` allows.
pub const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// Where sandboxes' own networks are carved from (/28 each): always refused as
/// a destination, so no sandbox reaches another through the proxy.
pub const SANDBOX_RANGE: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 213, 0, 0), 16);
/// Where each FORAGE_HOME's outside network (the proxy's way out) is carved
/// from (/24 each).
pub const OUTSIDE_RANGE: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 214, 0, 0), 16);

/// What an entry names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// One host name, lowercase, no trailing dot.
    Exact(String),
    /// `*.suffix`: any name of at least one more label under `suffix`.
    Glob(String),
    Ip(Ipv4Addr),
}

/// One checked allowlist entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Pattern {
    target: Target,
    port: Option<u16>,
}

impl TryFrom<String> for Pattern {
    type Error = String;
    fn try_from(s: String) -> Result<Pattern, String> {
        s.parse()
    }
}

impl From<Pattern> for String {
    fn from(p: Pattern) -> String {
        p.to_string()
    }
}

impl std::fmt::Display for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.target {
            Target::Exact(h) => f.write_str(h)?,
            Target::Glob(s) => write!(f, "*.{s}")?,
            Target::Ip(ip) => write!(f, "{ip}")?,
        }
        match self.port {
            Some(p) => write!(f, ":{p}"),
            None => Ok(()),
        }
    }
}

impl std::str::FromStr for Pattern {
    type Err = String;

    fn from_str(raw: &str) -> Result<Pattern, String> {
        let bad = |why: &str| {
            format!(
                "{raw:?} is not an allowlist entry ({why}): use a host name (api.anthropic.com), a glob of its subdomains (*.githubusercontent.com) or an IPv4 address, optionally with :PORT"
            )
        };
        let s = raw.trim();
        if s.is_empty() {
            return Err(bad("it is empty"));
        }
        if s.contains('[') || s.matches(':').count() > 1 {
            return Err(bad("IPv6 is not supported"));
        }
        let (host, port) = match s.rsplit_once(':') {
            Some((h, p)) => {
                let port: u16 = p.parse().map_err(|_| bad("the port is not a number from 1 to 65535"))?;
                if port == 0 {
                    return Err(bad("the port is not a number from 1 to 65535"));
                }
                (h, Some(port))
            }
            None => (s, None),
        };
        let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        let target = if let Ok(ip) = host.parse::<Ipv4Addr>() {
            Target::Ip(ip)
        } else if let Some(suffix) = host.strip_prefix("*.") {
            check_name(suffix).map_err(|why| bad(&why))?;
            if !suffix.contains('.') {
                return Err(bad("a glob must name a domain of at least two labels, such as *.example.com"));
            }
            Target::Glob(suffix.to_owned())
        } else {
            check_name(&host).map_err(|why| bad(&why))?;
            Target::Exact(host)
        };
        Ok(Pattern { target, port })
    }
}

/// A DNS name as forage accepts it: labels of letters, digits, `-` and `_`.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 253 {
        return Err("a host name is 1 to 253 characters".into());
    }
    for label in name.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err("each label of a host name is 1 to 63 characters".into());
        }
        if !label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
            return Err("a host name holds only letters, digits, '-', '_' and dots".into());
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err("a label of a host name neither starts nor ends with '-'".into());
        }
    }
    if name.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return Err("an all-numeric name is an address, not a host name".into());
    }
    Ok(())
}

/// A destination as a sandbox asked for it: a name (lowercase, checked) or an
/// IPv4 literal, and a port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Name(String),
    Ip(Ipv4Addr),
}

impl Host {
    /// Parses the host part of a CONNECT target or URL; `None` for anything
    /// that is neither a checked name nor an IPv4 literal (IPv6 included).
    pub fn parse(raw: &str) -> Option<Host> {
        let h = raw.strip_suffix('.').unwrap_or(raw).to_ascii_lowercase();
        if let Ok(ip) = h.parse::<Ipv4Addr>() {
            return Some(Host::Ip(ip));
        }
        check_name(&h).ok().map(|()| Host::Name(h))
    }
}

impl std::fmt::Display for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// How an allowed destination was matched, which decides what addresses it
/// may reach: only an entry that names the host exactly (or its address) may
/// reach a private or link-local address; a glob never does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    Exact,
    Glob,
}

/// The entries of one sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Allowlist(pub Vec<Pattern>);

impl Allowlist {
    /// Whether `host:port` is allowed, and how (an exact match wins over a glob).
    pub fn check(&self, host: &Host, port: u16) -> Option<Match> {
        let mut best = None;
        for p in &self.0 {
            if !p.port.map_or(DEFAULT_PORTS.contains(&port), |only| only == port) {
                continue;
            }
            let m = match (&p.target, host) {
                (Target::Exact(e), Host::Name(n)) if e == n => Match::Exact,
                (Target::Ip(a), Host::Ip(b)) if a == b => Match::Exact,
                (Target::Glob(s), Host::Name(n))
                    if n.len() > s.len() + 1
                        && n.ends_with(s.as_str())
                        && n.as_bytes()[n.len() - s.len() - 1] == b'.' =>
                {
                    Match::Glob
                }
                _ => continue,
            };
            if m == Match::Exact {
                return Some(m);
            }
            best = Some(m);
        }
        best
    }
}

/// Why an address is never reached, whatever the allowlist says; `None` if
/// it may be.
pub fn always_refused(ip: Ipv4Addr) -> Option<&'static str> {
    if ip.is_loopback() || ip.is_unspecified() {
        Some("a loopback or unspecified address")
    } else if ip.is_multicast() || ip.is_broadcast() || ip.octets()[0] >= 240 {
        Some("a multicast, broadcast or reserved address")
    } else if in_range(ip, SANDBOX_RANGE) {
        Some("an address of forage's sandbox networks")
    } else if in_range(ip, crate::ports::PORTS_RANGE) {
        Some("an address of forage's port forwarders")
    } else {
        None
    }
}

/// Addresses only an exact entry may reach: private, shared (CGNAT),
/// link-local (cloud metadata), and the test and benchmark ranges.
pub fn is_internal(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    ip.is_private()
        || ip.is_link_local()
        || (o[0] == 100 && (o[1] & 0xc0) == 64)
        || (o[0] == 198 && (o[1] & 0xfe) == 18)
        || o[0] == 0
}

pub fn in_range(ip: Ipv4Addr, (base, bits): (Ipv4Addr, u8)) -> bool {
    let mask = if bits == 0 { 0 } else { u32::MAX << (32 - u32::from(bits)) };
    (u32::from(ip) & mask) == (u32::from(base) & mask)
}

/// Whether a resolved address may be reached by a destination matched as `how`.
pub fn reachable(ip: Ipv4Addr, how: Match) -> Result<(), String> {
    if let Some(why) = always_refused(ip) {
        return Err(format!("{ip} is {why}"));
    }
    if how == Match::Glob && is_internal(ip) {
        return Err(format!(
            "{ip} is a private or link-local address, which only an entry naming the host exactly may reach"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(entries: &[&str]) -> Allowlist {
        Allowlist(entries.iter().map(|e| e.parse().unwrap()).collect())
    }

    #[test]
    fn entries_parse_and_print_canonically() {
        for (raw, shown) in [
            ("API.Anthropic.com.", "api.anthropic.com"),
            ("*.githubusercontent.com", "*.githubusercontent.com"),
            ("host.test:11434", "host.test:11434"),
            ("10.0.0.5:8080", "10.0.0.5:8080"),
        ] {
            assert_eq!(raw.parse::<Pattern>().unwrap().to_string(), shown);
        }
        for bad in ["", "*", "*.com", "a b", "x:0", "x:99999", "::1", "[::1]:80", "-a.com", "*.*.a.com", "http://a.com"]
        {
            let err = bad.parse::<Pattern>().unwrap_err();
            assert!(err.contains("is not an allowlist entry"), "{bad}: {err}");
        }
    }

    #[test]
    fn names_globs_and_ports_match_as_documented() {
        let l = list(&["api.anthropic.com", "*.githubusercontent.com", "model.test:11434", "10.1.2.3"]);
        let name = |n: &str| Host::parse(n).unwrap();
        assert_eq!(l.check(&name("api.anthropic.com"), 443), Some(Match::Exact));
        assert_eq!(l.check(&name("API.anthropic.com."), 80), Some(Match::Exact));
        assert_eq!(l.check(&name("api.anthropic.com"), 22), None);
        assert_eq!(l.check(&name("raw.githubusercontent.com"), 443), Some(Match::Glob));
        assert_eq!(l.check(&name("githubusercontent.com"), 443), None);
        assert_eq!(l.check(&name("evilgithubusercontent.com"), 443), None);
        assert_eq!(l.check(&name("model.test"), 11434), Some(Match::Exact));
        assert_eq!(l.check(&name("model.test"), 443), None);
        assert_eq!(l.check(&name("10.1.2.3"), 80), Some(Match::Exact));
        assert_eq!(l.check(&name("10.1.2.4"), 80), None);
        assert_eq!(l.check(&name("anthropic.com"), 443), None);
    }

    #[test]
    fn internal_addresses_need_an_exact_entry_and_some_are_never_reached() {
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert!(reachable(ip("10.214.0.5"), Match::Exact).is_ok());
        assert!(reachable(ip("10.214.0.5"), Match::Glob).is_err());
        assert!(reachable(ip("169.254.169.254"), Match::Glob).is_err());
        assert!(reachable(ip("93.184.216.34"), Match::Glob).is_ok());
        for never in ["127.0.0.1", "0.0.0.0", "10.213.4.3", "10.215.0.2", "224.0.0.1", "255.255.255.255"] {
            assert!(reachable(ip(never), Match::Exact).is_err(), "{never}");
        }
    }
}
