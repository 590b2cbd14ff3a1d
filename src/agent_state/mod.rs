//! Agent state that outlives a sandbox (SPEC §9): the files a template names
//! as its agent's configuration and credentials (`agent.state`), kept once per
//! template and profile under FORAGE_HOME (`store`), given to each sandbox at
//! `up` (`archive::upload`), and taken back at `sync` and `down` from the
//! engine's archive of the container's files, read as hostile
//! (`archive::read`), with newest-wins rules (`merge`) so that a rotated
//! OAuth token is never lost and two sandboxes never corrupt each other's copy.
//!
//! Nothing read back is ever executed or parsed by forage: file contents are
//! bytes, hashed and stored; names are checked to stay under the state path.

pub mod archive;
pub mod merge;
pub mod store;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The profile a sandbox uses when `--profile` is not given.
pub const DEFAULT_PROFILE: &str = "default";

/// At most this many bytes of state files are taken back from one sandbox
/// (all its state paths together): configuration and tokens are kilobytes.
pub const MAX_BYTES: u64 = 16 << 20;
/// At most this many state files are taken back from one sandbox.
pub const MAX_FILES: usize = 1000;
/// At most this many path components below the agent's home.
pub const MAX_DEPTH: usize = 16;

/// One entry of a template's `agent.state`: a file, or (written with a
/// trailing `/`) a directory, relative to the agent's home.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatePath {
    /// Without the trailing `/`: `.claude/.credentials.json`, `.config/opencode`.
    rel: String,
    dir: bool,
}

impl StatePath {
    /// Relative, of plain components only (no `..`, `.`, empty ones), at most
    /// `MAX_DEPTH` deep.
    pub fn parse(raw: &str) -> Result<StatePath, String> {
        let (rel, dir) = match raw.strip_suffix('/') {
            Some(rel) => (rel, true),
            None => (raw, false),
        };
        if !rel_ok(rel) {
            return Err(format!(
                "{raw:?} must be a path relative to the agent's home (/home/agent) without '.', '..' or empty parts, e.g. .claude/.credentials.json or .config/opencode/"
            ));
        }
        Ok(StatePath { rel: rel.to_owned(), dir })
    }

    pub fn rel(&self) -> &str {
        &self.rel
    }

    pub fn is_dir(&self) -> bool {
        self.dir
    }

    /// Its path inside the container.
    pub fn inside(&self) -> String {
        format!("{}/{}", crate::inside::AGENT_HOME, self.rel)
    }

    /// Whether the stored file `file` (a relative path) is this path or under it.
    pub fn holds(&self, file: &str) -> bool {
        if self.dir {
            file.strip_prefix(&self.rel).is_some_and(|rest| rest.starts_with('/'))
        } else {
            file == self.rel
        }
    }
}

/// A relative path of plain components, at most `MAX_DEPTH` of them, no NUL.
pub fn rel_ok(rel: &str) -> bool {
    let parts: Vec<&str> = rel.split('/').collect();
    !rel.contains('\0') && parts.len() <= MAX_DEPTH && parts.iter().all(|p| !p.is_empty() && *p != "." && *p != "..")
}

/// The parsed `agent.state` of a template (checked when it was read).
pub fn state_paths(raw: &[String]) -> Vec<StatePath> {
    raw.iter().filter_map(|p| StatePath::parse(p).ok()).collect()
}

/// A profile name: the sandbox-name alphabet.
pub fn check_profile(profile: &str) -> crate::error::Result<()> {
    crate::names::SandboxName::parse(profile).map(|_| ()).map_err(|_| {
        crate::error::Error::usage(format!(
            "invalid profile {profile:?}: use {} (e.g. --profile work)",
            crate::names::NAME_RULE
        ))
    })
}

/// What a sandbox was given of each state file (or, after a write-back, what
/// was taken back): kept in FORAGE_HOME/agent-state/sandboxes/<name>.json, so
/// that a write-back knows what the agent changed and whether the store still
/// holds what this sandbox started from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Given {
    pub template: String,
    pub profile: String,
    /// The template's `agent.state` when the sandbox was made: what is taken
    /// back, whatever the template says later.
    pub paths: Vec<String>,
    /// When the sandbox was given its state (seconds since the Unix epoch):
    /// the oldest a change of its agent's can be.
    pub at: u64,
    /// Each file given or taken back, by its path relative to the agent's
    /// home: its SHA-256, `None` for a file it did not have.
    pub files: BTreeMap<String, Option<String>>,
}

/// The SHA-256 of `bytes`, in hex.
pub fn sha256(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_paths_are_plain_relative_paths() {
        let f = StatePath::parse(".claude/.credentials.json").unwrap();
        assert!(!f.is_dir() && f.holds(".claude/.credentials.json") && !f.holds(".claude/x"));
        let d = StatePath::parse(".config/opencode/").unwrap();
        assert!(d.is_dir() && d.rel() == ".config/opencode");
        assert!(d.holds(".config/opencode/a/b") && !d.holds(".config/opencodex/a") && !d.holds(".config/opencode"));
        assert_eq!(d.inside(), "/home/agent/.config/opencode");
        for bad in ["", "/etc/passwd", "../x", "a/../b", "./a", "a//b", "/", "a/./b", "a\0b"] {
            assert!(StatePath::parse(bad).is_err(), "{bad:?} accepted");
        }
        let deep = vec!["a"; MAX_DEPTH + 1].join("/");
        assert!(StatePath::parse(&deep).is_err());
    }
}
