//! Host paths forage will not hand an agent: whatever would give it the machine
//! (a container engine's socket: root on the host), forage's own state (records
//! an agent could forge, other sandboxes' workspaces), or everything at once (`/`).
//! Checked for `--workspace` and for every template mount, before anything is made.

use std::path::{Path, PathBuf};

/// Where container engines listen, by default and as configured.
fn engine_sockets() -> Vec<PathBuf> {
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
    for var in ["DOCKER_HOST", "CONTAINER_HOST"] {
        if let Some(path) = std::env::var(var).ok().and_then(|h| h.strip_prefix("unix://").map(PathBuf::from)) {
            sockets.push(path);
        }
    }
    let runtime_dirs = [
        std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from),
        Some(PathBuf::from(format!("/run/user/{}", nix::unistd::getuid()))),
    ];
    for dir in runtime_dirs.into_iter().flatten() {
        sockets.push(dir.join("docker.sock"));
        sockets.push(dir.join("podman/podman.sock"));
    }
    sockets
}

/// True when `a` is `b`, holds it, or lies inside it.
fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// Why `path` (canonical) must never be mounted into a sandbox, if it must not.
/// `forage_home` is FORAGE_HOME (which may not exist yet).
pub fn refusal(path: &Path, forage_home: &Path) -> Option<String> {
    refusal_among(path, forage_home, &engine_sockets())
}

fn refusal_among(path: &Path, forage_home: &Path, sockets: &[PathBuf]) -> Option<String> {
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
                if path == dir { "is" } else if dir.starts_with(path) { "holds" } else { "is inside" },
                dir.display(),
                socket.display()
            ));
        }
    }
    let home = forage_home.canonicalize().unwrap_or_else(|_| forage_home.to_path_buf());
    if overlaps(path, &home) {
        return Some(format!(
            "it {} forage's state, {} (FORAGE_HOME): an agent could forge records there, or reach other sandboxes' workspaces",
            if path == home { "is" } else if home.starts_with(path) { "holds" } else { "is inside" },
            home.display()
        ));
    }
    None
}

/// True when `path` is the user's home directory or holds it: mounted writable,
/// the agent could plant shell startup files, ssh keys, git config.
pub fn exposes_user_home(path: &Path) -> bool {
    let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()).map(PathBuf::from) else { return false };
    let home = home.canonicalize().unwrap_or(home);
    home.starts_with(path)
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
        let refused = |p: &Path| refusal_among(p, &home, &sockets);

        assert!(refused(Path::new("/")).unwrap().contains("whole file system"));
        assert!(refused(&socket).unwrap().contains("is a socket"));
        assert!(refused(&run).unwrap().contains("it is") && refused(&run).unwrap().contains("root on this machine"));
        assert!(refused(&t.join("run")).unwrap().contains("it holds"));
        assert!(refused(&home).unwrap().contains("is forage's state"));
        assert!(refused(&home.join("workspaces/x")).unwrap().contains("is inside forage's state"));
        assert_eq!(refused(&project), None);
        // t holds both the socket's directory and FORAGE_HOME; the socket is named.
        assert!(refused(&t).unwrap().contains("socket"));
    }
}
