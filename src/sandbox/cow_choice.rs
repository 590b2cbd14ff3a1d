//! Which checkout a git sandbox gets, copy-on-write or full
//! (docs/adr/0003-copy-on-write-workspaces.md, Decision 6): `up --cow` or
//! `--full-checkout` when given, else the template's `workspace.cow`, whose
//! default `auto` takes copy-on-write for a tree of at least
//! `FORAGE_COW_THRESHOLD` files (20,000) where the overlay can be made, and a
//! full checkout otherwise. `up` says which it made and why.

use super::Engine;
use crate::error::{Error, Result};
use crate::runtime::Runtime;
use crate::template::CowPolicy;
use crate::workspace::WorkspaceRequest;

/// Below this many files a full checkout costs about what an overlay does
/// (docs/benchmarks.md); above it, its time and disk grow with the tree.
pub const DEFAULT_COW_THRESHOLD: usize = 20_000;

/// Who chose the policy, as `up` names it.
#[derive(Debug, Clone, Copy)]
enum Asker {
    Flag,
    Template,
}

/// The checkout chosen, and what `up` says of it: `why` it is the kind it is
/// (a status line), or a `warning` when an asked-for overlay cannot be made.
#[derive(Debug, Default)]
pub(super) struct Chosen {
    pub why: Option<String>,
    pub warning: Option<String>,
    /// Chosen by the tree's size (`auto`), not asked for.
    pub by_size: bool,
}

/// Why an engine that is Podman gets a full checkout: its Engine API makes a
/// mount's volume of the `local` driver without the driver's options, so the
/// overlay would be an empty /workspace.
const PODMAN_NO_OVERLAY: &str =
    "the engine is Podman, whose Engine API mounts the copy-on-write volume empty (it ignores the overlay's options)";

impl<R: Runtime> Engine<R> {
    /// `asked` (`--cow` / `--full-checkout`) or the template's `policy`
    /// applied to `workspace`.
    pub(super) fn choose_checkout(
        &self,
        workspace: WorkspaceRequest,
        asked: Option<CowPolicy>,
        template_policy: CowPolicy,
    ) -> Result<(WorkspaceRequest, Chosen)> {
        let (policy, asker) = match asked {
            Some(p) => (p, Asker::Flag),
            None => (template_policy, Asker::Template),
        };
        match (policy, &workspace) {
            (CowPolicy::Always, _) => self.copy_on_write(workspace, asker),
            (CowPolicy::Never, WorkspaceRequest::GitWorktree(_)) => {
                let why = match asker {
                    Asker::Flag => "--full-checkout",
                    Asker::Template => "the template's workspace.cow: never",
                };
                Ok((workspace, Chosen { why: Some(why.to_owned()), ..Chosen::default() }))
            }
            (CowPolicy::Auto, WorkspaceRequest::GitWorktree(_)) => self.cow_by_size(workspace),
            _ => Ok((workspace, Chosen::default())),
        }
    }

    /// `auto`: copy-on-write for a tree of at least the threshold's files,
    /// where the overlay can be made; else a full checkout, saying why.
    fn cow_by_size(&self, workspace: WorkspaceRequest) -> Result<(WorkspaceRequest, Chosen)> {
        let WorkspaceRequest::GitWorktree(git) = workspace else { return Ok((workspace, Chosen::default())) };
        let threshold = self.cow_threshold()?;
        let full =
            |git, why: String| Ok((WorkspaceRequest::GitWorktree(git), Chosen { why: Some(why), ..Chosen::default() }));
        if !git.has_at_least_files(threshold)? {
            return full(git, format!("the tree has fewer than {threshold} files, the threshold for copy-on-write"));
        }
        if self.identity.uid != 0 {
            return full(git, format!("the tree has at least {threshold} files, but {ROOT_ONLY}"));
        }
        // Asked for (`--cow`), a refused mount fails `up`; by default it is
        // not tried where it would be refused.
        if let Some(why) = crate::workspace::cow::kernel_too_old() {
            return full(git, format!("the tree has at least {threshold} files, but {why}"));
        }
        match git.copy_on_write(self.home.root(), &self.home.bases_dir()) {
            (git, Some(why)) => full(git, format!("the tree has at least {threshold} files, but {why}")),
            (git, None) => Ok((
                WorkspaceRequest::GitWorktree(git),
                Chosen { why: Some(format!("the tree has at least {threshold} files")), warning: None, by_size: true },
            )),
        }
    }

    /// `--cow` or the template's `always`: a git sandbox's workspace as a
    /// copy-on-write overlay, or a warning why it is a full checkout instead
    /// (a jj sandbox always is, and for now any sandbox of a forage-ctl not
    /// running as root). `--cow` is refused for a directory mounted as it is,
    /// which has no checkout to share; a template's `always` does not apply.
    fn copy_on_write(&self, workspace: WorkspaceRequest, asker: Asker) -> Result<(WorkspaceRequest, Chosen)> {
        let (why_cow, who) = match asker {
            Asker::Flag => ("--cow", "--cow"),
            Asker::Template => ("the template's workspace.cow: always", "the template's workspace.cow: always"),
        };
        let warn = |why: &str| Some(format!("{who}: {why}, so the sandbox has a full checkout"));
        let warning = match workspace {
            WorkspaceRequest::GitWorktree(_) if self.identity.uid != 0 => warn(ROOT_ONLY),
            WorkspaceRequest::GitWorktree(git) => {
                let (git, why) = git.copy_on_write(self.home.root(), &self.home.bases_dir());
                let chosen = match why {
                    Some(why) => Chosen { warning: warn(&why), ..Chosen::default() },
                    None => Chosen { why: Some(why_cow.to_owned()), ..Chosen::default() },
                };
                return Ok((WorkspaceRequest::GitWorktree(git), chosen));
            }
            WorkspaceRequest::Jj(_) => warn("jj sandboxes have no copy-on-write workspace yet"),
            WorkspaceRequest::Direct(_) if matches!(asker, Asker::Template) => None,
            WorkspaceRequest::Direct(_) => {
                return Err(Error::usage(
                    "--cow makes a copy-on-write checkout of a git repository; --workspace mounts your directory as it is, with nothing to copy: leave out --cow, or pass --git-worktree",
                ))
            }
        };
        Ok((workspace, Chosen { warning, ..Chosen::default() }))
    }

    /// An overlay chosen for an engine that cannot mount it (Podman) becomes
    /// a full checkout: by default saying why, asked for with a warning, as
    /// where forage itself cannot make it. Asks the engine only when an
    /// overlay was chosen.
    pub(super) async fn overlay_the_engine_mounts(
        &self,
        workspace: WorkspaceRequest,
        chosen: Chosen,
    ) -> Result<(WorkspaceRequest, Chosen)> {
        let WorkspaceRequest::GitWorktree(mut git) = workspace else { return Ok((workspace, chosen)) };
        if git.workspace.cow.is_none() || self.runtime.mounts_overlay_volumes().await? {
            return Ok((WorkspaceRequest::GitWorktree(git), chosen));
        }
        git.workspace.cow = None;
        let chosen = match (chosen.by_size, chosen.why) {
            (true, Some(why)) => Chosen { why: Some(format!("{why}, but {PODMAN_NO_OVERLAY}")), ..Chosen::default() },
            (_, why) => {
                let who = why.unwrap_or_else(|| "--cow".to_owned());
                Chosen {
                    warning: Some(format!("{who}: {PODMAN_NO_OVERLAY}, so the sandbox has a full checkout")),
                    ..Chosen::default()
                }
            }
        };
        Ok((WorkspaceRequest::GitWorktree(git), chosen))
    }

    /// `FORAGE_COW_THRESHOLD`, else `DEFAULT_COW_THRESHOLD`.
    fn cow_threshold(&self) -> Result<usize> {
        let Some(raw) = self.settings.cow_threshold.as_deref() else { return Ok(DEFAULT_COW_THRESHOLD) };
        raw.trim().parse().map_err(|_| {
            Error::usage(format!(
                "FORAGE_COW_THRESHOLD={raw:?} is not a number of files: set it to a whole number (e.g. {DEFAULT_COW_THRESHOLD}), or unset it"
            ))
        })
    }
}

/// Why a forage-ctl not running as root makes no overlay: the overlay leaves
/// root-owned scratch files in its work directory (ADR 0003, measurement 7),
/// which only root can delete at `down`.
const ROOT_ONLY: &str = "the overlay leaves files only root can delete, and forage-ctl does not run as root";
