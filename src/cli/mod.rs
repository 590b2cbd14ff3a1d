//! Command-line parsing, one file per command. Commands map arguments into the
//! library's requests and render the results; they decide nothing themselves.

/// `println!` for text that may hold names the agent chose: escaped (`render::shown`).
macro_rules! say {
    ($($arg:tt)*) => {
        println!("{}", $crate::cli::shown(&format!($($arg)*)))
    };
}

mod attach;
mod completions;
mod down;
mod exec;
mod gc;
mod lifecycle;
mod list;
mod logs;
mod render;
pub use render::{shown, shown_text};
mod reset;
mod restore;
mod status;
mod sync;
mod templates;
mod up;

use clap::{Parser, Subcommand};

use crate::error::Result;
use crate::names::SandboxName;
use crate::progress::Progress;
use crate::runtime::docker::Docker;
use crate::sandbox::{Cancel, Engine};
use crate::store::Home;

#[derive(Debug, Parser)]
#[command(
    name = "forage-ctl",
    version,
    about = "Run AI coding agents in sandboxes: one container and one workspace per agent",
    after_help = "Exit codes: 0 ok, 1 error, 2 usage, 3 not found, 4 already exists/conflict, \
                  5 Docker unreachable, 6 workspace/VCS error, 7 refused to lose data.\n\
                  FORAGE_HOME sets where state lives; RUST_LOG filters tracing output."
)]
pub struct Cli {
    /// More diagnostics on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Print only what scripts need: no progress, no hints (for `list`: names only).
    #[arg(short, long, global = true)]
    pub quiet: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a sandbox: workspace plus container, and start the agent.
    Up(Box<up::UpArgs>),
    /// One row per sandbox.
    #[command(visible_alias = "ls")]
    List(list::ListArgs),
    /// Everything forage knows about one sandbox.
    Status(status::StatusArgs),
    /// Run a command in a running sandbox; exits with the command's exit code.
    Exec(exec::ExecArgs),
    /// An interactive shell in the sandbox.
    Shell(NameArg),
    /// Attach the terminal to the agent (detach with ctrl-p ctrl-q).
    Attach(NameArg),
    /// The agent's output.
    Logs(logs::LogsArgs),
    /// Start a stopped sandbox's container.
    Start(NameArg),
    /// Stop the container; the workspace is untouched.
    Stop(NameArg),
    /// Stop and start the container; the workspace is untouched.
    Restart(NameArg),
    /// Replace the container with a new one from the template as it is now (same
    /// options as `up`); the workspace is untouched.
    Reset(NameArg),
    /// Bring the agent's commits to the host repository (git: onto branch forage-NAME).
    Sync(sync::SyncArgs),
    /// Tear sandboxes down: container first, then workspace and record.
    #[command(visible_alias = "rm")]
    Down(down::DownArgs),
    /// Bring a torn-down sandbox's archived work back as a branch (and with --up, a sandbox).
    Restore(restore::RestoreArgs),
    /// Find what crashes left behind; with --force, clean it up (archiving work).
    Gc(gc::GcArgs),
    /// List templates, or print one.
    Templates(templates::TemplatesArgs),
    /// Print shell completions.
    Completions(completions::CompletionsArgs),
    /// Print the man page (roff), or write every page with --dir.
    Man(completions::ManArgs),
}

#[derive(Debug, clap::Args)]
pub struct NameArg {
    /// The sandbox.
    pub name: SandboxName,
}

/// What every command may need, built lazily so that commands which never touch
/// Docker (templates, completions) work without an engine.
pub struct Ctx {
    pub quiet: bool,
    pub home: Home,
}

impl Ctx {
    pub async fn docker(&self) -> Result<Docker> {
        Docker::connect().await
    }

    pub fn progress(&self) -> Box<dyn Progress> {
        if self.quiet {
            Box::new(render::Quiet)
        } else {
            Box::new(render::Spinner::new())
        }
    }

    pub fn engine<'a>(&self, docker: &'a Docker, progress: &'a dyn Progress) -> Engine<'a, Docker> {
        Engine { home: self.home.clone(), runtime: docker, progress, cancel: Cancel::default() }
    }
}

/// Runs the command; the `Ok` value is the process exit code.
pub async fn run(cli: Cli) -> Result<i32> {
    let ctx = Ctx { quiet: cli.quiet, home: Home::from_env()? };
    match cli.command {
        Command::Up(args) => up::run(&ctx, *args).await,
        Command::List(args) => list::run(&ctx, args).await,
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
        Command::Down(args) => down::run(&ctx, args).await,
        Command::Restore(args) => restore::run(&ctx, args).await,
        Command::Gc(args) => gc::run(&ctx, args).await,
        Command::Templates(args) => templates::run(args),
        Command::Completions(args) => completions::run(args),
        Command::Man(args) => completions::man(args),
    }
}
