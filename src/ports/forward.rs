//! `forage-ctl port-forward` (hidden): the forwarder of a sandbox's published
//! ports, as forage runs it in its own container. Each `--forward
//! LISTEN_PORT=ADDR:PORT` listens on every address of the forwarder's
//! container (the engine publishes it on the host's 127.0.0.1 only) and
//! copies each connection from the host both ways to the sandbox. It reads
//! nothing of what it copies.
//!
//! Only the host is served. Docker's (and rootful Podman's) published port
//! reaches the forwarder from the host's address on one of its networks: the
//! gateway of a default route (Docker and rootful Podman give the forwarder
//! one, through their default network, the only one forage puts the
//! forwarder on with a gateway: see `Docker::forwarder_on_default_network`).
//! A gateway is always an address of the host's; an internal network (a
//! restricted sandbox's) has none.
//! Rootless Podman's (`rootlessport`) connects from inside the forwarder's
//! own network namespace, so from one of the forwarder's own addresses (any
//! of its networks'): that is the host's too, and there only that is
//! admitted (`Host::OwnAddresses`): a gateway there is an address of Podman's
//! network namespace, and a container on Podman's default network (a `full`
//! sandbox that publishes ports) reaches the forwarder's own network
//! through it, masqueraded as the gateway. No other container can send
//! from either: the kernel drops a packet that arrives with one of its own
//! addresses as source, and a sandbox has no address on the forwarder's
//! network or the gateway's. Anything else that reaches a listener — another
//! sandbox on the default bridge, or its own sandbox on its network — is
//! closed unanswered.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use tokio::net::{TcpListener, TcpStream};

/// One listener: the forwarder's port, and where its connections go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forward {
    pub listen: u16,
    pub to: SocketAddr,
}

impl std::str::FromStr for Forward {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not LISTEN_PORT=ADDR:PORT");
        let (listen, to) = s.split_once('=').ok_or_else(bad)?;
        Ok(Forward { listen: listen.parse().map_err(|_| bad())?, to: to.parse().map_err(|_| bad())? })
    }
}

impl std::fmt::Display for Forward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.listen, self.to)
    }
}

/// Where the host's connections come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Host {
    /// The gateway of a default route, or one of the forwarder's own
    /// addresses (Docker, rootful Podman).
    GatewaysAndOwnAddresses,
    /// One of the forwarder's own addresses only (rootless Podman, whose
    /// gateways are no address of the host's, and where a container on
    /// Podman's default network reaches the forwarder masqueraded as one).
    OwnAddresses,
}

/// Serves every forward to the host until one listener fails.
pub async fn serve(forwards: Vec<Forward>, host: Host) -> std::io::Result<()> {
    match host {
        Host::GatewaysAndOwnAddresses => serve_admitting(forwards, from_the_host).await,
        Host::OwnAddresses => serve_admitting(forwards, is_own_address).await,
    }
}

/// Who a connection is from decides whether it is served: `admit(peer)`.
type Admit = fn(IpAddr) -> bool;

async fn serve_admitting(forwards: Vec<Forward>, admit: Admit) -> std::io::Result<()> {
    let mut tasks = tokio::task::JoinSet::new();
    for f in forwards {
        let listener = TcpListener::bind(("0.0.0.0", f.listen)).await?;
        tasks.spawn(accept(listener, f.to, admit));
    }
    match tasks.join_next().await {
        Some(Ok(r)) => r,
        Some(Err(e)) => Err(std::io::Error::other(e)),
        None => std::future::pending().await,
    }
}

async fn accept(listener: TcpListener, to: SocketAddr, admit: Admit) -> std::io::Result<()> {
    loop {
        let (mut inbound, peer) = listener.accept().await?;
        if !admit(peer.ip()) {
            continue;
        }
        tokio::spawn(async move {
            // The sandbox not listening (yet) closes the connection: the
            // client sees a reset, as it would talking to the port directly.
            let Ok(mut outbound) = TcpStream::connect(to).await else { return };
            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
        });
    }
}

/// Whether a connection from `peer` is the host's: `peer` is the gateway
/// of one of the forwarder's default routes, read now (a network joined or
/// left since the start changes them; no default route, nobody is), or one
/// of the forwarder's own addresses but loopback (rootless Podman's
/// published port).
fn from_the_host(peer: IpAddr) -> bool {
    let routes = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    is_gateway(peer, &crate::egress::subnet::default_gateways(&routes)) || is_own_address(peer)
}

/// Whether `peer` is an address of this network namespace (one a socket can
/// be bound to), not loopback.
fn is_own_address(peer: IpAddr) -> bool {
    let peer = peer.to_canonical();
    !peer.is_loopback() && !peer.is_unspecified() && std::net::UdpSocket::bind((peer, 0)).is_ok()
}

fn is_gateway(peer: IpAddr, gateways: &[Ipv4Addr]) -> bool {
    matches!(peer.to_canonical(), IpAddr::V4(peer) if gateways.contains(&peer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn forwards_parse_and_print_the_same() {
        let f: Forward = "3000=10.1.2.3:3000".parse().unwrap();
        assert_eq!(f.to_string(), "3000=10.1.2.3:3000");
        assert!("3000".parse::<Forward>().is_err());
    }

    #[test]
    fn only_the_gateways_of_default_routes_are_served() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // Rootful Podman: the default bridge's route, then the forwarder's own.
        let gateways = [Ipv4Addr::new(10, 88, 0, 1), Ipv4Addr::new(10, 215, 0, 9)];
        assert!(is_gateway(ip("10.215.0.9"), &gateways));
        assert!(is_gateway(ip("::ffff:10.215.0.9"), &gateways));
        assert!(is_gateway(ip("10.88.0.1"), &gateways));
        assert!(!is_gateway(ip("10.215.0.9"), &[]));
        // Another container on the forwarder's network, a network's address
        // that is no route's gateway, a sandbox on the default bridge, a
        // restricted sandbox.
        for peer in ["10.215.0.11", "10.215.0.1", "172.17.0.5", "10.88.0.60", "10.213.0.19", "127.0.0.1", "::1"] {
            assert!(!is_gateway(ip(peer), &gateways), "{peer}");
        }
    }

    #[test]
    fn only_an_own_address_but_loopback_is_the_forwarders() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        // Loopback, the unspecified address, and documentation addresses
        // (RFC 5737) that no machine holds.
        for peer in ["127.0.0.1", "::1", "0.0.0.0", "198.51.100.77", "203.0.113.9"] {
            assert!(!is_own_address(ip(peer)), "{peer}");
        }
    }

    #[tokio::test]
    async fn a_connection_not_from_the_host_is_closed_unanswered() {
        for host in [Host::GatewaysAndOwnAddresses, Host::OwnAddresses] {
            a_connection_from_loopback_is_closed_unanswered(host).await;
        }
    }

    async fn a_connection_from_loopback_is_closed_unanswered(host: Host) {
        let backend = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let to = backend.local_addr().unwrap();
        let listen = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
        tokio::spawn(serve(vec![Forward { listen, to }], host));
        let mut client = loop {
            match TcpStream::connect(("127.0.0.1", listen)).await {
                Ok(c) => break c,
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        };
        let _ = client.write_all(b"ping").await;
        let mut got = Vec::new();
        let _ = client.read_to_end(&mut got).await;
        assert!(got.is_empty());
        let accepted = tokio::time::timeout(std::time::Duration::from_millis(200), backend.accept()).await;
        assert!(accepted.is_err(), "the forwarder connected to the sandbox for a stranger");
    }

    #[tokio::test]
    async fn a_connection_is_copied_both_ways() {
        let backend = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let to = backend.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = backend.accept().await.unwrap();
            let mut buf = [0u8; 4];
            s.read_exact(&mut buf).await.unwrap();
            s.write_all(&buf.map(|b| b.to_ascii_uppercase())).await.unwrap();
        });
        // A free port for the forwarder's listener, which here admits
        // loopback (the host's own address on a forwarder's network is no
        // address of this machine).
        let listen = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
        tokio::spawn(serve_admitting(vec![Forward { listen, to }], |_| true));
        let mut client = loop {
            match TcpStream::connect(("127.0.0.1", listen)).await {
                Ok(c) => break c,
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        };
        client.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"PING");
    }
}
