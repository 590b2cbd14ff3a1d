//! `checkout`'s branch: `review/<name>` in the user's repository, at the tip
//! of the sandbox's host branch (`forage-<name>`, which only a verified sync
//! moves), for the user to `git switch` to. It is one ref moved through git2:
//! nothing is checked out, no hook or program runs, and nothing of the
//! agent's repository is read. A branch forage did not put where it is, or
//! one checked out in a worktree (moving it would change that checkout's
//! HEAD under its files), is never moved.

use std::path::{Path, PathBuf};

use git2::{ErrorCode, Oid};
use serde::{Deserialize, Serialize};

use super::{ws_err, GitWorkspace};
use crate::error::{Error, Result};

/// A review branch as forage last left it: which repository, which branch,
/// at which commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewBranch {
    pub common_dir: PathBuf,
    pub branch: String,
    pub commit: String,
}

/// What `set_review_branch` did: where the branch was, and where it is.
#[derive(Debug, Clone)]
pub struct ReviewMove {
    pub before: Option<Oid>,
    pub tip: Oid,
}

/// A HEAD file is a line naming a ref; anything longer is not one.
const MAX_HEAD_BYTES: u64 = 4096;

impl GitWorkspace {
    /// Points `branch` at the sandbox branch's tip on the host: creates it,
    /// or moves it when forage left it at `ours` and nobody moved it since.
    pub fn set_review_branch(&self, branch: &str, ours: Option<&ReviewBranch>) -> Result<ReviewMove> {
        if !git2::Branch::name_is_valid(branch).unwrap_or(false) {
            return Err(Error::usage(format!("{branch:?} is not a branch name git allows")));
        }
        let repo = self.open()?;
        let tip = self.tip(&repo).ok_or_else(|| {
            ws_err(format!("branch {} is gone from {}; nothing to check out", self.branch, self.repo.display()))
        })?;
        let refname = format!("refs/heads/{branch}");
        let message = format!("forage-ctl checkout: the synced work of branch {}", self.branch);
        let current = match repo.find_reference(&refname) {
            Ok(r) => r.target(),
            Err(e) if e.code() == ErrorCode::NotFound => None,
            Err(e) => return Err(ws_err(format!("reading {refname} in {}: {e}", self.repo.display()))),
        };
        let Some(current) = current else {
            repo.reference(&refname, tip, false, &message).map_err(|e| {
                ws_err(format!("creating branch {branch} in {}: {e}", self.repo.display())).hint(format!(
                    "a branch named like it may be in the way (`git -C {:?} branch --list 'review*'`)",
                    self.repo
                ))
            })?;
            return Ok(ReviewMove { before: None, tip });
        };
        if current == tip {
            return Ok(ReviewMove { before: Some(current), tip });
        }
        let forage_left_it = ours
            .is_some_and(|o| o.branch == branch && o.common_dir == self.common_dir && o.commit == current.to_string());
        if !forage_left_it {
            return Err(Error::conflict(format!(
                "branch {branch} exists in {} at {}, and forage did not put it there: refusing to move it",
                self.repo.display(),
                &current.to_string()[..12]
            ))
            .hint(format!(
                "rename or delete it if nothing on it is needed (`git -C {:?} branch -m {branch} {branch}-old`), then run this again",
                self.repo
            )));
        }
        if let Some(checkout) = checked_out_in(&self.common_dir, &self.repo, &refname)? {
            return Err(Error::conflict(format!(
                "branch {branch} is checked out in {}: moving it would change that checkout's HEAD under its files; nothing was moved",
                checkout.display()
            ))
            .hint(format!("there, `git merge --ff-only {}` brings the agent's new commits", self.branch)));
        }
        repo.reference_matching(&refname, tip, true, current, &message)
            .map_err(|e| ws_err(format!("moving branch {branch} (did it change meanwhile?): {e}")))?;
        Ok(ReviewMove { before: Some(current), tip })
    }
}

/// The worktree of the repository whose git directory is `common_dir` (and
/// whose main checkout is `top`) that has `refname` checked out, if any: read
/// from the HEAD files of the host's git directory, which no agent can write.
fn checked_out_in(common_dir: &Path, top: &Path, refname: &str) -> Result<Option<PathBuf>> {
    let names = |head: &Path| -> Result<bool> {
        use std::io::Read;
        let file = match std::fs::File::open(head) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(ws_err(format!("reading {}: {e}", head.display()))),
        };
        let mut text = String::new();
        file.take(MAX_HEAD_BYTES).read_to_string(&mut text).map_err(ws_err)?;
        Ok(text.trim().strip_prefix("ref:").is_some_and(|r| r.trim() == refname))
    };
    if names(&common_dir.join("HEAD"))? {
        return Ok(Some(top.to_path_buf()));
    }
    let Ok(entries) = std::fs::read_dir(common_dir.join("worktrees")) else { return Ok(None) };
    for entry in entries.flatten() {
        if names(&entry.path().join("HEAD"))? {
            let gitdir = std::fs::read_to_string(entry.path().join("gitdir")).unwrap_or_default();
            let checkout = Path::new(gitdir.trim()).parent().map_or_else(|| entry.path(), Path::to_path_buf);
            return Ok(Some(checkout));
        }
    }
    Ok(None)
}
