//! The host's copy of each template's agent state, per profile:
//! FORAGE_HOME/agent-state/profiles/<template>/<profile>/ holds `files/` (the
//! state files, by their path under the agent's home) and `manifest.json`
//! (each file's SHA-256 and when its content last changed). Directories are
//! 0700 and files 0600; every file is written to a temporary name and renamed
//! into place; every read-modify-write holds the profile's lock. What each
//! sandbox was given is in FORAGE_HOME/agent-state/sandboxes/<name>.json.
//!
//! Only forage writes here: no container mounts any of it (a sandbox gets a
//! copy through the Engine API), so a path under it is never a symlink an
//! agent planted.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::archive::Seen;
use super::merge::{self, Action, Current, StoreFile};
use super::{sha256, Given, StatePath};
use crate::error::{Context, Error, Result};
use crate::names::SandboxName;
use crate::store::Home;

const MANIFEST: &str = "manifest.json";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Manifest {
    files: BTreeMap<String, ManifestFile>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ManifestFile {
    sha256: String,
    /// Seconds since the Unix epoch.
    changed_at: u64,
}

/// One stored template/profile pair, as `login --list` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct StoredProfile {
    pub template: String,
    pub profile: String,
    pub files: usize,
    /// When a file of it last changed (seconds since the Unix epoch).
    pub changed_at: Option<u64>,
}

/// What a write-back did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TakenBack {
    pub written: Vec<String>,
    pub deleted: Vec<String>,
    /// Files the agent changed that the store kept a newer copy of.
    pub kept_newer: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct StateStore {
    home: Home,
}

impl StateStore {
    pub fn new(home: &Home) -> Self {
        StateStore { home: home.clone() }
    }

    fn root(&self) -> PathBuf {
        self.home.root().join("agent-state")
    }

    fn profile_dir(&self, template: &str, profile: &str) -> PathBuf {
        self.root().join("profiles").join(template).join(profile)
    }

    fn lock(&self, template: &str, profile: &str) -> Result<crate::store::Lock> {
        self.home.lock_state(&format!("agent-state-{template}-{profile}"))
    }

    fn manifest(&self, dir: &Path) -> Result<Manifest> {
        let path = dir.join(MANIFEST);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).context(|| format!("reading {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Manifest::default()),
            Err(e) => Err(Error::other(format!("reading {}: {e}", path.display()))),
        }
    }

    /// The stored files of `paths`, with their times, to give a new sandbox.
    pub fn read_for_giving(
        &self,
        template: &str,
        profile: &str,
        paths: &[StatePath],
    ) -> Result<BTreeMap<String, (Vec<u8>, u64)>> {
        let _lock = self.lock(template, profile)?;
        let dir = self.profile_dir(template, profile);
        let manifest = self.manifest(&dir)?;
        let mut out = BTreeMap::new();
        for (file, entry) in &manifest.files {
            if !paths.iter().any(|p| p.holds(file)) || !super::rel_ok(file) {
                continue;
            }
            let path = dir.join("files").join(file);
            match fs::read(&path) {
                Ok(bytes) => {
                    out.insert(file.clone(), (bytes, entry.changed_at));
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::other(format!("reading {}: {e}", path.display()))),
            }
        }
        Ok(out)
    }

    /// Takes back what the agent changed (`seen`, by state path; a path
    /// missing from it could not be read and is left alone), under the
    /// profile's lock. Returns what was done and what the sandbox now counts
    /// as given.
    pub fn write_back(
        &self,
        given: &Given,
        paths: &[StatePath],
        seen: &BTreeMap<String, Seen>,
        now: u64,
    ) -> Result<(TakenBack, Given)> {
        let current = current_of(paths, seen, given);
        let _lock = self.lock(&given.template, &given.profile)?;
        let dir = self.profile_dir(&given.template, &given.profile);
        let mut manifest = self.manifest(&dir)?;
        let store: BTreeMap<String, StoreFile> = manifest
            .files
            .iter()
            .map(|(f, m)| (f.clone(), StoreFile { sha256: m.sha256.clone(), changed_at: m.changed_at }))
            .collect();
        let actions = merge::decide(&current, &given.files, given.at, &store, now);
        let mut done = TakenBack::default();
        for (file, cur) in &current {
            let changed = cur.sha256 != given.files.get(file).cloned().flatten();
            match actions.get(file) {
                Some(Action::Write { changed_at }) => {
                    let bytes = seen.values().find_map(|s| s.files.get(file)).map(|f| f.bytes.as_slice());
                    let Some(bytes) = bytes else { continue };
                    write_file(&dir.join("files"), file, bytes)?;
                    manifest
                        .files
                        .insert(file.clone(), ManifestFile { sha256: sha256(bytes), changed_at: *changed_at });
                    done.written.push(file.clone());
                }
                Some(Action::Delete) => {
                    remove_file(&dir.join("files"), file)?;
                    manifest.files.remove(file);
                    done.deleted.push(file.clone());
                }
                None if changed && cur.sha256.is_some() => done.kept_newer.push(file.clone()),
                None => {}
            }
        }
        if !actions.is_empty() {
            write_private(&dir, MANIFEST, &serde_json::to_vec_pretty(&manifest).map_err(Error::other)?)?;
        }
        let mut next = given.clone();
        next.at = now;
        for (file, cur) in current {
            next.files.insert(file, cur.sha256);
        }
        Ok((done, next))
    }

    /// `logout`: removes the stored copy of `template`'s `profile`. False
    /// when there was none.
    pub fn remove(&self, template: &str, profile: &str) -> Result<bool> {
        let _lock = self.lock(template, profile)?;
        let dir = self.profile_dir(template, profile);
        match fs::symlink_metadata(&dir) {
            Ok(m) if m.is_dir() => {
                fs::remove_dir_all(&dir).context(|| format!("removing {}", dir.display()))?;
                // The template's directory goes with its last profile.
                if let Some(parent) = dir.parent() {
                    let _ = fs::remove_dir(parent);
                }
                Ok(true)
            }
            Ok(_) => Err(Error::other(format!("{} is not a directory; forage did not make it", dir.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(Error::other(format!("reading {}: {e}", dir.display()))),
        }
    }

    /// Whether a login (or any state) is kept for `template`'s `profile`.
    pub fn holds_any(&self, template: &str, profile: &str) -> Result<bool> {
        Ok(!self.manifest(&self.profile_dir(template, profile))?.files.is_empty())
    }

    /// Every stored template/profile pair.
    pub fn list(&self) -> Result<Vec<StoredProfile>> {
        let mut out = Vec::new();
        for template in sorted_dirs(&self.root().join("profiles")) {
            for profile in sorted_dirs(&self.root().join("profiles").join(&template)) {
                let manifest = self.manifest(&self.profile_dir(&template, &profile))?;
                out.push(StoredProfile {
                    files: manifest.files.len(),
                    changed_at: manifest.files.values().map(|f| f.changed_at).max(),
                    template: template.clone(),
                    profile,
                });
            }
        }
        Ok(out)
    }

    fn given_path(&self, name: &SandboxName) -> PathBuf {
        self.root().join("sandboxes").join(format!("{}.json", name.as_str()))
    }

    /// What sandbox `name` was given; `None` if it was given nothing.
    pub fn given(&self, name: &SandboxName) -> Result<Option<Given>> {
        let path = self.given_path(name);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).context(|| format!("reading {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::other(format!("reading {}: {e}", path.display()))),
        }
    }

    pub fn save_given(&self, name: &SandboxName, given: &Given) -> Result<()> {
        let path = self.given_path(name);
        let dir = path.parent().expect("sandboxes dir");
        make_dirs(dir)?;
        write_private(dir, &format!("{}.json", name.as_str()), &serde_json::to_vec_pretty(given).map_err(Error::other)?)
    }

    /// Forgets what sandbox `name` was given (its teardown's last word on it).
    pub fn remove_given(&self, name: &SandboxName) -> Result<()> {
        let path = self.given_path(name);
        match fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::other(format!("removing {}: {e}", path.display())))
            }
            _ => Ok(()),
        }
    }
}

/// Each file to judge: those the sandbox was given or holds now, in the state
/// paths that could be read, without those skipped (a symlink is neither
/// content nor a deletion).
fn current_of(paths: &[StatePath], seen: &BTreeMap<String, Seen>, given: &Given) -> BTreeMap<String, Current> {
    let mut current = BTreeMap::new();
    for path in paths {
        let Some(seen) = seen.get(path.rel()) else { continue };
        for file in given.files.keys().filter(|f| path.holds(f)).chain(seen.files.keys()) {
            if seen.is_skipped(file) {
                continue;
            }
            let cur = match seen.files.get(file) {
                Some(f) => Current { sha256: Some(sha256(&f.bytes)), mtime: f.mtime },
                None => Current { sha256: None, mtime: 0 },
            };
            current.insert(file.clone(), cur);
        }
    }
    current
}

fn sorted_dirs(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn make_dirs(dir: &Path) -> Result<()> {
    fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).context(|| format!("creating {}", dir.display()))
}

/// Writes `bytes` as `dir/name` (0600): a temporary file, synced, renamed.
fn write_private(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .context(|| format!("writing {}", tmp.display()))?;
    f.write_all(bytes).and_then(|()| f.sync_all()).context(|| format!("writing {}", tmp.display()))?;
    let path = dir.join(name);
    fs::rename(&tmp, &path).context(|| format!("writing {}", path.display()))
}

/// Stores `bytes` as the state file `rel` under `files`.
fn write_file(files: &Path, rel: &str, bytes: &[u8]) -> Result<()> {
    let path = files.join(rel);
    let dir = path.parent().expect("a state file has a parent");
    make_dirs(dir)?;
    let name = path.file_name().and_then(|n| n.to_str()).expect("a checked name");
    write_private(dir, name, bytes)
}

/// Deletes the state file `rel` under `files`, and the directories it leaves empty.
fn remove_file(files: &Path, rel: &str) -> Result<()> {
    let path = files.join(rel);
    match fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(Error::other(format!("removing {}: {e}", path.display())))
        }
        _ => {}
    }
    let mut dir = path.parent();
    while let Some(d) = dir.filter(|d| d.starts_with(files) && *d != files) {
        if fs::remove_dir(d).is_err() {
            break;
        }
        dir = d.parent();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::archive::SeenFile;
    use super::*;

    #[test]
    fn a_write_back_stores_a_change_and_a_second_is_a_no_op() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path().to_path_buf()).unwrap();
        let store = StateStore::new(&home);
        let paths = vec![StatePath::parse(".claude/.credentials.json").unwrap()];
        let f = ".claude/.credentials.json".to_owned();
        let given = Given {
            template: "claude".into(),
            profile: "default".into(),
            paths: vec![f.clone()],
            at: 100,
            files: BTreeMap::new(),
        };
        let seen = Seen {
            files: BTreeMap::from([(f.clone(), SeenFile { bytes: b"token-1".to_vec(), mtime: 150 })]),
            ..Seen::default()
        };
        let seen = BTreeMap::from([(f.clone(), seen)]);
        let (done, next) = store.write_back(&given, &paths, &seen, 200).unwrap();
        assert_eq!(done.written, std::slice::from_ref(&f));
        let stored = store.read_for_giving("claude", "default", &paths).unwrap();
        assert_eq!(stored[&f], (b"token-1".to_vec(), 150));
        let (again, _) = store.write_back(&next, &paths, &seen, 300).unwrap();
        assert_eq!(again, TakenBack::default());
        use std::os::unix::fs::PermissionsExt;
        let file = dir.path().join("agent-state/profiles/claude/default/files").join(&f);
        assert_eq!(fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::metadata(file.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(store.list().unwrap().len(), 1);
        assert!(store.remove("claude", "default").unwrap());
        assert!(store.list().unwrap().is_empty());
    }
}
