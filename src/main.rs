use clap::FromArgMatches;
use tracing_subscriber::EnvFilter;

fn main() {
    // Die quietly when a reader such as `head` closes the pipe, as CLIs do,
    // instead of panicking on the failed write.
    // SAFETY: restoring the default disposition of one signal before any threads exist.
    #[allow(unsafe_code)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    forage::env::start_libgit2_without_tls_roots();
    // A Tab in a shell whose completion script `forage-ctl completions` printed:
    // answer with the candidates and exit.
    clap_complete::CompleteEnv::with_factory(forage::cli::command).var(forage::cli::COMPLETE_VAR).complete();
    let mut command = forage::cli::command();
    let cli = forage::cli::Cli::from_arg_matches(&command.get_matches_mut())
        .unwrap_or_else(|e| e.format(&mut command).exit());
    let default_level = match (cli.quiet, cli.verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        _ => "trace",
    };
    // rmcp logs every JSON-RPC error it sends as a warning; for `mcp` those are
    // answers to the client, not forage's trouble (-v shows them).
    let default = if cli.verbose == 0 { format!("{default_level},rmcp=error") } else { default_level.to_owned() };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let color = std::io::IsTerminal::is_terminal(&std::io::stderr()) && forage::env::no_color().is_none();
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(|| forage::cli::LogWriter).with_ansi(color).init();

    let printer = forage::cli::Printer::new(cli.quiet, cli.json);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    let code = match runtime.block_on(forage::cli::run(cli)) {
        Ok(code) => code,
        Err(err) => {
            printer.error(&err);
            err.exit_code()
        }
    };
    std::process::exit(code);
}
