//! The engine's side of published ports (`crate::ports`): a sandbox's
//! forwarder container, on a network of its own (the one it publishes on:
//! nothing else is on it) and joined to the sandbox's network, publishing
//! each port on the host's 127.0.0.1 only.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use bollard::models::{
    ContainerCreateBody, EndpointIpamConfig, EndpointSettings, HostConfig, NetworkConnectRequest, NetworkingConfig,
    PortBinding, RestartPolicy, RestartPolicyNameEnum,
};
use bollard::query_parameters::{CreateContainerOptions, InspectContainerOptions, RemoveContainerOptions};

use super::docker::Docker;
use super::{ImageSource, Runtime as _};
use crate::error::{is_docker_not_found, Error, Result};
use crate::ports::{PortSpec, Published};
use crate::progress::Progress;

/// A sandbox's forwarder.
#[derive(Debug, Clone)]
pub struct ForwarderSpec {
    pub container: String,
    /// Its own network, which it publishes on (the engine made it).
    pub network: String,
    pub labels: HashMap<String, String>,
    /// The sandbox's network, and the forwarder's addresses on it, the first
    /// free one taken (none: the engine picks, as on the default bridge).
    pub sandbox_network: String,
    pub addresses: Vec<Ipv4Addr>,
    /// The sandbox's address there (`None`: read from the sandbox's
    /// container, named here, as it is now).
    pub target: Option<Ipv4Addr>,
    pub sandbox_container: String,
    pub image: ImageSource,
    /// The program in the image (forage-ctl).
    pub program: String,
    pub ports: Vec<PortSpec>,
}

impl Docker {
    /// Replaces the forwarder with one publishing `spec.ports`, and says
    /// which host port each got.
    pub(crate) async fn docker_ensure_forwarder(
        &self,
        spec: &ForwarderSpec,
        progress: &dyn Progress,
    ) -> Result<Vec<Published>> {
        let (sandbox_network, target) = match spec.target {
            Some(t) => (spec.sandbox_network.clone(), t),
            None => self.address_on(&spec.sandbox_container, &spec.sandbox_network).await?,
        };
        let image = self.ensure_image(&spec.image, progress).await?;
        let inside = inside_ports(spec.ports.len());
        let mut addresses = spec.addresses.iter().copied();
        let mut address = addresses.next();
        let mut races = 0;
        loop {
            self.docker_remove_forwarder_container(&spec.container).await?;
            let e =
                match self.make_forwarder(spec, &image.reference, &sandbox_network, address, target, &inside).await? {
                    Ok(()) => return self.published(&spec.container, &spec.ports, &inside).await,
                    Err(e) => e,
                };
            let raced = is_host_port_race(spec, &e) && races < 5;
            races += usize::from(raced);
            // Podman 4.3 keeps the address of a forwarder whose start failed
            // allocated on the network after its removal, until the network
            // goes: the next address, after an address held or a race.
            let move_on = address.is_some() && (raced || is_address_taken(&e));
            match (raced || move_on, move_on.then(|| addresses.next())) {
                (true, None) => tracing::debug!("making the forwarder again: {e}"),
                (true, Some(Some(next))) => {
                    tracing::debug!("the forwarder was not made at {address:?} on {sandbox_network}: {e}");
                    address = Some(next);
                }
                _ => return Err(start_failed(spec, e)),
            }
        }
    }

    /// Creates and starts the forwarder at `address` on the sandbox's
    /// network: the engine's refusal, if it refused.
    async fn make_forwarder(
        &self,
        spec: &ForwarderSpec,
        image: &str,
        sandbox_network: &str,
        address: Option<Ipv4Addr>,
        target: Ipv4Addr,
        inside: &[u16],
    ) -> Result<std::result::Result<(), bollard::errors::Error>> {
        let (info, api) = (self.info().await?, self.api().await?);
        let mut config = container_config(spec, image, target, inside, &info);
        let on_sandbox_network = EndpointSettings {
            ipam_config: address
                .map(|a| EndpointIpamConfig { ipv4_address: Some(a.to_string()), ..Default::default() }),
            ..Default::default()
        };
        // Podman 4.3 joined to a second network after the create (not yet
        // started) leaves its network state inconsistent: every network
        // listing answers 500 "network inspection mismatch" until the
        // container is removed. Podman takes both networks at the create;
        // Docker (API 1.41) honours only one there, so it joins after.
        if info.podman {
            config.networking_config = Some(NetworkingConfig {
                endpoints_config: Some(HashMap::from([
                    (spec.network.clone(), EndpointSettings::default()),
                    (sandbox_network.to_owned(), on_sandbox_network.clone()),
                ])),
            });
        }
        let options = CreateContainerOptions { name: Some(spec.container.clone()), ..Default::default() };
        if let Err(e) = api.create_container(Some(options), config).await {
            return Ok(Err(e));
        }
        if !info.podman && sandbox_network != spec.network {
            let request =
                NetworkConnectRequest { container: spec.container.clone(), endpoint_config: Some(on_sandbox_network) };
            if let Err(e) = api.connect_network(sandbox_network, request).await {
                return Ok(Err(e));
            }
        }
        Ok(api.start_container(&spec.container, None).await)
    }

    /// The host port of each of `ports` (forwarded from `inside`), as the
    /// engine bound it.
    async fn published(&self, container: &str, ports: &[PortSpec], inside: &[u16]) -> Result<Vec<Published>> {
        let inspected = self
            .api()
            .await?
            .inspect_container(container, None::<InspectContainerOptions>)
            .await
            .map_err(|e| Error::docker(format!("inspecting the port forwarder {container}"), e))?;
        let map = inspected.network_settings.and_then(|n| n.ports).unwrap_or_default();
        ports
            .iter()
            .zip(inside)
            .map(|(p, inside)| {
                let host_port = map
                    .get(&format!("{inside}/tcp"))
                    .and_then(|b| b.as_ref())
                    .into_iter()
                    .flatten()
                    .filter(|b| b.host_ip.as_deref() == Some("127.0.0.1"))
                    .find_map(|b| b.host_port.as_deref()?.parse::<u16>().ok())
                    .ok_or_else(|| {
                        Error::other(format!("the engine bound no host port for port {} of {container}", p.port))
                    })?;
                Ok(Published { port: p.port, host_port })
            })
            .collect()
    }

    /// The container's address on the network, as the engine reports it, and
    /// the network's name there. Docker's default network is `bridge`;
    /// Podman's (`podman` unless configured otherwise) is named as itself, so
    /// a container Podman put on "bridge" is on the one network it has.
    async fn address_on(&self, container: &str, network: &str) -> Result<(String, Ipv4Addr)> {
        let inspected = self
            .api()
            .await?
            .inspect_container(container, None::<InspectContainerOptions>)
            .await
            .map_err(|e| Error::docker(format!("inspecting container {container}"), e))?;
        if inspected.host_config.as_ref().and_then(|h| h.network_mode.as_deref()) == Some("slirp4netns") {
            return Err(on_slirp4netns(container));
        }
        let mut networks = inspected.network_settings.and_then(|n| n.networks).unwrap_or_default();
        let on = match networks.remove_entry(network) {
            Some(found) => Some(found),
            None if network == "bridge" && networks.len() == 1 && self.info().await?.podman => {
                networks.into_iter().next()
            }
            None => None,
        };
        on.and_then(|(name, e)| Some((name, e.ip_address?.parse().ok()?))).ok_or_else(|| {
            Error::conflict(format!("container {container} has no address on network {network}: it is not running"))
                .hint("start the sandbox first (`forage-ctl start NAME`)")
        })
    }

    async fn docker_remove_forwarder_container(&self, name: &str) -> Result<()> {
        let options = RemoveContainerOptions { force: true, v: true, link: false };
        match self.api().await?.remove_container(name, Some(options)).await {
            Ok(()) => Ok(()),
            Err(e) if is_docker_not_found(&e) => Ok(()),
            Err(e) => Err(Error::docker(format!("removing the port forwarder {name}"), e)),
        }
    }

    /// Docker and rootful Podman: the forwarder's published port goes on
    /// the engine's default network, not a network of its own. Through a
    /// network of its own, a published port's connection comes from that
    /// network's gateway, and so does a container's from the default network
    /// (every `full` sandbox's) that crosses to it through the host,
    /// masqueraded as it leaves: on rootful Podman always (netavark accepts
    /// whatever comes from its default network, and isolates only networks
    /// that both ask for it), on Docker 20.10 in the moment it lifts its
    /// isolation between networks, which it does whenever any network is
    /// made. The forwarder, which serves its gateways, could not tell the two
    /// apart (a `full` sandbox got another sandbox's service so, in
    /// `network::`, on both). On the default network, a container reaches
    /// the forwarder on its own link, from its own address, which is not
    /// served, and only the host comes from the gateway. (Rootless Podman's
    /// published port comes from the forwarder's own addresses, on a network
    /// of its own.) On Podman the network is named, as a container's
    /// networks must be at its create: `podman`, the default network of
    /// Podman's own configuration.
    pub(crate) async fn docker_forwarder_on_default_network(&self) -> Result<Option<String>> {
        let info = self.info().await?;
        if !info.podman {
            return Ok(Some("bridge".to_owned()));
        }
        if info.rootless {
            return Ok(None);
        }
        const PODMAN_DEFAULT_NETWORK: &str = "podman";
        if !super::libpod::network_exists(&info.host, PODMAN_DEFAULT_NETWORK).await? {
            return Err(Error::conflict(format!(
                "rootful Podman ({}) has no network named {PODMAN_DEFAULT_NETWORK}, its default, through which \
                 forage publishes a sandbox's ports",
                info.host
            ))
            .hint("make it again (`sudo podman network create podman`), or use rootless Podman or Docker"));
        }
        Ok(Some(PODMAN_DEFAULT_NETWORK.to_owned()))
    }

    /// The containers with all of `labels`, stopped ones too: name, labels.
    pub(crate) async fn docker_containers_labelled(
        &self,
        labels: &[String],
    ) -> Result<Vec<(String, HashMap<String, String>)>> {
        let filters = HashMap::from([("label".to_owned(), labels.to_vec())]);
        let found = self.containers_matching(filters).await?;
        Ok(found.into_iter().map(|c| (c.name, c.labels)).collect())
    }

    /// Removes the forwarder, then its network; succeeds if both are gone.
    pub(crate) async fn docker_remove_forwarder(&self, container: &str, network: &str) -> Result<()> {
        self.docker_remove_forwarder_container(container).await?;
        self.docker_remove_network(network).await
    }
}

/// A `full` sandbox made without published ports is on slirp4netns under
/// rootless Podman (see `create`), a network of its container alone, which
/// no forwarder can join.
fn on_slirp4netns(container: &str) -> Error {
    let name = container.strip_prefix("forage-").unwrap_or(container);
    Error::conflict(format!(
        "sandbox {name} was made without published ports, so rootless Podman runs it on slirp4netns, a network of \
         its container alone that no port forwarder can reach"
    ))
    .hint(
        "publish its ports when you make it (`up --publish PORT`): rootless Podman then puts it on its bridge network",
    )
}

/// A host port the engine picked itself (none was asked for) taken by the
/// time it bound it: another forwarder's, made at the same moment (rootless
/// Podman's `rootlessport` picks and binds apart). Asked again.
fn is_host_port_race(spec: &ForwarderSpec, e: &bollard::errors::Error) -> bool {
    let text = e.to_string();
    let asked = spec.ports.iter().filter_map(|p| p.host).any(|h| text.contains(&format!(":{h}")));
    !asked && (text.contains("address already in use") || text.contains("port is already allocated"))
}

/// Podman's answer to an address on a network another container holds.
fn is_address_taken(e: &bollard::errors::Error) -> bool {
    let text = e.to_string();
    text.contains("requested ip address") && text.contains("is already allocated")
}

/// Why the forwarder was not made: a host port taken, said as such.
fn start_failed(spec: &ForwarderSpec, e: bollard::errors::Error) -> Error {
    let text = e.to_string();
    let taken = spec.ports.iter().filter_map(|p| p.host).find(|h| text.contains(&format!(":{h}")));
    match taken {
        Some(h) if text.contains("already allocated") || text.contains("in use") => {
            Error::conflict(format!("host port {h} (127.0.0.1:{h}) is taken by another program or sandbox"))
                .hint("pick another HOSTPORT, or give only PORT and forage picks a free one")
        }
        _ => Error::docker(format!("making the port forwarder {}", spec.container), e),
    }
}

/// The ports the forwarder listens on, one per published port: random and
/// distinct, from 20000 to 59999, made anew with every forwarder. Only the
/// engine's published port knows them: a second lock, behind the forwarder
/// serving only the host's address (should a container ever come
/// masqueraded as it, it would have to guess the port too).
fn inside_ports(count: usize) -> Vec<u16> {
    use std::hash::{BuildHasher, Hasher};
    let mut ports: Vec<u16> = Vec::with_capacity(count);
    // A fresh RandomState is seeded from the OS's randomness.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    while ports.len() < count {
        hasher.write_usize(ports.len());
        let port = 20000 + (hasher.finish() % 40000) as u16;
        if !ports.contains(&port) {
            ports.push(port);
        }
    }
    ports
}

/// The forwarder's container: forage-ctl `port-forward`, as the user, with
/// no capability, publishing each port on 127.0.0.1 from its `inside` port.
fn container_config(
    spec: &ForwarderSpec,
    image: &str,
    target: Ipv4Addr,
    inside: &[u16],
    engine: &super::engine_choice::EngineInfo,
) -> ContainerCreateBody {
    let ulimits = engine.rlimits();
    let key = |p: u16| format!("{p}/tcp");
    let bindings = spec
        .ports
        .iter()
        .zip(inside)
        .map(|(p, inside)| {
            let binding = PortBinding {
                host_ip: Some("127.0.0.1".into()),
                // Empty: the engine picks a free port, and no two
                // sandboxes ever get the same one.
                host_port: Some(p.host.map(|h| h.to_string()).unwrap_or_default()),
            };
            (key(*inside), Some(vec![binding]))
        })
        .collect();
    let mut command = vec![spec.program.clone(), "port-forward".into()];
    // Rootless Podman's published port connects from inside the forwarder
    // (rootlessport), never from a gateway; and there a container on
    // Podman's default network reaches the forwarder's own network through
    // the gateway, masqueraded as it (netavark isolates only networks that
    // both ask for it, and the default one does not).
    if engine.rootless {
        command.push("--only-own-addresses".into());
    }
    for (p, inside) in spec.ports.iter().zip(inside) {
        command.push("--forward".into());
        command.push(format!("{inside}={target}:{}", p.port));
    }
    let host_config = HostConfig {
        network_mode: Some(spec.network.clone()),
        port_bindings: Some(bindings),
        init: Some(true),
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec!["no-new-privileges".into()]),
        readonly_rootfs: Some(true),
        // Ports under 1024 without a capability: it runs as the user.
        // And never a router between a restricted sandbox's internal network
        // and its own (a new namespace inherits the host's forwarding).
        sysctls: Some(HashMap::from([
            ("net.ipv4.ip_unprivileged_port_start".to_owned(), "1".to_owned()),
            ("net.ipv4.ip_forward".to_owned(), "0".to_owned()),
        ])),
        memory: Some(64 << 20),
        pids_limit: Some(64),
        // Rootful Podman's own limits fail its start where root may not
        // raise a hard limit (as for a sandbox).
        ulimits,
        restart_policy: Some(RestartPolicy {
            name: Some(RestartPolicyNameEnum::UNLESS_STOPPED),
            maximum_retry_count: None,
        }),
        ..Default::default()
    };
    let identity = spec.image.identity();
    ContainerCreateBody {
        image: Some(image.to_owned()),
        cmd: Some(command),
        labels: Some(spec.labels.clone()),
        user: Some(format!("{}:{}", identity.uid, identity.gid)),
        exposed_ports: Some(inside.iter().map(|p| key(*p)).collect()),
        host_config: Some(host_config),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn inside_ports_are_distinct_in_their_range_and_not_the_same_each_time() {
        let ports = super::inside_ports(100);
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), 100);
        assert!(ports.iter().all(|p| (20000..60000).contains(p)), "{ports:?}");
        assert_ne!(super::inside_ports(8), super::inside_ports(8));
    }
}
