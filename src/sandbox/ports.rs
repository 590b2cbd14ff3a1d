//! Published ports in the sandbox engine: the set a sandbox publishes
//! (`up --publish`, `port NAME add|rm`), carried out by its forwarder
//! (`crate::ports`), journaled before it is made and recorded with the host
//! port each got. Changing the set replaces the forwarder, never the
//! sandbox's container.

use std::collections::HashMap;

use super::Engine;
use crate::egress::subnet::Subnet;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::ports::{forwarder_name, PortSpec};
use crate::record::{Record, Step};
use crate::runtime::egress::NetworkSpec;
use crate::runtime::forwarder::ForwarderSpec;
use crate::runtime::{HostImage, ImageSource, Network, Runtime};

/// Labels of the forwarder's container and network: not `forage.home`,
/// which marks sandbox containers (`list`, `gc`'s orphans).
pub const LABEL_PORTS_HOME: &str = "forage.ports.home";
pub const LABEL_PORTS_SANDBOX: &str = "forage.ports.sandbox";

/// A change to a sandbox's published ports.
#[derive(Debug, Clone)]
pub enum PortChange {
    Add(PortSpec),
    Remove(PortSpec),
}

impl<R: Runtime> Engine<R> {
    /// `port NAME add|rm`: the sandbox's published ports after the change.
    pub async fn change_ports(&self, name: &SandboxName, change: PortChange) -> Result<Record> {
        let _lock = self.lock_sandbox(name).await?;
        let mut record = self.record(name)?;
        // A half-made sandbox's journal is `down`'s to finish, not ours to extend.
        if record.state != crate::record::RecordState::Ready {
            return Err(super::lifecycle::half_made(name));
        }
        let mut wanted = asked(&record);
        match change {
            PortChange::Add(spec) => {
                if wanted.iter().any(|p| p.port == spec.port) {
                    let at = match record.ports.iter().find(|p| p.port == spec.port) {
                        Some(p) => format!("at {p}"),
                        None => "(when the sandbox starts)".to_owned(),
                    };
                    return Err(Error::conflict(format!(
                        "port {} of sandbox {name} is published already, {at}",
                        spec.port
                    ))
                    .hint_run(
                        "{command} first to publish it elsewhere",
                        ["port", name.as_str(), "rm", &spec.port.to_string()],
                    ));
                }
                wanted.push(spec);
                crate::ports::check_publish(&wanted, network_of(&record))?;
            }
            PortChange::Remove(spec) => {
                let before = wanted.len();
                wanted.retain(|p| p.port != spec.port || spec.host.is_some_and(|h| Some(h) != p.host));
                if wanted.len() == before {
                    return Err(Error::not_found(format!("sandbox {name} does not publish {spec}"))
                        .hint_run("{command} lists what it publishes", ["port", name.as_str()]));
                }
            }
        }
        let before = asked(&record);
        if let Err(e) = self.publish(&mut record, &wanted).await {
            // The old forwarder is gone: bring back what was published (its
            // host ports pinned), so that a refused change changes nothing.
            if let Err(again) = self.publish(&mut record, &before).await {
                return Err(e.with_note(format!("publishing the ports as they were failed too ({again})")));
            }
            return Err(e);
        }
        Ok(record)
    }

    /// After a start or reset: the forwarder made again, on the same host
    /// ports, for a `full` sandbox (the default bridge may have given its
    /// container another address) and for one whose forwarder is gone (A
    /// restricted sandbox's address is forage's pick, and stays); and the
    /// ports asked for while it was not running published.
    pub(crate) async fn refresh_ports(&self, record: &mut Record) -> Result<()> {
        let wanted = asked(record);
        if wanted.is_empty() {
            return Ok(());
        }
        if record.unpublished.is_empty()
            && record.egress.is_some()
            && self.runtime.container_exists(&forwarder_name(&record.name)).await?
        {
            return Ok(());
        }
        self.publish(record, &wanted).await.map_err(|e| {
            e.with_note(format!("sandbox {} runs, but its ports are not published", record.name))
                .hint_run("{command} tries again", ["restart", record.name.as_str()])
        })
    }

    /// After `stop`: a `full` sandbox's forwarder goes, and its ports wait
    /// for its next start on the host ports they had: the address it
    /// forwarded to may be another container's meanwhile.
    pub(crate) async fn hold_ports(&self, record: &mut Record) -> Result<()> {
        if record.ports.is_empty() || !self.has_no_address_yet(record).await? {
            return Ok(());
        }
        let wanted = asked(record);
        self.publish(record, &wanted).await
    }

    /// Makes the sandbox's forwarder publish exactly `wanted` (none: removes
    /// it), and records the host ports. `up --publish` and `port`.
    pub(crate) async fn publish(&self, record: &mut Record, wanted: &[PortSpec]) -> Result<()> {
        let name = forwarder_name(&record.name);
        let step = Step::Forwarder { name: name.clone() };
        if wanted.is_empty() {
            self.runtime.remove_forwarder(&name, &name).await?;
            record.ports.clear();
            record.unpublished.clear();
            record.journal.retain(|s| s != &step);
            return self.home.save(record);
        }
        crate::ports::check_publish(wanted, network_of(record))?;
        if self.has_no_address_yet(record).await? {
            // Published at its start (`refresh_ports`), on the host ports
            // it had if it had some. Until then nothing forwards to an
            // address another container may hold meanwhile.
            self.runtime.remove_forwarder(&name, &name).await?;
            record.ports.clear();
            record.unpublished = wanted.to_vec();
            record.journal.retain(|s| s != &step);
            return self.home.save(record);
        }
        if !record.journal.contains(&step) {
            self.begin(record, step)?;
        }
        self.step(&format!("publishing ports with {name}"));
        let default_network = self.runtime.forwarder_on_default_network().await?;
        if default_network.is_none() {
            self.make_forwarder_network(record).await?;
        }
        let spec = self.forwarder_spec(record, wanted, default_network)?;
        match self.runtime.ensure_forwarder(&spec, self.progress.as_ref()).await {
            Ok(published) => {
                record.ports = published;
                record.unpublished.clear();
                self.home.save(record)
            }
            Err(e) => {
                // Kept for the next start to try again.
                record.ports.clear();
                record.unpublished = wanted.to_vec();
                self.home.save(record)?;
                Err(e)
            }
        }
    }

    /// A `full` sandbox whose container is not running has no address on
    /// the default bridge for a forwarder to reach (a restricted one's is
    /// forage's pick, fixed at `up`).
    async fn has_no_address_yet(&self, record: &Record) -> Result<bool> {
        if network_of(record) != Network::Full || record.egress.is_some() {
            return Ok(false);
        }
        let container = self.runtime.inspect(&record.container).await?;
        Ok(container.is_none_or(|c| c.state != crate::runtime::ContainerState::Running))
    }

    /// The forwarder's own network, unless it exists: a /29 of
    /// `PORTS_RANGE`, with only the forwarder on it.
    async fn make_forwarder_network(&self, record: &Record) -> Result<()> {
        use crate::ports::{PORTS_RANGE, PORTS_SUBNET_BITS};
        let name = forwarder_name(&record.name);
        let labels = HashMap::from([
            (LABEL_PORTS_HOME.to_owned(), self.home.label()),
            (LABEL_PORTS_SANDBOX.to_owned(), record.name.to_string()),
        ]);
        let filter: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        if self.runtime.networks(&filter).await?.iter().any(|(n, _)| *n == name) {
            return Ok(());
        }
        // As for a sandbox's network: a subnet the engine refused (taken
        // meanwhile, or still held by a network being removed) is skipped.
        let mut refused = Vec::new();
        for _ in 0..32 {
            let mut used = self.runtime.used_subnets().await?;
            used.extend_from_slice(&refused);
            let Some(subnet) = crate::egress::subnet::free(PORTS_RANGE, PORTS_SUBNET_BITS, &used).next() else {
                break;
            };
            let spec = NetworkSpec { name: name.clone(), subnet, internal: false, labels: labels.clone() };
            if self.runtime.create_network(&spec).await? {
                return Ok(());
            }
            refused.push(subnet);
        }
        Err(Error::other(format!(
            "no free /{PORTS_SUBNET_BITS} found in {}/{} for the port forwarder's network {name}",
            PORTS_RANGE.0, PORTS_RANGE.1
        ))
        .hint("remove sandboxes you no longer need (`forage-ctl down`), or networks left behind (`forage-ctl gc`)"))
    }

    /// The forwarder of `wanted`, published through `default_network` if
    /// given, else through a network of its own.
    fn forwarder_spec(
        &self,
        record: &Record,
        wanted: &[PortSpec],
        default_network: Option<String>,
    ) -> Result<ForwarderSpec> {
        let name = forwarder_name(&record.name);
        // On a restricted sandbox's own network, at an address of its own;
        // with `full`, on the default bridge, reaching the sandbox's address
        // there as it is now.
        let (sandbox_network, addresses, target) = match &record.egress {
            Some(e) => {
                let subnet = Subnet::parse(&e.subnet)
                    .ok_or_else(|| Error::other(format!("the record's subnet {:?} is not one", e.subnet)))?;
                (e.network.clone(), forwarder_addresses(&subnet), Some(e.sandbox_address))
            }
            None => ("bridge".to_owned(), Vec::new(), None),
        };
        let exe = std::env::current_exe().map_err(|e| Error::other(format!("finding forage-ctl's own binary: {e}")))?;
        let (Some(dir), Some(program)) = (exe.parent(), exe.file_name().and_then(|n| n.to_str())) else {
            return Err(Error::other(format!("forage-ctl's own binary {} has no name", exe.display())));
        };
        let label = self.home.label();
        Ok(ForwarderSpec {
            container: name.clone(),
            network: default_network.unwrap_or(name),
            labels: HashMap::from([
                (LABEL_PORTS_HOME.to_owned(), label),
                (LABEL_PORTS_SANDBOX.to_owned(), record.name.to_string()),
            ]),
            sandbox_network,
            addresses,
            target,
            sandbox_container: record.container.clone(),
            // The egress proxy's image: forage-ctl itself, built offline.
            image: ImageSource::Host {
                template: "egress-proxy".into(),
                spec: HostImage { tools: vec![program.to_owned()], require: vec![program.to_owned()] },
                tool_dirs: vec![dir.to_path_buf()],
                identity: self.identity,
            },
            program: program.to_owned(),
            ports: wanted.to_vec(),
        })
    }
}

impl<R: Runtime> Engine<R> {
    /// `gc`: forwarders of this FORAGE_HOME whose sandbox has no record
    /// (found by their network, which is made before the container and
    /// removed after it, and by their container, which is all there is of
    /// one on the engine's default network).
    pub(crate) async fn gc_forwarders(
        &self,
        had_record: impl Fn(&SandboxName) -> bool,
        force: bool,
    ) -> Result<Vec<super::gc::Finding>> {
        use super::gc::{Finding, Kind};
        let mut findings = Vec::new();
        // A forwarder's container and its network (if it has one) both
        // bear its name and labels: each forwarder once, by that name.
        let home = [format!("{LABEL_PORTS_HOME}={}", self.home.label())];
        let mut forwarders = self.runtime.networks(&home).await?;
        for (container, labels) in self.runtime.containers_labelled(&home).await? {
            if !forwarders.iter().any(|(n, _)| *n == container) {
                forwarders.push((container, labels));
            }
        }
        for (forwarder, labels) in forwarders {
            let Some(Ok(name)) = labels.get(LABEL_PORTS_SANDBOX).map(|n| SandboxName::parse(n)) else { continue };
            let Some(_lock) = self.lock_if_unowned(&name, had_record(&name) || forwarder != forwarder_name(&name))?
            else {
                continue;
            };
            let why = format!("the port forwarder of sandbox {name}, which has no record");
            let finding =
                Finding::new(Kind::OrphanForwarder, forwarder.clone(), why, "remove its container and network");
            findings.push(finding.act(force, self.runtime.remove_forwarder(&forwarder, &forwarder)).await);
        }
        Ok(findings)
    }
}

/// The forwarder's addresses on a restricted sandbox's network, in order:
/// `FORWARDER_HOST` and every one after it but the broadcast address.
fn forwarder_addresses(subnet: &Subnet) -> Vec<std::net::Ipv4Addr> {
    let hosts = (1u32 << (32 - u32::from(subnet.bits))) - 1;
    (crate::egress::FORWARDER_HOST..hosts).map(|h| subnet.host(h)).collect()
}

/// What the sandbox publishes or will at its start, published ports pinned
/// to the host port they have.
fn asked(record: &Record) -> Vec<PortSpec> {
    let published = record.ports.iter().map(|p| PortSpec { host: Some(p.host_port), port: p.port });
    published.chain(record.unpublished.iter().copied()).collect()
}

/// The sandbox's network: as recorded, else (an older forage's record)
/// restricted if it has an egress network, else full.
fn network_of(record: &Record) -> Network {
    match (&record.network, &record.egress) {
        (Some(n), _) => *n,
        (None, Some(_)) => Network::Restricted,
        (None, None) => Network::Full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forwarder_may_take_any_address_after_the_sandboxs_but_the_broadcast() {
        let subnet = Subnet::parse("10.213.0.16/28").unwrap();
        let addresses = forwarder_addresses(&subnet);
        assert_eq!(addresses.first(), Some(&"10.213.0.20".parse().unwrap()));
        assert_eq!(addresses.last(), Some(&"10.213.0.30".parse().unwrap()));
        assert_eq!(addresses.len(), 11);
    }
}
