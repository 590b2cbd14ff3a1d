//! `gc`: finds what a crash, a kill -9 or a hand-deleted file left behind, and with
//! `--force` finishes the job the way `down` would, archiving work first. It only
//! ever touches containers labelled with this FORAGE_HOME, worktrees whose admin
//! entry is named `forage-*`, and paths under FORAGE_HOME.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::journal::Step;
use super::{Engine, Teardown};
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::runtime::Runtime;
use crate::store::{Record, RecordState, RECORD_VERSION};
use crate::template::DEFAULT_TEMPLATE;
use crate::workspace::untrusted::remove_created_dir;
use crate::workspace::WorkspaceRecord;

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// An `up` or `down` that stopped half way.
    BrokenSandbox,
    /// A ready sandbox whose container was removed outside forage.
    MissingContainer,
    /// A container labelled with this FORAGE_HOME that no record owns.
    OrphanContainer,
    /// A directory under FORAGE_HOME/workspaces that no record owns.
    OrphanWorkspace,
    /// A record forage cannot read: corrupt, or written by a newer forage.
    UnreadableRecord,
    /// A lock file no process holds (its holder was killed).
    StaleLock,
    /// A half-written record (its writer was killed).
    StaleTempFile,
}

#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub kind: Kind,
    /// The sandbox, container or path concerned.
    pub subject: String,
    /// Why it is a finding.
    pub why: String,
    /// What `--force` does (or did) about it.
    pub action: String,
    /// With `--force`: `None` when the action succeeded, else the error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl<R: Runtime> Engine<'_, R> {
    pub async fn gc(&self, force: bool) -> Result<Vec<Finding>> {
        let mut findings = Vec::new();
        // What counts as an orphan is judged against the records as they were
        // when gc started, so that `--force` acts on exactly the findings a dry
        // run lists (removing a broken sandbox must not make its container look
        // like an orphan a moment later).
        let (records, bad) = self.home.load_all()?;
        let had_record =
            |name: &SandboxName| records.iter().any(|r| &r.name == name) || bad.iter().any(|b| &b.name == name);
        let containers = self.runtime.list(&self.home.label()).await?;

        for b in &bad {
            findings.push(Finding {
                kind: Kind::UnreadableRecord,
                subject: b.path.display().to_string(),
                why: format!("{}: {}", b.problem.word(), b.detail),
                action: "nothing: forage cannot tell what it describes; inspect it and move it aside by hand".into(),
                error: None,
            });
        }

        for record in &records {
            // A sandbox whose lock is held is being worked on right now.
            let Some(lock) = self.home.try_lock_sandbox(&record.name)? else { continue };
            let has_container = containers.iter().any(|c| c.sandbox == record.name.as_str());
            let (kind, why) = match record.state {
                RecordState::Creating => (Kind::BrokenSandbox, "its `up` stopped half way".to_owned()),
                RecordState::Removing => (Kind::BrokenSandbox, "its `down` stopped half way".to_owned()),
                RecordState::Ready if !has_container => {
                    (Kind::MissingContainer, format!("its container {} was removed outside forage", record.container))
                }
                RecordState::Ready => continue,
            };
            let mut finding = Finding {
                kind,
                subject: record.name.to_string(),
                why,
                action: "remove what is left of it, archiving any work, as `down` does".into(),
                error: None,
            };
            if force {
                let how = Teardown { graceful: false, keep_branch: false, discard: false };
                finding.error = self.teardown(record, how).await.err().map(|e| e.to_string());
            }
            drop(lock);
            findings.push(finding);
        }

        // Orphans are judged under the sandbox's lock, which `up` takes before its
        // record exists, so a sandbox being made right now is never taken for one.
        for c in &containers {
            let Ok(name) = SandboxName::parse(&c.sandbox) else { continue };
            if had_record(&name) {
                continue;
            }
            let Some(_lock) = self.home.try_lock_sandbox(&name)? else { continue };
            if self.home.record_exists(&name) {
                continue;
            }
            let mut finding = Finding {
                kind: Kind::OrphanContainer,
                subject: c.name.clone(),
                why: format!("labelled as sandbox {} of this FORAGE_HOME, which has no record", c.sandbox),
                action: "remove the container".into(),
                error: None,
            };
            if force {
                finding.error = self.runtime.remove(&c.name).await.err().map(|e| e.to_string());
            }
            findings.push(finding);
        }

        // Workspaces live at workspaces/<name>, private repositories at private/<name>.
        let mut orphan_names: Vec<SandboxName> = list_dir(&self.home.workspaces_dir())
            .into_iter()
            .chain(list_dir(&self.home.private_dir()))
            .filter_map(|d| d.file_name().and_then(|n| n.to_str()).and_then(|n| SandboxName::parse(n).ok()))
            .collect();
        orphan_names.sort();
        orphan_names.dedup();
        for name in orphan_names {
            if had_record(&name) {
                continue;
            }
            let Some(_lock) = self.home.try_lock_sandbox(&name)? else { continue };
            if self.home.record_exists(&name) {
                continue;
            }
            findings.push(self.orphan_workspace(&name, force).await);
        }

        for path in self.home.stale_locks()? {
            let mut finding = Finding {
                kind: Kind::StaleLock,
                subject: path.display().to_string(),
                why: "no process holds it".into(),
                action: "remove the file".into(),
                error: None,
            };
            if force {
                finding.error = self.home.remove_stale_lock(&path).err().map(|e| e.to_string());
            }
            findings.push(finding);
        }
        for path in self.home.stale_temp_files() {
            let mut finding = Finding {
                kind: Kind::StaleTempFile,
                subject: path.display().to_string(),
                why: "a record write that never finished".into(),
                action: "remove the file".into(),
                error: None,
            };
            if force {
                finding.error = std::fs::remove_file(&path).err().map(|e| e.to_string());
            }
            findings.push(finding);
        }
        Ok(findings)
    }

    /// A workspace (or private repository) no record owns. Its sidecar
    /// (written by `up` next to the private repository) says what forage made,
    /// and a teardown as `down`'s removes exactly that, archiving the work
    /// first. Without one, only directories that hold no repository are removed:
    /// forage cannot tell where the work in one belongs.
    async fn orphan_workspace(&self, name: &SandboxName, force: bool) -> Finding {
        let dir = self.home.workspaces_dir().join(name.as_str());
        let private = self.home.private_dir_of(name);
        let sidecar = self.home.workspace_sidecar(name);
        let holds_repo = dir.join(".git").exists()
            || dir.join(".jj").exists()
            || private.join("git/HEAD").exists()
            || private.join("jj/repo").exists();
        let subject: Vec<String> =
            [&dir, &private].iter().filter(|p| p.exists()).map(|p| p.display().to_string()).collect();
        let mut finding = Finding {
            kind: Kind::OrphanWorkspace,
            subject: subject.join(" and "),
            why: "no sandbox record owns it".into(),
            action: match &sidecar {
                Some(WorkspaceRecord::GitWorktree(w)) => {
                    format!("archive its work, then remove worktree {} and branch {} of {}", w.worktree_id, w.branch, w.repo.display())
                }
                Some(ws) => format!("archive its work, then remove its {} workspace", ws.mode()),
                None if holds_repo => {
                    "nothing: it holds a repository forage cannot trace back (made by an older or another forage?); inspect it and remove it by hand".into()
                }
                None => "remove it (it holds no repository, so no history)".into(),
            },
            error: None,
        };
        if !force {
            return finding;
        }
        let result = match sidecar {
            Some(workspace) => {
                let journal = match &workspace {
                    WorkspaceRecord::GitWorktree(_) => vec![Step::GitBranch, Step::GitWorktree, Step::PrivateRepo],
                    WorkspaceRecord::Jj(_) => vec![Step::PrivateRepo, Step::JjWorkspace],
                    WorkspaceRecord::Direct { .. } => vec![Step::PrivateRepo],
                };
                let record = Record {
                    version: RECORD_VERSION,
                    name: name.clone(),
                    state: RecordState::Removing,
                    created_at: super::now(),
                    template: DEFAULT_TEMPLATE.into(),
                    image: String::new(),
                    container: name.container(),
                    workspace,
                    stop_timeout: 0,
                    init: Vec::new(),
                    options: Default::default(),
                    journal,
                };
                let how = Teardown { graceful: false, keep_branch: false, discard: false };
                self.teardown(&record, how).await.map(|_| ())
            }
            None if holds_repo => return finding,
            None => remove_created_dir(&dir, &self.home.workspaces_dir())
                .and_then(|()| remove_created_dir(&private, &self.home.private_dir()))
                .map_err(Error::other),
        };
        finding.error = result.err().map(|e| e.to_string());
        finding
    }
}

fn list_dir(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|e| e.flatten().map(|e| e.path()).collect()).unwrap_or_default();
    out.sort();
    out
}
