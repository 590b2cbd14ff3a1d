//! `templates export NAME [DIR]`: a built-in template's files written out for
//! editing. By default into the user's template directory, where the copy
//! takes the built-in's place at once; all or nothing, never over a file.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::template::{builtin_files, Templates};

/// What `export` wrote.
pub struct Exported {
    pub dir: PathBuf,
    pub files: Vec<PathBuf>,
    /// Whether forage will now use the copy in place of the built-in.
    pub in_search_path: bool,
}

/// Writes built-in template `name` into `dir` (default: the first template
/// directory of the user's, `~/.config/forage/templates/NAME`).
pub fn export(templates: &Templates, name: &str, dir: Option<PathBuf>) -> Result<Exported> {
    let Some((yaml, dockerfile)) = builtin_files(name) else {
        if !templates.names().iter().any(|n| n == name) {
            return Err(templates
                .resolve(name)
                .err()
                .unwrap_or_else(|| Error::not_found(format!("no template {name:?}"))));
        }
        return Err(Error::usage(format!(
            "template {name:?} is not a built-in but a file of yours, which you can edit or copy as it is"
        ))
        .hint_run("{command} shows where it is", ["templates"]));
    };
    let dir = match dir.or_else(|| templates.user_dir().map(|d| d.join(name))) {
        Some(d) => d,
        None => return Err(Error::usage("no template directory of yours is known (HOME is not set); name a DIR")),
    };
    if std::fs::read_dir(&dir).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(Error::conflict(format!(
            "{} already holds files; export writes only into a new or empty directory",
            dir.display()
        ))
        .hint("remove it, or name another DIR"));
    }
    let made_dir = !dir.exists();
    std::fs::create_dir_all(&dir).map_err(|e| Error::usage(format!("cannot make {}: {e}", dir.display())))?;
    let mut files = vec![(dir.join("template.yaml"), yaml)];
    files.extend(dockerfile.map(|d| (dir.join("Dockerfile"), d)));
    let mut written = Vec::new();
    for (path, text) in &files {
        if let Err(e) = write_new(path, text) {
            // All or nothing: what this call made goes again.
            for w in &written {
                let _ = std::fs::remove_file(w);
            }
            if made_dir {
                let _ = std::fs::remove_dir(&dir);
            }
            return Err(Error::other(format!("writing {}: {e}", path.display())));
        }
        written.push(path.clone());
    }
    let in_search_path = dir.parent().is_some_and(|p| templates.search_path().iter().any(|d| d == p));
    Ok(Exported { dir, files: written, in_search_path })
}

/// Creates `path` with `text`; never over an existing file or through a symlink.
fn write_new(path: &Path, text: &str) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o644).open(path)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()
}
