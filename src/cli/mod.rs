//! Command-line parsing, one file per command. Commands map arguments into the
//! library's requests and render the results through the `Printer`; they decide
//! nothing themselves.

mod archives;
mod attach;
mod complete;
mod completions;
mod down;
mod egress_proxy;
mod exec;
mod gc;
mod help;
mod jobs;
mod lifecycle;
mod list;
mod login;
mod logs;
mod mcp;
mod next;
mod pager;
mod path;
mod port;
mod port_forward;
mod printer;
mod render;
mod reset;
mod restore;
mod review;
mod serve;
mod status;
mod sync;
mod template_export;
mod templates;
mod terminal;
mod up;
mod wait;

pub use complete::VAR as COMPLETE_VAR;
pub use printer::{error_line, Printer};
pub use render::{shown, shown_text, LogWriter};

use std::sync::Arc;

use clap::{Parser, Subcommand};

use crate::env::Settings;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::runtime::docker::Docker;
use crate::runtime::engine_choice::{candidates, EngineChoice};
use crate::runtime::Identity;
use crate::sandbox::{Cancel, Engine};
use crate::store::Home;

/// The heading of the options every command takes, shown apart from a
/// command's own.
const GLOBAL: &str = "Global options";

/// The command line as `main` parses it: `Cli` with its commands grouped in `--help`.
pub fn command() -> clap::Command {
    help::grouped(<Cli as clap::CommandFactory>::command())
}

#[derive(Debug, Parser)]
#[command(
    name = "forage-ctl",
    version,
    about = "Run AI coding agents in sandboxes: one container and one workspace per agent",
    after_help = "Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 already exists/conflict, \
                  5 Docker unreachable, 6 workspace/VCS error, 7 refused to lose data; \
                  `wait`: 8 an agent is idle, 9 timed out, 10 `--next` found none left.\n\
                  FORAGE_HOME sets where state lives; RUST_LOG filters tracing output.\n\
                  `forage-ctl COMMAND --help` shows a command's options and an example."
)]
pub struct Cli {
    /// More diagnostics on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true, help_heading = GLOBAL)]
    pub verbose: u8,
    /// Print only what scripts need: no progress, no hints (for `list`: names only).
    #[arg(short, long, global = true, help_heading = GLOBAL)]
    pub quiet: bool,
    /// Machine-readable output: the command's result as JSON on stdout.
    #[arg(long, global = true, help_heading = GLOBAL)]
    pub json: bool,
    /// Engine if DOCKER_HOST is unset (default: Docker, else Podman); or FORAGE_ENGINE.
    #[arg(long, global = true, value_enum, help_heading = GLOBAL)]
    pub engine: Option<EngineChoice>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a sandbox: workspace plus container, and start the agent.
    #[command(after_help = "Example: forage-ctl up agent-a --repo ~/src/app -t claude")]
    Up(Box<up::UpArgs>),
    /// One row per sandbox.
    #[command(visible_alias = "ls", after_help = "Example: forage-ctl list --json")]
    List,
    /// Everything forage knows about one sandbox.
    #[command(after_help = "Example: forage-ctl status agent-a")]
    Status(NameArg),
    /// Run a command in a running sandbox; exits with the command's exit code.
    #[command(after_help = "Example: forage-ctl exec agent-a -- git log --oneline")]
    Exec(exec::ExecArgs),
    /// An interactive shell in the sandbox.
    #[command(after_help = "Example: forage-ctl shell agent-a")]
    Shell(NameArg),
    /// Attach the terminal to the agent (detach with ctrl-p ctrl-q).
    #[command(after_help = "Example: forage-ctl attach agent-a")]
    Attach(NameArg),
    /// The agent's output.
    #[command(after_help = "Example: forage-ctl logs agent-a --follow --tail 50")]
    Logs(logs::LogsArgs),
    /// Start a stopped sandbox's container.
    #[command(after_help = "Example: forage-ctl start agent-a")]
    Start(NameArg),
    /// Stop the container; the workspace is untouched.
    #[command(after_help = "Example: forage-ctl stop agent-a")]
    Stop(NameArg),
    /// Stop and start the container; the workspace is untouched.
    #[command(after_help = "Example: forage-ctl restart agent-a")]
    Restart(NameArg),
    /// Replace the container with a new one from the template as it is now (same
    /// options as `up`); the workspace is untouched.
    #[command(after_help = "Example: forage-ctl reset agent-a")]
    Reset(NameArg),
    /// Bring the agent's work to the host repository (git: onto branch forage-NAME;
    /// jj: as bookmark forage/NAME).
    #[command(after_help = "Example: forage-ctl sync agent-a")]
    Sync(NameArg),
    /// The agent's change since its base, committed and not (git and jj sandboxes).
    #[command(after_help = "Example: forage-ctl diff agent-a agent-b --stat")]
    Diff(review::DiffArgs),
    /// The agent's commits since its base, newest first.
    #[command(after_help = "Example: forage-ctl log agent-a")]
    Log(review::LogArgs),
    /// Land the agent's work on your branch (jj: bookmark), in your own checkout.
    #[command(after_help = "Example: forage-ctl merge agent-a --squash")]
    Merge(review::MergeArgs),
    /// Bring your branch (jj: bookmark) into the agent's work, inside the sandbox
    /// (git: merged; jj: rebased onto), for it to resolve what conflicts.
    #[command(after_help = "Example: forage-ctl update agent-a --from main")]
    Update(review::UpdateArgs),
    /// The agent's whole change as uncommitted edits in your checkout.
    #[command(after_help = "Example: forage-ctl apply agent-a")]
    Apply(NameArg),
    /// Until an agent exits or goes idle (exit 0: exited, 8: idle, 9: timed out);
    /// --all: every one; --next: the next not yet reported (10: none left).
    #[command(after_help = "Example: forage-ctl wait agent-a agent-b --until idle --timeout 1h")]
    Wait(wait::WaitArgs),
    /// The ports a sandbox publishes on the host's 127.0.0.1; `add`/`rm` change
    /// them on a running sandbox (its container stays).
    #[command(after_help = "Example: forage-ctl port agent-a add 3000")]
    Port(port::PortArgs),
    /// Print the sandbox's workspace directory on the host, from forage's record.
    #[command(after_help = "Example: cd \"$(forage-ctl path agent-a)\"")]
    Path(NameArg),
    /// Make (or move) branch review/NAME at the agent's synced work, for you
    /// to switch to in your checkout (git sandboxes).
    #[command(after_help = "Example: forage-ctl checkout agent-a && git switch review/agent-a")]
    Checkout(NameArg),
    /// What `down` archived; `archives prune` deletes old archives.
    #[command(after_help = "Example: forage-ctl archives prune --older-than 30d")]
    Archives(archives::ArchivesArgs),
    /// Tear sandboxes down: container first, then workspace and record.
    #[command(visible_alias = "rm", after_help = "Example: forage-ctl down agent-a agent-b --dry-run")]
    Down(down::DownArgs),
    /// Bring a torn-down sandbox's archived work back as a branch (and with --up, a sandbox).
    #[command(after_help = "Example: forage-ctl restore agent-a --up")]
    Restore(restore::RestoreArgs),
    /// Find what crashes left behind; with --force, clean it up (archiving work).
    #[command(after_help = "Example: forage-ctl gc --force")]
    Gc(gc::GcArgs),
    /// Log an agent in once (its own login, in a throwaway sandbox) and keep
    /// its state for the sandboxes of its template; --list: what is stored.
    #[command(after_help = "Example: forage-ctl login claude --profile work")]
    Login(login::LoginArgs),
    /// Remove a template's stored agent state (one profile).
    #[command(after_help = "Example: forage-ctl logout claude --profile work")]
    Logout(login::LogoutArgs),
    /// List templates, or print one.
    #[command(after_help = "Example: forage-ctl templates show claude")]
    Templates(templates::TemplatesArgs),
    /// Print the shell's completion script (it completes sandbox and template names too).
    #[command(after_help = "Example: source <(forage-ctl completions bash)")]
    Completions(completions::CompletionsArgs),
    /// Print the man page (roff), or write every page with --dir.
    #[command(after_help = "Example: forage-ctl man --dir ~/.cargo/share/man/man1")]
    Man(completions::ManArgs),
    /// Jobs (`up --repo SOURCE --job`) and their context: task, status, times, result.
    #[command(after_help = "Example: forage-ctl jobs --json")]
    Jobs,
    /// Serve forage's tools (create, exec, diff, merge, down, …) to an agent
    /// over MCP on stdin/stdout, until the client disconnects.
    #[command(after_help = "Example: claude mcp add forage -- forage-ctl mcp")]
    Mcp(mcp::McpArgs),
    /// Serve forage's operations as an HTTP/JSON API on a unix socket (and
    /// optionally a loopback port with a token), until stopped.
    #[command(after_help = "Example: forage-ctl serve --socket /run/user/1000/forage.sock")]
    Serve(serve::ServeArgs),
    /// The egress proxy of `network: restricted`, as forage runs it in its own
    /// container (not for running by hand).
    #[command(
        hide = true,
        after_help = "Example: forage-ctl egress-proxy --listen 0.0.0.0:3128 --policy /forage-egress/policy --log /forage-egress/log"
    )]
    EgressProxy(egress_proxy::EgressProxyArgs),
    /// The forwarder of a sandbox's published ports, as forage runs it in its
    /// own container (not for running by hand).
    #[command(hide = true, after_help = "Example: forage-ctl port-forward --forward 3000=10.0.0.3:3000")]
    PortForward(port_forward::PortForwardArgs),
}

#[derive(Debug, clap::Args)]
pub struct NameArg {
    /// The sandbox.
    #[arg(add = complete::sandboxes())]
    pub name: SandboxName,
}

/// What every command may need: the printer, the environment, and (built on
/// first use, so that commands which never touch Docker work without an
/// engine) the sandbox engine.
pub struct Ctx {
    pub out: Printer,
    pub settings: Arc<Settings>,
    pub home: Home,
    cancel: Cancel,
}

impl Ctx {
    /// The engine over the Docker engine `DOCKER_HOST` names, reporting progress
    /// through the printer.
    pub async fn engine(&self) -> Result<Engine<Docker>> {
        let choice = self.settings.engine.as_deref().map(EngineChoice::parse).transpose()?;
        // The Podman seccomp file lives in the user's runtime directory,
        // which the rootless service (the same user) can read.
        let seccomp_dir = self.settings.xdg_runtime_dir.as_ref().map(|d| d.join("forage"));
        let docker = Docker::trying(candidates(&self.settings, choice), seccomp_dir);
        Ok(Engine {
            home: self.home.clone(),
            runtime: Arc::new(docker),
            progress: self.out.progress(),
            cancel: self.cancel.clone(),
            settings: self.settings.clone(),
            identity: Identity::current(),
        })
    }

    /// Ctrl-C, SIGTERM and SIGHUP ask the engine to stop after its current
    /// step (and roll back, for `up`).
    fn cancel_on_signals(&self) {
        use tokio::signal::unix::{signal, SignalKind};
        for kind in [SignalKind::interrupt(), SignalKind::terminate(), SignalKind::hangup()] {
            let cancel = self.cancel.clone();
            if let Ok(mut sig) = signal(kind) {
                tokio::spawn(async move {
                    if sig.recv().await.is_some() {
                        cancel.trigger();
                    }
                });
            }
        }
    }

    /// Refuses `--json` for a command whose output is not a report: `does`
    /// says what it prints instead (`streams the agent's terminal`), so that
    /// the refusal is true of each command.
    fn no_json(&self, command: &str, does: &str) -> Result<()> {
        if self.out.json_wanted() {
            return Err(Error::usage(format!("`{command}` {does}; it has no --json output")));
        }
        Ok(())
    }
}

/// Runs the command; the `Ok` value is the process exit code.
pub async fn run(cli: Cli) -> Result<i32> {
    let mut settings = Settings::from_process();
    if let Some(engine) = cli.engine {
        settings.engine = Some(if engine == EngineChoice::Podman { "podman" } else { "docker" }.into());
    }
    let settings = Arc::new(settings);
    let ctx = Ctx {
        out: Printer::new(cli.quiet, cli.json),
        home: Home::from_settings(&settings)?,
        settings,
        cancel: Cancel::default(),
    };
    match cli.command {
        Command::Up(args) => up::run(&ctx, *args).await,
        Command::List => list::run(&ctx).await,
        Command::Status(args) => status::run(&ctx, args).await,
        Command::Exec(args) => exec::run(&ctx, args).await,
        Command::Shell(args) => exec::shell(&ctx, args).await,
        Command::Attach(args) => attach::run(&ctx, args).await,
        Command::Logs(args) => logs::run(&ctx, args).await,
        Command::Start(args) => lifecycle::start(&ctx, args).await,
        Command::Stop(args) => lifecycle::stop(&ctx, args).await,
        Command::Restart(args) => lifecycle::restart(&ctx, args).await,
        Command::Reset(args) => reset::run(&ctx, args).await,
        Command::Sync(args) => sync::run(&ctx, args).await,
        Command::Diff(args) => review::diff(&ctx, args).await,
        Command::Log(args) => review::log(&ctx, args).await,
        Command::Merge(args) => review::merge(&ctx, args).await,
        Command::Update(args) => review::update(&ctx, args).await,
        Command::Apply(args) => review::apply(&ctx, args).await,
        Command::Wait(args) => wait::run(&ctx, args).await,
        Command::Path(args) => path::run(&ctx, args).await,
        Command::Port(args) => port::run(&ctx, args).await,
        Command::Checkout(args) => path::checkout(&ctx, args).await,
        Command::Archives(args) => archives::run(&ctx, args).await,
        Command::Down(args) => down::run(&ctx, args).await,
        Command::Restore(args) => restore::run(&ctx, args).await,
        Command::Gc(args) => gc::run(&ctx, args).await,
        Command::Login(args) => login::login(&ctx, args).await,
        Command::Logout(args) => login::logout(&ctx, args).await,
        Command::Templates(args) => templates::run(&ctx, args),
        Command::Completions(args) => completions::run(&ctx, args),
        Command::Man(args) => completions::man(&ctx, args),
        Command::Mcp(args) => mcp::run(&ctx, args).await,
        Command::Jobs => jobs::list(&ctx).await,
        Command::Serve(args) => serve::run(&ctx, args).await,
        Command::EgressProxy(args) => egress_proxy::run(args).await,
        Command::PortForward(args) => port_forward::run(args).await,
    }
}
