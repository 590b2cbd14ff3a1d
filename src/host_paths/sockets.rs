//! Finding Unix sockets under a host path: whoever can reach a socket can talk
//! to the program listening on it (a tmux server takes keystrokes, an ssh agent
//! signs, a container engine runs containers), and a read-only mount does not
//! stop anyone from connecting.
//!
//! Two looks, because neither is enough alone: the kernel's list of bound
//! sockets (`/proc/net/unix`, every socket of this network namespace that has a
//! listener, however deep, at no cost per file), and a bounded walk of the
//! directory for socket files (sockets bound in another namespace, a
//! container's, are files too, and are not in that list).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use std::os::unix::fs::FileTypeExt;

/// The most directory entries one walk looks at: enough for any project's tree
/// of source files at a few milliseconds, short of a whole disk. A walk that
/// stops here has still checked every socket the kernel lists.
pub const MAX_SCAN_ENTRIES: usize = 100_000;

/// The paths of the sockets bound in this network namespace, canonical, as
/// `/proc/net/unix` lists them (abstract and relative ones left out).
pub fn live_sockets() -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    let mut canonical_dirs: HashMap<PathBuf, Option<PathBuf>> = HashMap::new();
    let mut out = Vec::new();
    for line in text.lines().skip(1) {
        let Some(path) = bound_path(line) else { continue };
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else { continue };
        let real = canonical_dirs.entry(dir.to_path_buf()).or_insert_with(|| dir.canonicalize().ok());
        if let Some(real) = real {
            out.push(real.join(name));
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The path a `/proc/net/unix` line names: the rest of the line after its seven
/// fixed fields (a path may hold spaces), when it is an absolute one.
fn bound_path(line: &str) -> Option<PathBuf> {
    let mut rest = line.trim_start();
    for _ in 0..7 {
        let end = rest.find(char::is_whitespace)?;
        rest = rest[end..].trim_start();
    }
    rest.starts_with('/').then(|| PathBuf::from(rest))
}

/// The first socket file under `dir` (itself excluded), looking at no more
/// than `limit` entries and never following a symlink; `None` when the walk
/// found none.
pub fn socket_under(dir: &Path, limit: usize) -> Option<PathBuf> {
    let mut todo: Vec<PathBuf> = vec![dir.to_path_buf()];
    let mut seen = 0usize;
    while let Some(at) = todo.pop() {
        let Ok(entries) = std::fs::read_dir(&at) else { continue };
        for entry in entries.flatten() {
            seen += 1;
            if seen > limit {
                return None;
            }
            // The entry's own type (readdir's, else lstat's): a symlink is never followed.
            let Ok(kind) = entry.file_type() else { continue };
            if kind.is_dir() {
                todo.push(entry.path());
            } else if kind.is_socket() {
                return Some(entry.path());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_unix_lines_give_their_paths_spaces_and_all() {
        let line = "0000000000000000: 00000002 00000000 00010000 0001 01 23456 /tmp/tmux-1000/my server";
        assert_eq!(bound_path(line), Some(PathBuf::from("/tmp/tmux-1000/my server")));
        assert_eq!(bound_path("0000000000000000: 00000002 00000000 00010000 0001 01 23456 @abstract"), None);
        assert_eq!(bound_path("0000000000000000: 00000002 00000000 00010000 0001 01 23456"), None);
    }

    #[test]
    fn a_listening_socket_is_found_by_both_looks() {
        let t = tempfile::tempdir().unwrap();
        let deep = t.path().canonicalize().unwrap().join("a/b/c");
        std::fs::create_dir_all(&deep).unwrap();
        std::fs::write(deep.join("file"), "x").unwrap();
        assert_eq!(socket_under(t.path(), MAX_SCAN_ENTRIES), None);
        let socket = deep.join("door.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        assert_eq!(socket_under(t.path(), MAX_SCAN_ENTRIES), Some(socket.clone()));
        assert_eq!(socket_under(t.path(), 2), None, "a walk stops at its bound");
        assert!(live_sockets().contains(&socket));
    }
}
