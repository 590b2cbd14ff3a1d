//! The proxy's side of injected keys (`super::inject`): a tunnel to a host
//! whose key the proxy holds is not passed through. The proxy ends the
//! agent's TLS itself, with a certificate for that host signed by this
//! FORAGE_HOME's CA (which the sandbox trusts), reads each HTTP/1.1 request,
//! sets the key's header (replacing whatever the agent sent in it) and sends
//! the request on over TLS of its own, checked against the host's roots.
//!
//! Only HTTP/1.1 is spoken on either side (ALPN offers nothing else), so
//! every request passes through here one at a time.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::inject::{self, Key};

/// How long the agent has to send a request's head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the upstream TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);

type Body = BoxBody<Bytes, hyper::Error>;
/// A file's (inode, modified time, length): a file replaced is a file changed.
type Stamp = (u64, SystemTime, u64);
/// The certificates made from the CA key of that stamp, per host.
type Servers = (Option<Stamp>, HashMap<String, Arc<ServerConfig>>);

fn stamp(path: &Path) -> Option<Stamp> {
    std::fs::metadata(path).ok().and_then(|m| Some((m.ino(), m.modified().ok()?, m.len())))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The TLS the proxy speaks for injected hosts: a certificate per host (made
/// on first use, signed by the CA) and the upstream roots, each re-read when
/// its file changes.
pub struct Tls {
    policy_dir: PathBuf,
    servers: Mutex<Servers>,
    client: Mutex<Option<(Stamp, Arc<ClientConfig>)>>,
}

impl Tls {
    pub fn new(policy_dir: PathBuf) -> Tls {
        Tls { policy_dir, servers: Mutex::new((None, HashMap::new())), client: Mutex::new(None) }
    }

    /// The proxy's TLS server for `host`.
    fn server(&self, host: &str) -> Result<Arc<ServerConfig>, String> {
        let key_path = self.policy_dir.join(inject::CA_KEY);
        let now = stamp(&key_path);
        let mut held = self.servers.lock().unwrap_or_else(|e| e.into_inner());
        if held.0 != now || now.is_none() {
            *held = (now, HashMap::new());
        }
        if let Some(config) = held.1.get(host) {
            return Ok(config.clone());
        }
        let config = Arc::new(self.make_server(&key_path, host)?);
        held.1.insert(host.to_owned(), config.clone());
        Ok(config)
    }

    fn make_server(&self, key_path: &Path, host: &str) -> Result<ServerConfig, String> {
        let pem = std::fs::read_to_string(key_path).map_err(|e| format!("reading the CA's key: {e}"))?;
        let ca_key = rcgen::KeyPair::from_pem(&pem).map_err(|e| format!("the CA's key: {e}"))?;
        let issuer = rcgen::Issuer::new(inject::ca_params(), ca_key);
        let leaf_key = rcgen::KeyPair::generate().map_err(|e| e.to_string())?;
        let mut params = rcgen::CertificateParams::new(vec![host.to_owned()]).map_err(|e| e.to_string())?;
        params.distinguished_name.push(rcgen::DnType::CommonName, host);
        params.use_authority_key_identifier_extension = true;
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        params.not_before = rcgen::date_time_ymd(2025, 1, 1);
        params.not_after = rcgen::date_time_ymd(2045, 1, 1);
        let cert = params.signed_by(&leaf_key, &issuer).map_err(|e| e.to_string())?;
        let key = PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into());
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], key)
            .map_err(|e| e.to_string())?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }

    /// The proxy's TLS client, trusting the host's roots.
    fn client(&self) -> Result<Arc<ClientConfig>, String> {
        let path = self.policy_dir.join(inject::UPSTREAM_ROOTS);
        let Some(now) = stamp(&path) else {
            return Err("the proxy has no trusted roots to check the server with (run `up` again)".into());
        };
        let mut held = self.client.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((at, config)) = held.as_ref() {
            if *at == now {
                return Ok(config.clone());
            }
        }
        let mut roots = RootCertStore::empty();
        let certs = CertificateDer::pem_file_iter(&path).map_err(|e| format!("reading the trusted roots: {e}"))?;
        // A certificate the bundle holds that rustls cannot take is skipped,
        // as OpenSSL skips it.
        let (added, _) = roots.add_parsable_certificates(certs.filter_map(Result::ok));
        if added == 0 {
            return Err("the trusted roots the proxy was given hold no certificate".into());
        }
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        *held = Some((now, config.clone()));
        Ok(config)
    }
}

/// Serves one tunnel to `host` whose key the proxy sets: `first` is what the
/// agent already sent (its ClientHello), `upstream` the connection to the
/// host the policy allowed. Returns why it ended early, if it did.
pub async fn serve(
    tls: &Tls,
    client: TcpStream,
    first: Vec<u8>,
    upstream: TcpStream,
    host: &str,
    keys: Vec<Key>,
) -> Result<(), String> {
    let server = tls.server(host)?;
    let accepted = tokio::time::timeout(
        HANDSHAKE_TIMEOUT,
        tokio_rustls::TlsAcceptor::from(server).accept(Prefixed { prefix: first, at: 0, inner: client }),
    )
    .await
    .map_err(|_| "the agent's TLS handshake timed out".to_owned())?
    .map_err(|e| format!("the agent's TLS handshake failed ({e}); does the sandbox trust forage's CA?"))?;
    // Upstream next; when it cannot be had the agent is told why, in HTTP.
    let sender = match open_upstream(tls, upstream, host).await {
        Ok(sender) => Ok(Arc::new(tokio::sync::Mutex::new(sender))),
        Err(why) => Err(format!("forage: the egress proxy could not open TLS to {host}: {why}\n")),
    };
    let host = host.to_owned();
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let (sender, keys, host) = (sender.clone(), keys.clone(), host.clone());
        async move {
            let response = match sender {
                Ok(sender) => send(&sender, request, &host, &keys).await,
                Err(text) => answer(StatusCode::BAD_GATEWAY, text),
            };
            Ok::<_, std::convert::Infallible>(response)
        }
    });
    hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .serve_connection(TokioIo::new(accepted), service)
        .await
        .map_err(|e| format!("serving the agent: {e}"))
}

async fn open_upstream(
    tls: &Tls,
    upstream: TcpStream,
    host: &str,
) -> Result<hyper::client::conn::http1::SendRequest<Incoming>, String> {
    let config = tls.client()?;
    let name = ServerName::try_from(host.to_owned()).map_err(|e| e.to_string())?;
    let stream =
        tokio::time::timeout(HANDSHAKE_TIMEOUT, tokio_rustls::TlsConnector::from(config).connect(name, upstream))
            .await
            .map_err(|_| "the TLS handshake timed out".to_owned())?
            .map_err(|e| e.to_string())?;
    let (sender, connection) =
        hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!("upstream connection: {e}");
        }
    });
    Ok(sender)
}

/// Sends the agent's request on, with the keys for `host` set.
async fn send(
    sender: &tokio::sync::Mutex<hyper::client::conn::http1::SendRequest<Incoming>>,
    mut request: Request<Incoming>,
    host: &str,
    keys: &[Key],
) -> Response<Body> {
    if let Err(why) = set_keys(request.headers_mut(), host, keys) {
        return answer(StatusCode::INTERNAL_SERVER_ERROR, format!("forage: {why}\n"));
    }
    let mut sender = sender.lock().await;
    if sender.ready().await.is_err() {
        let text = format!("forage: {host} closed the connection; send the request again on a new one\n");
        return answer(StatusCode::BAD_GATEWAY, text);
    }
    match sender.send_request(request).await {
        Ok(response) => response.map(BodyExt::boxed),
        Err(e) => answer(StatusCode::BAD_GATEWAY, format!("forage: sending the request to {host}: {e}\n")),
    }
}

/// Sets each key's header (every value the agent sent for it replaced) and
/// the Host the tunnel was allowed for.
fn set_keys(headers: &mut hyper::HeaderMap, host: &str, keys: &[Key]) -> Result<(), String> {
    headers.insert(hyper::header::HOST, HeaderValue::from_str(host).map_err(|e| e.to_string())?);
    for key in keys.iter().filter(|k| k.host == host) {
        let name = HeaderName::from_bytes(key.header.as_bytes()).map_err(|e| e.to_string())?;
        let mut value =
            HeaderValue::from_str(&key.value).map_err(|_| format!("the key for {host} is not a header value"))?;
        value.set_sensitive(true);
        headers.remove(&name);
        headers.insert(name, value);
    }
    Ok(())
}

fn answer(status: StatusCode, text: String) -> Response<Body> {
    let mut response = Response::new(Full::new(Bytes::from(text)).map_err(|never| match never {}).boxed());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    headers.insert("x-forage-proxy", HeaderValue::from_static("denied"));
    headers.insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The agent's connection, with the bytes already read from it put back in
/// front.
struct Prefixed {
    prefix: Vec<u8>,
    at: usize,
    inner: TcpStream,
}

impl AsyncRead for Prefixed {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let me = self.get_mut();
        if me.at < me.prefix.len() {
            let n = buf.remaining().min(me.prefix.len() - me.at);
            buf.put_slice(&me.prefix[me.at..me.at + n]);
            me.at += n;
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut me.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_the_agent_sent_for_the_key_is_replaced() {
        let mut headers = hyper::HeaderMap::new();
        headers.append("x-api-key", HeaderValue::from_static("placeholder"));
        headers.append("X-Api-Key", HeaderValue::from_static("another"));
        headers.insert(hyper::header::HOST, HeaderValue::from_static("elsewhere.test"));
        let keys = [
            Key { host: "api.test".into(), header: "x-api-key".into(), value: "real".into() },
            Key { host: "other.test".into(), header: "authorization".into(), value: "Bearer other".into() },
        ];
        set_keys(&mut headers, "api.test", &keys).unwrap();
        let got: Vec<_> = headers.get_all("x-api-key").iter().collect();
        assert_eq!(got, [HeaderValue::from_static("real")]);
        assert_eq!(headers[hyper::header::HOST], "api.test");
        assert!(headers.get("authorization").is_none(), "another host's key was set");
    }

    #[test]
    fn a_certificate_for_the_host_is_signed_by_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        inject::ensure_ca(dir.path()).unwrap();
        let tls = Tls::new(dir.path().to_owned());
        let first = tls.server("api.test").unwrap();
        assert!(Arc::ptr_eq(&first, &tls.server("api.test").unwrap()), "made twice");
        assert!(tls.client().unwrap_err().contains("no trusted roots"));
    }
}
