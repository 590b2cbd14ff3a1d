use clap::Args;

use super::Ctx;
use crate::error::Result;
use crate::names::SandboxName;
use crate::progress::Silent;
use crate::sandbox::UpRequest;
use crate::template;
use crate::workspace::git::GitRequest;
use crate::workspace::jj::JjRequest;
use crate::workspace::{Mode, WorkspaceRequest};

#[derive(Debug, Args)]
pub struct RestoreArgs {
    /// The sandbox whose archived work to bring back.
    pub name: SandboxName,
    /// Which archive: its ref or its timestamp (default: the newest).
    #[arg(long, value_name = "REF")]
    pub archive: Option<String>,
    /// The branch to create (default: forage-NAME).
    #[arg(long)]
    pub branch: Option<String>,
    /// Also bring the sandbox up again on that branch, with the archive's template.
    #[arg(long)]
    pub up: bool,
    /// With --up: a secret the template needs, as for `up` (repeatable).
    #[arg(long = "secret", value_name = "NAME=FILE", requires = "up")]
    pub secrets: Vec<String>,
}

pub async fn run(ctx: &Ctx, args: RestoreArgs) -> Result<i32> {
    let docker = ctx.docker().await?;
    let engine = ctx.engine(&docker, &Silent);
    let entry = engine.find_archive(&args.name, args.archive.as_deref())?;
    if entry.mode == Mode::Jj && args.up && args.branch.is_some() {
        return Err(crate::error::Error::Usage(
            "--branch with --up is for git; a jj sandbox's bookmark is always forage/NAME".into(),
        ));
    }
    let branch = args.branch.clone().unwrap_or_else(|| args.name.branch());
    if !args.up {
        engine.restore_branch(&entry, &branch).await?;
        if !ctx.quiet {
            let what = if entry.mode == Mode::Jj { "bookmark" } else { "branch" };
            say!("restored {} as {what} {branch} in {}", entry.refname, entry.repo.display());
            if entry.mode != Mode::Jj {
                say!("  uncommitted files came back committed on top; `git reset HEAD~1` un-commits them if the archive was dirty");
            }
        }
        return Ok(0);
    }
    crate::sandbox::ensure_name_free(&ctx.home, &args.name)?;
    let path = ctx.home.workspaces_dir().join(args.name.as_str());
    let workspace = match entry.mode {
        Mode::Jj => WorkspaceRequest::Jj(JjRequest::validate(
            &entry.repo,
            Some(&entry.commit),
            &args.name,
            path,
            ctx.home.private_dir_of(&args.name),
        )?),
        _ => WorkspaceRequest::GitWorktree(GitRequest::validate(
            &entry.repo,
            Some(&entry.commit),
            Some(&branch),
            &args.name,
            path,
            ctx.home.private_dir_of(&args.name),
        )?),
    };
    let mut request = UpRequest::new(args.name, template::resolve(&entry.template)?, workspace);
    request.options.secrets = super::up::secret_files(&args.secrets)?;
    crate::sandbox::preflight(&request, ctx.home.root())?;
    super::up::bring_up(ctx, request).await
}
