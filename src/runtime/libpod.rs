//! The few reads forage makes through Podman's own (libpod) API instead of its
//! Docker-compatible one.
//!
//! Podman 4.3's compat network list and inspect describe every container on
//! the engine to fill in each network's `Containers`, and fail with 500
//! "getting container from store …: container not known" for as long as any
//! one container anywhere is half removed (in its database, gone from its
//! storage). One such container, the user's or another sandbox's, would stop
//! every restricted `up` and `down`. The libpod network endpoints read the
//! network's own configuration and nothing else, so forage reads networks
//! there, and asks which containers are on a network through the container
//! list (which skips a vanishing container).

use std::collections::HashMap;

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde::Deserialize;

use crate::error::{Error, Result};

/// The libpod API version forage asks for (Podman 4.0's, which 4.3 and
/// later serve).
const VERSION: &str = "v4.0.0";

/// One of Podman's networks: the fields forage reads.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Network {
    pub name: String,
    #[serde(default)]
    pub labels: Option<HashMap<String, String>>,
    #[serde(default)]
    pub subnets: Option<Vec<NetworkSubnet>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct NetworkSubnet {
    pub subnet: String,
}

/// The networks matching `filters` (Docker's filter keys: `name`, `label`).
pub async fn networks(host: &str, filters: &HashMap<String, Vec<String>>) -> Result<Vec<Network>> {
    let filters = serde_json::to_string(filters).expect("a map of strings is JSON");
    let path = format!("/{VERSION}/libpod/networks/json?filters={}", percent_encoded(&filters));
    let (status, body) = get(host, &path).await?;
    if status != 200 {
        return Err(refused("listing networks", status, &body));
    }
    serde_json::from_slice(&body)
        .map_err(|e| Error::other(format!("Podman's network list could not be read ({e}): {}", shown(&body))))
}

/// Whether Podman has a network of that name.
pub async fn network_exists(host: &str, name: &str) -> Result<bool> {
    let path = format!("/{VERSION}/libpod/networks/{}/exists", percent_encoded(name));
    match get(host, &path).await? {
        (204, _) => Ok(true),
        (404, _) => Ok(false),
        (status, body) => Err(refused(&format!("looking for network {name}"), status, &body)),
    }
}

/// GET `path` from the engine at `host` (`unix://…`, `tcp://…` or `http://…`):
/// its status and body; an engine that does not answer is exit 5.
async fn get(host: &str, path: &str) -> Result<(u16, Bytes)> {
    let unreachable = |e: &dyn std::fmt::Display| Error::engine(format!("Podman at {host} did not answer {path}: {e}"));
    let request = hyper::Request::get(path)
        .header(hyper::header::HOST, "podman")
        .body(Empty::<Bytes>::new())
        .map_err(|e| unreachable(&e))?;
    let exchange = async {
        let response = if let Some(socket) = host.strip_prefix("unix://") {
            let stream = tokio::net::UnixStream::connect(socket).await.map_err(|e| unreachable(&e))?;
            send(TokioIo::new(stream), request).await
        } else {
            let address = host.trim_start_matches("tcp://").trim_start_matches("http://").trim_end_matches('/');
            let stream = tokio::net::TcpStream::connect(address).await.map_err(|e| unreachable(&e))?;
            send(TokioIo::new(stream), request).await
        };
        response.map_err(|e| unreachable(&e))
    };
    // As long as bollard waits for any other call.
    tokio::time::timeout(std::time::Duration::from_secs(120), exchange)
        .await
        .map_err(|_| unreachable(&"no answer in 120 s"))?
}

/// One request on a connection of its own, read to the end.
async fn send<T>(io: T, request: hyper::Request<Empty<Bytes>>) -> hyper::Result<(u16, Bytes)>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await?;
    let exchange = async {
        let response = sender.send_request(request).await?;
        let status = response.status().as_u16();
        Ok((status, response.into_body().collect().await?.to_bytes()))
    };
    let mut exchange = std::pin::pin!(exchange);
    tokio::select! {
        answer = &mut exchange => answer,
        // The connection drives the exchange; ended first (the engine closed
        // it), the exchange ends too, with its answer or its error.
        ended = connection => {
            ended?;
            exchange.await
        }
    }
}

/// An answer other than the one asked for: an error of the engine's, not
/// an engine out of reach (exit 1, as for the compat API's errors).
fn refused(what: &str, status: u16, body: &[u8]) -> Error {
    Error::other(format!("{what}: Podman said ({status}): {}", shown(body)))
}

/// The body, as Podman's error message when it is one.
fn shown(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Message {
        message: String,
    }
    match serde_json::from_slice::<Message>(body) {
        Ok(m) => m.message,
        Err(_) => String::from_utf8_lossy(&body[..body.len().min(400)]).into_owned(),
    }
}

/// `text` as a URL's query value or path segment.
fn percent_encoded(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_and_names_are_percent_encoded() {
        assert_eq!(percent_encoded(r#"{"label":["a=b c"]}"#), "%7B%22label%22%3A%5B%22a%3Db%20c%22%5D%7D");
        assert_eq!(percent_encoded("forage-net-x_1.net"), "forage-net-x_1.net");
    }

    #[test]
    fn a_network_list_as_podman_4_3_writes_it_is_read() {
        let body = br#"[{"name":"forage-egress","id":"abc","driver":"bridge","network_interface":"podman1",
            "created":"2026-11-26T13:11:20Z","subnets":[{"subnet":"10.231.0.0/24","gateway":"10.231.0.1"}],
            "ipv6_enabled":false,"internal":false,"dns_enabled":false,"labels":{"forage.egress.home":"/h"},
            "ipam_options":{"driver":"host-local"}},
            {"name":"podman","id":"def","driver":"bridge","subnets":[{"subnet":"10.88.0.0/16"}]}]"#;
        let networks: Vec<Network> = serde_json::from_slice(body).unwrap();
        assert_eq!(networks[0].name, "forage-egress");
        assert_eq!(networks[0].labels.as_ref().unwrap()["forage.egress.home"], "/h");
        assert_eq!(networks[0].subnets.as_ref().unwrap()[0].subnet, "10.231.0.0/24");
        assert_eq!(networks[1].labels, None);
    }

    #[test]
    fn podmans_error_message_is_what_is_shown() {
        assert_eq!(shown(br#"{"cause":"x","message":"network not found","response":404}"#), "network not found");
        assert_eq!(shown(b"plain"), "plain");
    }
}
