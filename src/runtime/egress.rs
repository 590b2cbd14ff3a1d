//! The engine's side of `network: restricted` (`crate::egress`): sandbox
//! networks (internal, no address on the host's side of the bridge), the
//! proxy's outside network, and the proxy's container.

use std::collections::HashMap;
use std::net::Ipv4Addr;

use bollard::models::{
    ContainerCreateBody, EndpointIpamConfig, EndpointSettings, HostConfig, Ipam, IpamConfig, NetworkConnectRequest,
    NetworkCreateRequest, NetworkDisconnectRequest, RestartPolicy, RestartPolicyNameEnum,
};
use bollard::query_parameters::{
    InspectContainerOptions, InspectNetworkOptions, ListContainersOptions, ListNetworksOptions, RemoveContainerOptions,
};

use super::docker::Docker;
use super::{ImageSource, Mount, Runtime as _};
use crate::egress::subnet::Subnet;
use crate::error::{is_docker_conflict, is_docker_not_found, Error, Result};
use crate::progress::Progress;

/// A network forage makes.
#[derive(Debug, Clone)]
pub struct NetworkSpec {
    pub name: String,
    pub subnet: Subnet,
    /// No route out, and (bridge option `inhibit_ipv4`) no address of the
    /// host's on it: what is on it reaches only what else is on it.
    pub internal: bool,
    pub labels: HashMap<String, String>,
}

/// The egress proxy's container.
#[derive(Debug, Clone)]
pub struct ProxySpec {
    pub container: String,
    /// The network it reaches the outside through (made on demand).
    pub outside: String,
    pub outside_labels: HashMap<String, String>,
    pub image: ImageSource,
    pub labels: HashMap<String, String>,
    pub mounts: Vec<Mount>,
    pub command: Vec<String>,
}

/// What the engine did to bring the proxy up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyState {
    /// It was running already, on the image it should be.
    Running,
    /// It was (re)made: joined to no sandbox network yet.
    Made,
}

/// A network as forage reads it, from either engine.
struct NetworkSummary {
    name: String,
    labels: HashMap<String, String>,
    subnets: Vec<Subnet>,
}

impl Docker {
    /// The networks matching `filters` (`name`, `label`). Podman's are read
    /// through its libpod API: its compat listing fails while any container
    /// on the engine is half removed (see `super::libpod`).
    async fn network_list(&self, filters: HashMap<String, Vec<String>>) -> Result<Vec<NetworkSummary>> {
        let info = self.info().await?;
        let subnets = |s: Vec<String>| s.iter().filter_map(|s| Subnet::parse(s)).collect();
        if info.podman {
            let networks = super::libpod::networks(&info.host, &filters).await?;
            return Ok(networks
                .into_iter()
                .map(|n| NetworkSummary {
                    name: n.name,
                    labels: n.labels.unwrap_or_default(),
                    subnets: subnets(n.subnets.into_iter().flatten().map(|s| s.subnet).collect()),
                })
                .collect());
        }
        let options = ListNetworksOptions { filters: Some(filters) };
        let networks =
            self.api().await?.list_networks(Some(options)).await.map_err(|e| Error::docker("listing networks", e))?;
        Ok(networks
            .into_iter()
            .filter_map(|n| {
                let configs = n.ipam.and_then(|i| i.config).unwrap_or_default();
                Some(NetworkSummary {
                    name: n.name?,
                    labels: n.labels.unwrap_or_default(),
                    subnets: subnets(configs.into_iter().filter_map(|c| c.subnet).collect()),
                })
            })
            .collect())
    }

    /// Whether a network of that name exists.
    async fn network_exists(&self, name: &str) -> Result<bool> {
        let info = self.info().await?;
        if info.podman {
            return super::libpod::network_exists(&info.host, name).await;
        }
        match self.api().await?.inspect_network(name, None::<InspectNetworkOptions>).await {
            Ok(_) => Ok(true),
            Err(e) if is_docker_not_found(&e) => Ok(false),
            Err(e) => Err(Error::docker(format!("inspecting network {name}"), e)),
        }
    }

    /// The containers on `network`, stopped ones too: (id, name).
    async fn containers_on_network(&self, network: &str) -> Result<Vec<(String, String)>> {
        let filters = HashMap::from([("network".to_owned(), vec![network.to_owned()])]);
        let found = self.containers_matching(filters).await?;
        Ok(found.into_iter().map(|c| (c.id, c.name)).collect())
    }

    /// The containers matching `filters` (Docker's keys), stopped ones too.
    /// On Podman through its own list (see `super::libpod::containers`).
    pub(crate) async fn containers_matching(&self, filters: HashMap<String, Vec<String>>) -> Result<Vec<Listed>> {
        let info = self.info().await?;
        if info.podman {
            let list = super::libpod::containers(&info.host, &filters).await?;
            return Ok(list
                .into_iter()
                .map(|c| Listed {
                    id: c.id,
                    name: c.names.into_iter().next().unwrap_or_default(),
                    labels: c.labels.unwrap_or_default(),
                })
                .collect());
        }
        let options = ListContainersOptions { all: true, filters: Some(filters), ..Default::default() };
        let list = self
            .api()
            .await?
            .list_containers(Some(options))
            .await
            .map_err(|e| Error::docker("listing containers", e))?;
        Ok(list
            .into_iter()
            .filter_map(|c| {
                let name = c.names.into_iter().flatten().next().unwrap_or_default();
                let labels = c.labels.unwrap_or_default();
                Some(Listed { id: c.id?, name: name.trim_start_matches('/').to_owned(), labels })
            })
            .collect())
    }
}

impl Docker {
    pub(crate) async fn docker_default_network_subnets(&self) -> Result<Vec<Subnet>> {
        let name = if self.info().await?.podman { "podman" } else { "bridge" };
        // The engine's name filter matches parts of names: the exact one is kept.
        let filters = HashMap::from([("name".to_owned(), vec![name.to_owned()])]);
        let networks = self.network_list(filters).await?;
        Ok(networks.into_iter().filter(|n| n.name == name).flat_map(|n| n.subnets).collect())
    }

    pub(crate) async fn docker_used_subnets(&self) -> Result<Vec<Subnet>> {
        let networks = self.network_list(HashMap::new()).await?;
        let mut used: Vec<Subnet> = networks.into_iter().flat_map(|n| n.subnets).collect();
        // Podman also refuses a subnet the host routes to (another engine's
        // bridge, a VPN): those are skipped too. (Docker does not check, and a
        // host route over all of forage's range must not stop it there.)
        if self.info().await?.podman {
            let routes = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
            used.extend(crate::egress::subnet::host_routes(&routes));
        }
        Ok(used)
    }

    pub(crate) async fn docker_create_network(&self, spec: &NetworkSpec) -> Result<bool> {
        // Engines before API 1.44 make a second network of a name in use
        // (`CheckDuplicate` is off, and bollard no longer sends it), and then
        // every request by that name is ambiguous: refuse one in use first.
        let filters = HashMap::from([("name".to_owned(), vec![spec.name.clone()])]);
        let same_name = self.network_list(filters).await?;
        if same_name.iter().any(|n| n.name == spec.name) {
            return Err(taken(&spec.name));
        }
        let info = self.info().await?;
        if info.podman && spec.internal {
            // The last guard (`up` refuses before it makes anything).
            info.check_restricted(super::engine_choice::bridged_traffic_filtered())?;
            return self.podman_create_internal_network(spec).await;
        }
        let mut options = HashMap::new();
        if spec.internal {
            options.insert("com.docker.network.bridge.inhibit_ipv4".to_owned(), "true".to_owned());
        }
        let request = NetworkCreateRequest {
            name: spec.name.clone(),
            driver: Some("bridge".into()),
            internal: Some(spec.internal),
            ipam: Some(Ipam {
                config: Some(vec![IpamConfig {
                    subnet: Some(spec.subnet.to_string()),
                    gateway: Some(spec.subnet.host(1).to_string()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            options: Some(options),
            labels: Some(spec.labels.clone()),
            ..Default::default()
        };
        match self.api().await?.create_network(request).await {
            Ok(_) => Ok(true),
            // Docker: "Pool overlaps with other one on this address space";
            // Podman: "subnet … is already used on the host or by another config".
            Err(e) if e.to_string().contains("overlap") || e.to_string().contains("is already used") => Ok(false),
            Err(e) if is_docker_conflict(&e) => Err(taken(&spec.name)),
            Err(e) => Err(Error::docker(format!("creating network {} ({})", spec.name, spec.subnet), e)),
        }
    }

    /// Names of the networks with all of `labels` (`key=value`).
    pub(crate) async fn docker_networks(&self, labels: &[String]) -> Result<Vec<(String, HashMap<String, String>)>> {
        let filters = HashMap::from([("label".to_owned(), labels.to_vec())]);
        let networks = self.network_list(filters).await?;
        Ok(networks.into_iter().map(|n| (n.name, n.labels)).collect())
    }

    /// Removes the network, first disconnecting whatever is still on it;
    /// succeeds if it is already gone.
    pub(crate) async fn docker_remove_network(&self, name: &str) -> Result<()> {
        if !self.network_exists(name).await? {
            return Ok(());
        }
        let api = self.api().await?;
        let mut failed = None;
        for (id, container) in self.containers_on_network(name).await? {
            let request = NetworkDisconnectRequest { container: id.clone(), force: Some(true) };
            match api.disconnect_network(name, request).await {
                Ok(()) => {}
                Err(e) if is_docker_not_found(&e) => {}
                // Podman takes the container off the network in its
                // database before it tears the interface down, and a
                // teardown that fails (its rootless network namespace gone
                // under it) leaves it off: the network can still go. The
                // container is left one Podman cannot describe (an egress
                // proxy is replaced at the next `up`).
                Err(e) if self.info().await?.podman => {
                    tracing::warn!("disconnecting {container} from network {name}: {e}");
                    failed.get_or_insert(Error::docker(format!("disconnecting {container} from network {name}"), e));
                }
                Err(e) => return Err(Error::docker(format!("disconnecting {container} from network {name}"), e)),
            }
        }
        match api.remove_network(name).await {
            Ok(()) => Ok(()),
            Err(e) if is_docker_not_found(&e) => Ok(()),
            Err(e) => Err(failed.unwrap_or_else(|| Error::docker(format!("removing network {name}"), e))),
        }
    }

    /// Joins `container` to `network` at `address`, unless it is on it already.
    pub(crate) async fn docker_connect(&self, network: &str, container: &str, address: Ipv4Addr) -> Result<()> {
        let api = self.api().await?;
        if self.containers_on_network(network).await?.iter().any(|(_, name)| name == container) {
            return Ok(());
        }
        let request = NetworkConnectRequest {
            container: container.to_owned(),
            endpoint_config: Some(EndpointSettings {
                ipam_config: Some(EndpointIpamConfig { ipv4_address: Some(address.to_string()), ..Default::default() }),
                // Docker derives a container's MAC from its address; Podman
                // picks one at random, and a proxy made again at the same
                // address then goes unreached by a sandbox that still has the
                // old one's in its ARP cache (it cannot flush it, nor does
                // Podman announce the new one). Podman is given Docker's.
                mac_address: self.info().await?.podman.then(|| mac_of(address)),
                ..Default::default()
            }),
        };
        api.connect_network(network, request)
            .await
            .map_err(|e| Error::docker(format!("joining {container} to network {network} at {address}"), e))
    }

    async fn ensure_outside(&self, spec: &ProxySpec) -> Result<()> {
        if self.network_exists(&spec.outside).await? {
            return Ok(());
        }
        use crate::egress::policy::OUTSIDE_RANGE;
        // A subnet the engine refused is skipped from then on: one another
        // `up` took meanwhile, or one a network being removed still holds
        // (which the listing no longer shows).
        let mut refused = Vec::new();
        for _ in 0..32 {
            let mut used = self.docker_used_subnets().await?;
            used.extend_from_slice(&refused);
            let bits = crate::egress::OUTSIDE_SUBNET_BITS;
            let Some(subnet) = crate::egress::subnet::free(OUTSIDE_RANGE, bits, &used).next() else { break };
            let labels = spec.outside_labels.clone();
            let network = NetworkSpec { name: spec.outside.clone(), subnet, internal: false, labels };
            if self.docker_create_network(&network).await? {
                return Ok(());
            }
            tracing::debug!("the engine refused subnet {subnet} for {}", spec.outside);
            refused.push(subnet);
        }
        Err(Error::other(format!(
            "no free /{} found in {}/{} for the egress proxy's network {}; remove unused networks (`docker network prune`)",
            crate::egress::OUTSIDE_SUBNET_BITS,
            OUTSIDE_RANGE.0,
            OUTSIDE_RANGE.1,
            spec.outside
        )))
    }

    pub(crate) async fn docker_ensure_proxy(&self, spec: &ProxySpec, progress: &dyn Progress) -> Result<ProxyState> {
        self.ensure_outside(spec).await?;
        let image = self.ensure_image(&spec.image, progress).await?;
        let api = self.api().await?;
        match api.inspect_container(&spec.container, None::<InspectContainerOptions>).await {
            Ok(c) if is_image(c.config.as_ref().and_then(|c| c.image.as_deref()), &image.reference) => {
                if c.state.and_then(|s| s.running) == Some(true) {
                    return Ok(ProxyState::Running);
                }
                // Stopped (the engine restarted, or someone stopped it): a
                // fresh one is joined to every network again below.
            }
            Ok(_) => {} // an older forage's proxy: replaced
            Err(e) if is_docker_not_found(&e) => {}
            // Podman cannot describe it (a network's setup or teardown
            // failed half way): it is replaced, and joined to every sandbox
            // network afresh.
            Err(e) if self.info().await?.podman && self.docker_container_exists(&spec.container).await? => {
                tracing::warn!("the egress proxy {} is broken, and is made again: {e}", spec.container);
            }
            Err(e) => return Err(Error::docker(format!("inspecting container {}", spec.container), e)),
        }
        self.docker_remove_proxy_container(&spec.container).await?;
        let info = self.info().await?;
        let host_config = HostConfig {
            network_mode: Some(spec.outside.clone()),
            // The proxy reads files only the user may (the injected keys, the
            // CA's key: 0600): rootless Podman runs it as the user itself, as
            // it does the sandbox. Without, its user is one of the user's
            // subordinate ids, which may read nothing of the user's.
            userns_mode: info.rootless.then(|| "keep-id".to_owned()),
            // Rootful Podman's own limits fail its start where root may not
            // raise a hard limit (as for a sandbox).
            ulimits: info.rlimits(),
            mounts: Some(spec.mounts.iter().map(super::docker::docker_mount).collect()),
            init: Some(true),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into()]),
            readonly_rootfs: Some(true),
            // Port 53 (its DNS answer) without a capability: the proxy runs
            // as the user, with none.
            sysctls: Some(HashMap::from([(
                "net.ipv4.ip_unprivileged_port_start".to_owned(),
                crate::egress::DNS_PORT.to_string(),
            )])),
            memory: Some(256 << 20),
            pids_limit: Some(256),
            restart_policy: Some(RestartPolicy {
                name: Some(RestartPolicyNameEnum::UNLESS_STOPPED),
                maximum_retry_count: None,
            }),
            ..Default::default()
        };
        let identity = spec.image.identity();
        let config = ContainerCreateBody {
            image: Some(image.reference.clone()),
            cmd: Some(spec.command.clone()),
            labels: Some(spec.labels.clone()),
            user: Some(format!("{}:{}", identity.uid, identity.gid)),
            env: Some(vec!["RUST_LOG=info".into()]),
            host_config: Some(host_config),
            ..Default::default()
        };
        self.create_container(&spec.container, config, &info).await?;
        api.start_container(&spec.container, None)
            .await
            .map_err(|e| Error::docker(format!("starting the egress proxy {}", spec.container), e))?;
        Ok(ProxyState::Made)
    }

    async fn docker_remove_proxy_container(&self, name: &str) -> Result<()> {
        if self.info().await?.podman {
            self.podman_leave_networks_one_at_a_time(name).await?;
        }
        let options = RemoveContainerOptions { force: true, v: true, link: false };
        match self.api().await?.remove_container(name, Some(options)).await {
            Ok(()) => Ok(()),
            Err(e) if is_docker_not_found(&e) => Ok(()),
            Err(e) => Err(Error::docker(format!("removing the egress proxy {name}"), e)),
        }
    }

    /// Takes the container off each of its networks in turn, so that
    /// Podman frees each of its addresses on its own. Podman 4.3 frees a
    /// removed container's addresses in one transaction over all its
    /// networks, which fails whole, freeing none, when one of them was
    /// never set up: the state a connect that failed half way leaves, in
    /// which Podman cannot describe the container (a broken proxy, replaced
    /// by `docker_ensure_proxy`). Its fixed address on every sandbox's
    /// network would then stay held by no container until the engine's
    /// next boot, and its replacement could join none of them (seen in CI).
    /// A disconnect that fails is only logged: the removal goes on.
    async fn podman_leave_networks_one_at_a_time(&self, container: &str) -> Result<()> {
        let info = self.info().await?;
        let filters = HashMap::from([("name".to_owned(), vec![format!("^{container}$")])]);
        let found = super::libpod::containers(&info.host, &filters).await?;
        let Some(found) = found.into_iter().find(|c| c.names.iter().any(|n| n == container)) else { return Ok(()) };
        let api = self.api().await?;
        for network in &found.networks {
            let request = NetworkDisconnectRequest { container: found.id.clone(), force: Some(true) };
            if let Err(e) = api.disconnect_network(network, request).await {
                tracing::debug!("disconnecting {container} from network {network} before removing it: {e}");
            }
        }
        Ok(())
    }

    pub(crate) async fn docker_remove_proxy(&self, container: &str, outside: &str) -> Result<()> {
        self.docker_remove_proxy_container(container).await?;
        self.docker_remove_network(outside).await
    }

    /// A sandbox's network on Podman, made through libpod: as the compat API
    /// would make it (isolated from Podman's other networks), but without
    /// two things of the host's that the agent would reach around the proxy:
    ///
    /// - the DNS server the compat API gives every network. That server, at
    ///   the gateway, answers a container any name, asking the host's
    ///   resolvers for what it does not know (a name is data, and the
    ///   resolvers pass it on). forage gives the sandbox the proxy's DNS.
    /// - a gateway. Podman puts a network's gateway address on its bridge,
    ///   which rootful Podman makes in the host's own network namespace:
    ///   every service listening on the host would answer the agent there.
    ///   An internal network made with no gateway gets none, and its bridge
    ///   no IPv4 address (Docker's `inhibit_ipv4`, which netavark lacks);
    ///   the sandbox reaches the proxy on its own subnet, needing none.
    ///
    /// `true` if made, `false` if the subnet is in use.
    async fn podman_create_internal_network(&self, spec: &NetworkSpec) -> Result<bool> {
        use super::libpod::{create_network, Created, NewNetwork, NewSubnet};
        let info = self.info().await?;
        let network = NewNetwork {
            name: spec.name.clone(),
            driver: "bridge".into(),
            subnets: vec![NewSubnet { subnet: spec.subnet.to_string(), gateway: None }],
            internal: true,
            dns_enabled: false,
            options: HashMap::from([("isolate".to_owned(), "true".to_owned())]),
            labels: spec.labels.clone(),
        };
        match create_network(&info.host, &network).await? {
            Created::Made => {}
            Created::SubnetUsed => return Ok(false),
            Created::NameTaken => return Err(taken(&spec.name)),
        }
        // The last guard, for a Podman that gives it a gateway all the same:
        // on rootful Podman that is an address of the host's, and the network
        // goes again. (Rootless Podman's bridge is in a namespace of its own.)
        let filters = HashMap::from([("name".to_owned(), vec![format!("^{}$", spec.name)])]);
        let made = super::libpod::networks(&info.host, &filters).await?;
        let gateway = made.iter().flat_map(|n| n.subnets.iter().flatten()).find_map(|s| s.gateway.clone());
        match gateway {
            Some(gateway) if !info.rootless => {
                self.docker_remove_network(&spec.name).await?;
                Err(Error::conflict(format!(
                    "rootful Podman ({}) gave the restricted sandbox's network {} the gateway {gateway}, an address \
                     of the host's, through which the agent would reach every service on the host",
                    info.host, spec.name
                ))
                .hint("use rootless Podman or Docker for restricted sandboxes, or `--network full` or `none` here"))
            }
            _ => Ok(true),
        }
    }

    pub(crate) async fn docker_container_exists(&self, name: &str) -> Result<bool> {
        let info = self.info().await?;
        if info.podman {
            return super::libpod::container_exists(&info.host, name).await;
        }
        match self.api().await?.inspect_container(name, None::<InspectContainerOptions>).await {
            Ok(_) => Ok(true),
            Err(e) if is_docker_not_found(&e) => Ok(false),
            Err(e) => Err(Error::docker(format!("inspecting container {name}"), e)),
        }
    }
}

/// A container as a listing gives it.
pub(crate) struct Listed {
    pub id: String,
    pub name: String,
    pub labels: HashMap<String, String>,
}

/// Whether a container's image, as the engine names it, is `reference`:
/// Podman names a local image without a registry `localhost/…`.
fn is_image(named: Option<&str>, reference: &str) -> bool {
    named.is_some_and(|n| n == reference || n.strip_prefix("localhost/") == Some(reference))
}

/// The MAC address Docker gives the container at `address`.
fn mac_of(address: Ipv4Addr) -> String {
    let [a, b, c, d] = address.octets();
    format!("02:42:{a:02x}:{b:02x}:{c:02x}:{d:02x}")
}

/// A network of that name exists, and is not forage's to use.
fn taken(name: &str) -> Error {
    Error::conflict(format!(
        "a network named {name} already exists; remove it (`docker network rm {name}`) or pick another sandbox name"
    ))
}

/// What a runtime without networks says to `network: restricted`.
pub fn unsupported() -> Error {
    Error::other("this container runtime cannot make networks, which `network: restricted` needs")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn podmans_localhost_name_is_the_same_image() {
        assert!(is_image(Some("forage-host/egress-proxy:1"), "forage-host/egress-proxy:1"));
        assert!(is_image(Some("localhost/forage-host/egress-proxy:1"), "forage-host/egress-proxy:1"));
        assert!(!is_image(Some("localhost/forage-host/egress-proxy:2"), "forage-host/egress-proxy:1"));
        assert!(!is_image(Some("docker.io/forage-host/egress-proxy:1"), "forage-host/egress-proxy:1"));
        assert!(!is_image(None, "forage-host/egress-proxy:1"));
    }

    #[test]
    fn the_mac_is_dockers_for_the_address() {
        assert_eq!(mac_of(Ipv4Addr::new(10, 213, 0, 18)), "02:42:0a:d5:00:12");
    }
}
