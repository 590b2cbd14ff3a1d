//! One container create at a time on a rootless Podman service, across every
//! forage-ctl process that speaks to it.
//!
//! Rootless Podman 4.3 reads the user's subordinate ids through libsubid for
//! each `keep-id` create, and libsubid is not safe to call from two threads at
//! once: concurrent creates now and then fail with "keep-id requires
//! additional UIDs or GIDs … %!w(<nil>)", and once in a while the service
//! dies with SIGSEGV inside `subid_get_uid_ranges`, taking every sandbox's
//! engine with it. Serialising the creates keeps those calls apart. A create
//! takes tens of milliseconds, so sixteen parallel `up`s wait well under a
//! second in all.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use super::engine_choice::{socket_path, EngineInfo};

/// Held while a create is in flight; the kernel lets go of it if the process dies.
pub(super) struct CreateLock {
    _file: Flock<File>,
}

/// The lock for `info`'s engine, when it is rootless Podman on a unix socket;
/// `None` for every other engine, whose creates need no such care. The lock
/// file lives beside the socket, in a directory only the service's user can
/// write (anyone who can write there controls the engine already). When it
/// cannot be opened, the create goes ahead unserialised rather than failing.
pub(super) async fn for_create(info: &EngineInfo) -> Option<CreateLock> {
    let path = lock_path(info)?;
    let taken = tokio::task::spawn_blocking(move || take(&path).map_err(|e| (path, e))).await;
    match taken {
        Ok(Ok(lock)) => Some(lock),
        Ok(Err((path, e))) => {
            tracing::debug!("creating without Podman's create lock {}: {e}", path.display());
            None
        }
        Err(e) => {
            tracing::debug!("taking Podman's create lock: {e}");
            None
        }
    }
}

fn lock_path(info: &EngineInfo) -> Option<PathBuf> {
    if !info.rootless {
        return None;
    }
    Some(socket_path(&info.host)?.parent()?.join("forage-create.lock"))
}

fn take(path: &Path) -> std::io::Result<CreateLock> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    let file = Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, errno)| std::io::Error::from(errno))?;
    Ok(CreateLock { _file: file })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(host: &str, podman: bool, rootless: bool) -> EngineInfo {
        EngineInfo { host: host.into(), podman, rootless, version: "4.3.1".into(), socket_owner: Some(1000) }
    }

    #[test]
    fn only_rootless_podman_on_a_socket_is_serialised() {
        let sock = "unix:///run/user/1000/podman/podman.sock";
        assert_eq!(
            lock_path(&engine(sock, true, true)),
            Some(PathBuf::from("/run/user/1000/podman/forage-create.lock"))
        );
        assert_eq!(lock_path(&engine(sock, true, false)), None);
        assert_eq!(lock_path(&engine("unix:///var/run/docker.sock", false, false)), None);
        assert_eq!(lock_path(&engine("tcp://127.0.0.1:2375", true, true)), None);
    }

    #[test]
    fn a_second_holder_waits_for_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("forage-create.lock");
        let first = take(&path).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let path = path.clone();
            std::thread::spawn(move || {
                let _second = take(&path).unwrap();
                tx.send(()).unwrap();
            })
        };
        // The second take blocks while the first is held…
        assert!(rx.recv_timeout(std::time::Duration::from_millis(300)).is_err());
        drop(first);
        // …and gets the lock once it is let go.
        rx.recv_timeout(std::time::Duration::from_secs(30)).unwrap();
        waiter.join().unwrap();
    }

    #[test]
    fn a_symlink_in_the_lock_s_place_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("forage-create.lock");
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &path).unwrap();
        assert!(take(&path).is_err());
        assert!(!dir.path().join("elsewhere").exists());
    }
}
