//! FORAGE_HOME: the sandbox records (one JSON file each, written atomically, mode
//! 0600) and the lock files that serialise mutations of one sandbox or one repository.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::env::Settings;
use crate::error::{Context, Error, Result};
use crate::names::SandboxName;
use crate::workspace::WorkspaceRecord;

pub use crate::record::{ArchiveEntry, Record, RecordState, RECORD_VERSION};

/// A sandbox of this name exists already.
pub fn already_exists(name: &SandboxName) -> Error {
    Error::conflict(format!("sandbox {:?} already exists", name.as_str()))
        .hint_run("pick another name or remove it with {command}", ["down", name.as_str()])
}

/// In FORAGE_HOME/private/<name>: the sandbox's workspace, as `up` made it.
const WORKSPACE_SIDECAR: &str = "workspace.json";

/// Where forage keeps its state. Resolved once per process.
#[derive(Debug, Clone)]
pub struct Home {
    root: PathBuf,
}

impl Home {
    /// `$FORAGE_HOME`, else `$XDG_DATA_HOME/forage`, else `~/.local/share/forage`.
    pub fn from_settings(settings: &Settings) -> Result<Self> {
        let root = if let Some(h) = &settings.forage_home {
            h.clone()
        } else if let Some(x) = &settings.xdg_data_home {
            x.join("forage")
        } else if let Some(home) = &settings.home {
            home.join(".local/share/forage")
        } else {
            return Err(Error::usage("cannot find a place for forage's state: set FORAGE_HOME (or HOME)"));
        };
        Home::at(root)
    }

    /// Uses `root` as FORAGE_HOME, made absolute and free of symlinks, so that
    /// labels and records name it the same way whatever directory a later
    /// command runs from, and every path forage deletes under it is canonical
    /// (`remove_created_dir` refuses any other).
    pub fn at(root: PathBuf) -> Result<Self> {
        let root = if root.is_absolute() {
            root
        } else {
            std::env::current_dir().context(|| "reading the current directory".into())?.join(root)
        };
        Ok(Home { root: crate::host_paths::resolved(&root) })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The label value that marks containers as belonging to this home.
    pub fn label(&self) -> String {
        self.root.display().to_string()
    }

    pub fn sandboxes_dir(&self) -> PathBuf {
        self.root.join("sandboxes")
    }

    pub fn workspaces_dir(&self) -> PathBuf {
        self.root.join("workspaces")
    }

    /// FORAGE_HOME/private: per-sandbox state around the agent's private
    /// repository (git and jj modes).
    pub fn private_dir(&self) -> PathBuf {
        self.root.join("private")
    }

    /// FORAGE_HOME/bases: the base checkouts copy-on-write sandboxes share
    /// (`workspace::cow`).
    pub fn bases_dir(&self) -> PathBuf {
        self.root.join("bases")
    }

    /// FORAGE_HOME/secrets: forage's copies of `--secret` files, in a
    /// directory per sandbox that only the user can read, and no container
    /// mounts but each file its own sandbox was given.
    pub fn secrets_dir(&self) -> PathBuf {
        self.root.join("secrets")
    }

    /// Makes FORAGE_HOME/secrets, readable by the user alone.
    pub fn ensure_secrets_dir(&self) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let dir = self.secrets_dir();
        self.ensure_dir(&dir)?;
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
            .context(|| format!("making {} the user's alone", dir.display()))
    }

    /// FORAGE_HOME/private/<name>.
    pub fn private_dir_of(&self, name: &SandboxName) -> PathBuf {
        self.private_dir().join(name.as_str())
    }

    /// Makes FORAGE_HOME/private/<name> and writes in it what the sandbox's
    /// workspace is (`workspace.json`, which the agent never sees), so that `gc`
    /// can clean up after it from forage's own words even if the record is gone.
    pub fn create_private_dir(&self, name: &SandboxName, workspace: &WorkspaceRecord) -> Result<PathBuf> {
        self.ensure_dir(&self.private_dir())?;
        let dir = self.private_dir_of(name);
        fs::create_dir(&dir).context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(WORKSPACE_SIDECAR);
        let tmp = write_temp(&path, &serde_json::to_vec_pretty(workspace).map_err(Error::other)?)?;
        fs::rename(&tmp, &path).context(|| format!("writing {}", path.display()))?;
        sync_dir(&dir)?;
        Ok(dir)
    }

    /// What `create_private_dir` wrote for `name`, if it is there and readable.
    pub fn workspace_sidecar(&self, name: &SandboxName) -> Option<WorkspaceRecord> {
        let bytes = fs::read(self.private_dir_of(name).join(WORKSPACE_SIDECAR)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    fn locks_dir(&self) -> PathBuf {
        self.root.join("locks")
    }

    /// FORAGE_HOME/state: small files of forage's that outlive one sandbox
    /// (which agents `wait --next` reported, the branches `checkout` made).
    fn state_path(&self, file: &str) -> PathBuf {
        self.root.join("state").join(format!("{file}.json"))
    }

    /// The state file `file` (`T::default()` when there is none yet).
    pub fn read_state<T: serde::de::DeserializeOwned + Default>(&self, file: &str) -> Result<T> {
        let path = self.state_path(file);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).context(|| format!("reading {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(T::default()),
            Err(e) => Err(Error::other(format!("reading {}: {e}", path.display()))),
        }
    }

    /// Replaces the state file `file` with `value`, atomically. The caller
    /// holds `lock_state(file)`.
    pub fn write_state<T: Serialize>(&self, file: &str, value: &T) -> Result<()> {
        let path = self.state_path(file);
        let dir = path.parent().expect("state dir").to_path_buf();
        self.ensure_dir(&dir)?;
        let tmp = write_temp(&path, &serde_json::to_vec_pretty(value).map_err(Error::other)?)?;
        fs::rename(&tmp, &path).context(|| format!("writing {}", path.display()))?;
        sync_dir(&dir)
    }

    /// Serialises read-modify-write of the state file `file`.
    pub fn lock_state(&self, file: &str) -> Result<Lock> {
        self.lock(&format!("state-{file}"), true).map(|l| l.expect("blocking lock always returns"))
    }

    fn archives_path(&self, name: &SandboxName) -> PathBuf {
        self.root.join("archives").join(format!("{name}.json"))
    }

    /// The archives `down` made of a sandbox's work, oldest first.
    pub fn archives(&self, name: &SandboxName) -> Result<Vec<ArchiveEntry>> {
        let path = self.archives_path(name);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).context(|| format!("reading {}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(Error::other(format!("reading {}: {e}", path.display()))),
        }
    }

    /// Remembers an archive so `restore` can find it (the caller holds the
    /// sandbox lock); one remembered already (a `down` run again) is kept as it is.
    pub fn add_archive(&self, entry: &ArchiveEntry) -> Result<()> {
        let mut all = self.archives(&entry.name)?;
        if all.iter().any(|a| a.refname == entry.refname && a.commit == entry.commit) {
            return Ok(());
        }
        all.push(entry.clone());
        let path = self.archives_path(&entry.name);
        let dir = path.parent().expect("archives dir").to_path_buf();
        self.ensure_dir(&dir)?;
        let tmp = write_temp(&path, &serde_json::to_vec_pretty(&all).map_err(Error::other)?)?;
        fs::rename(&tmp, &path).context(|| format!("writing {}", path.display()))?;
        sync_dir(&dir)
    }

    /// Replaces sandbox `name`'s archive index with `entries` (none: removes it).
    /// The caller holds the sandbox lock.
    pub fn set_archives(&self, name: &SandboxName, entries: &[ArchiveEntry]) -> Result<()> {
        let path = self.archives_path(name);
        let dir = path.parent().expect("archives dir").to_path_buf();
        if entries.is_empty() {
            return match fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    Err(Error::other(format!("removing {}: {e}", path.display())))
                }
                _ => sync_dir(&dir),
            };
        }
        let tmp = write_temp(&path, &serde_json::to_vec_pretty(entries).map_err(Error::other)?)?;
        fs::rename(&tmp, &path).context(|| format!("writing {}", path.display()))?;
        sync_dir(&dir)
    }

    /// The names of the sandboxes with an archive index, sorted.
    pub fn archived_names(&self) -> Vec<SandboxName> {
        names_of_json_files(&self.root.join("archives"))
    }

    /// The names of the sandboxes with a record, readable or not, sorted: from
    /// the records' file names alone (shell completion asks on every Tab).
    pub fn sandbox_names(&self) -> Vec<SandboxName> {
        names_of_json_files(&self.sandboxes_dir())
    }

    pub fn record_path(&self, name: &SandboxName) -> PathBuf {
        self.sandboxes_dir().join(format!("{name}.json"))
    }

    /// Makes `dir` (and what is missing above it) readable by the user alone:
    /// what forage keeps, and the agents' files, are no one else's business (an
    /// agent's setuid file must be out of other users' reach).
    fn ensure_dir(&self, dir: &Path) -> Result<()> {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .context(|| format!("creating {}", dir.display()))
    }

    /// Makes FORAGE_HOME's directories for sandboxes' files (`workspaces/`,
    /// `private/`) readable by the user alone, also where an older forage made
    /// them readable by all.
    pub fn prepare_sandbox_dirs(&self) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        for dir in [self.workspaces_dir(), self.private_dir()] {
            self.ensure_dir(&dir)?;
            let meta = fs::metadata(&dir).context(|| format!("reading {}", dir.display()))?;
            if meta.permissions().mode() & 0o077 != 0 && meta.uid() == nix::unistd::getuid().as_raw() {
                fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
                    .context(|| format!("making {} the user's alone", dir.display()))?;
            }
        }
        Ok(())
    }

    /// Reads one record; `None` when the sandbox has no record. A record that
    /// cannot be read (corrupt, or written by a newer forage) is an error that
    /// says which and what to do.
    pub fn load(&self, name: &SandboxName) -> Result<Option<Record>> {
        match self.read_record(name) {
            Ok(r) => Ok(r),
            Err(bad) => Err(Error::other(bad.message())),
        }
    }

    /// True if the sandbox has a record, readable or not.
    pub fn record_exists(&self, name: &SandboxName) -> bool {
        self.record_path(name).exists()
    }

    fn read_record(&self, name: &SandboxName) -> std::result::Result<Option<Record>, BadRecord> {
        let path = self.record_path(name);
        let bad =
            |problem: Problem, detail: String| BadRecord { name: name.clone(), path: path.clone(), problem, detail };
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(bad(Problem::Unreadable, e.to_string())),
        };
        #[derive(Deserialize)]
        struct Version {
            version: u32,
        }
        match serde_json::from_slice::<Version>(&bytes) {
            Ok(v) if v.version > RECORD_VERSION => {
                let detail = format!("record version {}, this forage reads up to {RECORD_VERSION}", v.version);
                return Err(bad(Problem::UnsupportedVersion, detail));
            }
            Ok(_) => {}
            Err(e) => return Err(bad(Problem::Corrupt, e.to_string())),
        }
        let record: Record = serde_json::from_slice(&bytes).map_err(|e| bad(Problem::Corrupt, e.to_string()))?;
        // A record copied or renamed by hand would otherwise act on another
        // sandbox's container, workspace and record.
        if record.name != *name {
            let detail = format!("it names sandbox {}, not the {name} its file name says", record.name);
            return Err(bad(Problem::Corrupt, detail));
        }
        Ok(Some(record))
    }

    /// Every readable record, sorted by name, and every record that cannot be
    /// read: one bad record never hides the others.
    pub fn load_all(&self) -> Result<(Vec<Record>, Vec<BadRecord>)> {
        let dir = self.sandboxes_dir();
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
            Err(e) => return Err(Error::other(format!("reading {}: {e}", dir.display()))),
        };
        let (mut records, mut bad) = (Vec::new(), Vec::new());
        for entry in entries {
            let entry = entry.context(|| format!("reading {}", dir.display()))?;
            let file_name = entry.file_name();
            let Some(stem) = file_name.to_str().and_then(|f| f.strip_suffix(".json")) else {
                continue;
            };
            let Ok(name) = SandboxName::parse(stem) else {
                continue;
            };
            match self.read_record(&name) {
                Ok(Some(r)) => records.push(r),
                Ok(None) => {}
                Err(b) => bad.push(b),
            }
        }
        records.sort_by(|a, b| a.name.cmp(&b.name));
        bad.sort_by(|a, b| a.name.cmp(&b.name));
        Ok((records, bad))
    }

    /// Creates the record, failing with `Conflict` if one exists: the one place where
    /// two concurrent `up`s of the same name are told apart, atomically (link(2)).
    pub fn create(&self, record: &Record) -> Result<()> {
        self.ensure_dir(&self.sandboxes_dir())?;
        let path = self.record_path(&record.name);
        let tmp = write_temp(&path, &serde_json::to_vec_pretty(record).map_err(Error::other)?)?;
        let linked = fs::hard_link(&tmp, &path);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => sync_dir(&self.sandboxes_dir()),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(already_exists(&record.name)),
            Err(e) => Err(Error::other(format!("writing {}: {e}", path.display()))),
        }
    }

    /// Replaces the record atomically: temp file, fsync, rename, fsync of the directory.
    pub fn save(&self, record: &Record) -> Result<()> {
        self.ensure_dir(&self.sandboxes_dir())?;
        let path = self.record_path(&record.name);
        let tmp = write_temp(&path, &serde_json::to_vec_pretty(record).map_err(Error::other)?)?;
        fs::rename(&tmp, &path).context(|| format!("writing {}", path.display()))?;
        sync_dir(&self.sandboxes_dir())
    }

    pub fn remove(&self, name: &SandboxName) -> Result<()> {
        let path = self.record_path(name);
        match fs::remove_file(&path) {
            Ok(()) => sync_dir(&self.sandboxes_dir()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::other(format!("removing {}: {e}", path.display()))),
        }
    }

    /// Blocks until this process alone may change the sandbox.
    pub fn lock_sandbox(&self, name: &SandboxName) -> Result<Lock> {
        self.lock(&format!("sandbox-{name}"), true).map(|l| l.expect("blocking lock always returns"))
    }

    /// `None` when another process holds the sandbox's lock (an `up` or `down` in flight).
    pub fn try_lock_sandbox(&self, name: &SandboxName) -> Result<Option<Lock>> {
        self.lock(&format!("sandbox-{name}"), false)
    }

    /// Lock files no process holds: left by a killed forage-ctl.
    pub fn stale_locks(&self) -> Result<Vec<PathBuf>> {
        let mut stale = Vec::new();
        let Ok(entries) = fs::read_dir(self.locks_dir()) else { return Ok(stale) };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(file) = File::open(&path) else { continue };
            // Taken and released on this descriptor only: the file stays for gc to remove.
            if let Ok(held) = Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                drop(held);
                stale.push(path);
            }
        }
        stale.sort();
        Ok(stale)
    }

    /// Removes a lock file no one holds, by taking the lock (which checks that the
    /// file is still the one at its path) and releasing it, so it never races a
    /// process that is taking the same lock.
    pub fn remove_stale_lock(&self, path: &Path) -> Result<()> {
        let key = path.file_stem().and_then(|s| s.to_str()).ok_or_else(|| Error::other("odd lock file name"))?;
        match self.lock(key, false)? {
            Some(lock) => {
                drop(lock);
                Ok(())
            }
            None => Err(Error::conflict(format!("{} is held again; leaving it", path.display()))),
        }
    }

    /// Temp files of record and archive-index writes whose writer is gone.
    pub fn stale_temp_files(&self) -> Vec<PathBuf> {
        let dirs = [self.sandboxes_dir(), self.root.join("archives"), self.root.join("state")];
        let mut stale: Vec<PathBuf> = dirs
            .iter()
            .filter_map(|d| fs::read_dir(d).ok())
            .flat_map(|entries| entries.flatten())
            .map(|e| e.path())
            .filter(|p| {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                let pid =
                    name.strip_suffix(".tmp").and_then(|n| n.rsplit('.').next()).and_then(|p| p.parse::<i32>().ok());
                name.starts_with('.') && pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists())
            })
            .collect();
        stale.sort();
        stale
    }

    /// Serialises changes to one repository's metadata (worktrees, branches, jj ops).
    pub fn lock_repo(&self, repo: &Path) -> Result<Lock> {
        self.lock(&repo_lock_key(repo), true).map(|l| l.expect("blocking lock always returns"))
    }

    /// `None` when another process holds the repository's lock.
    pub fn try_lock_repo(&self, repo: &Path) -> Result<Option<Lock>> {
        self.lock(&repo_lock_key(repo), false)
    }

    fn lock(&self, key: &str, block: bool) -> Result<Option<Lock>> {
        let dir = self.locks_dir();
        self.ensure_dir(&dir)?;
        let path = dir.join(format!("{key}.lock"));
        // The lock file may be unlinked by its holder (see `Drop for Lock`);
        // after locking, make sure the file we hold is still the one at `path`.
        loop {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .mode(0o600)
                .open(&path)
                .context(|| format!("opening the lock {}", path.display()))?;
            let arg = if block { FlockArg::LockExclusive } else { FlockArg::LockExclusiveNonblock };
            let flock = match Flock::lock(file, arg) {
                Ok(f) => f,
                Err((_, nix::errno::Errno::EWOULDBLOCK)) if !block => return Ok(None),
                Err((_, e)) => return Err(Error::other(format!("locking {}: {e}", path.display()))),
            };
            let held = flock.metadata().context(|| format!("reading {}", path.display()))?;
            match fs::metadata(&path) {
                Ok(now) if now.ino() == held.ino() && now.dev() == held.dev() => {
                    return Ok(Some(Lock { _file: flock, path }))
                }
                _ => continue,
            }
        }
    }
}

/// An exclusive advisory lock, released on drop.
pub struct Lock {
    _file: Flock<File>,
    path: PathBuf,
}

impl Drop for Lock {
    /// The lock file goes with the lock, so FORAGE_HOME keeps nothing between
    /// commands. Unlinking while still holding the lock is safe: a waiter that then
    /// gets the lock sees that the file it locked is no longer at the path, and
    /// retries on a fresh one (see `Home::lock`).
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// `repo-<first 16 hex digits of the SHA-256 of the path>`.
fn repo_lock_key(repo: &Path) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(repo.as_os_str().as_encoded_bytes());
    let key: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("repo-{key}")
}

fn write_temp(final_path: &Path, bytes: &[u8]) -> Result<PathBuf> {
    let file_name = final_path.file_name().and_then(|f| f.to_str()).unwrap_or("record");
    let tmp = final_path.with_file_name(format!(".{file_name}.{}.tmp", std::process::id()));
    let mut f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)
        .context(|| format!("writing {}", tmp.display()))?;
    f.write_all(bytes).and_then(|()| f.sync_all()).context(|| format!("writing {}", tmp.display()))?;
    Ok(tmp)
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).context(|| format!("syncing {}", dir.display()))
}

/// A record `load_all` could not read.
#[derive(Debug, Clone, Serialize)]
pub struct BadRecord {
    pub name: SandboxName,
    pub path: PathBuf,
    pub problem: Problem,
    pub detail: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Problem {
    /// Not valid JSON, or not a record.
    Corrupt,
    /// Written by a newer forage.
    UnsupportedVersion,
    /// The file cannot be read at all (permissions).
    Unreadable,
}

impl Problem {
    /// The word `list` shows as the sandbox's status.
    pub fn word(self) -> &'static str {
        match self {
            Problem::Corrupt => "corrupt",
            Problem::UnsupportedVersion => "unsupported version",
            Problem::Unreadable => "unreadable",
        }
    }
}

impl BadRecord {
    pub fn message(&self) -> String {
        format!(
            "the record {} of sandbox {} is {} ({}); {}",
            self.path.display(),
            self.name,
            self.problem.word(),
            self.detail,
            self.fix()
        )
    }

    /// What the user can do about it (forage does nothing to such a record).
    pub fn fix(&self) -> String {
        match self.problem {
            Problem::UnsupportedVersion => "use the newer forage-ctl that made it".to_owned(),
            _ => format!(
                "move it aside, and remove the sandbox's container (forage-{}) and workspace by hand",
                self.name
            ),
        }
    }
}

/// The sandbox names of `dir`'s `NAME.json` files, sorted (none when it is
/// missing); from file names alone.
fn names_of_json_files(dir: &Path) -> Vec<SandboxName> {
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    let mut names: Vec<SandboxName> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_suffix(".json").and_then(|n| SandboxName::parse(n).ok()))
        .collect();
    names.sort();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(home: &Home, name: &str) -> Record {
        let name = SandboxName::parse(name).unwrap();
        Record {
            version: RECORD_VERSION,
            container: name.container(),
            name,
            state: RecordState::Creating,
            created_at: 1,
            template: "shell".into(),
            image: "img".into(),
            workspace: WorkspaceRecord::Direct(crate::workspace::direct::DirectWorkspace {
                path: home.root().to_path_buf(),
            }),
            stop_timeout: 10,
            init: vec![],
            options: Default::default(),
            journal: vec![],
            pins: vec![],
            egress: None,
            network: None,
            ports: Vec::new(),
            unpublished: Vec::new(),
            stopped_at: None,
            toolchain: None,
        }
    }

    #[test]
    fn create_is_exclusive_and_save_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path().to_path_buf()).unwrap();
        let mut r = record(&home, "a");
        home.create(&r).unwrap();
        assert_eq!(home.create(&r).unwrap_err().kind(), crate::error::ErrorKind::Conflict);
        r.state = RecordState::Ready;
        home.save(&r).unwrap();
        let back = home.load(&r.name).unwrap().unwrap();
        assert_eq!(back.state, RecordState::Ready);
        let mode = fs::metadata(home.record_path(&r.name)).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let leftovers: Vec<_> = fs::read_dir(home.sandboxes_dir()).unwrap().collect();
        assert_eq!(leftovers.len(), 1, "temp files must not be left behind");
        home.remove(&r.name).unwrap();
        assert!(home.load(&r.name).unwrap().is_none());
    }

    #[test]
    fn try_lock_sees_a_held_lock_and_removal_is_safe() {
        let dir = tempfile::tempdir().unwrap();
        let home = Home::at(dir.path().to_path_buf()).unwrap();
        let name = SandboxName::parse("a").unwrap();
        let held = home.lock_sandbox(&name).unwrap();
        assert!(home.try_lock_sandbox(&name).unwrap().is_none());
        drop(held);
        assert_eq!(fs::read_dir(dir.path().join("locks")).unwrap().count(), 0, "no record, no lock file");
        let again = home.try_lock_sandbox(&name).unwrap();
        assert!(again.is_some());
    }
}
