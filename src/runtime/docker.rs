//! The runtime over the Docker Engine API (bollard). Never the docker CLI.

use std::collections::HashMap;
use std::io::Read;
use std::path::PathBuf;

use bollard::models::{ContainerCreateBody, HostConfig, Mount as DockerMount, MountType};
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptions, DownloadFromContainerOptions, InspectContainerOptions,
    ListContainersOptions, LogsOptions, RemoveContainerOptions, StopContainerOptions, UploadToContainerOptions,
};
use bytes::Bytes;
use futures_util::{StreamExt, TryStreamExt};

use super::engine_choice::EngineInfo;
use super::image::{Build, Entry};
use super::unreachable::{unreachable, DEFAULT_HOST};
use super::{
    BaseImage, ContainerDetails, ContainerSpec, ContainerState, ContainerSummary, ExecOptions, Identity, ImageSource,
    Mount, Network, OutputStream, ReadyImage, Runtime, Session, SessionId, StartWatch, AGENT_HOME, WORKSPACE_TARGET,
};
use crate::error::{is_docker_conflict, is_docker_not_found, Error, Result};
use crate::names::{LABEL_HOME, LABEL_SANDBOX};
use crate::progress::Progress;

/// How many times (every 100 ms) an attach or inspect that meets Podman still
/// cleaning up after a stop is tried again: 30 seconds, for a loaded machine.
const ATTACH_TRIES: u32 = 300;

/// Podman's answers to an attach while its cleanup after a stop still holds
/// the container (Docker answers neither).
fn podman_cleaning_up(err: &bollard::errors::Error) -> bool {
    matches!(err, bollard::errors::Error::DockerResponseServerError { status_code: 500, message }
        if message.contains("container state improper") || message.contains("container's attach socket"))
}

/// `inspect_container`, waiting out Podman's "stopped" state (between a stop
/// or an exit and Podman's cleanup, a moment), which the Docker API has no
/// name for and the client cannot read ("unknown variant `stopped`").
async fn inspect_settled(
    api: &bollard::Docker,
    name: &str,
) -> std::result::Result<bollard::models::ContainerInspectResponse, bollard::errors::Error> {
    let mut tries = 0;
    loop {
        match api.inspect_container(name, None::<InspectContainerOptions>).await {
            Err(e) if e.to_string().contains("unknown variant `stopped`") && tries < ATTACH_TRIES => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            answer => return answer,
        }
    }
}

/// Go's `os.ModeSymlink`, in the modes the engine's path stat reports.
const GO_MODE_SYMLINK: u32 = 1 << 27;

/// The lowest Engine API this crate is tested against (Docker 20.10).
const MIN_API: (usize, usize) = (1, 41);

/// The Docker engine (or Podman, through its Docker-compatible API),
/// connected to on first use (so that everything that can be checked without
/// it is checked first, and a command that needs no engine never asks for
/// one). Clones share the connection.
#[derive(Clone)]
pub struct Docker {
    /// The sockets to try, in order (engine_choice::candidates); the first
    /// that answers is used.
    hosts: Vec<String>,
    /// Where a seccomp profile file goes for an engine that wants a path.
    seccomp_dir: Option<PathBuf>,
    api: std::sync::Arc<tokio::sync::OnceCell<(bollard::Docker, EngineInfo)>>,
}

impl Docker {
    /// The engine named by `docker_host` (DOCKER_HOST; default the local socket).
    pub fn new(docker_host: Option<&str>) -> Self {
        Self::trying(vec![docker_host.unwrap_or(DEFAULT_HOST).to_owned()], None)
    }

    /// The first of `hosts` that answers; `seccomp_dir` is where a Podman
    /// engine is given forage's seccomp profile as a file.
    pub fn trying(hosts: Vec<String>, seccomp_dir: Option<PathBuf>) -> Self {
        Docker { hosts, seccomp_dir, api: Default::default() }
    }

    /// The connection, made the first time: agreeing on an API version with the
    /// engine, so newer and older engines both work.
    pub(crate) async fn api(&self) -> Result<bollard::Docker> {
        Ok(self.connected().await?.0.clone())
    }

    /// Which engine answered, and where.
    pub async fn info(&self) -> Result<EngineInfo> {
        Ok(self.connected().await?.1.clone())
    }

    async fn connected(&self) -> Result<&(bollard::Docker, EngineInfo)> {
        self.api
            .get_or_try_init(|| async {
                let mut first_error = None;
                for host in &self.hosts {
                    match connect(host).await {
                        Ok(connected) => {
                            tracing::info!("engine: {}", connected.1.describe());
                            crate::error::name_the_engine(connected.1.podman.then(|| {
                                super::engine_choice::socket_path(host).map_or_else(
                                    || "check that the Podman service is running".to_owned(),
                                    super::unreachable::podman_start,
                                )
                            }));
                            return Ok(connected);
                        }
                        Err(e) => {
                            tracing::info!("no engine at {host}: {e}");
                            first_error.get_or_insert(e);
                        }
                    }
                }
                // The first candidate's error is the one to fix (DOCKER_HOST's,
                // the chosen engine's, or Docker's before Podman's).
                let error = first_error.unwrap_or_else(|| Error::engine("no engine to try"));
                // Docker was tried first and Podman after it: say how to use Podman too.
                let docker_first = self.hosts.first().is_some_and(|h| h == DEFAULT_HOST);
                match self
                    .hosts
                    .iter()
                    .skip(1)
                    .find_map(|h| super::engine_choice::socket_path(h))
                    .filter(|_| docker_first)
                {
                    Some(podman) => Err(error.hint(format!(
                        "or use Podman: {} (forage tries {} when no Docker engine answers)",
                        super::unreachable::podman_start(podman),
                        podman.display()
                    ))),
                    None => Err(error),
                }
            })
            .await
    }

    /// Creates the container `name` from `config`: a name taken is a
    /// conflict; Podman's keep-id hiccup is tried again, a few times. On
    /// rootless Podman one create runs at a time (see `create_lock`).
    pub(super) async fn create_container(
        &self,
        name: &str,
        config: ContainerCreateBody,
        info: &EngineInfo,
    ) -> Result<()> {
        let options = CreateContainerOptions { name: Some(name.to_owned()), ..Default::default() };
        let api = self.api().await?;
        let podman = info.podman;
        let mut hiccups = 0;
        loop {
            let lock = super::create_lock::for_create(info).await;
            let created = api.create_container(Some(options.clone()), config.clone()).await;
            drop(lock);
            match created {
                Ok(_) => return Ok(()),
                Err(e) if is_docker_conflict(&e) => {
                    return Err(Error::conflict(format!(
                        "a container named {name} already exists; remove it or pick another sandbox name"
                    )))
                }
                Err(e) if podman && hiccups < KEEP_ID_RETRIES && is_podmans_keep_id_hiccup(&e) => {
                    hiccups += 1;
                    tracing::debug!("Podman's keep-id hiccup creating {name} ({e}); trying again");
                    tokio::time::sleep(std::time::Duration::from_millis(200 * u64::from(hiccups))).await;
                }
                Err(e) => return Err(Error::docker(format!("creating container {name}"), e)),
            }
        }
    }

    /// The `seccomp=` security option. Docker takes the profile itself;
    /// Podman's compat API takes a file path (4.3 opens the value as a file),
    /// so for Podman the profile is written to a file it can read.
    fn seccomp_option(&self, info: &EngineInfo) -> Result<String> {
        let profile = super::seccomp::profile();
        if !info.podman {
            return Ok(format!("seccomp={profile}"));
        }
        let dir = self.seccomp_dir.clone().unwrap_or_else(std::env::temp_dir);
        let path = super::engine_choice::seccomp_file(&dir, &profile)?;
        Ok(format!("seccomp={}", path.display()))
    }
}

/// How often a create that rootless Podman failed with its keep-id hiccup is tried again.
const KEEP_ID_RETRIES: u32 = 5;

/// Rootless Podman (4.3), creating containers with `keep-id` at the same
/// time, now and then fails one with 500 "keep-id requires additional UIDs or
/// GIDs defined in /etc/subuid and /etc/subgid … %!w(<nil>)": a nil error
/// while it reads the user's subordinate ids, which are there. Nothing was
/// made; the same create a moment later succeeds.
fn is_podmans_keep_id_hiccup(e: &bollard::errors::Error) -> bool {
    matches!(e, bollard::errors::Error::DockerResponseServerError { status_code: 500, message }
        if message.contains("keep-id requires additional UIDs or GIDs"))
}

async fn connect(host: &str) -> Result<(bollard::Docker, EngineInfo)> {
    let unreachable = |e: bollard::errors::Error| unreachable(host, &e);
    let client = |version: &bollard::ClientVersion| {
        if host.starts_with("unix://") {
            bollard::Docker::connect_with_unix(host, 120, version)
        } else {
            bollard::Docker::connect_with_http(host, 120, version)
        }
        .map_err(unreachable)
    };
    // One `/version` (unversioned) both names the engine and settles the
    // API version, as bollard's `negotiate_version` would with a second one:
    // each costs the engine a few milliseconds on every command.
    let version = client(bollard::API_DEFAULT_VERSION)?.version().await.map_err(unreachable)?;
    let (major, minor) = negotiated(version.api_version.as_deref()).ok_or_else(|| {
        Error::engine(format!("the engine at {host} named no API version it speaks ({:?})", version.api_version))
    })?;
    if (major, minor) < MIN_API {
        return Err(Error::engine(format!(
            "the Docker engine at {host} speaks API {major}.{minor}; forage needs {}.{} or newer (Docker 20.10+)",
            MIN_API.0, MIN_API.1
        )));
    }
    let api = client(&bollard::ClientVersion { major_version: major, minor_version: minor })?;
    let info = EngineInfo::new(host, &version);
    Ok((api, info))
}

/// The API version to speak: the engine's (`"1.41"`), or bollard's own when
/// that is older.
fn negotiated(engine: Option<&str>) -> Option<(usize, usize)> {
    let (major, minor) = engine?.trim().split_once('.')?;
    let engine = (major.parse().ok()?, minor.parse().ok()?);
    let ours = (bollard::API_DEFAULT_VERSION.major_version, bollard::API_DEFAULT_VERSION.minor_version);
    Some(engine.min(ours))
}

impl Docker {
    /// Waits (up to a minute) until the engine no longer knows container `name`.
    async fn wait_until_gone(&self, name: &str) -> Result<()> {
        for _ in 0..600 {
            match inspect_settled(&self.api().await?, name).await {
                Err(e) if is_docker_not_found(&e) => return Ok(()),
                Err(e) => return Err(Error::docker(format!("waiting for container {name} to be removed"), e)),
                Ok(_) => tokio::time::sleep(std::time::Duration::from_millis(100)).await,
            }
        }
        Err(Error::other(format!(
            "container {name} is still being removed after a minute; run the command again once `docker ps -a` no longer shows it"
        )))
    }

    /// Reads one file out of a (possibly stopped) container; `None` if it is absent.
    async fn read_file(&self, container: &str, path: &str) -> Result<Option<String>> {
        let options = DownloadFromContainerOptions { path: path.to_owned() };
        let stream = self.api().await?.download_from_container(container, Some(options));
        let chunks: Vec<Bytes> = match stream.try_collect().await {
            Ok(c) => c,
            Err(e) if is_docker_not_found(&e) => return Ok(None),
            Err(e) => return Err(Error::docker(format!("reading {path} in {container}"), e)),
        };
        let tar_bytes: Vec<u8> = chunks.concat();
        let mut archive = tar::Archive::new(tar_bytes.as_slice());
        let entries = archive.entries().map_err(Error::other)?;
        for entry in entries {
            let mut entry = entry.map_err(Error::other)?;
            if entry.header().entry_type().is_file() {
                let mut text = String::new();
                entry.read_to_string(&mut text).map_err(Error::other)?;
                return Ok(Some(text));
            }
        }
        Ok(None)
    }

    /// Gives the invoking user a passwd and group entry (tools such as git, ssh and
    /// id need one) and a writable HOME, merged into whatever the image ships.
    async fn install_identity(&self, container: &str, who: Identity) -> Result<()> {
        let passwd = self.read_file(container, "/etc/passwd").await?.unwrap_or_default();
        let group = self.read_file(container, "/etc/group").await?.unwrap_or_default();
        let (passwd, group) = merge_identity(&passwd, &group, who);

        let mut tar = tar::Builder::new(Vec::new());
        let home = Entry { owner: (who.uid, who.gid), ..Entry::dir(0o755) };
        Entry::file(0o644)
            .append(&mut tar, "etc/passwd", passwd.as_bytes())
            .and_then(|()| Entry::file(0o644).append(&mut tar, "etc/group", group.as_bytes()))
            .and_then(|()| home.append(&mut tar, &AGENT_HOME[1..], &[]))
            .map_err(Error::other)?;
        let bytes = tar.into_inner().map_err(Error::other)?;
        self.api()
            .await?
            .upload_to_container(
                container,
                Some(UploadToContainerOptions { path: "/".into(), ..Default::default() }),
                bollard::body_full(bytes.into()),
            )
            .await
            .map_err(|e| Error::docker(format!("preparing the user in {container}"), e))
    }
}

/// Adds `agent` entries for `who` unless the image already has that uid / gid.
pub(crate) fn merge_identity(passwd: &str, group: &str, who: Identity) -> (String, String) {
    let has_id =
        |db: &str, id: u32| db.lines().any(|l| l.split(':').nth(2).and_then(|f| f.parse::<u32>().ok()) == Some(id));
    let has_name = |db: &str, name: &str| db.lines().any(|l| l.split(':').next() == Some(name));
    let pick_name = |db: &str| {
        if has_name(db, "agent") {
            "forage-agent"
        } else {
            "agent"
        }
    };
    let with_newline = |s: &str| {
        let mut s = s.to_owned();
        if !s.is_empty() && !s.ends_with('\n') {
            s.push('\n');
        }
        s
    };
    let mut passwd_out = with_newline(passwd);
    if !has_id(passwd, who.uid) {
        let name = pick_name(passwd);
        passwd_out.push_str(&format!("{name}:x:{}:{}:forage agent:{AGENT_HOME}:/bin/sh\n", who.uid, who.gid));
    }
    let mut group_out = with_newline(group);
    if !has_id(group, who.gid) {
        let name = pick_name(group);
        group_out.push_str(&format!("{name}:x:{}:\n", who.gid));
    }
    (passwd_out, group_out)
}

/// A restricted sandbox's container on its own network, at the address forage picked.
fn egress_endpoint(e: &super::EgressAttachment) -> bollard::models::NetworkingConfig {
    bollard::models::NetworkingConfig {
        endpoints_config: Some(HashMap::from([(
            e.network.clone(),
            bollard::models::EndpointSettings {
                ipam_config: Some(bollard::models::EndpointIpamConfig {
                    ipv4_address: Some(e.address.to_string()),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )])),
    }
}

pub(crate) fn docker_mount(m: &Mount) -> DockerMount {
    if let Some(overlay) = &m.overlay {
        return overlay_mount(m, overlay);
    }
    DockerMount {
        target: Some(m.target.clone()),
        source: Some(m.source.display().to_string()),
        typ: Some(MountType::BIND),
        read_only: Some(m.read_only),
        ..Default::default()
    }
}

/// An anonymous volume of the `local` driver that the engine mounts as an
/// overlay (measured in docs/adr/0003): removed with the container (`remove`
/// passes `v`). `userxattr` makes the overlay mark opaque directories with
/// `user.overlay.opaque`, which forage (not root) can read in the upper layer.
fn overlay_mount(m: &Mount, overlay: &super::Overlay) -> DockerMount {
    use bollard::models::{MountVolumeOptions, MountVolumeOptionsDriverConfig};
    let options = format!(
        "lowerdir={},upperdir={},workdir={},userxattr",
        overlay.lower.display(),
        m.source.display(),
        overlay.work.display()
    );
    let driver = MountVolumeOptionsDriverConfig {
        name: Some("local".into()),
        options: Some(HashMap::from([
            ("type".to_owned(), "overlay".to_owned()),
            ("device".to_owned(), "overlay".to_owned()),
            ("o".to_owned(), options),
        ])),
    };
    DockerMount {
        target: Some(m.target.clone()),
        typ: Some(MountType::VOLUME),
        read_only: Some(m.read_only),
        volume_options: Some(MountVolumeOptions {
            no_copy: Some(true),
            driver_config: Some(driver),
            labels: Some(HashMap::from([(COW_LABEL.to_owned(), m.source.display().to_string())])),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// On an overlay volume: the upper layer it writes to (`docker volume ls
/// --filter label=forage.cow.upper` finds them; the tests look for leftovers).
pub const COW_LABEL: &str = "forage.cow.upper";

impl Docker {
    /// `reference`, which must be in the engine, ready for `create`.
    async fn ready(&self, reference: String, me: Identity, base: Option<String>) -> Result<ReadyImage> {
        let image = match self.api().await?.inspect_image(&reference).await {
            Ok(image) => image,
            Err(e) if is_docker_not_found(&e) => {
                return Err(Error::not_found(format!(
                    "image {reference:?} is not in the Docker engine; load or build it first (`docker pull {reference}` where a registry is reachable), or use a template with `host_image`"
                )))
            }
            Err(e) => return Err(Error::docker(format!("inspecting image {reference}"), e)),
        };
        let has_identity = image
            .config
            .and_then(|c| c.labels)
            .is_some_and(|l| l.get(super::image::LABEL_IMAGE_IDENTITY) == Some(&format!("{}:{}", me.uid, me.gid)));
        Ok(ReadyImage { reference, has_identity, programs: None, base })
    }
}

impl Docker {
    /// Rootless Podman on a cgroups v1 host (or without cgroup delegation)
    /// creates the container but drops its memory, CPU and process limits,
    /// saying so only in its own log. The agent then runs unbounded; forage
    /// says so on every `up` rather than let the user believe otherwise.
    async fn warn_if_limits_dropped(&self, spec: &ContainerSpec) {
        let Ok(api) = self.api().await else { return };
        let Ok(c) = api.inspect_container(&spec.name, None::<InspectContainerOptions>).await else { return };
        let hc = c.host_config.unwrap_or_default();
        let dropped: Vec<&str> = [
            ("memory", hc.memory.unwrap_or(0) == 0 && spec.memory_bytes > 0),
            ("CPU", hc.nano_cpus.unwrap_or(0) == 0 && spec.nano_cpus > 0),
            ("process", hc.pids_limit.unwrap_or(0) <= 0 && spec.pids > 0),
        ]
        .into_iter()
        .filter_map(|(what, lost)| lost.then_some(what))
        .collect();
        if !dropped.is_empty() {
            tracing::warn!(
                "the Podman engine did not apply the sandbox's {} limits (rootless Podman needs cgroups v2 with the \
                 memory, cpu and pids controllers delegated to your user); the agent runs without them",
                dropped.join(", ")
            );
        }
    }
}

impl Runtime for Docker {
    async fn ping(&self) -> Result<()> {
        self.api().await.map(|_| ())
    }

    async fn ensure_image(&self, source: &ImageSource, progress: &dyn Progress) -> Result<ReadyImage> {
        let me = source.identity();
        let reference = match source {
            ImageSource::Reference { reference, .. } => reference.clone(),
            ImageSource::Host { template, spec, tool_dirs, identity } => {
                // Built for the invoking user: it carries their identity.
                let (reference, tools) = super::image::ensure_host_image(
                    &self.api().await?,
                    template,
                    spec,
                    tool_dirs,
                    *identity,
                    self.info().await?.podman,
                    progress,
                )
                .await?;
                return Ok(ReadyImage { reference, has_identity: true, programs: Some(tools), base: None });
            }
            ImageSource::Build { template, context, base, .. } => {
                let api = self.api().await?;
                let no_args = Default::default();
                let base = match base {
                    None => None,
                    Some(BaseImage::Reference(reference)) => Some(reference.clone()),
                    Some(BaseImage::Build { name, what, context, args }) => {
                        let project = Build { name, what, template: None, context, base: None, args };
                        Some(super::image::ensure_built_image(&api, &project, progress).await?)
                    }
                };
                let what = format!("the image of template {template:?}");
                let agent = Build {
                    name: template,
                    what: &what,
                    template: Some(template),
                    context,
                    base: base.as_deref(),
                    args: &no_args,
                };
                let reference = super::image::ensure_built_image(&api, &agent, progress).await?;
                return self.ready(reference, me, base).await;
            }
        };
        self.ready(reference, me, None).await
    }

    async fn create(&self, spec: &ContainerSpec) -> Result<()> {
        let info = self.info().await?;
        info.check_identity(spec.identity.uid)?;
        info.check_mounts(&spec.mounts)?;
        let host_config = HostConfig {
            mounts: Some(spec.mounts.iter().map(docker_mount).collect()),
            init: Some(true),
            cap_drop: Some(vec!["ALL".into()]),
            security_opt: Some(vec!["no-new-privileges".into(), self.seccomp_option(&info)?]),
            // Rootless Podman maps the container's root to the user and every
            // other uid to a subordinate id, so an agent running as the user's
            // uid would write files the user does not own. keep-id maps the
            // user's own uid inside to theirs outside (Docker has no such mode
            // and needs none: its uids are the host's).
            userns_mode: info.rootless.then(|| "keep-id".to_owned()),
            privileged: Some(false),
            memory: Some(spec.memory_bytes),
            nano_cpus: Some(spec.nano_cpus),
            pids_limit: Some(spec.pids),
            ulimits: info.rlimits(),
            network_mode: Some(match (&spec.egress, spec.network) {
                (Some(egress), _) => egress.network.clone(),
                // Rootless Podman: slirp4netns, its own default, a network of
                // the container alone that needs none of Podman's rootless
                // network namespace (which Podman 4.3 sometimes tears down
                // under its containers when many come and go at once); but
                // a sandbox that publishes ports goes on Podman's default
                // bridge network in that namespace, where its port
                // forwarder can join it (as a restricted sandbox's does).
                (None, Network::Full) if info.rootless && !spec.publishes => "slirp4netns".into(),
                (None, Network::Full) => "bridge".into(),
                // Never `bridge` for want of the sandbox's network.
                (None, Network::None | Network::Restricted) => "none".into(),
            }),
            // Names resolve only through the proxy: the engine's resolver
            // forwards to the proxy's address, which answers NXDOMAIN to all.
            dns: spec.egress.as_ref().map(|e| vec![e.proxy.to_string()]),
            sysctls: spec.egress.as_ref().map(|_| no_ipv6()),
            ..Default::default()
        };
        let networking_config = spec.egress.as_ref().map(egress_endpoint);
        let config = ContainerCreateBody {
            image: Some(spec.image.reference.clone()),
            cmd: Some(spec.command.clone()),
            env: Some(spec.env.clone()),
            labels: Some(spec.labels.clone()),
            user: Some(format!("{}:{}", spec.identity.uid, spec.identity.gid)),
            working_dir: Some(WORKSPACE_TARGET.into()),
            tty: Some(true),
            open_stdin: Some(true),
            stop_signal: Some(spec.stop_signal.clone()),
            stop_timeout: Some(spec.stop_timeout.into()),
            host_config: Some(host_config),
            networking_config,
            ..Default::default()
        };
        self.create_container(&spec.name, config, &info).await?;
        if info.podman {
            self.warn_if_limits_dropped(spec).await;
        }
        if spec.image.has_identity {
            return Ok(());
        }
        self.install_identity(&spec.name, spec.identity).await
    }

    async fn start(&self, name: &str) -> Result<()> {
        self.api()
            .await?
            .start_container(name, None)
            .await
            .map_err(|e| Error::docker(format!("starting container {name}"), e))
    }

    async fn stop(&self, name: &str, timeout_secs: u32) -> Result<()> {
        let options = StopContainerOptions { t: i32::try_from(timeout_secs).ok(), signal: None };
        match self.api().await?.stop_container(name, Some(options)).await {
            Ok(()) => Ok(()),
            // 304: already stopped; 404: already gone.
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 304 | 404, .. }) => Ok(()),
            Err(e) => Err(Error::docker(format!("stopping container {name}"), e)),
        }
    }

    async fn remove(&self, name: &str) -> Result<()> {
        // Docker's forced removal kills the container (SIGKILL). Podman's
        // stops it first, with the stop signal and its timeout, so an agent
        // that `down --discard` (or a rollback) means to end at once would get
        // time to act: kill it first there. Whatever this kill answers (not
        // running, gone), the removal below says what matters.
        if self.info().await?.podman {
            let kill = bollard::query_parameters::KillContainerOptions { signal: "KILL".into() };
            let _ = self.api().await?.kill_container(name, Some(kill)).await;
        }
        let options = RemoveContainerOptions { force: true, v: true, link: false };
        match self.api().await?.remove_container(name, Some(options)).await {
            Ok(()) => Ok(()),
            Err(e) if is_docker_not_found(&e) => Ok(()),
            // 409: another removal is in progress (a concurrent down, or the
            // engine's own). The container must be gone before the caller goes on
            // to delete the workspace it mounts, so wait until it is.
            Err(e) if is_docker_conflict(&e) => self.wait_until_gone(name).await,
            Err(e) => Err(Error::docker(format!("removing container {name}"), e)),
        }
    }

    async fn inspect(&self, name: &str) -> Result<Option<ContainerDetails>> {
        let c = match inspect_settled(&self.api().await?, name).await {
            Ok(c) => c,
            Err(e) if is_docker_not_found(&e) => return Ok(None),
            Err(e) => return Err(Error::docker(format!("inspecting container {name}"), e)),
        };
        let state = c.state.unwrap_or_default();
        let mounts = c
            .mounts
            .unwrap_or_default()
            .into_iter()
            .map(|m| Mount {
                source: m.source.unwrap_or_default().into(),
                target: m.destination.unwrap_or_default(),
                read_only: !m.rw.unwrap_or(true),
                overlay: None,
            })
            .collect();
        let status = state.status.map(|s| ContainerState::parse(s.as_ref())).unwrap_or(ContainerState::Unknown);
        // The engine reports exit code 0 and the year 1 for what has not
        // happened: a running container has no exit code, a new one no start.
        let happened = |time: Option<String>| time.filter(|t| !t.starts_with("0001-"));
        Ok(Some(ContainerDetails {
            id: c.id.unwrap_or_default(),
            state: status,
            exit_code: state.exit_code.filter(|_| status.has_ended()),
            started_at: happened(state.started_at),
            finished_at: happened(state.finished_at).filter(|_| status.has_ended()),
            image: c.config.and_then(|c| c.image).unwrap_or_default(),
            mounts,
        }))
    }

    async fn run_captured(&self, container: &str, command: Vec<String>, identity: Identity) -> Result<(i64, String)> {
        self.exec_captured(container, command, identity).await
    }

    async fn run_to_end(&self, spec: &ContainerSpec) -> Result<(i64, String)> {
        self.remove(&spec.name).await?;
        self.create(spec).await?;
        let ran = async {
            self.start(&spec.name).await?;
            let mut waited = self.api().await?.wait_container(&spec.name, None);
            let code = match waited.next().await {
                Some(Ok(done)) => done.status_code,
                // bollard reports a non-zero exit as an error carrying the code.
                Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => code,
                Some(Err(e)) => return Err(Error::docker(format!("waiting for {}", spec.name), e)),
                None => -1,
            };
            let options = LogsOptions { stdout: true, stderr: true, tail: "all".into(), ..Default::default() };
            let mut logs = self.api().await?.logs(&spec.name, Some(options));
            let mut output = Vec::new();
            while let Some(chunk) = logs.next().await {
                let chunk = chunk.map_err(|e| Error::docker(format!("reading the output of {}", spec.name), e))?;
                super::session::keep_bounded(&mut output, &chunk.into_bytes());
            }
            Ok((code, String::from_utf8_lossy(&output).into_owned()))
        }
        .await;
        let removed = self.remove(&spec.name).await;
        let ran = ran?;
        removed.map(|()| ran)
    }

    async fn watch(&self, container: &str) -> Result<StartWatch> {
        let options = AttachContainerOptions {
            stream: true,
            stdout: true,
            stderr: true,
            stdin: false,
            logs: false,
            detach_keys: None,
        };
        let api = self.api().await?;
        // Podman's `stop` returns while its cleanup still holds the container
        // ("stopped", not yet "exited"), in which state it refuses an attach
        // with 500 "container state improper", or fails it ("failed to connect
        // to container's attach socket"); Docker's stop returns once the
        // container has exited. Wait for Podman's cleanup (seconds at most).
        let mut tries = 0;
        let attached = loop {
            match api.attach_container(container, Some(options.clone())).await {
                Err(e) if podman_cleaning_up(&e) && tries < ATTACH_TRIES => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                attached => break attached.map_err(|e| Error::docker(format!("attaching to {container}"), e))?,
            }
        };
        // An error ends the output like an exit: the caller then asks the engine.
        let output = attached
            .output
            .take_while(|chunk| std::future::ready(chunk.is_ok()))
            .filter_map(|chunk| std::future::ready(chunk.ok().map(|c| c.into_bytes())));
        Ok(StartWatch::new(output))
    }

    async fn exec(&self, container: &str, command: Vec<String>, options: ExecOptions) -> Result<Session> {
        self.exec_session(container, command, options).await
    }

    async fn attach(&self, container: &str) -> Result<Session> {
        self.attach_session(container).await
    }

    async fn resize(&self, session: &SessionId, rows: u16, cols: u16) -> Result<()> {
        self.resize_session(session, rows, cols).await
    }

    async fn exit_code(&self, session: &SessionId) -> Result<Option<i64>> {
        self.session_exit_code(session).await
    }

    fn logs(&self, container: &str, follow: bool, tail: Option<u64>) -> OutputStream {
        self.logs_stream(container, follow, tail)
    }

    async fn last_output(&self, container: &str) -> Result<Option<std::time::SystemTime>> {
        self.last_output_time(container).await
    }

    async fn upload(&self, container: &str, dir: &str, tar: Vec<u8>) -> Result<()> {
        let options = UploadToContainerOptions { path: dir.to_owned(), ..Default::default() };
        self.api()
            .await?
            .upload_to_container(container, Some(options), bollard::body_full(tar.into()))
            .await
            .map_err(|e| Error::docker(format!("copying files into {container}"), e))
    }

    async fn download(&self, container: &str, below: &str, path: &str, limit: u64) -> Result<super::Download> {
        // The engine resolves every directory on the way (in the container's
        // view): look at each first, top down. Docker archives the last
        // component as it is (a symlink as a symlink), but Podman (4.3's
        // compat API) follows it too and sends what it points at under the
        // link's name, indistinguishable from a file: so the path itself is
        // looked at as well. (At `sync` the agent still runs and could swap
        // a symlink in between the look and the read, as it could a directory
        // on the way on either engine; at `down` the container is stopped.)
        let mut on_the_way: Vec<&std::path::Path> = std::path::Path::new(path)
            .ancestors()
            .take_while(|a| a.starts_with(below) && *a != std::path::Path::new(below))
            .collect();
        on_the_way.reverse();
        for dir in on_the_way {
            let dir = dir.display().to_string();
            let options = bollard::query_parameters::ContainerArchiveInfoOptions { path: dir.clone() };
            match self.api().await?.get_container_archive_info(container, Some(options)).await {
                Ok(stat) if stat.file_mode & GO_MODE_SYMLINK != 0 => return Ok(super::Download::ThroughSymlink(dir)),
                Ok(_) => {}
                Err(e) if is_docker_not_found(&e) => return Ok(super::Download::Absent),
                Err(e) => return Err(Error::docker(format!("looking at {dir} in {container}"), e)),
            }
        }
        let options = DownloadFromContainerOptions { path: path.to_owned() };
        let mut stream = self.api().await?.download_from_container(container, Some(options));
        let mut tar = Vec::new();
        // Chunk by chunk: an archive over the limit is dropped unread, not
        // held in memory.
        while let Some(chunk) = stream.next().await {
            match chunk {
                Ok(bytes) if (tar.len() + bytes.len()) as u64 > limit => return Ok(super::Download::TooLarge),
                Ok(bytes) => tar.extend_from_slice(&bytes),
                Err(e) if is_docker_not_found(&e) => return Ok(super::Download::Absent),
                Err(e) => return Err(Error::docker(format!("reading {path} in {container}"), e)),
            }
        }
        Ok(super::Download::Archive(tar))
    }

    async fn mounts_overlay_volumes(&self) -> Result<bool> {
        Ok(!self.info().await?.podman)
    }

    async fn used_subnets(&self) -> Result<Vec<crate::egress::subnet::Subnet>> {
        self.docker_used_subnets().await
    }

    async fn default_network_subnets(&self) -> Result<Vec<crate::egress::subnet::Subnet>> {
        self.docker_default_network_subnets().await
    }

    async fn check_restricted(&self) -> Result<()> {
        self.info().await?.check_restricted(super::engine_choice::bridged_traffic_filtered())
    }

    async fn create_network(&self, spec: &super::egress::NetworkSpec) -> Result<bool> {
        self.docker_create_network(spec).await
    }

    async fn remove_network(&self, name: &str) -> Result<()> {
        self.docker_remove_network(name).await
    }

    async fn networks(&self, labels: &[String]) -> Result<Vec<(String, HashMap<String, String>)>> {
        self.docker_networks(labels).await
    }

    async fn connect_network(&self, network: &str, container: &str, address: std::net::Ipv4Addr) -> Result<()> {
        self.docker_connect(network, container, address).await
    }

    async fn ensure_proxy(
        &self,
        spec: &super::egress::ProxySpec,
        progress: &dyn Progress,
    ) -> Result<super::egress::ProxyState> {
        self.docker_ensure_proxy(spec, progress).await
    }

    async fn remove_proxy(&self, container: &str, outside: &str) -> Result<()> {
        self.docker_remove_proxy(container, outside).await
    }

    async fn container_exists(&self, name: &str) -> Result<bool> {
        self.docker_container_exists(name).await
    }

    async fn ensure_forwarder(
        &self,
        spec: &super::forwarder::ForwarderSpec,
        progress: &dyn Progress,
    ) -> Result<Vec<crate::ports::Published>> {
        self.docker_ensure_forwarder(spec, progress).await
    }

    async fn remove_forwarder(&self, container: &str, network: &str) -> Result<()> {
        self.docker_remove_forwarder(container, network).await
    }

    async fn forwarder_on_default_network(&self) -> Result<Option<String>> {
        self.docker_forwarder_on_default_network().await
    }

    async fn containers_labelled(&self, labels: &[String]) -> Result<Vec<(String, HashMap<String, String>)>> {
        self.docker_containers_labelled(labels).await
    }

    async fn list(&self, home_label: &str) -> Result<Vec<ContainerSummary>> {
        let filters = HashMap::from([(
            "label".to_string(),
            vec![LABEL_SANDBOX.to_string(), format!("{LABEL_HOME}={home_label}")],
        )]);
        let info = self.info().await?;
        if info.podman {
            // Podman's own list: its compat one fails while any container on
            // the engine cannot be described (see `super::libpod`).
            let containers = super::libpod::containers(&info.host, &filters).await?;
            return Ok(containers
                .into_iter()
                .filter_map(|c| {
                    let sandbox = c.labels.as_ref()?.get(LABEL_SANDBOX)?.clone();
                    let state = ContainerState::parse(c.docker_state());
                    let exit_code = state.has_ended().then_some(c.exit_code);
                    Some(ContainerSummary { name: c.names.into_iter().next()?, sandbox, state, exit_code })
                })
                .collect());
        }
        let options = ListContainersOptions { all: true, filters: Some(filters), ..Default::default() };
        let api = self.api().await?;
        let containers =
            api.list_containers(Some(options)).await.map_err(|e| Error::docker("listing containers", e))?;
        Ok(containers
            .into_iter()
            .filter_map(|c| {
                let sandbox = c.labels.as_ref()?.get(LABEL_SANDBOX)?.clone();
                let name = c.names?.first()?.trim_start_matches('/').to_owned();
                let state = c.state.map(|s| ContainerState::parse(s.as_ref())).unwrap_or(ContainerState::Unknown);
                let exit_code = c.status.as_deref().and_then(exit_code_in_status).filter(|_| state.has_ended());
                Some(ContainerSummary { name, sandbox, state, exit_code })
            })
            .collect())
    }
}

/// The code in the engine's status text of an ended container: `Exited (137) 5 seconds ago`.
fn exit_code_in_status(status: &str) -> Option<i64> {
    let rest = status.strip_prefix("Exited (")?;
    rest.split(')').next()?.parse().ok()
}

/// A restricted sandbox has no IPv6 at all, whatever the engine's default: a
/// link-local address would reach the host's side of the bridge, and every
/// host service listening on `::`, around the egress proxy.
fn no_ipv6() -> HashMap<String, String> {
    ["all", "default"].map(|i| (format!("net.ipv6.conf.{i}.disable_ipv6"), "1".to_owned())).into_iter().collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_podmans_keep_id_hiccup_is_tried_again() {
        let server = |status_code, message: &str| bollard::errors::Error::DockerResponseServerError {
            status_code,
            message: message.to_owned(),
        };
        let hiccup = "container create: keep-id requires additional UIDs or GIDs defined in /etc/subuid and /etc/subgid to function correctly: %!w(<nil>)";
        assert!(super::is_podmans_keep_id_hiccup(&server(500, hiccup)));
        assert!(!super::is_podmans_keep_id_hiccup(&server(409, hiccup)));
        assert!(!super::is_podmans_keep_id_hiccup(&server(500, "no such image")));
    }

    use super::*;

    #[test]
    fn the_api_version_is_the_engines_or_ours_whichever_is_older() {
        let ours = (bollard::API_DEFAULT_VERSION.major_version, bollard::API_DEFAULT_VERSION.minor_version);
        assert_eq!(negotiated(Some("1.41")), Some((1, 41)));
        assert_eq!(negotiated(Some("1.99")), Some(ours));
        assert_eq!(negotiated(Some("2.0")), Some(ours));
        assert_eq!(negotiated(Some("one.41")), None);
        assert_eq!(negotiated(None), None);
    }

    #[test]
    fn only_podmans_answers_during_its_cleanup_are_waited_out() {
        let e = |status_code, message: &str| bollard::errors::Error::DockerResponseServerError {
            status_code,
            message: message.into(),
        };
        assert!(podman_cleaning_up(&e(
            500,
            "can only attach to created or running containers: container state improper"
        )));
        assert!(podman_cleaning_up(&e(500, "failed to connect to container's attach socket: /x/attach: no such file")));
        assert!(!podman_cleaning_up(&e(409, "container is not running")), "Docker's refusal is final");
        assert!(!podman_cleaning_up(&e(500, "no space left on device")));
        assert!(!podman_cleaning_up(&e(404, "no such container")));
    }

    #[test]
    fn the_exit_code_is_read_from_the_status_text() {
        assert_eq!(exit_code_in_status("Exited (137) 5 seconds ago"), Some(137));
        assert_eq!(exit_code_in_status("Exited (0) About a minute ago"), Some(0));
        assert_eq!(exit_code_in_status("Up 3 minutes"), None);
    }

    #[test]
    fn adds_missing_user_and_group() {
        let (p, g) = merge_identity("root:x:0:0::/root:/bin/sh", "root:x:0:", Identity { uid: 1000, gid: 100 });
        assert_eq!(p, "root:x:0:0::/root:/bin/sh\nagent:x:1000:100:forage agent:/home/agent:/bin/sh\n");
        assert_eq!(g, "root:x:0:\nagent:x:100:\n");
    }

    #[test]
    fn keeps_existing_ids_and_avoids_taken_names() {
        let passwd = "root:x:0:0::/root:/bin/sh\nagent:x:5:5::/:/bin/sh\n";
        let (p, g) = merge_identity(passwd, "root:x:0:\n", Identity { uid: 0, gid: 7 });
        assert_eq!(p, passwd, "uid 0 already has an entry");
        assert_eq!(g, "root:x:0:\nagent:x:7:\n");
        let (p, _) = merge_identity(passwd, "", Identity { uid: 9, gid: 9 });
        assert!(p.ends_with("forage-agent:x:9:9:forage agent:/home/agent:/bin/sh\n"), "{p}");
    }
}
