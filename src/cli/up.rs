use std::path::PathBuf;

use clap::Args;

use super::Ctx;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::sandbox::{ensure_name_free, Cancel, Engine, SecretFile, UpOptions, UpRequest};
use crate::template::{self, Network, DEFAULT_TEMPLATE};
use crate::workspace::git::GitRequest;
use crate::workspace::jj::JjRequest;
use crate::workspace::{detect_mode, direct::DirectPath, Mode, WorkspaceRequest};

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("ws").required(true).args(["workspace", "git_worktree", "jj", "repo"])))]
pub struct UpArgs {
    /// The sandbox's name: lowercase letters, digits, '_', '.', '-'.
    pub name: SandboxName,
    /// The template to run (see `forage-ctl templates`).
    #[arg(short, long, default_value = DEFAULT_TEMPLATE)]
    pub template: String,
    /// Mount this directory as /workspace, read-write, as it is (no isolation).
    #[arg(long, value_name = "PATH")]
    pub workspace: Option<PathBuf>,
    /// A new worktree of this git repository, on branch forage-NAME.
    #[arg(long, value_name = "REPO")]
    pub git_worktree: Option<PathBuf>,
    /// A new jj workspace of this repository, named forage-NAME.
    #[arg(long, value_name = "REPO")]
    pub jj: Option<PathBuf>,
    /// A repository; the mode is detected (jj if it holds .jj/, else git).
    #[arg(long, value_name = "REPO")]
    pub repo: Option<PathBuf>,
    /// git: start the branch from this revision instead of HEAD; jj: the revset
    /// the workspace's first change sits on instead of @-.
    #[arg(long, value_name = "REV")]
    pub base: Option<String>,
    /// git: the branch to create instead of forage-NAME.
    #[arg(long, value_name = "BRANCH")]
    pub branch: Option<String>,
    /// Use this image instead of the template's.
    #[arg(long)]
    pub image: Option<String>,
    /// An extra environment variable for the agent (repeatable).
    #[arg(long = "env", value_name = "KEY=VALUE", value_parser = parse_env)]
    pub env: Vec<(String, String)>,
    /// A secret for the agent, from a file: mounted read-only at /run/secrets/NAME and
    /// exported to the agent where the template asks (repeatable).
    #[arg(long = "secret", value_name = "NAME=FILE")]
    pub secrets: Vec<String>,
    /// Network access: full, or none.
    #[arg(long, value_enum)]
    pub network: Option<Network>,
    /// Memory limit, e.g. 2g.
    #[arg(long)]
    pub memory: Option<String>,
    /// CPU limit in cores, e.g. 1.5.
    #[arg(long)]
    pub cpus: Option<f64>,
    /// Mount the workspace read-only.
    #[arg(long)]
    pub read_only: bool,
    /// Allow a --workspace or template mount that is (or holds) your home directory.
    #[arg(long)]
    pub allow_home: bool,
    /// Create everything but do not start the container.
    #[arg(long)]
    pub no_start: bool,
    /// Arguments appended to the template's agent command.
    #[arg(last = true)]
    pub agent_args: Vec<String>,
}

fn parse_env(raw: &str) -> Result<(String, String), String> {
    match raw.split_once('=') {
        Some((k, v)) if !k.is_empty() && !k.contains(char::is_whitespace) => Ok((k.into(), v.into())),
        _ => Err(format!("invalid --env {raw:?}: use KEY=VALUE")),
    }
}

/// Validates `--secret NAME=FILE` values: a good name, given once, and a file the
/// user can read. The value itself is never read.
pub fn secret_files(raw: &[String]) -> Result<Vec<SecretFile>> {
    let mut out: Vec<SecretFile> = Vec::new();
    for r in raw {
        let Some((name, file)) = r.split_once('=').filter(|(n, f)| !n.is_empty() && !f.is_empty()) else {
            return Err(Error::Usage(format!(
                "invalid --secret {r:?}: use NAME=FILE, e.g. --secret anthropic=~/.keys/anthropic"
            )));
        };
        if !template::secret_name_ok(name) {
            return Err(Error::Usage(format!("invalid secret name {name:?}: use {}", template::SECRET_NAME_RULE)));
        }
        if out.iter().any(|s| s.name == name) {
            return Err(Error::Usage(format!("--secret {name} is given twice; give each secret once")));
        }
        // Shells do not expand `~` after `=`; do it here so the obvious spelling works.
        let expanded = match (file.strip_prefix("~/"), std::env::var_os("HOME")) {
            (Some(rest), Some(home)) => std::path::PathBuf::from(home).join(rest),
            _ => std::path::PathBuf::from(file),
        };
        let path = expanded.as_path();
        let readable = std::fs::File::open(path).and_then(|f| f.metadata()).map(|m| m.is_file());
        match readable {
            Ok(true) => {}
            Ok(false) => return Err(Error::Usage(format!("secret file {file:?} (for {name}) is not a regular file"))),
            Err(e) => {
                return Err(Error::Usage(format!(
                    "secret file {file:?} (for {name}) cannot be read ({e}); pass a file holding the secret's value"
                )))
            }
        }
        let path = path.canonicalize().map_err(|e| Error::Usage(format!("secret file {file:?}: {e}")))?;
        out.push(SecretFile { name: name.to_owned(), path });
    }
    Ok(out)
}

/// Maps the workspace flags to a validated request; nothing is created here.
pub fn workspace_request(ctx: &Ctx, args: &UpArgs) -> Result<WorkspaceRequest> {
    let (mode, repo) = match (&args.workspace, &args.git_worktree, &args.jj, &args.repo) {
        (Some(path), ..) => {
            if args.base.is_some() || args.branch.is_some() {
                return Err(Error::Usage(
                    "--base and --branch need a repository: use --git-worktree REPO, --jj REPO or --repo REPO instead of --workspace".into(),
                ));
            }
            return Ok(WorkspaceRequest::Direct(DirectPath::validate(path, ctx.home.root(), args.allow_home)?));
        }
        (None, Some(repo), ..) => (Mode::GitWorktree, repo),
        (None, None, Some(repo), _) => (Mode::Jj, repo),
        (None, None, None, Some(repo)) => (detect_mode(repo), repo),
        (None, None, None, None) => unreachable!("clap requires one workspace flag"),
    };
    let path = ctx.home.workspaces_dir().join(args.name.as_str());
    match mode {
        Mode::Jj => {
            if args.branch.is_some() {
                return Err(Error::Usage("--branch is for git; a jj sandbox's bookmark is always forage/NAME".into()));
            }
            let private = ctx.home.private_dir_of(&args.name);
            Ok(WorkspaceRequest::Jj(JjRequest::validate(repo, args.base.as_deref(), &args.name, path, private)?))
        }
        _ => Ok(WorkspaceRequest::GitWorktree(GitRequest::validate(
            repo,
            args.base.as_deref(),
            args.branch.as_deref(),
            &args.name,
            path,
            ctx.home.private_dir_of(&args.name),
        )?)),
    }
}

pub async fn run(ctx: &Ctx, args: UpArgs) -> Result<i32> {
    // Everything that can be checked without Docker is checked first.
    ensure_name_free(&ctx.home, &args.name)?;
    let template = template::resolve(&args.template)?;
    if let Some(image) = &args.image {
        template::check_image_reference(image).map_err(|why| Error::Usage(format!("--image: {why}")))?;
    }
    if let Some(memory) = &args.memory {
        template::parse_memory(memory).map_err(Error::Usage)?;
    }
    if let Some(cpus) = args.cpus.filter(|c| c.is_nan() || *c <= 0.0) {
        return Err(Error::Usage(format!("--cpus must be above 0, not {cpus}")));
    }
    let secrets = secret_files(&args.secrets)?;
    let workspace = workspace_request(ctx, &args)?;
    let options = UpOptions {
        image: args.image,
        env: args.env,
        network: args.network,
        memory: args.memory,
        cpus: args.cpus,
        read_only: args.read_only,
        allow_home: args.allow_home,
        agent_args: args.agent_args,
        secrets,
    };
    let request = UpRequest { name: args.name, template, workspace, options, start: !args.no_start };
    crate::sandbox::preflight(&request, ctx.home.root())?;
    bring_up(ctx, request).await
}

/// Runs a validated `up` with progress, signal handling and a summary.
pub async fn bring_up(ctx: &Ctx, request: UpRequest) -> Result<i32> {
    let docker = ctx.docker().await?;
    let progress = ctx.progress();
    let cancel = Cancel::default();
    spawn_signal_handlers(cancel.clone());
    let started = request.start;
    let engine = Engine { home: ctx.home.clone(), runtime: &docker, progress: progress.as_ref(), cancel };
    let record = engine.up(request).await?;
    progress.finish();
    if !ctx.quiet {
        let n = &record.name;
        let branch = match (record.workspace.mode(), record.workspace.branch()) {
            (Mode::Jj, Some(b)) => format!(" bookmark {b}"),
            (_, Some(b)) => format!(" on branch {b}"),
            _ => String::new(),
        };
        say!(
            "sandbox {n} is {}: container {}, workspace {} ({}{branch})",
            if started { "up" } else { "created" },
            record.container,
            record.workspace.host_path().display(),
            record.workspace.mode()
        );
        say!("  attach: forage-ctl attach {n}   shell: forage-ctl shell {n}   remove: forage-ctl down {n}");
    }
    Ok(0)
}

/// Ctrl-C and SIGTERM ask `up` to stop after its current step and roll back.
fn spawn_signal_handlers(cancel: Cancel) {
    use tokio::signal::unix::{signal, SignalKind};
    for kind in [SignalKind::interrupt(), SignalKind::terminate(), SignalKind::hangup()] {
        let cancel = cancel.clone();
        if let Ok(mut sig) = signal(kind) {
            tokio::spawn(async move {
                if sig.recv().await.is_some() {
                    cancel.trigger();
                }
            });
        }
    }
}
