//! Picks a free subnet for a new network from a range forage owns, so the
//! engine's default address pools (about 30 networks) are never used up by
//! sandboxes. The engine refuses an overlapping subnet, so two `up`s that pick
//! the same one at once are told apart by retrying the next free one.

use std::net::Ipv4Addr;

use super::policy::in_range;

/// The network `base/bits`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subnet {
    pub base: Ipv4Addr,
    pub bits: u8,
}

impl Subnet {
    pub fn parse(cidr: &str) -> Option<Subnet> {
        let (ip, bits) = cidr.split_once('/')?;
        let bits: u8 = bits.parse().ok().filter(|b| *b <= 32)?;
        Some(Subnet { base: ip.parse().ok()?, bits })
    }

    /// The `n`th address of the subnet (1: the gateway).
    pub fn host(self, n: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.base) + n)
    }

    fn size(self) -> u64 {
        1u64 << (32 - u32::from(self.bits))
    }

    fn overlaps(self, other: Subnet) -> bool {
        in_range(self.base, (other.base, other.bits)) || in_range(other.base, (self.base, self.bits))
    }
}

impl std::fmt::Display for Subnet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.base, self.bits)
    }
}

/// The free subnets of `bits` in `range`, lowest first, that overlap none of `used`.
pub fn free(range: (Ipv4Addr, u8), bits: u8, used: &[Subnet]) -> impl Iterator<Item = Subnet> + '_ {
    let range = Subnet { base: range.0, bits: range.1 };
    let step = Subnet { base: range.base, bits }.size();
    (0..range.size() / step)
        .map(move |i| Subnet { base: Ipv4Addr::from(u32::from(range.base) + (i * step) as u32), bits })
        .filter(move |s| !used.iter().any(|u| s.overlaps(*u)))
}

/// The subnets the host routes to (`/proc/net/route`'s text), the default
/// route left out: Podman refuses a network whose subnet one of them covers
/// ("already used on the host"), Docker's and other engines' bridges among
/// them. A line that does not parse is skipped.
pub fn host_routes(proc_net_route: &str) -> Vec<Subnet> {
    routes(proc_net_route)
        .filter_map(|(base, _, mask)| {
            let bits = u32::from(mask).count_ones() as u8;
            (bits > 0).then_some(Subnet { base, bits })
        })
        .collect()
}

/// The gateways of the default routes in `/proc/net/route`'s text: one on
/// Docker, one per network with a gateway on Podman (which gives each of a
/// container's networks a default route).
pub fn default_gateways(proc_net_route: &str) -> Vec<Ipv4Addr> {
    routes(proc_net_route)
        .filter(|(base, gateway, mask)| base.is_unspecified() && mask.is_unspecified() && !gateway.is_unspecified())
        .map(|(_, gateway, _)| gateway)
        .collect()
}

/// Each route of `/proc/net/route`'s text: destination, gateway and mask. A
/// line that does not parse is skipped.
fn routes(proc_net_route: &str) -> impl Iterator<Item = (Ipv4Addr, Ipv4Addr, Ipv4Addr)> + '_ {
    // Columns: Iface Destination Gateway Flags RefCnt Use Metric Mask ...;
    // addresses in hex, as the kernel holds them (network order in memory).
    let address = |hex: &str| u32::from_str_radix(hex, 16).ok().map(|v| Ipv4Addr::from(v.to_ne_bytes()));
    proc_net_route.lines().skip(1).filter_map(move |line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        Some((address(fields.get(1)?)?, address(fields.get(2)?)?, address(fields.get(7)?)?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hosts_routes_are_read_but_the_default_one() {
        let table = "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
            eth0\t00000000\t0101A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
            eth0\t0001A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n\
            br-1\t1000D50A\t00000000\t0001\t0\t0\t0\tF0FFFFFF\t0\t0\t0\n\
            garbage\n";
        let routes: Vec<String> = host_routes(table).iter().map(|s| s.to_string()).collect();
        if cfg!(target_endian = "little") {
            assert_eq!(routes, ["192.168.1.0/24", "10.213.0.16/28"]);
            assert_eq!(default_gateways(table), [Ipv4Addr::new(192, 168, 1, 1)]);
        }
        assert_eq!(routes.len(), 2);
        assert_eq!(
            default_gateways(&table.replace("eth0\t00000000\t0101A8C0", "eth0\t00000000\t00000000")),
            Vec::<Ipv4Addr>::new()
        );
    }

    #[test]
    fn the_first_subnet_overlapping_nothing_is_picked() {
        let range = (Ipv4Addr::new(10, 213, 0, 0), 16);
        let used = [Subnet::parse("10.213.0.0/28").unwrap(), Subnet::parse("10.213.0.32/27").unwrap()];
        let picked: Vec<String> = free(range, 28, &used).take(2).map(|s| s.to_string()).collect();
        assert_eq!(picked, ["10.213.0.16/28", "10.213.0.64/28"]);
        assert_eq!(free(range, 28, &[]).count(), 4096);
        assert_eq!(free(range, 28, &[Subnet::parse("10.0.0.0/8").unwrap()]).count(), 0);
        assert_eq!(Subnet::parse("10.213.0.16/28").unwrap().host(2), Ipv4Addr::new(10, 213, 0, 18));
    }
}
