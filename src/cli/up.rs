use std::path::PathBuf;

use clap::Args;

use super::Ctx;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::record::Record;
use crate::runtime::Network;
use crate::sandbox::{HostUncommitted, TaskSpec, UpSpec, WorkspaceSpec};
use crate::template::{CowPolicy, DEFAULT_TEMPLATE};
use crate::workspace::{Mode, WorkspaceRecord};

#[derive(Debug, Args)]
// One workspace flag at most; that there is one is checked in `workspace`,
// after a path given without a flag was told apart (`stray_path`).
#[command(group(clap::ArgGroup::new("ws").args(["workspace", "git_worktree", "jj", "repo"])))]
#[command(
    override_usage = "forage-ctl up [OPTIONS] <NAME> <--repo <REPO>|--git-worktree <REPO>|--jj <REPO>|--workspace <PATH>> [-- <AGENT_ARGS>...]"
)]
pub struct UpArgs {
    /// The sandbox's name: lowercase letters, digits, '_', '.', '-'.
    pub name: SandboxName,
    /// A path given where `up` takes none (`up NAME PATH`): taken only to say
    /// which flag it wants, as the usage error `stray_path` makes.
    #[arg(hide = true, value_name = "PATH")]
    pub stray: Option<PathBuf>,
    /// The template to run (see `forage-ctl templates`).
    #[arg(short, long, default_value = DEFAULT_TEMPLATE, add = super::complete::templates())]
    pub template: String,
    /// Mount this directory as /workspace, read-write, as it is (no isolation).
    #[arg(long, value_name = "PATH")]
    pub workspace: Option<PathBuf>,
    /// A new worktree of this git repository, on branch forage-NAME, with a
    /// private repository for the agent.
    #[arg(long, value_name = "REPO")]
    pub git_worktree: Option<PathBuf>,
    /// A private jj repository for the agent, on this repository's work; its
    /// changes reach the repository as bookmark forage/NAME.
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
    /// The agent's first task, as text: mounted read-only at /run/forage/task.md
    /// and given to the agent as its template's `agent.task` says.
    #[arg(long, value_name = "TEXT", conflicts_with = "task_file")]
    pub task: Option<String>,
    /// Whose copy of the agent's state (login, settings) the sandbox gets and
    /// writes back to, for templates that keep one (default: `default`).
    #[arg(long, value_name = "PROFILE")]
    pub profile: Option<String>,
    /// The agent's first task, from a file (read once, at up).
    #[arg(long, value_name = "FILE")]
    pub task_file: Option<PathBuf>,
    /// A secret for the agent, from a file or (NAME=env:VAR) a variable of forage's
    /// environment: copied once, mounted read-only at /run/secrets/NAME and
    /// exported to the agent where the template asks (repeatable).
    #[arg(long = "secret", value_name = "NAME=FILE|NAME=env:VAR")]
    pub secrets: Vec<String>,
    /// Network access: full, none, or restricted (only the allowlist's hosts,
    /// through forage's egress proxy).
    #[arg(long, value_parser = ["full", "none", "restricted"])]
    pub network: Option<String>,
    /// With `network: restricted`: also allow HOST (a name, `*.domain`, or an
    /// IPv4 address; `:PORT` pins a port, else 80 and 443). Repeatable.
    #[arg(long = "allow", value_name = "HOST[:PORT]")]
    pub allow: Vec<String>,
    /// Publish the sandbox's PORT on the host's 127.0.0.1 only, at HOSTPORT
    /// (else a free port forage picks). Repeatable.
    #[arg(long = "publish", short = 'p', value_name = "[HOSTPORT:]PORT")]
    pub publish: Vec<crate::ports::PortSpec>,
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
    /// git: start the agent's worktree with a copy of your checkout's
    /// uncommitted changes (tracked edits and untracked files that are not
    /// ignored), on your HEAD; your checkout is left as it is.
    #[arg(long)]
    pub include_uncommitted: bool,
    /// git: make /workspace a copy-on-write overlay on a base checkout shared
    /// by every sandbox on the same tree, so `up` writes no files and the
    /// sandbox's disk holds only what the agent changes; falls back to a full
    /// checkout, saying why, where the overlay cannot be made. The default
    /// for a tree of 20,000 files or more (FORAGE_COW_THRESHOLD) where the
    /// overlay can be made, unless the template's `workspace.cow` says otherwise.
    #[arg(long, conflicts_with = "full_checkout")]
    pub cow: bool,
    /// git: give the sandbox a full checkout of its own, whatever the tree's
    /// size and the template's `workspace.cow`.
    #[arg(long)]
    pub full_checkout: bool,
    /// Ignore the project's toolchain (.forage/template.yaml,
    /// .devcontainer/devcontainer.json): run the template's image as it is.
    #[arg(long)]
    pub no_project_toolchain: bool,
    /// With --repo: run a job. The repository (a path, or a file://, https://,
    /// http:// or git:// URL) is
    /// fetched into forage's own mirror, the sandbox made from the mirror on
    /// branch forage-NAME, and the job's context (task, status, times,
    /// result) kept in FORAGE_HOME/jobs/NAME after the sandbox goes.
    #[arg(long, requires = "repo")]
    pub job: bool,
    /// With --job: wait for the agent to exit, record the job's result, then
    /// tear the sandbox down (its branch kept in the mirror, the job's context kept).
    #[arg(long, requires = "job")]
    pub cleanup: bool,
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

impl UpArgs {
    /// The workspace the flags ask for; a usage error for a path given
    /// without a flag, or for no workspace at all.
    fn workspace(&mut self) -> Result<WorkspaceSpec> {
        if let Some(path) = &self.stray {
            return Err(stray_path(&self.name, path));
        }
        Ok(match (self.workspace.take(), self.git_worktree.take(), self.jj.take(), self.repo.take()) {
            (Some(p), ..) => WorkspaceSpec::Direct(p),
            (None, Some(r), ..) => WorkspaceSpec::GitWorktree(r),
            (None, None, Some(r), _) => WorkspaceSpec::Jj(r),
            (None, None, None, Some(r)) if !self.job && r.to_str().is_some_and(crate::jobs::mirror::is_network_url) => {
                return Err(Error::usage(format!(
                    "--repo {}: a URL is fetched into forage's mirror only for a job; add --job, or pass a checkout's path",
                    crate::jobs::mirror::redacted(&r.to_string_lossy())
                )))
            }
            (None, None, None, Some(r)) => WorkspaceSpec::Repo(r),
            (None, None, None, None) => {
                return Err(Error::usage(
                    "`up` needs a workspace: --repo REPO (a git or jj repository, the mode detected), \
                     --git-worktree REPO, --jj REPO, or --workspace PATH (a directory mounted as it is)",
                ))
            }
        })
    }

    pub(super) fn spec(mut self) -> Result<UpSpec> {
        let workspace = self.workspace()?;
        Ok(UpSpec {
            name: self.name,
            template: self.template,
            workspace,
            base: self.base,
            branch: self.branch,
            image: self.image,
            env: self.env,
            secrets: self.secrets,
            network: self.network.map(|n| n.parse::<Network>()).transpose().map_err(Error::usage)?,
            allow: self.allow,
            publish: self.publish,
            memory: self.memory,
            cpus: self.cpus,
            read_only: self.read_only,
            allow_home: self.allow_home,
            start: !self.no_start,
            agent_args: self.agent_args,
            profile: self.profile,
            include_uncommitted: self.include_uncommitted,
            cow: match (self.cow, self.full_checkout) {
                (true, _) => Some(CowPolicy::Always),
                (_, true) => Some(CowPolicy::Never),
                _ => None,
            },
            no_project_toolchain: self.no_project_toolchain,
            task: match (self.task, self.task_file) {
                (Some(text), _) => Some(TaskSpec::Text(text)),
                (None, Some(file)) => Some(TaskSpec::File(file)),
                (None, None) => None,
            },
        })
    }
}

/// `up NAME PATH`: `up` takes its workspace by a flag; the error names the
/// one that fits what `path` is (`--repo` in a repository, or for a path that
/// is not there to be told apart; `--workspace` for any other directory).
fn stray_path(name: &SandboxName, path: &std::path::Path) -> Error {
    // Inside a repository as `--repo` finds one (`detect_mode`).
    let start = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let is_repository = start.ancestors().any(|d| d.join(".jj").is_dir() || d.join(".git").exists());
    let (flag, what) = if !is_repository && path.is_dir() {
        ("--workspace", "a directory that is no repository, mounted as it is")
    } else {
        ("--repo", "a git or jj repository, the mode detected")
    };
    let shown = path.display().to_string();
    Error::usage(format!(
        "unexpected argument {shown:?}: `up` takes the workspace by a flag, not as a second argument ({flag}: {what})"
    ))
    .hint_run("did you mean {command}?", ["up", name.as_str(), flag, &shown])
}

pub async fn run(ctx: &Ctx, args: UpArgs) -> Result<i32> {
    if args.job {
        return super::jobs::up(ctx, args).await;
    }
    let engine = ctx.engine().await?;
    warn_root_on_a_users_checkout(ctx, &args, engine.identity);
    // Everything that can be checked is checked before anything is made.
    let request = engine.prepare_up(args.spec()?).await?;
    let host_uncommitted = request.host_uncommitted.clone();
    if let Some(found) = host_uncommitted.included() {
        warn_uncommitted(ctx, &found);
    }
    for warning in &request.warnings {
        ctx.out.warn(warning);
    }
    say_checkout(ctx, &request);
    if let Some(toolchain) = request.toolchain() {
        ctx.out.status(format!("toolchain: {toolchain}"));
        if request.plan.network != Network::None {
            offer_forward_ports(ctx, &request.name, toolchain, &request.options.publish);
        }
    }
    let started = request.start;
    ctx.cancel_on_signals();
    let record = engine.up(request).await?;
    engine.progress.finish();
    match host_uncommitted.left_out() {
        Ok(Some(found)) => warn_uncommitted(ctx, &found),
        Ok(None) => {}
        Err(why) => ctx.out.warn(format!("whether your checkout has uncommitted changes is not known: {why}")),
    }
    report(ctx, &record, started)?;
    Ok(0)
}

/// Which checkout a git sandbox gets, and why (`cow_choice`).
fn say_checkout(ctx: &Ctx, request: &crate::sandbox::UpRequest) {
    let crate::workspace::WorkspaceRequest::GitWorktree(git) = &request.workspace else { return };
    let why = request.checkout_why.as_deref();
    match (&git.workspace.cow, why) {
        (Some(layers), why) => ctx.out.status(format!(
            "workspace: copy-on-write over the shared base checkout {} ({}the sandbox's disk holds only what the agent changes)",
            layers.base.display(),
            why.map(|w| format!("{w}; ")).unwrap_or_default()
        )),
        (None, Some(why)) => ctx.out.status(format!("workspace: a full checkout ({why})")),
        (None, None) => {}
    }
}

/// The agent runs as whoever runs forage-ctl. Run as root (sudo) on a
/// checkout that belongs to someone else, the agent is root inside and the
/// files it writes are root's, not the checkout owner's; Claude Code also
/// refuses `--dangerously-skip-permissions` as root. Said, not refused: a
/// root-owned service may mean it.
fn warn_root_on_a_users_checkout(ctx: &Ctx, args: &UpArgs, identity: crate::runtime::Identity) {
    use std::os::unix::fs::MetadataExt;
    if identity.uid != 0 {
        return;
    }
    let source = [&args.workspace, &args.git_worktree, &args.jj, &args.repo].into_iter().flatten().next();
    let Some(owner) = source.and_then(|p| std::fs::metadata(p).ok()).map(|m| m.uid()).filter(|uid| *uid != 0) else {
        return;
    };
    ctx.out.warn(format!(
        "forage-ctl runs as root, so the agent runs as root inside the sandbox and the files it writes belong to root, not to uid {owner} who owns the checkout"
    ));
    ctx.out.hint_text(
        "run forage-ctl as the checkout's owner (a member of the docker group) to give the agent that user's uid",
    );
}

/// The ports the project's devcontainer.json forwards, offered, not
/// published: serving a port is the user's choice, never the repository's.
fn offer_forward_ports(
    ctx: &Ctx,
    name: &SandboxName,
    toolchain: &crate::toolchain::Toolchain,
    published: &[crate::ports::PortSpec],
) {
    use crate::toolchain::ForwardPort;
    let offered: Vec<String> = toolchain
        .forward_ports
        .iter()
        .filter_map(|p| match p {
            ForwardPort::Port(port) if !published.iter().any(|s| s.port == *port) => Some(port.to_string()),
            _ => None,
        })
        .collect();
    if offered.is_empty() {
        return;
    }
    ctx.out.hint_text(&format!(
        "the project's devcontainer.json forwards port {}: `forage-ctl port {name} add PORT` serves one on 127.0.0.1 (or `up --publish PORT`)",
        offered.join(", ")
    ));
}

/// The user's uncommitted changes: left out (the agent starts from HEAD and
/// will not see them, so say so), or copied in (say what could not be).
fn warn_uncommitted(ctx: &Ctx, found: &HostUncommitted) {
    let n = found.count;
    let changes = if n == 1 { "1 uncommitted change".to_owned() } else { format!("{n} uncommitted changes") };
    let checkout = found.checkout.display();
    if found.included {
        ctx.out.status(format!("copying {changes} of {checkout} into the sandbox"));
        for s in &found.skipped {
            ctx.out.warn(format!("not copied into the sandbox: {s}"));
        }
        return;
    }
    ctx.out.warn(format!(
        "{checkout} has {changes} (edited, deleted or untracked files) that the agent will not see: it starts from your last commit"
    ));
    ctx.out.hint_text("pass --include-uncommitted to start the agent with a copy of them");
}

/// What `up` (and `restore --up`) made, and what to do next.
pub fn report(ctx: &Ctx, record: &Record, started: bool) -> Result<()> {
    let ws = record.workspace.get();
    let hints = super::next::after_up(&record.name, ws.mode());
    if ctx.out.json_wanted() {
        return ctx.out.json_with_hints(record, &hints);
    }
    let n = record.name.as_str();
    let branch = match (ws.mode(), ws.branch()) {
        (Mode::Jj, Some(b)) => format!(" bookmark {b}"),
        (_, Some(b)) => format!(" on branch {b}"),
        _ => String::new(),
    };
    let copied = match &record.workspace {
        WorkspaceRecord::GitWorktree(g) if g.from_uncommitted => ", with your uncommitted changes",
        _ => "",
    };
    ctx.out.data(format!(
        "sandbox {n} is {}: container {}, workspace {} ({}{branch}{copied})",
        if started { "up" } else { "created" },
        record.container,
        ws.host_path().display(),
        ws.mode()
    ));
    for hint in &hints {
        ctx.out.hint(hint);
    }
    Ok(())
}
