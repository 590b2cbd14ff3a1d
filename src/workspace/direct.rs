//! `--workspace PATH`: the host directory itself, bind-mounted read-write. No
//! isolation, nothing to create, and nothing to tear down: forage never modifies or
//! deletes the directory.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// An existing directory, made absolute and free of symlinks.
#[derive(Debug, Clone, PartialEq)]
pub struct DirectPath(PathBuf);

impl DirectPath {
    /// `forage_home` is FORAGE_HOME; `allow_home` is `--allow-home`.
    pub fn validate(raw: &Path, forage_home: &Path, allow_home: bool) -> Result<Self> {
        let shown = raw.display();
        let meta = std::fs::metadata(raw).map_err(|e| {
            Error::Workspace(match e.kind() {
                std::io::ErrorKind::NotFound => format!(
                    "workspace path {shown:?} does not exist; create it first or pass an existing directory to --workspace"
                ),
                _ => format!("workspace path {shown:?} cannot be read ({e}); check its permissions"),
            })
        })?;
        if !meta.is_dir() {
            return Err(Error::Workspace(format!(
                "workspace path {shown:?} is not a directory; pass a directory to --workspace"
            )));
        }
        std::fs::read_dir(raw).map_err(|e| {
            Error::Workspace(format!("workspace path {shown:?} cannot be read ({e}); check its permissions"))
        })?;
        let canonical = raw
            .canonicalize()
            .map_err(|e| Error::Workspace(format!("cannot resolve workspace path {shown:?}: {e}")))?;
        if let Some(why) =
            crate::host_paths::refusal(&canonical, Some(forage_home), crate::host_paths::Exposure::Writable)
        {
            return Err(Error::Usage(format!(
                "refusing to mount {} as a workspace: {why}; pass a project directory",
                canonical.display()
            )));
        }
        if crate::host_paths::exposes_user_home(&canonical) && !allow_home {
            return Err(Error::Usage(format!(
                "{} is (or holds) your home directory: the agent could change your shell's startup files, ssh keys and git config; pass a project directory, or --allow-home if you mean it",
                canonical.display()
            )));
        }
        Ok(DirectPath(canonical))
    }

    pub fn path(&self) -> &Path {
        &self.0
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
        for (bad, needle, code) in [
            (dir.path().join("missing"), "does not exist", 6),
            (file, "is not a directory", 6),
            (PathBuf::from("/"), "refusing", 2),
            (dir.path().to_path_buf(), "forage's state", 2),
        ] {
            let err = DirectPath::validate(&bad, &home, false).unwrap_err();
            assert_eq!(err.exit_code(), code, "{err}");
            assert!(err.to_string().contains(needle), "{err}");
        }
        let project = dir.path().join("project");
        std::fs::create_dir(&project).unwrap();
        assert!(DirectPath::validate(&project, &home, false).is_ok());
    }
}
