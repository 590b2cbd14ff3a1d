//! The agent's state in the sandbox's life (crate::agent_state): given at
//! `up` (after the container is made, before it starts) through the Engine
//! API, taken back at `sync` and before `down` removes the container; and
//! `login`, `logout` and `login --list`.
//!
//! Taking back never fails the command it is part of: a container that is
//! gone, an archive over its bounds or a store that cannot be written is a
//! warning that the state was not saved.

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::{now, Engine, UpRequest};
use crate::agent_state::archive::{self, Budget, Seen};
use crate::agent_state::store::{StateStore, StoredProfile, TakenBack};
use crate::agent_state::{state_paths, Given, StatePath, DEFAULT_PROFILE};
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::record::{Record, Step, UpOptions};
use crate::runtime::{Download, Network, Runtime, AGENT_HOME};
use crate::template::Resolved;
use crate::workspace::{direct::DirectWorkspace, WorkspaceRequest};

/// What `login` runs in its sandbox while the user logs in: nothing, until
/// the sandbox is torn down.
const IDLE: [&str; 3] = ["sh", "-c", "while :; do sleep 3600; done"];

/// A template with a login (`agent.login`) needs its key secrets only until
/// the user has logged in: once the profile keeps state, the login stands in
/// for each secret not given, and the agent runs without that variable. So
/// `forage-ctl login claude` once, then `up -t claude` with no key at all.
pub(crate) fn waive_secrets_for_login(
    home: &crate::store::Home,
    template: &mut Resolved,
    options: &UpOptions,
) -> Result<()> {
    let Some(profile) = &options.profile else { return Ok(()) };
    if template.template.agent.login.is_empty() || !StateStore::new(home).holds_any(&template.name, profile)? {
        return Ok(());
    }
    template.template.agent.secrets.retain(|_, secret| options.secrets.iter().any(|s| &s.name == secret));
    Ok(())
}

/// The profile `up` gives a sandbox of `template`: `asked` (`--profile`), or
/// the default one when the template keeps agent state; none when it keeps
/// none (and then `--profile` is a mistake worth saying).
pub(crate) fn profile_for(template: &Resolved, asked: Option<String>) -> Result<Option<String>> {
    if template.template.agent.state.is_empty() {
        return match asked {
            Some(p) => Err(Error::usage(format!(
                "--profile {p}: template {} keeps no agent state (`agent.state`), so it has no profiles; leave --profile out",
                template.name
            ))),
            None => Ok(None),
        };
    }
    let profile = asked.unwrap_or_else(|| DEFAULT_PROFILE.to_owned());
    crate::agent_state::check_profile(&profile)?;
    Ok(Some(profile))
}

impl<R: Runtime> Engine<R> {
    /// Gives the (created, not yet started) container of `record` its copy of
    /// the agent's state: journaled first, then what it was given recorded,
    /// then the files copied into its home, owned by the agent.
    pub(crate) async fn give_agent_state(&self, record: &mut Record, paths: &[String]) -> Result<()> {
        if record.options.profile.is_none() {
            return Ok(());
        }
        self.begin(record, Step::AgentState)?;
        self.hand_state(record, paths).await?;
        self.checkpoint(Step::AgentState.checkpoint()).await
    }

    /// Copies the profile's state files (of `paths`) into the container of
    /// `record` (`up`, and `reset` for its new container), after recording
    /// what it is given.
    pub(crate) async fn hand_state(&self, record: &Record, paths: &[String]) -> Result<()> {
        let Some(profile) = record.options.profile.clone() else { return Ok(()) };
        self.step(&format!("giving the agent its state (profile {profile})"));
        let store = StateStore::new(&self.home);
        let (template, parsed) = (record.template.clone(), state_paths(paths));
        let files = {
            let (store, template, profile) = (store.clone(), template.clone(), profile.clone());
            super::blocking(move || store.read_for_giving(&template, &profile, &parsed)).await?
        };
        // Noted as given nothing until the copy is made: a container that
        // lacks the files because the copy failed must not read as an agent
        // that deleted them (the rollback's write-back would delete them).
        let mut given = Given { template, profile, paths: paths.to_vec(), at: now(), files: Default::default() };
        store.save_given(&record.name, &given)?;
        if files.is_empty() {
            return Ok(());
        }
        let tar = archive::upload(&files, (self.identity.uid, self.identity.gid)).map_err(Error::other)?;
        self.runtime.upload(&record.container, AGENT_HOME, tar).await?;
        given.files =
            files.iter().map(|(f, (bytes, _))| (f.clone(), Some(crate::agent_state::sha256(bytes)))).collect();
        store.save_given(&record.name, &given)
    }

    /// Takes back what the agent of `record` changed of its state, if it was
    /// given any; says what was not saved, and never fails.
    pub(crate) async fn take_back_agent_state(&self, record: &Record) -> Option<TakenBack> {
        match self.try_take_back(record).await {
            Ok(done) => done,
            Err(e) => {
                self.progress.warn(&format!("sandbox {}: its agent's state was not saved: {e}", record.name));
                None
            }
        }
    }

    /// `take_back_agent_state`, saying what it saved.
    pub(crate) async fn take_back_and_say(&self, record: &Record) {
        let Some(done) = self.take_back_agent_state(record).await else { return };
        let changed = done.written.len() + done.deleted.len();
        if changed > 0 {
            let profile = record.options.profile.as_deref().unwrap_or(DEFAULT_PROFILE);
            let files = if changed == 1 { "1 file".to_owned() } else { format!("{changed} files") };
            self.progress.note(&format!(
                "sandbox {}: saved its agent's state ({files}) for template {}, profile {profile}",
                record.name, record.template
            ));
        }
    }

    async fn try_take_back(&self, record: &Record) -> Result<Option<TakenBack>> {
        let store = StateStore::new(&self.home);
        let Some(given) = store.given(&record.name)? else { return Ok(None) };
        if self.runtime.inspect(&record.container).await?.is_none() {
            self.progress.warn(&format!(
                "sandbox {}: its container is gone, so its agent's state (profile {}) was not saved",
                record.name, given.profile
            ));
            return Ok(None);
        }
        self.step("taking back the agent's state");
        let paths = state_paths(&given.paths);
        let seen = self.read_state(record, &paths).await?;
        // The engine answers 404 for a missing path and a missing container
        // alike: one removed while it was read would read as deletions.
        if self.runtime.inspect(&record.container).await?.is_none() {
            return Err(Error::other(format!("container {} went away while it was read", record.container)));
        }
        let (done, next) = {
            let (store, given, paths) = (store.clone(), given.clone(), paths.clone());
            super::blocking(move || store.write_back(&given, &paths, &seen, now())).await?
        };
        store.save_given(&record.name, &next)?;
        for file in &done.kept_newer {
            tracing::info!("~/{file}: the stored copy is newer than sandbox {}'s", record.name);
        }
        Ok(Some(done))
    }

    /// Each state path as the container holds it, read as hostile; a path
    /// that cannot be (over a bound, through a symlink) is left out, with a
    /// warning.
    async fn read_state(&self, record: &Record, paths: &[StatePath]) -> Result<BTreeMap<String, Seen>> {
        let mut budget = Budget::default();
        let mut seen = BTreeMap::new();
        for path in paths {
            let limit = archive::download_limit(&budget);
            let not_saved = |why: String| format!("sandbox {}: ~/{} was not saved: {why}", record.name, path.rel());
            match self.runtime.download(&record.container, AGENT_HOME, &path.inside(), limit).await? {
                Download::Absent => {
                    seen.insert(path.rel().to_owned(), Seen::default());
                }
                Download::TooLarge => {
                    self.progress.warn(&not_saved(archive::over_bytes()));
                }
                Download::ThroughSymlink(dir) => {
                    self.progress.warn(&not_saved(format!("{dir} is a symbolic link (never followed)")));
                }
                Download::Archive(tar) => match archive::read(path, &tar, &mut budget) {
                    Ok(s) => {
                        for w in &s.warnings {
                            self.progress.warn(&format!("sandbox {}: {w}", record.name));
                        }
                        seen.insert(path.rel().to_owned(), s);
                    }
                    Err(why) => self.progress.warn(&not_saved(why)),
                },
            }
        }
        Ok(seen)
    }

    /// `logout TEMPLATE --profile P`: forgets the stored state. False when
    /// there was none.
    pub async fn logout(&self, template: &str, profile: &str) -> Result<bool> {
        crate::agent_state::check_profile(profile)?;
        let resolved = self.templates().resolve(template)?;
        let store = StateStore::new(&self.home);
        let (template, profile) = (resolved.name, profile.to_owned());
        super::blocking(move || store.remove(&template, &profile)).await
    }

    /// Every stored template/profile pair.
    pub fn logins(&self) -> Result<Vec<StoredProfile>> {
        StateStore::new(&self.home).list()
    }

    /// `login TEMPLATE --profile P`: a throwaway sandbox of the template's
    /// image (full network, no secrets, an empty workspace forage makes), whose
    /// container idles while the caller runs `login_command` in it; tearing
    /// it down (`down`) keeps the state the agent wrote.
    pub fn prepare_login(&self, template: &str, profile: &str) -> Result<(UpRequest, Vec<String>)> {
        let mut resolved = self.templates().resolve(template)?;
        let agent = &resolved.template.agent;
        if agent.login.is_empty() {
            let keys: Vec<String> =
                agent.secrets.iter().map(|(var, secret)| format!("--secret {secret}=env:{var}")).collect();
            let how = match keys.is_empty() {
                true => "it takes no login".to_owned(),
                false => format!("pass its key to `up` instead: {}", keys.join(" ")),
            };
            return Err(Error::usage(format!(
                "template {} has no login command (`agent.login`): {how}",
                resolved.name
            )));
        }
        if agent.state.is_empty() {
            return Err(Error::usage(format!(
                "template {} keeps no agent state (`agent.state`), so a login would keep nothing; add `agent.state` to it",
                resolved.name
            )));
        }
        let login = agent.login.clone();
        // Container names are the engine's, shared by every FORAGE_HOME: the
        // process id and the clock keep two logins apart.
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().subsec_nanos();
        let name = SandboxName::parse(&format!("login-{}-{:04x}", std::process::id(), nanos & 0xffff))
            .map_err(Error::other)?;
        super::ensure_name_free(&self.home, &name)?;
        // The agent's own login only: no init, no secrets, no task.
        let t = &mut resolved.template;
        t.agent.command = IDLE.map(String::from).to_vec();
        t.agent.secrets.clear();
        t.agent.task.clear();
        t.init.clear();
        let options = UpOptions {
            network: Some(Network::Full),
            profile: profile_for(&resolved, Some(profile.to_owned()))?,
            // An empty directory: no project, so no project toolchain; the
            // login runs in the agent template's own image.
            no_project_toolchain: true,
            ..UpOptions::default()
        };
        let workspace = WorkspaceRequest::Direct(DirectWorkspace { path: self.login_dir(&name) });
        let mut request = self.finish_request(name, resolved, workspace, options, true)?;
        request.login_dir = true;
        Ok((request, login))
    }

    /// FORAGE_HOME/workspaces/<name>: `login`'s empty workspace.
    fn login_dir(&self, name: &SandboxName) -> PathBuf {
        self.home.workspaces_dir().join(name.as_str())
    }

    /// Makes `login`'s empty workspace, journaled first.
    pub(crate) fn make_login_dir(&self, record: &mut Record) -> Result<()> {
        use std::os::unix::fs::DirBuilderExt;
        self.begin(record, Step::LoginDir)?;
        std::fs::create_dir_all(self.home.workspaces_dir())
            .map_err(|e| Error::other(format!("creating {}: {e}", self.home.workspaces_dir().display())))?;
        let dir = self.login_dir(&record.name);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|e| Error::other(format!("creating {}: {e}", dir.display())))
    }
}
