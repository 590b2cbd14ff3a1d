//! `--workspace PATH`: the host directory itself, bind-mounted read-write. No
//! isolation, nothing to create, and nothing to tear down: forage never modifies or
//! deletes the directory.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// An existing directory, made absolute and free of symlinks.
#[derive(Debug, Clone, PartialEq)]
pub struct DirectPath(PathBuf);

impl DirectPath {
    pub fn validate(raw: &Path) -> Result<Self> {
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
        if canonical == Path::new("/") {
            return Err(Error::Workspace("refusing to mount / as a workspace; pass a project directory".into()));
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
        for (bad, needle) in [
            (dir.path().join("missing"), "does not exist"),
            (file, "is not a directory"),
            (PathBuf::from("/"), "refusing"),
        ] {
            let err = DirectPath::validate(&bad).unwrap_err();
            assert_eq!(err.exit_code(), 6);
            assert!(err.to_string().contains(needle), "{err}");
        }
        assert!(DirectPath::validate(dir.path()).is_ok());
    }
}
