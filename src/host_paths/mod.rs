//! Host paths forage will not hand an agent: whatever would give it the machine
//! (a container engine's socket: root on the host), any other program's door
//! (a Unix socket: a tmux server, an ssh agent), forage's own state (records an
//! agent could forge, other sandboxes' workspaces), everything at once (`/`),
//! the kernel's and the engine's trees (other sandboxes' processes and files),
//! and writable access to the system's own directories, other users' homes, and
//! the user's credentials and whatever their shell, desktop or git runs on its
//! own. Checked for `--workspace`, every template mount and every object
//! directory a repository borrows from, before anything is made, and again
//! before every start (`pin`).

pub mod pin;
mod places;
pub mod sockets;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use crate::env::Settings;
use places::{ENGINE_DATA, KERNEL_TREES, PRIVATE_IN_HOME, SHARED_SCRATCH, SYSTEM_DIRS};

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

/// A place no sandbox may write, and what it is (for the refusal).
#[derive(Debug, Clone)]
struct Private {
    path: PathBuf,
    what: String,
}

/// Which host paths no sandbox may see, for one request.
#[derive(Debug, Clone)]
pub struct Guard {
    sockets: Vec<PathBuf>,
    forage_home: Option<PathBuf>,
    user_home: Option<PathBuf>,
    /// `$XDG_RUNTIME_DIR` and `/run/user`: every session's sockets.
    runtime_dirs: Vec<PathBuf>,
    /// Other users' homes.
    other_homes: Vec<PathBuf>,
    /// Credentials and what runs on its own, in every home (`PRIVATE_IN_HOME`),
    /// `$XDG_CONFIG_HOME`, and the directories of `PATH`.
    private: Vec<Private>,
    /// The sockets this network namespace's kernel lists, read once, when first needed.
    live_sockets: Arc<OnceLock<Vec<PathBuf>>>,
}

impl Guard {
    /// `forage_home` is FORAGE_HOME (which may not exist yet); `None` where it
    /// is not known, for a last check of paths forage already validated.
    pub fn new(settings: &Settings, forage_home: Option<&Path>) -> Guard {
        let user_home = settings.home.as_ref().map(|h| h.canonicalize().unwrap_or_else(|_| h.clone()));
        let mut runtime_dirs = vec![resolved(Path::new("/run/user"))];
        runtime_dirs.extend(settings.xdg_runtime_dir.as_deref().map(resolved));
        let homes = places::homes_from_passwd();
        let other_homes: Vec<PathBuf> = homes.iter().filter(|h| Some(*h) != user_home.as_ref()).cloned().collect();
        Guard {
            sockets: engine_sockets(settings),
            forage_home: forage_home.map(Path::to_path_buf),
            private: private_places(settings, user_home.iter().chain(&homes)),
            user_home,
            runtime_dirs,
            other_homes,
            live_sockets: Arc::default(),
        }
    }

    /// Why `path` (canonical) must never reach a sandbox as `exposure`, if it
    /// must not: every rule, and a walk of the directory for sockets (bounded:
    /// `sockets::MAX_SCAN_ENTRIES`). The reason says nothing of a fix: what fixes
    /// it depends on how the path was asked for (see `refused_only_writable`).
    pub fn refusal(&self, path: &Path, exposure: Exposure) -> Option<String> {
        self.rule_refusal(path, exposure).or_else(|| {
            let socket = sockets::socket_under(path, sockets::MAX_SCAN_ENTRIES)?;
            Some(door(path, &socket))
        })
    }

    /// `refusal` without the walk for socket files: before a start, when any
    /// socket file the walk would find is either listed by the kernel (and so
    /// refused here too) or left by the sandbox's own agent, which is stopped,
    /// so that nothing listens on it.
    pub fn refusal_before_start(&self, path: &Path, exposure: Exposure) -> Option<String> {
        self.rule_refusal(path, exposure)
    }

    /// True when `path` is refused writable but would be allowed read-only
    /// (a system directory): a template mount can then be made read-only,
    /// while a workspace is refused all the same.
    pub fn refused_only_writable(&self, path: &Path) -> bool {
        self.rule_refusal(path, Exposure::Writable).is_some() && self.rule_refusal(path, Exposure::ReadOnly).is_none()
    }

    /// True when `path` is the user's home directory or holds it: mounted writable,
    /// the agent could plant shell startup files, ssh keys, git config.
    pub fn exposes_user_home(&self, path: &Path) -> bool {
        self.user_home.as_ref().is_some_and(|home| home.starts_with(path))
    }

    /// Every rule but the walk for sockets.
    fn rule_refusal(&self, path: &Path, exposure: Exposure) -> Option<String> {
        let rules = Rules { guard: self, path };
        rules
            .everything()
            .or_else(|| rules.kernel_and_engine())
            .or_else(|| rules.forage_state(exposure))
            .or_else(|| rules.doors())
            .or_else(|| match exposure {
                Exposure::Writable => rules.system().or_else(|| rules.homes()),
                Exposure::ReadOnly => None,
            })
    }

    fn live_sockets(&self) -> &[PathBuf] {
        self.live_sockets.get_or_init(sockets::live_sockets)
    }
}

/// What no sandbox may write beneath every home in `homes`, in
/// `$XDG_CONFIG_HOME`, and in the directories programs are run from (`PATH`).
fn private_places<'a>(settings: &Settings, homes: impl Iterator<Item = &'a PathBuf>) -> Vec<Private> {
    let mut out = Vec::new();
    for home in homes {
        for (rel, what) in PRIVATE_IN_HOME {
            out.push(Private { path: home.join(rel), what: (*what).to_owned() });
        }
    }
    if let Some(config) = &settings.xdg_config_home {
        out.push(Private { path: resolved(config), what: "programs' configuration ($XDG_CONFIG_HOME)".into() });
    }
    for dir in &settings.path {
        out.push(Private { path: resolved(dir), what: "a directory of programs on PATH".into() });
    }
    out
}

/// The refusal of a path that holds another program's socket.
fn door(path: &Path, socket: &Path) -> String {
    format!(
        "it {} the socket {}, another program's door: through it an agent talks to whatever listens there (a terminal multiplexer, an ssh or gpg agent, a container engine); if nothing does any more, remove the file",
        relation(path, socket),
        socket.display()
    )
}

/// The rules, each for one kind of place, applied to one path.
struct Rules<'a> {
    guard: &'a Guard,
    path: &'a Path,
}

impl Rules<'_> {
    fn everything(&self) -> Option<String> {
        (self.path == Path::new("/")).then(|| "it is the whole file system".into())
    }

    /// Sockets, and the directories full of them: refused however mounted
    /// (a socket works read-only too).
    fn doors(&self) -> Option<String> {
        use std::os::unix::fs::FileTypeExt;
        let path = self.path;
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
            return Some("it is a socket".into());
        }
        for socket in &self.guard.sockets {
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
        if let Some(dir) = self.guard.runtime_dirs.iter().find(|d| overlaps(path, d)) {
            return Some(format!(
                "it {} {}, the login sessions' runtime directory, full of their sockets (the session bus, ssh and gpg agents)",
                relation(path, dir),
                dir.display()
            ));
        }
        if let Some(dir) = SHARED_SCRATCH.iter().map(|d| resolved(Path::new(d))).find(|d| d.starts_with(path)) {
            return Some(format!(
                "it {} {}, which holds other programs' and users' sockets (terminal multiplexers, X displays, ssh agents); a directory inside it is fine",
                relation(path, &dir),
                dir.display()
            ));
        }
        let live = self.guard.live_sockets().iter().find(|s| s.starts_with(path) && s.as_path() != path)?;
        Some(door(path, live))
    }

    fn kernel_and_engine(&self) -> Option<String> {
        let path = self.path;
        if let Some(tree) = KERNEL_TREES.iter().map(Path::new).find(|t| overlaps(path, t)) {
            return Some(format!(
                "it {} {}, the kernel's view of every process and device: through it an agent reaches other sandboxes' files and secrets",
                relation(path, tree),
                tree.display()
            ));
        }
        let data = ENGINE_DATA.iter().map(|d| resolved(Path::new(d))).find(|d| overlaps(path, d))?;
        Some(format!(
            "it {} {}, where a container engine keeps its containers and images",
            relation(path, &data),
            data.display()
        ))
    }

    fn forage_state(&self, exposure: Exposure) -> Option<String> {
        let home = self.guard.forage_home.as_deref().map(resolved).filter(|home| overlaps(self.path, home))?;
        // A job mirror's object store (FORAGE_HOME/mirrors/<hash>/objects),
        // read-only: the job's sandbox is made from the mirror as from a
        // user's repository, whose objects it reads. Content-addressed
        // copies of the source's history and the jobs' synced work: nothing
        // in it is a record, a workspace or a way to one.
        let mirror_objects = self.path.strip_prefix(home.join("mirrors")).is_ok_and(|rel| {
            let parts: Vec<_> = rel.components().collect();
            parts.len() == 2 && matches!(parts[0], std::path::Component::Normal(_)) && parts[1].as_os_str() == "objects"
        });
        if mirror_objects && exposure == Exposure::ReadOnly {
            return None;
        }
        Some(format!(
            "it {} forage's state, {} (FORAGE_HOME): an agent could forge records there, or reach other sandboxes' workspaces",
            relation(self.path, &home),
            home.display()
        ))
    }

    /// The system's directories, and git's and jj's own (whose config and
    /// hooks the user's git and jj obey): never writable.
    fn system(&self) -> Option<String> {
        let path = self.path;
        if let Some(system) = SYSTEM_DIRS.iter().map(|d| resolved(Path::new(d))).find(|d| overlaps(path, d)) {
            return Some(format!(
                "it {} {}, the system's own programs, configuration or services' state, which no agent may write",
                relation(path, &system),
                system.display()
            ));
        }
        let repo_dir = path.ancestors().find(|a| a.file_name().is_some_and(|n| n == ".git" || n == ".jj"))?;
        Some(format!(
            "it {} {}, a repository's own directory, whose config and hooks your git or jj obeys",
            relation(path, repo_dir),
            repo_dir.display()
        ))
    }

    /// Other users' homes; everyone's credentials and startup files, and the
    /// directories programs run from. A path that holds the user's own home
    /// is left to `exposes_user_home` (`--allow-home`).
    fn homes(&self) -> Option<String> {
        let path = self.path;
        if let Some(home) = self.guard.other_homes.iter().find(|h| h.starts_with(path)) {
            return Some(format!("it {} {}, another user's home directory", relation(path, home), home.display()));
        }
        let own_home = self.guard.user_home.as_deref().filter(|h| h.starts_with(path));
        let private = self
            .guard
            .private
            .iter()
            .filter(|p| !own_home.is_some_and(|home| p.path.starts_with(home)))
            .find(|p| overlaps(path, &p.path))?;
        Some(format!("it {} {}, {}", relation(path, &private.path), private.path.display(), private.what))
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    /// A guard for a user whose home is `home`, with FORAGE_HOME `forage_home`
    /// and the engine listening on `socket`.
    fn guard(home: &Path, forage_home: &Path, socket: &Path) -> Guard {
        let settings = Settings {
            home: Some(home.to_path_buf()),
            docker_host: Some(format!("unix://{}", socket.display())),
            xdg_runtime_dir: Some(home.with_file_name("runtime")),
            path: vec![home.join("tools/bin")],
            ..Settings::default()
        };
        Guard::new(&settings, Some(forage_home))
    }

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
        let guard = guard(&t.join("user"), &home, &socket);
        let refused = |p: &Path| guard.refusal(p, Exposure::Writable);

        assert!(refused(Path::new("/")).unwrap().contains("whole file system"));
        assert!(refused(&socket).unwrap().contains("is a socket"));
        assert!(refused(&run).unwrap().contains("it is") && refused(&run).unwrap().contains("root on this machine"));
        assert!(refused(&t.join("run")).unwrap().contains("it holds"));
        assert!(refused(&home).unwrap().contains("is forage's state"));
        assert!(refused(&home.join("workspaces/x")).unwrap().contains("is inside forage's state"));
        assert_eq!(refused(&project), None);
        // t holds both the socket's directory and FORAGE_HOME: refused, naming one.
        assert!(refused(&t).unwrap().contains("holds forage's state"));

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
        assert_eq!(guard.refusal(&certs, Exposure::ReadOnly), None, "read-only is fine");
        assert!(guard.refused_only_writable(&certs));
        assert!(guard.refusal(Path::new("/proc"), Exposure::ReadOnly).is_some());
        for system in ["/opt", "/var/spool", "/var/spool/cron"] {
            assert!(refused(&resolved(Path::new(system))).unwrap().contains("system's own"), "{system}");
        }
    }

    #[test]
    fn a_job_mirrors_objects_are_readable_and_nothing_else_of_forage_home() {
        let t = tempfile::tempdir().unwrap();
        let t = t.path().canonicalize().unwrap();
        let home = t.join("forage");
        let mirror = home.join("mirrors/0123abcd");
        std::fs::create_dir_all(mirror.join("objects/pack")).unwrap();
        std::fs::create_dir_all(mirror.join("refs")).unwrap();
        let guard = guard(&t.join("user"), &home, &t.join("docker.sock"));
        let read_only = |p: &Path| guard.refusal(p, Exposure::ReadOnly);
        assert_eq!(read_only(&mirror.join("objects")), None);
        assert!(guard.refusal(&mirror.join("objects"), Exposure::Writable).is_some(), "never writable");
        for other in [mirror.clone(), mirror.join("refs"), mirror.join("objects/pack"), home.join("mirrors")] {
            assert!(read_only(&other).unwrap().contains("forage's state"), "{}", other.display());
        }
    }

    #[test]
    fn other_programs_doors_are_refused_however_mounted() {
        let t = tempfile::tempdir().unwrap();
        let t = t.path().canonicalize().unwrap();
        let user = t.join("user");
        // FORAGE_HOME outside /tmp, whose rule would come first.
        let forage_home = Path::new("/nonexistent/forage");
        let g = guard(&user, forage_home, &t.join("absent.sock"));
        // A tmux server's socket, deep in a directory: refused writable and read-only.
        let shared = t.join("shared");
        std::fs::create_dir_all(shared.join("tmux-1000")).unwrap();
        let socket = shared.join("tmux-1000/default");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        for exposure in [Exposure::Writable, Exposure::ReadOnly] {
            let why = g.refusal(&shared, exposure).unwrap();
            assert!(why.contains("holds the socket") && why.contains("tmux-1000/default"), "{why}");
        }
        assert!(!g.refused_only_writable(&shared), "read-only does not help");
        // The same socket file with no listener is still found by the walk.
        drop(_listener);
        assert!(g.refusal(&shared, Exposure::ReadOnly).unwrap().contains("tmux-1000/default"));
        std::fs::remove_file(&socket).unwrap();
        let g = guard(&user, forage_home, &t.join("absent.sock"));
        assert_eq!(g.refusal(&shared, Exposure::Writable), None);

        for scratch in ["/tmp", "/var/tmp"] {
            let why = g.refusal(&resolved(Path::new(scratch)), Exposure::ReadOnly).unwrap();
            assert!(why.contains("sockets"), "{scratch}: {why}");
        }
        assert!(g.refusal(Path::new("/run/user/1000"), Exposure::ReadOnly).unwrap().contains("socket"));
        std::fs::create_dir_all(t.join("runtime/x")).unwrap();
        assert!(g.refusal(&t.join("runtime/x"), Exposure::ReadOnly).unwrap().contains("runtime directory"));
    }

    #[test]
    fn credentials_startup_files_and_other_homes_are_never_writable() {
        let t = tempfile::tempdir().unwrap();
        let t = t.path().canonicalize().unwrap();
        let user = t.join("user");
        std::fs::create_dir_all(user.join("src/app")).unwrap();
        let g = guard(&user, &t.join("forage"), &t.join("absent.sock"));
        for (rel, needle) in [
            (".ssh", "ssh keys"),
            (".config", "systemd user units"),
            (".config/systemd/user", "systemd user units"),
            (".local/bin", "on the user's PATH"),
            (".local", "on the user's PATH"),
            (".bashrc", "shell startup file"),
            (".gitconfig", "git's configuration"),
            ("tools", "programs on PATH"),
            ("src/app/.git", "repository's own directory"),
            ("src/app/.git/hooks", "repository's own directory"),
        ] {
            let path = user.join(rel);
            let why = g.refusal(&path, Exposure::Writable).unwrap_or_else(|| panic!("{rel} allowed"));
            assert!(why.contains(needle), "{rel}: {why}");
            assert!(g.refused_only_writable(&path), "{rel}: read-only is the user's choice");
        }
        assert_eq!(g.refusal(&user.join("src/app"), Exposure::Writable), None);
        // The home itself is --allow-home's business (exposes_user_home), not a refusal.
        assert_eq!(g.refusal(&user, Exposure::Writable), None);
        assert!(g.exposes_user_home(&user) && g.exposes_user_home(&t));
        if Path::new("/root").is_dir() && resolved(Path::new("/root")) != user {
            let why = g.refusal(&resolved(Path::new("/root")), Exposure::Writable).unwrap();
            assert!(why.contains("another user's home") || why.contains("system"), "{why}");
        }
    }

    #[test]
    fn a_forage_home_not_made_yet_is_compared_where_it_really_is() {
        let t = tempfile::tempdir().unwrap();
        let t = t.path().canonicalize().unwrap();
        let real = t.join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, t.join("link")).unwrap();
        assert_eq!(resolved(&t.join("link/forage/home")), real.join("forage/home"));
        let g = guard(&t.join("user"), &t.join("link/forage/home"), &t.join("absent.sock"));
        assert!(g.refusal(&real, Exposure::Writable).unwrap().contains("holds forage's state"));
    }
}
