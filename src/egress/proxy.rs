//! The egress proxy (`forage-ctl egress-proxy`, run in forage's own container,
//! never in a sandbox): HTTP CONNECT and plain-HTTP proxying to allowed
//! destinations only. It tells sandboxes apart by the network a connection
//! arrives on (each sandbox has its own, where the proxy has one address) and
//! the sandbox's address on it; resolves names itself; refuses addresses the
//! policy does not let a match reach; and checks a tunnel's TLS server name
//! against the name it was allowed for. Every decision is logged.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::log::Decision;
use super::map::{EgressMap, Entry};
use super::policy::{reachable, Host};
use super::tls::{self, Hello};

/// The most of a request's head the proxy reads.
const MAX_HEAD: usize = 16 << 10;
/// How long a client has to send its request head, or a tunnel its first record.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long resolving a name, or connecting to its address, may take.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once; more wait (an agent cannot exhaust the proxy's files).
const MAX_CONNECTIONS: usize = 2048;

/// Where the proxy listens and which directories it reads and writes.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// The directory holding the map (mounted read-only).
    pub policy_dir: PathBuf,
    /// The directory the decisions are logged in.
    pub log_dir: PathBuf,
}

/// The map, and the (inode, modified time, length) of the file it was read
/// from: forage replaces the file (a rename), so a new map is a new inode.
type Loaded = (Option<(u64, SystemTime, u64)>, Arc<EgressMap>);

struct State {
    config: Config,
    map: Mutex<Loaded>,
    log: super::log::Writer,
    names: super::names::Names,
    /// For the hosts whose keys the proxy sets (`super::intercept`).
    tls: super::intercept::Tls,
}

impl State {
    /// The map as the file now holds it (re-read when the file changed).
    fn map(&self) -> Arc<EgressMap> {
        let path = self.config.policy_dir.join(super::map::FILE);
        let stamp = std::fs::metadata(&path).ok().and_then(|m| Some((m.ino(), m.modified().ok()?, m.len())));
        let mut held = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if held.0 != stamp || stamp.is_none() {
            match EgressMap::read(&self.config.policy_dir) {
                Ok(map) => *held = (stamp, Arc::new(map)),
                // A map that cannot be read allows nothing.
                Err(e) => {
                    tracing::error!("reading the egress map: {e}");
                    *held = (None, Arc::new(EgressMap::default()));
                }
            }
        }
        held.1.clone()
    }

    /// Logs an allowed connection (written by the log thread while its bytes flow).
    async fn log(&self, d: Decision) {
        self.log.record(d).await;
    }

    /// Logs a refusal, written before the client is answered.
    async fn log_now(&self, d: Decision) {
        self.log.record_now(d).await;
    }
}

/// Serves until `stop` completes, then writes the decisions still queued.
pub async fn serve(config: Config, stop: impl std::future::Future<Output = ()>) -> std::io::Result<()> {
    let listener = TcpListener::bind(config.listen).await?;
    let tls = super::intercept::Tls::new(config.policy_dir.clone());
    let log = super::log::Writer::start(config.log_dir.clone())?;
    let map = Mutex::new((None, Arc::default()));
    let state = Arc::new(State { config, map, log, names: super::names::Names::default(), tls });
    tracing::info!("egress proxy listening on {}", listener.local_addr()?);
    let served = tokio::select! {
        r = accept_all(&state, &listener) => r,
        () = stop => Ok(()),
    };
    state.log.finish().await;
    served
}

async fn accept_all(state: &Arc<State>, listener: &TcpListener) -> std::io::Result<()> {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = slots.clone().acquire_owned().await.map_err(std::io::Error::other)?;
        let (socket, _) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("accepting: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let state = state.clone();
        tokio::spawn(async move {
            handle(&state, socket).await;
            drop(permit);
        });
    }
}

pub(super) fn v4(addr: SocketAddr) -> Option<Ipv4Addr> {
    match addr {
        SocketAddr::V4(a) => Some(*a.ip()),
        SocketAddr::V6(a) => a.ip().to_ipv4_mapped(),
    }
}

/// A request's head, as far as the proxy needs it.
struct Request {
    method: String,
    /// CONNECT: `host:port`; else the absolute URL.
    target: String,
    version: String,
    /// The header lines after the request line, as sent.
    headers: Vec<String>,
    /// Bytes the client sent after the head.
    rest: Vec<u8>,
}

async fn handle(state: &State, mut client: TcpStream) {
    // Each piece copied goes on at once: a second small write must not wait
    // for the first's ACK (Nagle), which the peer may delay 40 ms.
    let _ = client.set_nodelay(true);
    let (Ok(local), Ok(peer)) = (client.local_addr(), client.peer_addr()) else { return };
    let (Some(local), Some(peer)) = (v4(local), v4(peer)) else { return };
    let map = state.map();
    let Some(sandbox) = map.sandbox(local, peer).cloned() else {
        // Not from a sandbox's network (the outside one, or a stale address).
        let _ = respond(&mut client, 403, "this proxy serves forage sandboxes only\n").await;
        return;
    };
    let request = match tokio::time::timeout(CLIENT_TIMEOUT, read_head(&mut client)).await {
        Ok(Ok(r)) => r,
        Ok(Err(why)) => {
            let _ = respond(&mut client, 400, &format!("forage egress proxy: {why}\n")).await;
            return;
        }
        Err(_) => return,
    };
    if request.method.eq_ignore_ascii_case("CONNECT") {
        connect(state, &sandbox, client, request).await;
    } else {
        forward(state, &sandbox, client, request).await;
    }
}

async fn read_head(client: &mut TcpStream) -> Result<Request, String> {
    let mut buf = Vec::with_capacity(1024);
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
        if buf.len() >= MAX_HEAD {
            return Err(format!("the request's head is over {MAX_HEAD} bytes"));
        }
        let mut chunk = [0u8; 4096];
        let n = client.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("the connection closed before the request's head ended".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| "the request's head is not text".to_owned())?;
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or_default().split(' ');
    let (Some(method), Some(target), Some(version), None) = (first.next(), first.next(), first.next(), first.next())
    else {
        return Err("the request line is not METHOD TARGET VERSION".into());
    };
    if !version.starts_with("HTTP/1.") {
        return Err(format!("{version:?} is not HTTP/1.x"));
    }
    Ok(Request {
        method: method.to_owned(),
        target: target.to_owned(),
        version: version.to_owned(),
        headers: lines.map(str::to_owned).collect(),
        rest: buf[end + 4..].to_vec(),
    })
}

/// Splits `host:port` (`default` when there is no port).
fn host_port(authority: &str, default: Option<u16>) -> Option<(Host, u16)> {
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (h, p.parse().ok().filter(|p| *p != 0)?),
        None => (authority, default?),
    };
    Some((Host::parse(host)?, port))
}

fn now() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// The 403 a denied request gets: the host, and how to allow it.
fn denial(sandbox: &str, host: &Host, port: u16, why: &str) -> String {
    let entry = if super::policy::DEFAULT_PORTS.contains(&port) { host.to_string() } else { format!("{host}:{port}") };
    format!(
        "forage: sandbox {sandbox} may not reach {host}:{port}: {why}.\n\
         To allow it, make the sandbox again with `forage-ctl up {sandbox} ... --allow {entry}`, \
         or add {entry} to the template's `network_allow` or to your allow file \
         ($XDG_CONFIG_HOME/forage/allow).\n"
    )
}

/// Decides on `host:port` for `sandbox` and connects to it: the upstream
/// stream, or the status and text to answer with (a refusal logged).
/// `open`, or the refusal answered to the client (`None`: nothing more to do).
async fn open_or_answer(
    state: &State,
    sandbox: &Entry,
    client: &mut TcpStream,
    host: &Host,
    port: u16,
) -> Option<TcpStream> {
    match open(state, sandbox, host, port).await {
        Ok(upstream) => Some(upstream),
        Err((status, text)) => {
            let _ = respond(client, status, &text).await;
            None
        }
    }
}

async fn open(state: &State, sandbox: &Entry, host: &Host, port: u16) -> Result<TcpStream, (u16, String)> {
    let decide = |allowed: bool, reason: Option<String>| Decision {
        time: now(),
        sandbox: sandbox.name.clone(),
        host: host.to_string(),
        port,
        allowed,
        reason,
    };
    let Some(how) = sandbox.allow.check(host, port) else {
        let why = "it is not in the sandbox's allowlist";
        state.log_now(decide(false, Some(why.into()))).await;
        return Err((403, denial(&sandbox.name, host, port, why)));
    };
    let addresses: Vec<Ipv4Addr> = match host {
        Host::Ip(ip) => vec![*ip],
        Host::Name(name) => match tokio::time::timeout(UPSTREAM_TIMEOUT, state.names.resolve(name, port)).await {
            Ok(Ok(addrs)) => addrs,
            Ok(Err(e)) => {
                let why = format!("{name} does not resolve ({e})");
                state.log_now(decide(false, Some(why.clone()))).await;
                return Err((502, format!("forage: {why}\n")));
            }
            Err(_) => {
                let why = format!("resolving {name} timed out");
                state.log_now(decide(false, Some(why.clone()))).await;
                return Err((504, format!("forage: {why}\n")));
            }
        },
    };
    let map = state.map();
    let check = |ip: Ipv4Addr| match reachable(ip, how) {
        Ok(()) if map.refuses(ip) => Err(format!(
            "{ip} is an address of the engine's default network, where other sandboxes and their port forwarders are"
        )),
        r => r,
    };
    let mut refused = Vec::new();
    let usable: Vec<Ipv4Addr> =
        addresses.into_iter().filter(|ip| check(*ip).map_err(|why| refused.push(why)).is_ok()).collect();
    if usable.is_empty() {
        let why = if refused.is_empty() { format!("{host} has no IPv4 address") } else { refused.join("; ") };
        state.log_now(decide(false, Some(why.clone()))).await;
        return Err((403, denial(&sandbox.name, host, port, &why)));
    }
    let mut last = String::new();
    for ip in usable {
        match tokio::time::timeout(UPSTREAM_TIMEOUT, TcpStream::connect(SocketAddrV4::new(ip, port))).await {
            // Logged as allowed by the caller, once it passed its last check.
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Ok(Err(e)) => last = format!("connecting to {ip}:{port}: {e}"),
            Err(_) => last = format!("connecting to {ip}:{port} timed out"),
        }
    }
    state.log_now(decide(true, Some(last.clone()))).await;
    Err((502, format!("forage: {host}:{port} is allowed, but {last}\n")))
}

async fn connect(state: &State, sandbox: &Entry, mut client: TcpStream, request: Request) {
    let Some((host, port)) = host_port(&request.target, None) else {
        let _ = respond(&mut client, 400, &format!("forage: {:?} is not HOST:PORT\n", request.target)).await;
        return;
    };
    let Some(mut upstream) = open_or_answer(state, sandbox, &mut client, &host, port).await else { return };
    if client.write_all(b"HTTP/1.1 200 Connection established\r\n\r\n").await.is_err() {
        return;
    }
    // The tunnel's first record, read whole before a byte goes upstream.
    let mut first = request.rest;
    let read = tokio::time::timeout(CLIENT_TIMEOUT, async {
        loop {
            let want = tls::record_len(&first).unwrap_or(5).min(tls::MAX_RECORD);
            if first.len() >= want || (!first.is_empty() && first[0] != 0x16) {
                return true;
            }
            let mut chunk = vec![0u8; want - first.len()];
            match client.read(&mut chunk).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => first.extend_from_slice(&chunk[..n]),
            }
        }
    })
    .await;
    if read != Ok(true) {
        return;
    }
    let injected = injects(sandbox, &host);
    let mismatch = match tls::parse(&first) {
        Hello::NotTls if injected => Some("the proxy sets this host's key, and only over TLS".to_owned()),
        Hello::NotTls | Hello::Tls(None) => None,
        Hello::Tls(Some(sni)) if Host::Name(sni.clone()) == host => None,
        Hello::Tls(Some(sni)) => Some(format!("its TLS names {sni:?}, not {host}")),
        Hello::Unreadable => Some("its TLS ClientHello cannot be read whole".to_owned()),
    };
    let decision = Decision {
        time: now(),
        sandbox: sandbox.name.clone(),
        host: host.to_string(),
        port,
        allowed: mismatch.is_none(),
        reason: mismatch,
    };
    if !decision.allowed {
        state.log_now(decision).await;
        return; // dropping both ends closes the tunnel
    }
    state.log(decision).await;
    if let (true, Host::Name(name)) = (injected, &host) {
        return intercept(state, sandbox, client, first, upstream, name).await;
    }
    if upstream.write_all(&first).await.is_ok() {
        let _ = super::splice::both_ways(&mut client, &mut upstream).await;
    }
}

/// A tunnel to a host whose key the proxy sets: served by `super::intercept`.
async fn intercept(state: &State, sandbox: &Entry, client: TcpStream, first: Vec<u8>, upstream: TcpStream, name: &str) {
    let keys = super::inject::read_keys(&state.config.policy_dir, &sandbox.name).unwrap_or_else(|e| {
        tracing::error!("reading sandbox {}'s keys: {e}", sandbox.name);
        Vec::new()
    });
    if let Err(why) = super::intercept::serve(&state.tls, client, first, upstream, name, keys).await {
        tracing::warn!("sandbox {}, {name}: {why}", sandbox.name);
    }
}

/// Plain HTTP: `GET http://host[:port]/path`, sent on in origin form, one
/// request per connection.
async fn forward(state: &State, sandbox: &Entry, mut client: TcpStream, request: Request) {
    let Some(rest) = request.target.strip_prefix("http://") else {
        let text = format!(
            "forage: {:?} is not an absolute http:// URL; use this proxy as HTTP_PROXY (https goes through CONNECT)\n",
            request.target
        );
        let _ = respond(&mut client, 400, &text).await;
        return;
    };
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let path = if path.starts_with('?') { format!("/{path}") } else { path.to_owned() };
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    let Some((host, port)) = host_port(authority, Some(80)) else {
        let _ = respond(&mut client, 400, &format!("forage: {authority:?} is not a host\n")).await;
        return;
    };
    if injects(sandbox, &host) {
        return refuse_plain_to_injected(state, sandbox, client, &host, port).await;
    }
    let Some(mut upstream) = open_or_answer(state, sandbox, &mut client, &host, port).await else { return };
    state
        .log(Decision {
            time: now(),
            sandbox: sandbox.name.clone(),
            host: host.to_string(),
            port,
            allowed: true,
            reason: None,
        })
        .await;
    let mut head = format!("{} {} {}\r\n", request.method, path, request.version);
    // The Host is the allowed one: a server shared by many names (a CDN)
    // routes by it, and must not be asked for another.
    let shown_port = if port == 80 { String::new() } else { format!(":{port}") };
    head.push_str(&format!("Host: {host}{shown_port}\r\n"));
    for h in &request.headers {
        let name = h.split(':').next().unwrap_or_default().trim().to_ascii_lowercase();
        let dropped = ["host", "proxy-connection", "proxy-authorization", "connection", "keep-alive"];
        if !dropped.contains(&name.as_str()) {
            head.push_str(h);
            head.push_str("\r\n");
        }
    }
    head.push_str("Connection: close\r\n\r\n");
    if upstream.write_all(head.as_bytes()).await.is_ok() && upstream.write_all(&request.rest).await.is_ok() {
        let _ = super::splice::both_ways(&mut client, &mut upstream).await;
    }
}

/// Plain HTTP to a host whose key the proxy sets: refused, so the key never
/// travels in clear.
async fn refuse_plain_to_injected(state: &State, sandbox: &Entry, mut client: TcpStream, host: &Host, port: u16) {
    let why = "the proxy sets this host's key, and only over HTTPS";
    state
        .log_now(Decision {
            time: now(),
            sandbox: sandbox.name.clone(),
            host: host.to_string(),
            port,
            allowed: false,
            reason: Some(why.into()),
        })
        .await;
    let text =
        format!("forage: sandbox {} may not reach {host}:{port} over plain HTTP: {why}; use https://\n", sandbox.name);
    let _ = respond(&mut client, 403, &text).await;
}

/// The proxy sets a key for `host` in `sandbox`'s requests.
fn injects(sandbox: &Entry, host: &Host) -> bool {
    matches!(host, Host::Name(name) if sandbox.inject.iter().any(|h| h == name))
}

async fn respond(client: &mut TcpStream, status: u16, text: &str) -> std::io::Result<()> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        502 => "Bad Gateway",
        504 => "Gateway Timeout",
        _ => "Error",
    };
    let response = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\nX-Forage-Proxy: denied\r\n\r\n{text}",
        text.len()
    );
    client.write_all(response.as_bytes()).await?;
    client.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_denial_names_the_host_and_how_to_allow_it() {
        let text = denial("agent-a", &Host::parse("evil.test").unwrap(), 443, "it is not in the sandbox's allowlist");
        assert!(text.contains("may not reach evil.test:443"), "{text}");
        assert!(text.contains("--allow evil.test`"), "{text}");
        assert!(text.contains("network_allow"), "{text}");
        let odd = denial("a", &Host::parse("x.test").unwrap(), 8080, "no");
        assert!(odd.contains("--allow x.test:8080"), "{odd}");
    }

    #[test]
    fn authorities_parse_with_and_without_ports() {
        assert_eq!(host_port("a.test:8443", None), Some((Host::Name("a.test".into()), 8443)));
        assert_eq!(host_port("a.test", Some(80)), Some((Host::Name("a.test".into()), 80)));
        assert_eq!(host_port("a.test", None), None);
        assert_eq!(host_port("[::1]:80", None), None);
        assert_eq!(host_port("a.test:0", None), None);
    }
}
