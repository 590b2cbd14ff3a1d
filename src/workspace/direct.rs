//! `--workspace PATH`: the host directory itself, bind-mounted read-write. No
//! isolation, nothing to create, and nothing to tear down: forage never modifies or
//! deletes the directory.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::git::ArchiveOutcome;
use super::{AtStake, Inside, Mode, Part, Scope, Synced, Workspace, WorkspaceStatus};
use crate::error::{Error, Result};
use crate::host_paths::{Exposure, Guard};

/// An existing directory, made absolute and free of symlinks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DirectWorkspace {
    pub path: PathBuf,
}

impl DirectWorkspace {
    /// `guard` knows what no sandbox may see; `allow_home` is `--allow-home`.
    pub fn validate(raw: &Path, guard: &Guard, allow_home: bool) -> Result<Self> {
        let shown = raw.display();
        let meta = std::fs::metadata(raw).map_err(|e| {
            Error::workspace(match e.kind() {
                std::io::ErrorKind::NotFound => format!(
                    "workspace path {shown:?} does not exist; create it first or pass an existing directory to --workspace"
                ),
                _ => format!("workspace path {shown:?} cannot be read ({e}); check its permissions"),
            })
        })?;
        if !meta.is_dir() {
            return Err(Error::workspace(format!(
                "workspace path {shown:?} is not a directory; pass a directory to --workspace"
            )));
        }
        let canonical = raw
            .canonicalize()
            .map_err(|e| Error::workspace(format!("cannot resolve workspace path {shown:?}: {e}")))?;
        // Checked as writable also for --read-only: a system directory is no
        // project, and read-only is for a template mount of what the agent reads.
        if let Some(why) = guard.refusal(&canonical, Exposure::Writable) {
            let even = if guard.refused_only_writable(&canonical) { ", even read-only" } else { "" };
            return Err(Error::usage(format!(
                "refusing to mount {} as a workspace{even}: {why}; pass a project directory",
                canonical.display()
            )));
        }
        if guard.exposes_user_home(&canonical) && !allow_home {
            return Err(Error::usage(format!(
                "{} is (or holds) your home directory: the agent could change your shell's startup files, ssh keys and git config; pass a project directory, or --allow-home if you mean it",
                canonical.display()
            )));
        }
        // Only now: what is refused is refused whatever its permissions (an
        // ordinary user cannot read /root, and "check its permissions" would
        // send them the wrong way).
        std::fs::read_dir(raw).map_err(|e| {
            Error::workspace(format!("workspace path {shown:?} cannot be read ({e}); check its permissions"))
        })?;
        Ok(DirectWorkspace { path: canonical })
    }
}

impl Workspace for DirectWorkspace {
    fn mode(&self) -> Mode {
        Mode::Direct
    }

    fn host_path(&self) -> &Path {
        &self.path
    }

    fn mounts(&self, read_only: bool, _guard: &Guard) -> Vec<crate::runtime::Mount> {
        vec![crate::runtime::Mount {
            source: self.path.clone(),
            target: crate::inside::WORKSPACE.into(),
            read_only,
            overlay: None,
        }]
    }

    fn make(&self, _part: Part) -> Result<()> {
        Ok(())
    }

    /// The directory is the user's: never touched.
    fn unmake(&self, _part: Part, _scope: &Scope) -> Result<()> {
        Ok(())
    }

    fn sync(&self, _inside: Option<Inside>) -> Result<Synced> {
        Err(Error::usage(format!(
            "the sandbox works directly in {}, which has no history for forage to sync; sync is for --git-worktree and --jj sandboxes",
            self.path.display()
        )))
    }

    fn at_stake(&self, _inside: Option<Inside>) -> Result<Option<AtStake>> {
        Ok(None)
    }

    fn archive(&self, _: &crate::names::SandboxName, _: &str, _: Option<Inside>) -> Result<ArchiveOutcome> {
        Ok(ArchiveOutcome::default())
    }

    fn status(&self) -> Result<Option<WorkspaceStatus>> {
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_missing_files_and_root() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        let home = dir.path().join("forage-home");
        let guard = Guard::new(&crate::env::Settings::default(), Some(&home));
        for (bad, needle, code) in [
            (dir.path().join("missing"), "does not exist", 6),
            (file, "is not a directory", 6),
            (PathBuf::from("/"), "refusing", 2),
            (dir.path().to_path_buf(), "forage's state", 2),
        ] {
            let err = DirectWorkspace::validate(&bad, &guard, false).unwrap_err();
            assert_eq!(err.exit_code(), code, "{err}");
            assert!(err.to_string().contains(needle), "{err}");
        }
        let project = dir.path().join("project");
        std::fs::create_dir(&project).unwrap();
        assert!(DirectWorkspace::validate(&project, &guard, false).is_ok());
    }
}
