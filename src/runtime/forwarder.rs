//! The engine's side of published ports (`crate::ports`): a sandbox's
//! forwarder container, on a network of its own (the one it publishes on:
//! nothing else is on it) and joined to the sandbox's network, publishing
//! each port on the host's 127.0.0.1 only.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use bollard::models::{
    ContainerCreateBody, EndpointIpamConfig, EndpointSettings, HostConfig, NetworkConnectRequest, NetworkingConfig,
    PortBinding, ResourcesUlimits, RestartPolicy, RestartPolicyNameEnum,
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
    /// The sandbox's network, and the forwarder's address on it (`None`: the
    /// engine picks, as on the default bridge).
    pub sandbox_network: String,
    pub address: Option<Ipv4Addr>,
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
        let info = self.info().await?;
        let (sandbox_network, target) = match spec.target {
            Some(t) => (spec.sandbox_network.clone(), t),
            // Rootless Podman runs a `full` sandbox on slirp4netns (see
            // `create`), a network of its container alone.
            None if info.rootless => return Err(full_on_rootless_podman()),
            None => self.address_on(&spec.sandbox_container, &spec.sandbox_network).await?,
        };
        let image = self.ensure_image(&spec.image, progress).await?;
        self.docker_remove_forwarder_container(&spec.container).await?;
        let api = self.api().await?;
        let mut config = container_config(spec, &image.reference, target, info.rlimits());
        let on_sandbox_network = EndpointSettings {
            ipam_config: spec
                .address
                .map(|a| EndpointIpamConfig { ipv4_address: Some(a.to_string()), ..Default::default() }),
            ..Default::default()
        };
        // Podman 4.3 joined to a second network after the create (not yet
        // started) leaves its network state inconsistent: every network
        // listing answers 500 "network inspection mismatch" until the
        // container is removed. Podman takes both networks at the create;
        // Docker (API 1.41) honours only one there, so it joins after.
        let podman = info.podman;
        if podman {
            config.networking_config = Some(NetworkingConfig {
                endpoints_config: Some(HashMap::from([
                    (spec.network.clone(), EndpointSettings::default()),
                    (sandbox_network.clone(), on_sandbox_network.clone()),
                ])),
            });
        }
        let options = CreateContainerOptions { name: Some(spec.container.clone()), ..Default::default() };
        api.create_container(Some(options), config)
            .await
            .map_err(|e| Error::docker(format!("creating the port forwarder {}", spec.container), e))?;
        if !podman {
            let request =
                NetworkConnectRequest { container: spec.container.clone(), endpoint_config: Some(on_sandbox_network) };
            api.connect_network(&sandbox_network, request).await.map_err(|e| {
                Error::docker(format!("joining the port forwarder {} to network {sandbox_network}", spec.container), e)
            })?;
        }
        if let Err(e) = api.start_container(&spec.container, None).await {
            return Err(start_failed(spec, e));
        }
        self.published(&spec.container, &spec.ports).await
    }

    /// The host port of each of `ports`, as the engine bound it.
    async fn published(&self, container: &str, ports: &[PortSpec]) -> Result<Vec<Published>> {
        let inspected = self
            .api()
            .await?
            .inspect_container(container, None::<InspectContainerOptions>)
            .await
            .map_err(|e| Error::docker(format!("inspecting the port forwarder {container}"), e))?;
        let map = inspected.network_settings.and_then(|n| n.ports).unwrap_or_default();
        ports
            .iter()
            .map(|p| {
                let host_port = map
                    .get(&format!("{}/tcp", p.port))
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

    /// Removes the forwarder, then its network; succeeds if both are gone.
    pub(crate) async fn docker_remove_forwarder(&self, container: &str, network: &str) -> Result<()> {
        self.docker_remove_forwarder_container(container).await?;
        self.docker_remove_network(network).await
    }
}

/// Rootless Podman cannot publish a `full` sandbox's ports: no forwarder can
/// join its network.
fn full_on_rootless_podman() -> Error {
    Error::conflict(
        "rootless Podman runs a sandbox with the full network on slirp4netns, which no port forwarder can reach",
    )
    .hint("publish ports of a sandbox with `--network restricted`, or use Docker or rootful Podman")
}

/// Why the forwarder did not start: a host port taken, said as such.
fn start_failed(spec: &ForwarderSpec, e: bollard::errors::Error) -> Error {
    let text = e.to_string();
    let taken = spec.ports.iter().filter_map(|p| p.host).find(|h| text.contains(&format!(":{h}")));
    match taken {
        Some(h) if text.contains("already allocated") || text.contains("in use") => {
            Error::conflict(format!("host port {h} (127.0.0.1:{h}) is taken by another program or sandbox"))
                .hint("pick another HOSTPORT, or give only PORT and forage picks a free one")
        }
        _ => Error::docker(format!("starting the port forwarder {}", spec.container), e),
    }
}

/// The forwarder's container: forage-ctl `port-forward`, as the user, with
/// no capability, publishing each port on 127.0.0.1.
fn container_config(
    spec: &ForwarderSpec,
    image: &str,
    target: Ipv4Addr,
    ulimits: Option<Vec<ResourcesUlimits>>,
) -> ContainerCreateBody {
    let key = |p: u16| format!("{p}/tcp");
    let bindings = spec
        .ports
        .iter()
        .map(|p| {
            let binding = PortBinding {
                host_ip: Some("127.0.0.1".into()),
                // Empty: the engine picks a free port, and no two
                // sandboxes ever get the same one.
                host_port: Some(p.host.map(|h| h.to_string()).unwrap_or_default()),
            };
            (key(p.port), Some(vec![binding]))
        })
        .collect();
    let mut command = vec![spec.program.clone(), "port-forward".into()];
    for p in &spec.ports {
        command.push("--forward".into());
        command.push(format!("{}={target}:{}", p.port, p.port));
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
        exposed_ports: Some(spec.ports.iter().map(|p| key(p.port)).collect()),
        host_config: Some(host_config),
        ..Default::default()
    }
}
