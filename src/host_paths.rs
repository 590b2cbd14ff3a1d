//! Host paths forage will not hand an agent: whatever would give it the machine
//! (a container engine's socket: root on the host), forage's own state (records
//! an agent could forge, other sandboxes' workspaces), everything at once (`/`),
//! the kernel's and the engine's trees (other sandboxes' processes and files), and
//! writable access to the system's own directories. Checked for `--workspace`,
//! every template mount and every object directory a repository borrows from,
//! before anything is made.

use std::path::{Path, PathBuf};

use crate::env::Settings;

/// Where container engines listen, by default and as `settings` configure.
fn engine_sockets(settings: &Settings) -> Vec<PathBuf> {
    let mut sockets: Vec<PathBuf> = [
        "/var/run/docker.sock",
        "/run/docker.sock",
        "/run/containerd/containerd.sock",
        "/var/run/containerd/containerd.sock",
        "/run/podman/podman.sock",
        "/run/crio/crio.sock",
        "/run/buildkit/buildkitd.sock",
    ]
    .iter()
    .map(PathBuf::from)
    .collect();
    for host in [&settings.docker_host, &settings.container_host].into_iter().flatten() {
        if let Some(path) = host.strip_prefix("unix://") {
            sockets.push(PathBuf::from(path));
        }
    }
    let runtime_dirs =
        [settings.xdg_runtime_dir.clone(), Some(PathBuf::from(format!("/run/user/{}", nix::unistd::getuid())))];
    for dir in runtime_dirs.into_iter().flatten() {
        sockets.push(dir.join("docker.sock"));
        sockets.push(dir.join("podman/podman.sock"));
    }
    sockets
}

/// The kernel's views of every process and device: a mount of one of these
/// reaches other sandboxes' files and secrets (`/proc/PID/root`, `environ`).
const KERNEL_TREES: &[&str] = &["/proc", "/sys", "/dev"];
/// Where container engines keep containers and images: whoever can write there
/// changes what other containers run.
const ENGINE_DATA: &[&str] = &["/var/lib/docker", "/var/lib/containerd", "/var/lib/containers"];
/// The system's programs and configuration: never writable from a sandbox
/// (forage may run as root), though a read-only mount of something inside one
/// (CA certificates, say) is fine.
const SYSTEM_DIRS: &[&str] = &["/bin", "/boot", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/sbin", "/usr"];

/// How a host path would reach the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposure {
    /// Writable: a workspace, or a mount without `read_only`.
    Writable,
    ReadOnly,
}

/// True when `a` is `b`, holds it, or lies inside it.
fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn relation(path: &Path, other: &Path) -> &'static str {
    if path == other {
        "is"
    } else if other.starts_with(path) {
        "holds"
    } else {
        "is inside"
    }
}

/// `path` with every symlink resolved, also when its last components do not
/// exist yet (FORAGE_HOME before the first `up`): the nearest existing ancestor
/// is resolved and the rest appended, so a path reached through a symlink is
/// compared by where it really is.
pub fn resolved(path: &Path) -> PathBuf {
    let mut tail = Vec::new();
    let mut at = path;
    loop {
        if let Ok(real) = at.canonicalize() {
            return tail.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (at.parent(), at.file_name()) {
            (Some(parent), Some(name)) => {
                tail.push(name.to_owned());
                at = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Which host paths no sandbox may see, for one request.
#[derive(Debug, Clone)]
pub struct Guard {
    sockets: Vec<PathBuf>,
    forage_home: Option<PathBuf>,
    user_home: Option<PathBuf>,
}

impl Guard {
    /// `forage_home` is FORAGE_HOME (which may not exist yet); `None` where it
    /// is not known, for a last check of paths forage already validated.
    pub fn new(settings: &Settings, forage_home: Option<&Path>) -> Guard {
        Guard {
            sockets: engine_sockets(settings),
            forage_home: forage_home.map(Path::to_path_buf),
            user_home: settings.home.as_ref().map(|h| h.canonicalize().unwrap_or_else(|_| h.clone())),
        }
    }

    /// Why `path` (canonical) must never reach a sandbox as `exposure`, if it
    /// must not. The reason says nothing of a fix: what fixes it depends on
    /// how the path was asked for (see `refused_only_writable`).
    pub fn refusal(&self, path: &Path, exposure: Exposure) -> Option<String> {
        refusal_among(path, self.forage_home.as_deref(), exposure, &self.sockets)
    }

    /// True when `path` is refused writable but would be allowed read-only
    /// (a system directory): a template mount can then be made read-only,
    /// while a workspace is refused all the same.
    pub fn refused_only_writable(&self, path: &Path) -> bool {
        self.refusal(path, Exposure::Writable).is_some() && self.refusal(path, Exposure::ReadOnly).is_none()
    }

    /// True when `path` is the user's home directory or holds it: mounted writable,
    /// the agent could plant shell startup files, ssh keys, git config.
    pub fn exposes_user_home(&self, path: &Path) -> bool {
        self.user_home.as_ref().is_some_and(|home| home.starts_with(path))
    }
}

fn refusal_among(path: &Path, forage_home: Option<&Path>, exposure: Exposure, sockets: &[PathBuf]) -> Option<String> {
    use std::os::unix::fs::FileTypeExt;
    if path == Path::new("/") {
        return Some("it is the whole file system".into());
    }
    if std::fs::metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
        return Some("it is a socket".into());
    }
    for socket in sockets {
        let Ok(socket) = socket.canonicalize() else { continue };
        let dir = socket.parent().unwrap_or(&socket);
        if overlaps(path, dir) {
            return Some(format!(
                "it {} {}, where the container engine's socket {} is: whoever can use that socket is root on this machine",
                relation(path, dir),
                dir.display(),
                socket.display()
            ));
        }
    }
    if let Some(tree) = KERNEL_TREES.iter().map(Path::new).find(|t| overlaps(path, t)) {
        return Some(format!(
            "it {} {}, the kernel's view of every process and device: through it an agent reaches other sandboxes' files and secrets",
            relation(path, tree),
            tree.display()
        ));
    }
    if let Some(data) = ENGINE_DATA.iter().map(|d| resolved(Path::new(d))).find(|d| overlaps(path, d)) {
        return Some(format!(
            "it {} {}, where a container engine keeps its containers and images",
            relation(path, &data),
            data.display()
        ));
    }
    if let Some(home) = forage_home.map(resolved).filter(|home| overlaps(path, home)) {
        return Some(format!(
            "it {} forage's state, {} (FORAGE_HOME): an agent could forge records there, or reach other sandboxes' workspaces",
            relation(path, &home),
            home.display()
        ));
    }
    if exposure == Exposure::Writable {
        if let Some(system) = SYSTEM_DIRS.iter().map(|d| resolved(Path::new(d))).find(|d| overlaps(path, d)) {
            return Some(format!(
                "it {} {}, the system's own programs or configuration, which no agent may write",
                relation(path, &system),
                system.display()
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_an_engine_socket_and_forage_home_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let t = t.path().canonicalize().unwrap();
        let home = t.join("forage");
        std::fs::create_dir_all(home.join("workspaces/x")).unwrap();
        let project = t.join("project");
        std::fs::create_dir_all(&project).unwrap();
        let run = t.join("run/docker");
        std::fs::create_dir_all(&run).unwrap();
        let socket = run.join("docker.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let sockets = [socket.clone(), t.join("absent.sock")];
        let refused = |p: &Path| refusal_among(p, Some(&home), Exposure::Writable, &sockets);

        assert!(refused(Path::new("/")).unwrap().contains("whole file system"));
        assert!(refused(&socket).unwrap().contains("is a socket"));
        assert!(refused(&run).unwrap().contains("it is") && refused(&run).unwrap().contains("root on this machine"));
        assert!(refused(&t.join("run")).unwrap().contains("it holds"));
        assert!(refused(&home).unwrap().contains("is forage's state"));
        assert!(refused(&home.join("workspaces/x")).unwrap().contains("is inside forage's state"));
        assert_eq!(refused(&project), None);
        // t holds both the socket's directory and FORAGE_HOME; the socket is named.
        assert!(refused(&t).unwrap().contains("socket"));

        for kernel in ["/proc", "/proc/1", "/sys/fs", "/dev"] {
            assert!(refused(Path::new(kernel)).unwrap().contains("kernel's view"), "{kernel}");
        }
        assert!(refused(Path::new("/var/lib/docker")).unwrap().contains("container engine keeps"));
        assert!(refused(Path::new("/var")).unwrap().contains("holds"));
        let etc = resolved(Path::new("/etc"));
        assert!(refused(&etc).unwrap().contains("system's own"));
        // The reason names no fix: a workspace there is refused read-only too.
        assert!(!refused(&etc).unwrap().contains("read-only"));
        let certs = etc.join("ssl");
        assert!(refused(&certs).is_some(), "writable, inside /etc");
        assert_eq!(refusal_among(&certs, Some(&home), Exposure::ReadOnly, &sockets), None, "read-only is fine");
        assert!(refusal_among(Path::new("/proc"), None, Exposure::ReadOnly, &sockets).is_some());
    }

    #[test]
    fn a_forage_home_not_made_yet_is_compared_where_it_really_is() {
        let t = tempfile::tempdir().unwrap();
        let t = t.path().canonicalize().unwrap();
        let real = t.join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, t.join("link")).unwrap();
        assert_eq!(resolved(&t.join("link/forage/home")), real.join("forage/home"));
        let refused = refusal_among(&real, Some(&t.join("link/forage/home")), Exposure::Writable, &[]);
        assert!(refused.unwrap().contains("holds forage's state"));
    }
}
