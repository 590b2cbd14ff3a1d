//! Why the Docker engine cannot be reached, told apart by the operating
//! system's own error: a user who may not open the socket, a socket that is
//! not there, and an engine that refuses the connection each need a different
//! fix, and "start dockerd" is wrong advice for the first.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::error::Error;

/// The engine forage talks to when DOCKER_HOST is unset.
pub const DEFAULT_HOST: &str = "unix:///var/run/docker.sock";

/// What stood between forage and the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// EACCES (or EPERM) opening the socket: the user may not use it.
    Denied,
    /// No socket at that path (ENOENT).
    Missing,
    /// ECONNREFUSED: nothing listens there (a socket left by an engine that
    /// stopped, a file that is not a socket, a TCP port with no engine).
    Refused,
    /// Anything else (a scheme bollard does not support, a timeout, …).
    Other,
}

/// The first cause the error, or any error it was caused by, names.
pub fn cause(err: &(dyn std::error::Error + 'static)) -> Cause {
    let mut next = Some(err);
    while let Some(e) = next {
        let io = match e.downcast_ref::<bollard::errors::Error>() {
            Some(bollard::errors::Error::SocketNotFoundError(_)) => return Cause::Missing,
            // bollard keeps this one's OS error as a field, not as its source.
            Some(bollard::errors::Error::IOError { err }) => Some(err),
            _ => e.downcast_ref::<std::io::Error>(),
        };
        match io.map(std::io::Error::kind) {
            Some(std::io::ErrorKind::PermissionDenied) => return Cause::Denied,
            Some(std::io::ErrorKind::NotFound) => return Cause::Missing,
            Some(std::io::ErrorKind::ConnectionRefused) => return Cause::Refused,
            _ => next = e.source(),
        }
    }
    Cause::Other
}

/// The error for an engine at `host` (a DOCKER_HOST value) that `err` kept
/// forage from: one message naming the socket or address, one fix. Exit 5.
pub fn unreachable(host: &str, err: &(dyn std::error::Error + 'static)) -> Error {
    let socket = host.strip_prefix("unix://").map(Path::new);
    if let Some(path) = socket.filter(|p| is_podman_socket(p)) {
        return podman_unreachable(host, path, cause(err), err);
    }
    match (cause(err), socket) {
        (Cause::Denied, Some(path)) => {
            let owner = socket_owner(path);
            Error::engine(format!(
                "permission denied on the Docker socket {}: {} may not use it{}",
                path.display(),
                who(),
                owner
                    .as_ref()
                    .map(|(group, mode)| format!(" (its group is {group}, mode {mode:o})"))
                    .unwrap_or_default()
            ))
            .hint(format!(
                "add yourself to the group that owns it (`sudo usermod -aG {0} $USER`, then log in again or run \
                 `newgrp {0}`), or use rootless Docker (DOCKER_HOST=unix://$XDG_RUNTIME_DIR/docker.sock)",
                owner.as_ref().map_or("docker", |(group, _)| group.as_str())
            ))
        }
        (Cause::Missing, Some(path)) => {
            Error::engine(format!("no Docker engine at {host}: there is no socket {}", path.display())).hint(
                "start dockerd (e.g. `sudo systemctl start docker`), or point DOCKER_HOST at the socket of a \
                 running engine",
            )
        }
        (Cause::Refused, Some(path)) => Error::engine(format!(
            "no Docker engine listens on the socket {} (connection refused): the engine that made it has stopped, \
             or it is not a Docker socket",
            path.display()
        ))
        .hint("start dockerd (e.g. `sudo systemctl start docker`), or point DOCKER_HOST at a running engine"),
        (Cause::Refused, None) => {
            Error::engine(format!("the Docker engine at {host} refused the connection: nothing listens there"))
                .hint("start the engine listening on that address, or correct the host and port in DOCKER_HOST")
        }
        _ => Error::engine(format!("cannot reach the Docker engine at {host} ({})", chain(err)))
            .hint("start dockerd (e.g. `sudo systemctl start docker`) or point DOCKER_HOST at a running engine"),
    }
}

/// A Podman service's socket (`…/podman/podman.sock`, rootless or rootful).
fn is_podman_socket(path: &Path) -> bool {
    path.ends_with("podman/podman.sock")
}

/// How to start the Podman service behind `path`: the user's own (rootless)
/// unless it is the system's socket under /run/podman.
pub fn podman_start(path: &Path) -> String {
    if path.starts_with("/run/podman") {
        "start the Podman service: `sudo systemctl start podman.socket`".into()
    } else {
        format!(
            "start your Podman service: `systemctl --user start podman.socket` (without systemd: \
             `podman system service --time=0 unix://{} &`)",
            path.display()
        )
    }
}

/// The error for a Podman socket: the same causes, Podman's fix.
fn podman_unreachable(host: &str, path: &Path, cause: Cause, err: &(dyn std::error::Error + 'static)) -> Error {
    let message = match cause {
        Cause::Denied => format!("permission denied on the Podman socket {}: {} may not use it", path.display(), who()),
        Cause::Missing => format!("no Podman service at {host}: there is no socket {}", path.display()),
        Cause::Refused => format!("no Podman service listens on the socket {} (connection refused)", path.display()),
        Cause::Other => format!("cannot reach the Podman service at {host} ({})", chain(err)),
    };
    let fix = match cause {
        // A rootless socket is its owner's alone: use your own.
        Cause::Denied => "use your own Podman service (`systemctl --user start podman.socket`), or run as the user \
                          that owns this one"
            .to_owned(),
        _ => podman_start(path),
    };
    Error::engine(message).hint(fix)
}

/// The user forage runs as, by name when it has one.
fn who() -> String {
    let uid = nix::unistd::getuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(user)) => format!("user {} (uid {uid})", user.name),
        _ => format!("uid {uid}"),
    }
}

/// The socket's group (by name when it has one) and permission bits, when
/// they can be read.
fn socket_owner(path: &Path) -> Option<(String, u32)> {
    let meta = std::fs::metadata(path).ok()?;
    let group = match nix::unistd::Group::from_gid(meta.gid().into()) {
        Ok(Some(group)) => group.name,
        _ => meta.gid().to_string(),
    };
    Some((group, meta.mode() & 0o7777))
}

/// The error and its causes, as one line: bollard's own message alone says
/// "client error (Connect)", the operating system's reason is further down.
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![err.to_string()];
    let mut next = err.source();
    while let Some(e) = next {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        next = e.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(code: i32) -> bollard::errors::Error {
        bollard::errors::Error::IOError { err: std::io::Error::from_raw_os_error(code) }
    }

    /// An error as a connector wraps it: the OS error two causes down.
    #[derive(Debug)]
    struct Wrapped(std::io::Error);
    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("client error (Connect)")
        }
    }
    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn each_os_error_is_its_own_cause_however_deep() {
        assert_eq!(cause(&os(libc::EACCES)), Cause::Denied);
        assert_eq!(cause(&os(libc::EPERM)), Cause::Denied);
        assert_eq!(cause(&os(libc::ENOENT)), Cause::Missing);
        assert_eq!(cause(&os(libc::ECONNREFUSED)), Cause::Refused);
        assert_eq!(cause(&os(libc::ETIMEDOUT)), Cause::Other);
        assert_eq!(cause(&bollard::errors::Error::SocketNotFoundError("/x".into())), Cause::Missing);
        assert_eq!(cause(&Wrapped(std::io::Error::from_raw_os_error(libc::EACCES))), Cause::Denied);
    }

    #[test]
    fn each_cause_has_its_own_message_and_fix() {
        let denied = unreachable("unix:///nonexistent/docker.sock", &os(libc::EACCES));
        assert!(denied.to_string().starts_with("permission denied on the Docker socket /nonexistent/docker.sock: "));
        assert!(denied.hints()[0].text.contains("usermod -aG docker") && denied.hints()[0].text.contains("newgrp"));
        assert!(!denied.hints()[0].text.contains("start dockerd"));

        let missing = unreachable("unix:///run/x.sock", &os(libc::ENOENT));
        assert_eq!(missing.to_string(), "no Docker engine at unix:///run/x.sock: there is no socket /run/x.sock");
        assert!(missing.hints()[0].text.starts_with("start dockerd"));

        let refused = unreachable("tcp://127.0.0.1:1", &os(libc::ECONNREFUSED));
        assert_eq!(
            refused.to_string(),
            "the Docker engine at tcp://127.0.0.1:1 refused the connection: nothing listens there"
        );
        assert!(refused.hints()[0].text.contains("DOCKER_HOST"));

        let stale = unreachable("unix:///run/x.sock", &os(libc::ECONNREFUSED));
        assert!(stale
            .to_string()
            .starts_with("no Docker engine listens on the socket /run/x.sock (connection refused)"));

        let other = unreachable("unix:///run/x.sock", &Wrapped(std::io::Error::from_raw_os_error(libc::ETIMEDOUT)));
        assert!(other.to_string().starts_with("cannot reach the Docker engine at unix:///run/x.sock (client error"));
        for e in [denied, missing, refused, stale, other] {
            assert_eq!(e.exit_code(), 5);
        }
    }

    #[test]
    fn a_podman_socket_is_named_as_podman_with_podmans_fix() {
        let rootless = unreachable("unix:///run/user/7/podman/podman.sock", &os(libc::ENOENT));
        assert_eq!(
            rootless.to_string(),
            "no Podman service at unix:///run/user/7/podman/podman.sock: there is no socket /run/user/7/podman/podman.sock"
        );
        assert!(rootless.hints()[0].text.contains("systemctl --user start podman.socket"));
        assert!(rootless.hints()[0]
            .text
            .contains("podman system service --time=0 unix:///run/user/7/podman/podman.sock"));
        let rootful = unreachable("unix:///run/podman/podman.sock", &os(libc::ECONNREFUSED));
        assert!(rootful.to_string().starts_with("no Podman service listens on the socket /run/podman/podman.sock"));
        assert!(rootful.hints()[0].text.contains("sudo systemctl start podman.socket"));
        let denied = unreachable("unix:///run/user/7/podman/podman.sock", &os(libc::EACCES));
        assert!(denied.to_string().starts_with("permission denied on the Podman socket"));
        for e in [rootless, rootful, denied] {
            assert_eq!(e.exit_code(), 5);
            assert!(!e.hints()[0].text.contains("dockerd"));
        }
    }
}
