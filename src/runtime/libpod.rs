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
//!
//! Its compat container list and inspect also fail, with 500 "network
//! inspection mismatch", while any one container's networks are half set up
//! or torn down: containers are listed here too, and an egress proxy in that
//! state is replaced.
//!
//! Podman also gives every network its compat API makes a DNS server
//! (aardvark-dns, at the gateway) that answers any name, forwarding what it
//! does not know to the host's resolvers: on a sandbox's internal network, a
//! way out around the proxy. forage makes those networks here, without it.

use std::collections::HashMap;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};

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
    /// The bridge's interface on the host (rootless: in Podman's network namespace).
    #[serde(default)]
    pub network_interface: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct NetworkSubnet {
    pub subnet: String,
    #[serde(default)]
    pub gateway: Option<String>,
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
    exists(host, "network", name).await
}

/// Whether Podman has a `kind` (`network`, `container`) of that name.
async fn exists(host: &str, kind: &str, name: &str) -> Result<bool> {
    let path = format!("/{VERSION}/libpod/{kind}s/{}/exists", percent_encoded(name));
    match get(host, &path).await? {
        (204, _) => Ok(true),
        (404, _) => Ok(false),
        (status, body) => Err(refused(&format!("looking for {kind} {name}"), status, &body)),
    }
}

/// One of Podman's containers, as its own container list gives it: the
/// fields forage reads.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Container {
    #[serde(rename = "Id")]
    pub id: String,
    #[serde(rename = "Names", default)]
    pub names: Vec<String>,
    #[serde(rename = "Labels", default)]
    pub labels: Option<HashMap<String, String>>,
    #[serde(rename = "State", default)]
    pub state: String,
    #[serde(rename = "ExitCode", default)]
    pub exit_code: i64,
    /// The networks Podman's database has it on (whether or not each was
    /// set up: those of a connect that failed half way are here too).
    #[serde(rename = "Networks", default)]
    pub networks: Vec<String>,
}

impl Container {
    /// Its state in the Docker API's words. Podman's own: `configured` and
    /// `initialized` (made, never started) are `created`; `stopped` (the
    /// process ended, Podman's cleanup has not run yet) is `exited`.
    pub fn docker_state(&self) -> &str {
        match self.state.as_str() {
            "configured" | "initialized" => "created",
            "stopped" => "exited",
            other => other,
        }
    }
}

/// Every container matching `filters` (Docker's keys: `label`, `network`,
/// `name`), stopped ones too. Podman's compat list, like its inspect,
/// describes each container's networks, and answers 500 "network
/// inspection mismatch" for the whole list while any one container on the
/// engine has a network half set up or torn down (4.3 leaves one so when a
/// connect or disconnect fails half way, as it does when its rootless
/// network namespace goes away under it). This list reads the database.
pub async fn containers(host: &str, filters: &HashMap<String, Vec<String>>) -> Result<Vec<Container>> {
    let filters = serde_json::to_string(filters).expect("a map of strings is JSON");
    let path = format!("/{VERSION}/libpod/containers/json?all=true&filters={}", percent_encoded(&filters));
    let (status, body) = get(host, &path).await?;
    if status != 200 {
        return Err(refused("listing containers", status, &body));
    }
    serde_json::from_slice(&body)
        .map_err(|e| Error::other(format!("Podman's container list could not be read ({e}): {}", shown(&body))))
}

/// Whether Podman has a container of that name (or id). Unlike an inspect,
/// this holds for a container Podman can no longer describe (4.3 answers
/// its inspect 500 "network inspection mismatch" once a network's setup or
/// teardown failed half way).
pub async fn container_exists(host: &str, name: &str) -> Result<bool> {
    exists(host, "container", name).await
}

/// A network for Podman to make (libpod's `POST /networks/create`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewNetwork {
    pub name: String,
    pub driver: String,
    pub subnets: Vec<NewSubnet>,
    pub internal: bool,
    /// Off for every network forage makes here: Podman's DNS server on it
    /// would answer the containers any name (see the module's comment).
    pub dns_enabled: bool,
    pub options: HashMap<String, String>,
    pub labels: HashMap<String, String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewSubnet {
    pub subnet: String,
    /// None: Podman gives an internal network none, and puts no address on
    /// its bridge (see `egress::podman_create_internal_network`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gateway: Option<String>,
}

/// What became of a network asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    Made,
    /// A network of that name exists already.
    NameTaken,
    /// Another network, or a route of the host's, has the subnet.
    SubnetUsed,
}

/// Makes `network`.
pub async fn create_network(host: &str, network: &NewNetwork) -> Result<Created> {
    let body = serde_json::to_vec(network).expect("a network is JSON");
    let path = format!("/{VERSION}/libpod/networks/create");
    let mut answer = request(host, hyper::Method::POST, &path, body.clone()).await?;
    // Podman reads the host's interfaces to check the subnet is free, and
    // fails when one goes away as it reads ("route ip+net: no such network
    // interface": another engine's containers coming and going): asked again.
    for _ in 0..5 {
        if answer.0 == 200 || !shown(&answer.1).contains("no such network interface") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        answer = request(host, hyper::Method::POST, &path, body.clone()).await?;
    }
    match answer {
        (200 | 201, _) => Ok(Created::Made),
        (409, _) => Ok(Created::NameTaken),
        // "subnet … is already used on the host or by another config"
        (_, body) if shown(&body).contains("is already used") => Ok(Created::SubnetUsed),
        (status, body) => {
            Err(refused(&format!("creating network {} ({:?})", network.name, network.subnets), status, &body))
        }
    }
}

/// GET `path` from the engine at `host`.
async fn get(host: &str, path: &str) -> Result<(u16, Bytes)> {
    request(host, hyper::Method::GET, path, Vec::new()).await
}

/// `method` `path` with `body` (JSON, if any) to the engine at `host`
/// (`unix://…`, `tcp://…` or `http://…`): its status and body; an engine
/// that does not answer is exit 5.
async fn request(host: &str, method: hyper::Method, path: &str, body: Vec<u8>) -> Result<(u16, Bytes)> {
    let unreachable = |e: &dyn std::fmt::Display| Error::engine(format!("Podman at {host} did not answer {path}: {e}"));
    let mut request = hyper::Request::builder().method(method).uri(path).header(hyper::header::HOST, "podman");
    if !body.is_empty() {
        request = request.header(hyper::header::CONTENT_TYPE, "application/json");
    }
    let request = request.body(Full::new(Bytes::from(body))).map_err(|e| unreachable(&e))?;
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
async fn send<T>(io: T, request: hyper::Request<Full<Bytes>>) -> hyper::Result<(u16, Bytes)>
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
    fn a_new_network_is_written_as_libpod_reads_it() {
        let network = NewNetwork {
            name: "forage-a-net".into(),
            driver: "bridge".into(),
            subnets: vec![NewSubnet { subnet: "10.231.0.0/29".into(), gateway: None }],
            internal: true,
            dns_enabled: false,
            options: HashMap::from([("isolate".into(), "true".into())]),
            labels: HashMap::from([("forage.home".into(), "/h".into())]),
        };
        let json = serde_json::to_value(&network).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"name": "forage-a-net", "driver": "bridge",
                "subnets": [{"subnet": "10.231.0.0/29"}], "internal": true,
                "dns_enabled": false, "options": {"isolate": "true"}, "labels": {"forage.home": "/h"}})
        );
    }

    #[test]
    fn a_container_list_as_podman_4_3_writes_it_is_read_in_dockers_words() {
        let body = br#"[{"AutoRemove":false,"Command":["sleep","1000"],"Created":"2026-11-26T16:40:01Z",
            "Exited":true,"ExitedAt":1764175201,"ExitCode":137,"Id":"4d3f5d4f6cf2aa","Image":"localhost/bb:1",
            "Labels":{"forage.sandbox":"a"},"Mounts":[],"Names":["forage-a"],"Networks":["t-int","t-out"],
            "Pid":0,"Pod":"","Ports":null,"State":"stopped","Status":""},
            {"Id":"b593769fdfde","Names":["other"],"Labels":null,"State":"configured","ExitCode":0}]"#;
        let containers: Vec<Container> = serde_json::from_slice(body).unwrap();
        assert_eq!(containers[0].names, ["forage-a"]);
        assert_eq!(containers[0].networks, ["t-int", "t-out"]);
        assert_eq!(containers[1].networks, Vec::<String>::new());
        assert_eq!(containers[0].labels.as_ref().unwrap()["forage.sandbox"], "a");
        assert_eq!((containers[0].docker_state(), containers[0].exit_code), ("exited", 137));
        assert_eq!((containers[1].labels.clone(), containers[1].docker_state()), (None, "created"));
    }

    #[test]
    fn podmans_error_message_is_what_is_shown() {
        assert_eq!(shown(br#"{"cause":"x","message":"network not found","response":404}"#), "network not found");
        assert_eq!(shown(b"plain"), "plain");
    }
}
