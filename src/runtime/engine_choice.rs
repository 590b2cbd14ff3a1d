//! Which engine forage talks to: Docker or Podman (through Podman's
//! Docker-compatible API, so one bollard client serves both), where its
//! socket is, and what kind of engine answered there.
//!
//! Order: `DOCKER_HOST` names the engine outright. Otherwise `--engine` /
//! `FORAGE_ENGINE` picks a kind and its usual sockets; with neither, Docker's
//! socket is tried first and, when nothing answers there, Podman's rootless
//! socket (`$XDG_RUNTIME_DIR/podman/podman.sock`), then its rootful one.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::env::Settings;
use crate::error::{Error, Result};

use super::unreachable::DEFAULT_HOST;

/// The rootful Podman service's socket (`podman.socket` as root).
pub const PODMAN_ROOTFUL: &str = "unix:///run/podman/podman.sock";

/// What rootful Podman sets a container's open-file and process limits to
/// when not told: the most forage ever asks for in their place.
const ROOTFUL_PODMAN_RLIMIT: u64 = 1 << 20;

/// An engine kind the user may ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineChoice {
    Docker,
    Podman,
}

impl EngineChoice {
    /// `FORAGE_ENGINE`'s value, refused with the accepted ones when unknown.
    pub fn parse(value: &str) -> Result<EngineChoice> {
        match value {
            "docker" => Ok(EngineChoice::Docker),
            "podman" => Ok(EngineChoice::Podman),
            other => Err(Error::usage(format!(
                "FORAGE_ENGINE={other:?} is not an engine forage knows; use `docker` or `podman` (or unset it)"
            ))),
        }
    }
}

/// The sockets to try, in order: the first that answers is the engine.
pub fn candidates(settings: &Settings, choice: Option<EngineChoice>) -> Vec<String> {
    if let Some(host) = &settings.docker_host {
        return vec![host.clone()];
    }
    let podman = podman_sockets(settings);
    match choice {
        Some(EngineChoice::Docker) => vec![DEFAULT_HOST.to_owned()],
        Some(EngineChoice::Podman) => podman,
        None => std::iter::once(DEFAULT_HOST.to_owned()).chain(podman).collect(),
    }
}

/// Podman's rootless socket (when XDG_RUNTIME_DIR is known), then its rootful one.
fn podman_sockets(settings: &Settings) -> Vec<String> {
    let rootless =
        settings.xdg_runtime_dir.as_ref().map(|d| format!("unix://{}", d.join("podman/podman.sock").display()));
    rootless.into_iter().chain([PODMAN_ROOTFUL.to_owned()]).collect()
}

/// What kind of engine answered, as shown by `-v`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineInfo {
    /// The socket or address it answered on.
    pub host: String,
    pub podman: bool,
    /// Podman running as an ordinary user: its containers' root is that user
    /// on the host, and every other uid inside is one of their subordinate ids.
    pub rootless: bool,
    /// The engine's own version (e.g. `28.2.2`, `4.3.1`).
    pub version: String,
    /// Who owns the socket: for rootless Podman, the user whose uid the
    /// container's uids map to.
    pub socket_owner: Option<u32>,
}

impl EngineInfo {
    /// From the engine's `/version` answer. Podman names itself among the
    /// components ("Podman Engine"); its compat `/info` does not say whether
    /// it is rootless, but its socket does: a rootless service runs as, and
    /// makes its socket as, the user it belongs to.
    pub fn new(host: &str, version: &bollard::models::SystemVersion) -> EngineInfo {
        let podman = version.components.iter().flatten().any(|c| c.name.to_ascii_lowercase().contains("podman"));
        let socket_owner = socket_path(host).and_then(|p| std::fs::metadata(p).ok()).map(|m| m.uid());
        let rootless = podman && socket_owner.is_some_and(|uid| uid != 0);
        EngineInfo {
            host: host.to_owned(),
            podman,
            rootless,
            version: version.version.clone().unwrap_or_default(),
            socket_owner,
        }
    }

    /// Refuses a rootless Podman that belongs to another user than the agent's
    /// identity: keep-id maps the *service owner's* uid, so the agent's files
    /// would belong to neither the user nor the agent.
    pub fn check_identity(&self, uid: u32) -> Result<()> {
        match self.socket_owner {
            Some(owner) if self.rootless && owner != uid => Err(Error::engine(format!(
                "the rootless Podman service at {} belongs to uid {owner}, but forage-ctl runs as uid {uid}: the \
                 agent's files would belong to neither",
                self.host
            ))
            .hint(
                "run forage-ctl as that user, or use your own Podman service (`systemctl --user start podman.socket`)",
            )),
            _ => Ok(()),
        }
    }

    /// Refuses `network: restricted` on rootful Podman where the sandbox's
    /// network could carry nothing, not even its way to the proxy: where
    /// the host passes bridged traffic through iptables
    /// (`net.bridge.bridge-nf-call-iptables` is 1, as it is wherever Docker
    /// runs, whose FORWARD chain drops what no rule accepts), netavark 1.4
    /// accepts nothing for an internal network. (Such a network has no
    /// address of the host's on any engine: see
    /// `Docker::podman_create_internal_network`. Rootless Podman's bridge is
    /// in a network namespace of its own, where no host rule applies.)
    pub fn check_restricted(&self, bridged_traffic_filtered: bool) -> Result<()> {
        if self.podman && !self.rootless && bridged_traffic_filtered {
            return Err(Error::conflict(format!(
                "`network: restricted` cannot work on rootful Podman ({}) on this host: it passes bridged traffic \
                 through iptables (net.bridge.bridge-nf-call-iptables = 1, as wherever Docker runs), and netavark \
                 lets none through on an internal network, so the sandbox could not even reach its egress proxy",
                self.host
            ))
            .hint("use rootless Podman or Docker for restricted sandboxes, or `--network full` or `none` here"));
        }
        Ok(())
    }

    /// Refuses the copy-on-write overlay on Podman: Podman (4.3) makes a
    /// mount's anonymous volume of the `local` driver but ignores its driver
    /// options, so /workspace would be empty. `up` never gets here (it makes a
    /// full checkout on Podman, `Runtime::mounts_overlay_volumes`); this is
    /// the last guard, so that no way of making a container can hand an agent
    /// an empty workspace.
    pub fn check_mounts(&self, mounts: &[super::Mount]) -> Result<()> {
        if self.podman && mounts.iter().any(|m| m.overlay.is_some()) {
            return Err(Error::usage(
                "--cow needs Docker: Podman's Engine API ignores the overlay options of the copy-on-write volume, \
                 so /workspace would be empty",
            )
            .hint("leave out --cow (the sandbox gets a full checkout of its own), or use Docker"));
        }
        Ok(())
    }

    /// The open-file and process limits to ask the engine for, when its own
    /// choice would fail. Rootful Podman (4.3) raises both to 1048576 in every
    /// container unless told otherwise, which fails at start ("error setting
    /// rlimit type 7: operation not permitted") wherever root may not raise a
    /// hard limit (no CAP_SYS_RESOURCE: a host that is itself a container or a
    /// confined VM). Docker and rootless Podman hand the container the limits
    /// they run with and need nothing. For rootful Podman forage asks for the
    /// invoking user's hard limits, which a local service started the usual
    /// way also has; the process limit at most `pid_max`, since no more
    /// processes can exist (and a rootful Podman 4.3 service was seen running
    /// with exactly that as its own limit, lower than its parent's).
    pub fn rlimits(&self) -> Option<Vec<bollard::models::ResourcesUlimits>> {
        use nix::sys::resource::{getrlimit, Resource};
        if !self.podman || self.rootless {
            return None;
        }
        let pid_max = std::fs::read_to_string("/proc/sys/kernel/pid_max").ok().and_then(|s| s.trim().parse().ok());
        let limit = |name: &str, resource, cap: u64| {
            let hard = getrlimit(resource).map_or(cap, |(_, hard)| hard.min(cap));
            let hard = i64::try_from(hard).unwrap_or(i64::MAX);
            bollard::models::ResourcesUlimits { name: Some(name.to_owned()), soft: Some(hard), hard: Some(hard) }
        };
        Some(vec![
            limit("nofile", Resource::RLIMIT_NOFILE, ROOTFUL_PODMAN_RLIMIT),
            limit("nproc", Resource::RLIMIT_NPROC, pid_max.unwrap_or(ROOTFUL_PODMAN_RLIMIT).min(ROOTFUL_PODMAN_RLIMIT)),
        ])
    }

    /// `Docker 28.2.2 at unix:///var/run/docker.sock`, `Podman 4.3.1 (rootless) at …`.
    pub fn describe(&self) -> String {
        let kind = if self.podman { "Podman" } else { "Docker" };
        let mode = if self.rootless { " (rootless)" } else { "" };
        format!("{kind} {}{mode} at {}", self.version, self.host)
    }
}

/// Whether the host passes bridged IPv4 traffic through iptables: the
/// br_netfilter module is loaded (Docker loads it) with its default, 1.
pub fn bridged_traffic_filtered() -> bool {
    bridged_traffic_filtered_by(
        &std::fs::read_to_string("/proc/sys/net/bridge/bridge-nf-call-iptables").unwrap_or_default(),
    )
}

fn bridged_traffic_filtered_by(sysctl: &str) -> bool {
    sysctl.trim() == "1"
}

/// The path of a `unix://` host.
pub fn socket_path(host: &str) -> Option<&Path> {
    host.strip_prefix("unix://").map(Path::new)
}

/// Where the seccomp profile goes for an engine that takes `seccomp=` as a
/// file path rather than the profile itself (Podman): content-addressed, so
/// concurrent commands write the same bytes, written under a temporary name
/// and renamed so that no engine ever reads half a file.
pub fn seccomp_file(dir: &Path, profile: &str) -> Result<PathBuf> {
    use sha2::{Digest, Sha256};
    let hash: String = Sha256::digest(profile.as_bytes()).iter().take(8).map(|b| format!("{b:02x}")).collect();
    let path = dir.join(format!("seccomp-{hash}.json"));
    if std::fs::read(&path).is_ok_and(|b| b == profile.as_bytes()) {
        return Ok(path);
    }
    std::fs::create_dir_all(dir).map_err(|e| Error::other(format!("creating {}: {e}", dir.display())))?;
    let tmp = dir.join(format!(".seccomp-{hash}.{}.tmp", std::process::id()));
    std::fs::write(&tmp, profile)
        .and_then(|()| std::fs::rename(&tmp, &path))
        .map_err(|e| Error::other(format!("writing the seccomp profile {}: {e}", path.display())))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(docker_host: Option<&str>, runtime: Option<&str>) -> Settings {
        Settings {
            docker_host: docker_host.map(str::to_owned),
            xdg_runtime_dir: runtime.map(PathBuf::from),
            ..Default::default()
        }
    }

    #[test]
    fn docker_host_wins_then_the_choice_then_docker_before_podman() {
        let s = settings(Some("unix:///x.sock"), Some("/run/user/7"));
        assert_eq!(candidates(&s, Some(EngineChoice::Podman)), ["unix:///x.sock"]);
        let s = settings(None, Some("/run/user/7"));
        assert_eq!(candidates(&s, Some(EngineChoice::Docker)), [DEFAULT_HOST]);
        assert_eq!(
            candidates(&s, Some(EngineChoice::Podman)),
            ["unix:///run/user/7/podman/podman.sock", PODMAN_ROOTFUL]
        );
        assert_eq!(candidates(&s, None), [DEFAULT_HOST, "unix:///run/user/7/podman/podman.sock", PODMAN_ROOTFUL]);
        assert_eq!(candidates(&settings(None, None), None), [DEFAULT_HOST, PODMAN_ROOTFUL]);
    }

    /// An engine at the rootful socket: Docker, or Podman rootful or rootless.
    fn engine(podman: bool, rootless: bool) -> EngineInfo {
        EngineInfo { host: PODMAN_ROOTFUL.into(), podman, rootless, version: "4.3.1".into(), socket_owner: Some(0) }
    }

    #[test]
    fn restricted_networks_are_refused_on_rootful_podman_only_where_bridges_are_filtered() {
        let e = engine(true, false).check_restricted(true).unwrap_err();
        assert!(e.to_string().contains("net.bridge.bridge-nf-call-iptables = 1"), "{e}");
        assert_eq!(e.exit_code(), 4);
        assert!(engine(true, false).check_restricted(false).is_ok(), "nothing on the host stops its bridge");
        assert!(engine(true, true).check_restricted(true).is_ok(), "rootless Podman's bridge is in its own namespace");
        assert!(engine(false, false).check_restricted(true).is_ok(), "Docker opens its internal networks' bridges");
    }

    #[test]
    fn bridged_traffic_is_filtered_only_where_the_sysctl_says_so() {
        assert!(bridged_traffic_filtered_by("1\n"));
        assert!(!bridged_traffic_filtered_by("0\n"));
        assert!(!bridged_traffic_filtered_by(""), "no br_netfilter module: no such file");
    }

    #[test]
    fn a_rootless_podman_of_another_user_is_refused() {
        let info = |rootless, owner| EngineInfo {
            host: "unix:///run/user/7/podman/podman.sock".into(),
            podman: true,
            rootless,
            version: "4.3.1".into(),
            socket_owner: Some(owner),
        };
        let e = info(true, 7).check_identity(0).unwrap_err();
        assert!(e.to_string().contains("belongs to uid 7, but forage-ctl runs as uid 0"), "{e}");
        assert_eq!(e.exit_code(), 5);
        assert!(info(true, 7).check_identity(7).is_ok());
        assert!(info(false, 0).check_identity(1000).is_ok(), "rootful Podman maps no uid");
    }

    #[test]
    fn only_rootful_podman_is_given_limits_and_they_are_the_users_own() {
        use nix::sys::resource::{getrlimit, Resource};
        assert_eq!(engine(false, false).rlimits(), None, "Docker");
        assert_eq!(engine(true, true).rlimits(), None, "rootless Podman");
        let limits = engine(true, false).rlimits().expect("rootful Podman");
        let of = |name: &str| limits.iter().find(|l| l.name.as_deref() == Some(name)).unwrap().clone();
        let (nofile, nproc) = (of("nofile"), of("nproc"));
        let own = |r| i64::try_from(getrlimit(r).unwrap().1.min(ROOTFUL_PODMAN_RLIMIT)).unwrap();
        assert_eq!(
            (nofile.soft, nofile.hard),
            (Some(own(Resource::RLIMIT_NOFILE)), Some(own(Resource::RLIMIT_NOFILE)))
        );
        let pid_max: i64 = std::fs::read_to_string("/proc/sys/kernel/pid_max").unwrap().trim().parse().unwrap();
        assert_eq!(nproc.hard, Some(own(Resource::RLIMIT_NPROC).min(pid_max)));
        assert_eq!(nproc.soft, nproc.hard);
    }

    #[test]
    fn an_unknown_engine_name_is_refused_naming_it() {
        let e = EngineChoice::parse("lxc").unwrap_err();
        assert!(e.to_string().contains("FORAGE_ENGINE=\"lxc\"") && e.to_string().contains("`podman`"), "{e}");
        assert_eq!(e.exit_code(), 2);
        assert_eq!(EngineChoice::parse("podman").unwrap(), EngineChoice::Podman);
    }

    #[test]
    fn the_seccomp_file_holds_the_profile_and_is_reused() {
        let dir = tempfile::tempdir().unwrap();
        let a = seccomp_file(dir.path(), "{\"a\":1}").unwrap();
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "{\"a\":1}");
        assert_eq!(seccomp_file(dir.path(), "{\"a\":1}").unwrap(), a);
        assert_ne!(seccomp_file(dir.path(), "{\"a\":2}").unwrap(), a);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2, "no temporary file is left");
    }
}
