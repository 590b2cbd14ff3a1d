//! `network: restricted` in the sandbox engine: the allowlist a sandbox gets
//! (template, the user's allow file, `--allow`), its own network (journaled
//! before it is made, removed by `down`, rollback and `gc`), the one egress
//! proxy per FORAGE_HOME (made on demand, joined to every restricted sandbox's
//! network, removed by `gc --force` once none is left), and the map the proxy
//! reads, rewritten from the records under one lock whenever one changes.

use std::collections::HashMap;
use std::path::PathBuf;

use sha2::{Digest, Sha256};

use super::Engine;
use crate::egress::inject::{self, InjectRule};
use crate::egress::map::{EgressMap, Entry};
use crate::egress::policy::{Allowlist, Pattern, SANDBOX_RANGE};
use crate::egress::subnet::{self, Subnet};
use crate::egress::{LOG_INSIDE, POLICY_INSIDE, PROXY_HOST, PROXY_PORT, SANDBOX_HOST, SANDBOX_SUBNET_BITS};
use crate::env::Settings;
use crate::error::{Error, Result};
use crate::names::{SandboxName, LABEL_HOME, LABEL_SANDBOX};
use crate::record::{EgressRecord, Record, RecordState, Step};
use crate::runtime::egress::{NetworkSpec, ProxySpec, ProxyState};
use crate::runtime::{ContainerSpec, EgressAttachment, HostImage, ImageSource, Mount, Network, Runtime};
use crate::template;

/// What a network or container of forage's egress is: `sandbox-network`,
/// `outside` or `proxy`.
pub const LABEL_EGRESS: &str = "forage.egress";
/// The FORAGE_HOME a proxy serves. Not `forage.home`, which marks sandbox
/// containers (`list`, `gc`'s orphans): the proxy is none.
pub const LABEL_EGRESS_HOME: &str = "forage.egress.home";
/// The most of the user's allow file forage reads.
const MAX_ALLOW_FILE: u64 = 64 << 10;

/// The user's allow file: `$XDG_CONFIG_HOME/forage/allow` (an absolute one),
/// else `~/.config/forage/allow`.
pub fn user_allow_file(settings: &Settings) -> Option<PathBuf> {
    let config = settings
        .xdg_config_home
        .clone()
        .filter(|p| p.is_absolute())
        .or_else(|| settings.home.as_ref().map(|h| h.join(".config")))?;
    Some(config.join("forage/allow"))
}

/// The entries of the user's allow file, one a line (`#` starts a comment);
/// none when there is no file.
fn read_allow_file(path: &std::path::Path) -> Result<Vec<Pattern>> {
    use std::io::Read;
    let shown = path.display();
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::usage(format!("your allow file {shown} cannot be read ({e})"))),
    };
    let mut text = String::new();
    file.take(MAX_ALLOW_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|e| Error::usage(format!("your allow file {shown} cannot be read as text ({e})")))?;
    if text.len() as u64 > MAX_ALLOW_FILE {
        return Err(Error::usage(format!(
            "your allow file {shown} is over {} KiB; it holds one host name a line",
            MAX_ALLOW_FILE >> 10
        )));
    }
    let mut entries = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default().trim();
        if line.is_empty() {
            continue;
        }
        let entry = line.parse().map_err(|why| {
            Error::usage(format!("{shown} line {}: {why}", n + 1)).hint("fix or remove that line of your allow file")
        })?;
        entries.push(entry);
    }
    Ok(entries)
}

/// A sandbox's allowlist: the template's `network_allow`, then the user's
/// allow file, then `--allow`, each entry once. Empty for other networks,
/// where `--allow` is refused (it would allow nothing).
pub(crate) fn allowlist(
    template: &template::Resolved,
    options: &crate::record::UpOptions,
    network: Network,
    settings: &Settings,
) -> Result<Allowlist> {
    if network != Network::Restricted {
        if let Some(first) = options.allow.first() {
            return Err(Error::usage(format!(
                "--allow {first} is for `network: restricted`, and this sandbox's network is {}",
                network.as_str()
            ))
            .hint("add --network restricted, or drop --allow"));
        }
        return Ok(Allowlist::default());
    }
    let mut all: Vec<Pattern> = template.template.network_allow.clone();
    if let Some(file) = user_allow_file(settings) {
        all.extend(read_allow_file(&file)?);
    }
    all.extend(options.allow.iter().cloned());
    // A host whose key the proxy sets is reached over HTTPS (added when no
    // entry allows it yet).
    for host in template.template.inject.keys() {
        let host_name = crate::egress::policy::Host::Name(host.clone());
        if Allowlist(all.clone()).check(&host_name, 443).is_none() {
            all.extend(format!("{host}:443").parse::<Pattern>());
        }
    }
    let mut seen = std::collections::HashSet::new();
    all.retain(|p| seen.insert(p.to_string()));
    Ok(Allowlist(all))
}

/// The template's `inject` rules whose secrets were given (a template with a
/// login may run without them), under `network: restricted` only: on another
/// network no proxy stands between the agent and the host, so the agent gets
/// the key itself, and `warnings` says so.
pub(crate) fn inject_rules(
    template: &template::Resolved,
    options: &crate::record::UpOptions,
    network: Network,
    warnings: &mut Vec<String>,
) -> Vec<InjectRule> {
    let given = |secret: &str| options.secrets.iter().any(|s| s.name == secret);
    let rules: Vec<InjectRule> = template
        .template
        .inject
        .iter()
        .filter(|(_, spec)| given(&spec.secret))
        .map(|(host, spec)| InjectRule {
            host: host.clone(),
            header: spec.header.clone(),
            secret: spec.secret.clone(),
            prefix: spec.prefix.clone(),
        })
        .collect();
    if network == Network::Restricted || rules.is_empty() {
        return rules;
    }
    let names: Vec<&str> = rules.iter().map(|r| r.secret.as_str()).collect();
    warnings.push(format!(
        "template {} has the egress proxy set the key {} for the agent under `network: restricted`; on network {} the agent holds the key itself",
        template.name,
        names.join(", "),
        network.as_str()
    ));
    Vec::new()
}

/// The environment that points the agent's TLS at the bundle holding
/// forage's CA, where the template did not set it.
fn trust_env(env: &mut Vec<String>) {
    let set = |env: &Vec<String>, var: &str| env.iter().any(|kv| kv.split('=').next() == Some(var));
    for var in ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"] {
        if !set(env, var) {
            env.push(format!("{var}={}", inject::BUNDLE_INSIDE));
        }
    }
    if !set(env, "NODE_EXTRA_CA_CERTS") {
        env.push(format!("NODE_EXTRA_CA_CERTS={}", inject::CA_INSIDE));
    }
}

/// A short name for a FORAGE_HOME, for the engine's object names.
fn home_id(label: &str) -> String {
    let digest = Sha256::digest(label.as_bytes());
    digest[..6].iter().map(|b| format!("{b:02x}")).collect()
}

/// The egress proxy's container, and its outside network, of a FORAGE_HOME.
pub fn proxy_container(home_label: &str) -> String {
    format!("forage-egress-{}", home_id(home_label))
}

pub fn outside_network(home_label: &str) -> String {
    format!("forage-egress-{}-out", home_id(home_label))
}

/// A sandbox's own network.
pub fn sandbox_network(name: &SandboxName) -> String {
    format!("{}-net", name.container())
}

/// `spec` attached to the sandbox's network (when it has one), with the proxy
/// in its environment: what `up` and `reset` create.
pub(crate) fn attach(mut spec: ContainerSpec, record: &Record) -> ContainerSpec {
    let Some(egress) = &record.egress else { return spec };
    let proxy = format!("http://{}:{PROXY_PORT}", egress.proxy_address);
    const VARS: [&str; 5] = ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY"];
    spec.env.retain(|kv| !VARS.iter().any(|v| kv.split('=').next() == Some(*v)) && !kv.starts_with("no_proxy="));
    for var in &VARS[..4] {
        spec.env.push(format!("{var}={proxy}"));
    }
    spec.env.push("NO_PROXY=localhost,127.0.0.1".into());
    spec.env.push("no_proxy=localhost,127.0.0.1".into());
    if !egress.inject.is_empty() {
        trust_env(&mut spec.env);
    }
    spec.egress = Some(EgressAttachment {
        network: egress.network.clone(),
        address: egress.sandbox_address,
        proxy: egress.proxy_address,
    });
    spec
}

impl<R: Runtime> Engine<R> {
    /// `up`'s step for `network: restricted`: the sandbox's network (journaled
    /// first), then the proxy joined to it and the map naming it.
    pub(crate) async fn make_egress(
        &self,
        record: &mut Record,
        allow: Allowlist,
        inject: Vec<InjectRule>,
    ) -> Result<()> {
        let network = sandbox_network(&record.name);
        self.step(&format!("making network {network}"));
        self.begin(record, Step::Network { name: network.clone() })?;
        let labels = HashMap::from([
            (LABEL_HOME.to_owned(), self.home.label()),
            (LABEL_SANDBOX.to_owned(), record.name.to_string()),
            (LABEL_EGRESS.to_owned(), "sandbox-network".to_owned()),
        ]);
        let (mut made, mut refused) = (None, Vec::new());
        // Another `up` may take the subnet picked between the listing and the
        // creation, and a network being removed may still hold its subnet
        // (unlisted): the engine refuses the overlap, and that subnet is
        // skipped from then on.
        for _ in 0..32 {
            let mut used = self.runtime.used_subnets().await?;
            used.extend_from_slice(&refused);
            let Some(subnet) = subnet::free(SANDBOX_RANGE, SANDBOX_SUBNET_BITS, &used).next() else { break };
            let spec = NetworkSpec { name: network.clone(), subnet, internal: true, labels: labels.clone() };
            let created = match self.runtime.create_network(&spec).await {
                // A network of that name is someone else's: never undo it.
                Err(e) if e.kind() == crate::error::ErrorKind::Conflict => {
                    record.journal.pop();
                    self.home.save(record)?;
                    return Err(e);
                }
                other => other?,
            };
            if created {
                made = Some(subnet);
                break;
            }
            tracing::debug!("the engine refused subnet {subnet} for {network}");
            refused.push(subnet);
        }
        let Some(subnet) = made else {
            return Err(Error::other(format!(
                "no free /{SANDBOX_SUBNET_BITS} found in {}/{} for the sandbox's network",
                SANDBOX_RANGE.0, SANDBOX_RANGE.1
            ))
            .hint("remove restricted sandboxes you no longer need (`forage-ctl down`), or networks left behind (`forage-ctl gc`)"));
        };
        record.egress = Some(EgressRecord {
            network,
            subnet: subnet.to_string(),
            proxy_address: subnet.host(PROXY_HOST),
            sandbox_address: subnet.host(SANDBOX_HOST),
            allow,
            inject,
        });
        self.home.save(record)?;
        self.write_injected_keys(record).await?;
        self.join_proxy(record).await?;
        self.checkpoint(Step::Network { name: String::new() }.checkpoint()).await
    }

    /// Brings the proxy up (made afresh: joined again to every restricted
    /// sandbox's network), joins it to `record`'s and rewrites the map: at
    /// `up`, and before every start (a proxy removed by hand comes back).
    pub(crate) async fn join_proxy(&self, record: &Record) -> Result<()> {
        let Some(egress) = &record.egress else { return Ok(()) };
        let default_network = self.runtime.default_network_subnets().await?;
        let _lock = self.egress_lock().await?;
        let proxy = proxy_container(&self.home.label());
        if self.runtime.ensure_proxy(&self.proxy_spec()?, self.progress.as_ref()).await? == ProxyState::Made {
            let (records, _) = self.home.load_all()?;
            for other in records.iter().filter(|r| r.name != record.name) {
                let Some(e) = &other.egress else { continue };
                if let Err(err) = self.runtime.connect_network(&e.network, &proxy, e.proxy_address).await {
                    tracing::warn!("joining the egress proxy to sandbox {}'s network: {err}", other.name);
                }
            }
        }
        self.runtime.connect_network(&egress.network, &proxy, egress.proxy_address).await?;
        self.write_egress_map(None, &default_network)
    }

    /// The proxy's copy of the sandbox's injected keys (read from the
    /// private copies `copy_secrets` made), its CA and the host's roots.
    async fn write_injected_keys(&self, record: &Record) -> Result<()> {
        let Some(egress) = record.egress.as_ref().filter(|e| !e.inject.is_empty()) else { return Ok(()) };
        let _lock = self.egress_lock().await?;
        let policy = self.egress_dir().join("policy");
        std::fs::create_dir_all(&policy).map_err(|e| Error::other(format!("making {}: {e}", policy.display())))?;
        let secrets = self.home.secrets_dir().join(record.name.as_str());
        let mut keys = Vec::new();
        for rule in &egress.inject {
            let value = std::fs::read(super::secrets::injected_path(&secrets, &rule.secret))
                .map_err(|e| Error::other(format!("reading the copy of secret {:?}: {e}", rule.secret)))?;
            let value = inject::header_value(&rule.secret, &value).map_err(Error::usage)?;
            keys.push(inject::Key {
                host: rule.host.clone(),
                header: rule.header.clone(),
                value: format!("{}{value}", rule.prefix),
            });
        }
        let fail =
            |e: std::io::Error| Error::other(format!("writing the egress proxy's keys in {}: {e}", policy.display()));
        inject::ensure_ca(&policy).map_err(fail)?;
        inject::copy_upstream_roots(&policy, &self.settings.trusted_roots()).map_err(Error::usage)?;
        inject::write_keys(&policy, record.name.as_str(), &keys).map_err(fail)
    }

    /// Gives a new container of `record` (`up`, `reset`) forage's CA: alone,
    /// and added to the image's own bundle, which it replaces.
    pub(crate) async fn give_egress_trust(&self, record: &Record) -> Result<()> {
        if record.egress.as_ref().is_none_or(|e| e.inject.is_empty()) {
            return Ok(());
        }
        let policy = self.egress_dir().join("policy");
        let ca = inject::ensure_ca(&policy).map_err(|e| Error::other(format!("reading forage's CA: {e}")))?;
        let image_bundle = self.image_bundle(&record.container).await?;
        let mut files = vec![(inject::CA_INSIDE, ca.clone().into_bytes())];
        let mut bundle = image_bundle.clone().unwrap_or_default();
        if !bundle.is_empty() && !bundle.ends_with(b"\n") {
            bundle.push(b'\n');
        }
        bundle.extend_from_slice(ca.as_bytes());
        files.push((inject::BUNDLE_INSIDE, bundle.clone()));
        if image_bundle.is_some() {
            files.push((inject::SYSTEM_BUNDLE, bundle));
        }
        let tar = trust_archive(&files).map_err(|e| Error::other(format!("packing forage's CA: {e}")))?;
        self.runtime.upload(&record.container, "/", tar).await
    }

    /// The image's CA bundle, if it has one: a regular file, bounded. A
    /// symlink to an absolute path is followed once (Fedora's points into
    /// /etc/pki), as the image's own TLS would.
    async fn image_bundle(&self, container: &str) -> Result<Option<Vec<u8>>> {
        let mut path = inject::SYSTEM_BUNDLE.to_owned();
        for _ in 0..2 {
            match self.bundle_entry(container, &path).await? {
                Some(BundleEntry::File(bytes)) => return Ok(Some(bytes)),
                Some(BundleEntry::Link(target)) if target.starts_with('/') => path = target,
                _ => return Ok(None),
            }
        }
        Ok(None)
    }

    /// What is at `path` in the (created) container: a file's bytes, or a
    /// symlink's target; nothing else.
    async fn bundle_entry(&self, container: &str, path: &str) -> Result<Option<BundleEntry>> {
        use crate::runtime::Download;
        let Download::Archive(archive) = self.runtime.download(container, "/", path, inject::MAX_BUNDLE).await? else {
            return Ok(None);
        };
        let unreadable = |e: std::io::Error| Error::other(format!("reading the image's CA bundle {path}: {e}"));
        let mut tar = tar::Archive::new(archive.as_slice());
        let Some(entry) = tar.entries().map_err(unreadable)?.next() else { return Ok(None) };
        let mut entry = entry.map_err(unreadable)?;
        let kind = entry.header().entry_type();
        if kind.is_file() {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut bytes).map_err(unreadable)?;
            return Ok(Some(BundleEntry::File(bytes)));
        }
        if kind.is_symlink() {
            let target = entry.link_name().map_err(unreadable)?;
            return Ok(target.and_then(|t| t.to_str().map(|t| BundleEntry::Link(t.to_owned()))));
        }
        Ok(None)
    }

    /// Undoes `Step::Network`: the map first (no connection is taken for the
    /// sandbox any more), then its keys and the network.
    pub(crate) async fn remove_egress(&self, record: &Record, network: &str) -> Result<()> {
        {
            let default_network = self.runtime.default_network_subnets().await?;
            let _lock = self.egress_lock().await?;
            self.write_egress_map(Some(&record.name), &default_network)?;
            let policy = self.egress_dir().join("policy");
            inject::remove_keys(&policy, record.name.as_str()).map_err(|e| {
                Error::other(format!("removing sandbox {}'s keys in {}: {e}", record.name, policy.display()))
            })?;
        }
        self.runtime.remove_network(network).await
    }

    async fn egress_lock(&self) -> Result<crate::store::Lock> {
        let home = self.home.clone();
        super::blocking(move || home.lock_state("egress")).await
    }

    fn egress_dir(&self) -> PathBuf {
        self.home.root().join("egress")
    }

    /// The decision log's directory (the proxy writes it).
    pub fn egress_log_dir(&self) -> PathBuf {
        self.egress_dir().join("log")
    }

    /// Rewrites the map from the records (every restricted sandbox not being
    /// removed, but `leaving`), with the engine's default network refused.
    /// The caller holds the egress lock.
    fn write_egress_map(&self, leaving: Option<&SandboxName>, default_network: &[Subnet]) -> Result<()> {
        let (records, _) = self.home.load_all()?;
        let sandboxes = records
            .into_iter()
            .filter(|r| r.state != RecordState::Removing && Some(&r.name) != leaving)
            .filter_map(|r| {
                let e = r.egress?;
                Some(Entry {
                    name: r.name.to_string(),
                    proxy_ip: e.proxy_address,
                    sandbox_ip: e.sandbox_address,
                    allow: e.allow,
                    inject: e.inject.into_iter().map(|r| r.host).collect(),
                })
            })
            .collect();
        let dir = self.egress_dir().join("policy");
        let refused = default_network.iter().map(Subnet::to_string).collect();
        EgressMap { sandboxes, refused }
            .write(&dir)
            .map_err(|e| Error::other(format!("writing the egress map in {}: {e}", dir.display())))
    }

    /// The proxy's container: forage-ctl itself (this very binary, with its
    /// shared libraries, in an image built offline), serving the map.
    fn proxy_spec(&self) -> Result<ProxySpec> {
        let exe = std::env::current_exe().map_err(|e| Error::other(format!("finding forage-ctl's own binary: {e}")))?;
        let (Some(dir), Some(program)) = (exe.parent(), exe.file_name().and_then(|n| n.to_str())) else {
            return Err(Error::other(format!("forage-ctl's own binary {} has no name", exe.display())));
        };
        let program = program.to_owned();
        let (policy, log) = (self.egress_dir().join("policy"), self.egress_log_dir());
        for d in [&policy, &log] {
            std::fs::create_dir_all(d).map_err(|e| Error::other(format!("making {}: {e}", d.display())))?;
        }
        let label = self.home.label();
        Ok(ProxySpec {
            container: proxy_container(&label),
            outside: outside_network(&label),
            outside_labels: HashMap::from([
                (LABEL_EGRESS_HOME.to_owned(), label.clone()),
                (LABEL_EGRESS.to_owned(), "outside".to_owned()),
            ]),
            image: ImageSource::Host {
                template: "egress-proxy".into(),
                spec: HostImage { tools: vec![program.clone()], require: vec![program.clone()] },
                tool_dirs: vec![dir.to_path_buf()],
                identity: self.identity,
            },
            labels: HashMap::from([
                (LABEL_EGRESS_HOME.to_owned(), label),
                (LABEL_EGRESS.to_owned(), "proxy".to_owned()),
            ]),
            mounts: vec![
                Mount { source: policy, target: POLICY_INSIDE.into(), read_only: true, overlay: None },
                Mount { source: log, target: LOG_INSIDE.into(), read_only: false, overlay: None },
            ],
            command: vec![
                program,
                "egress-proxy".into(),
                "--listen".into(),
                format!("0.0.0.0:{PROXY_PORT}"),
                "--dns".into(),
                format!("0.0.0.0:{}", crate::egress::DNS_PORT),
                "--policy".into(),
                POLICY_INSIDE.into(),
                "--log".into(),
                LOG_INSIDE.into(),
            ],
        })
    }

    /// `logs --network`: what the sandbox tried to reach since it was made,
    /// per destination, from the proxy's log.
    pub fn network_log(&self, name: &SandboxName) -> Result<Vec<crate::egress::log::Destination>> {
        let record = self.record(name)?;
        if record.egress.is_none() {
            return Err(Error::usage(format!(
                "sandbox {name} is not on `network: restricted`, so no proxy sees its traffic and there is no network log"
            ))
            .hint_run("{command} makes a restricted one", ["up", "NAME", "--network", "restricted"]));
        }
        let dir = self.egress_log_dir();
        crate::egress::log::summary(&dir, name.as_str(), record.created_at)
            .map_err(|e| Error::other(format!("reading the egress log in {}: {e}", dir.display())))
    }

    /// `gc`: sandbox networks of this FORAGE_HOME that no record owns, and
    /// the proxy when no restricted sandbox is left.
    pub(crate) async fn gc_egress(
        &self,
        had_record: impl Fn(&SandboxName) -> bool,
        force: bool,
    ) -> Result<Vec<super::gc::Finding>> {
        use super::gc::{Finding, Kind};
        let label = self.home.label();
        let mut findings = Vec::new();
        let networks = self
            .runtime
            .networks(&[format!("{LABEL_HOME}={label}"), format!("{LABEL_EGRESS}=sandbox-network")])
            .await?;
        for (network, labels) in networks {
            let Some(Ok(name)) = labels.get(LABEL_SANDBOX).map(|n| SandboxName::parse(n)) else { continue };
            let Some(_lock) = self.lock_if_unowned(&name, had_record(&name))? else { continue };
            let why = format!("the network of sandbox {name}, which has no record");
            let finding = Finding::new(Kind::OrphanNetwork, network.clone(), why, "remove the network and its keys");
            let policy = self.egress_dir().join("policy");
            let remove = async {
                inject::remove_keys(&policy, name.as_str()).map_err(|e| Error::other(format!("removing keys: {e}")))?;
                self.runtime.remove_network(&network).await
            };
            findings.push(finding.act(force, remove).await);
        }
        let (proxy, outside) = (proxy_container(&label), outside_network(&label));
        if !self.proxy_exists().await? {
            return Ok(findings);
        }
        let (records, bad) = self.home.load_all()?;
        if records.iter().any(|r| r.egress.is_some()) || !bad.is_empty() {
            return Ok(findings);
        }
        let finding = Finding::new(
            Kind::UnusedProxy,
            proxy,
            "no restricted sandbox is left for this egress proxy",
            format!("remove it, its network {outside} and its log"),
        );
        findings.push(finding.act(force, async { self.remove_proxy_if_unused().await.map(|_| ()) }).await);
        Ok(findings)
    }

    /// The proxy's container or its outside network exists.
    async fn proxy_exists(&self) -> Result<bool> {
        let label = self.home.label();
        let outside = [format!("{LABEL_EGRESS_HOME}={label}"), format!("{LABEL_EGRESS}=outside")];
        Ok(self.runtime.container_exists(&proxy_container(&label)).await?
            || !self.runtime.networks(&outside).await?.is_empty())
    }

    /// Removes the proxy, its outside network and FORAGE_HOME/egress when no
    /// restricted sandbox (nor a record forage cannot read) is left, under
    /// the egress lock (an `up` bringing it up waits): by `gc --force`, and by
    /// the rollback of the `up` that brought it up. `true` if it did.
    pub(crate) async fn remove_proxy_if_unused(&self) -> Result<bool> {
        let _lock = self.egress_lock().await?;
        let (records, bad) = self.home.load_all()?;
        if records.iter().any(|r| r.egress.is_some()) || !bad.is_empty() {
            return Ok(false);
        }
        let label = self.home.label();
        self.runtime.remove_proxy(&proxy_container(&label), &outside_network(&label)).await?;
        let dir = self.egress_dir();
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(true),
            Err(e) => Err(Error::other(format!("removing {}: {e}", dir.display()))),
        }
    }
}

/// What the image has where a CA bundle is looked for.
enum BundleEntry {
    File(Vec<u8>),
    Link(String),
}

/// A tar of `files` (absolute paths), readable by all, with their directories.
fn trust_archive(files: &[(&str, Vec<u8>)]) -> std::io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    let mut dirs = std::collections::BTreeSet::new();
    for (path, _) in files {
        let mut at = std::path::Path::new(path.trim_start_matches('/'));
        while let Some(parent) = at.parent().filter(|p| !p.as_os_str().is_empty()) {
            dirs.insert(parent.to_path_buf());
            at = parent;
        }
    }
    for dir in dirs {
        let mut header = tar::Header::new_gnu();
        header.set_entry_type(tar::EntryType::Directory);
        header.set_mode(0o755);
        header.set_size(0);
        tar.append_data(&mut header, &dir, std::io::empty())?;
    }
    for (path, bytes) in files {
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o644);
        header.set_size(bytes.len() as u64);
        tar.append_data(&mut header, path.trim_start_matches('/'), bytes.as_slice())?;
    }
    tar.into_inner()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allow_file_takes_one_entry_a_line_and_names_a_bad_one() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("allow");
        assert!(read_allow_file(&file).unwrap().is_empty());
        std::fs::write(&file, "# models\napi.anthropic.com\n\n*.githubusercontent.com  # raw files\n").unwrap();
        let got: Vec<String> = read_allow_file(&file).unwrap().iter().map(ToString::to_string).collect();
        assert_eq!(got, ["api.anthropic.com", "*.githubusercontent.com"]);
        std::fs::write(&file, "ok.test\nnot a host\n").unwrap();
        let err = read_allow_file(&file).unwrap_err().to_string();
        assert!(err.contains("line 2") && err.contains("\"not a host\""), "{err}");
    }

    #[test]
    fn egress_names_are_per_home_and_per_sandbox() {
        assert_ne!(proxy_container("/a"), proxy_container("/b"));
        assert!(proxy_container("/a").starts_with("forage-egress-"));
        assert_eq!(outside_network("/a"), format!("{}-out", proxy_container("/a")));
    }
}
