//! `login`, `logout` and `login --list`: the agent's own login flow run once
//! in a throwaway sandbox, its state kept for the sandboxes that follow.

use std::io::IsTerminal;

use clap::Args;

use super::render::{age, shown, Table};
use super::{terminal, Ctx};
use crate::agent_state::DEFAULT_PROFILE;
use crate::error::{Error, Result};
use crate::record::Record;
use crate::runtime::docker::Docker;
use crate::sandbox::{DownOptions, Engine};

#[derive(Debug, Args)]
pub struct LoginArgs {
    /// The template whose agent logs in (its `agent.login`).
    #[arg(required_unless_present = "list", add = super::complete::templates())]
    pub template: Option<String>,
    /// Which of the template's stored logins: keep a work and a personal one.
    #[arg(long, default_value = DEFAULT_PROFILE, value_name = "PROFILE")]
    pub profile: String,
    /// List the stored logins (template, profile, files, last change) instead.
    #[arg(long, conflicts_with = "template")]
    pub list: bool,
}

#[derive(Debug, Args)]
pub struct LogoutArgs {
    /// The template whose stored state to remove.
    #[arg(add = super::complete::templates())]
    pub template: String,
    /// Which profile (only that one is removed).
    #[arg(long, default_value = DEFAULT_PROFILE, value_name = "PROFILE")]
    pub profile: String,
}

pub async fn login(ctx: &Ctx, args: LoginArgs) -> Result<i32> {
    let engine = ctx.engine().await?;
    let Some(template) = args.template.filter(|_| !args.list) else { return list(ctx, &engine) };
    let (request, command) = engine.prepare_login(&template, &args.profile)?;
    let template = request.template.name.clone();
    ctx.cancel_on_signals();
    let record = engine.up(request).await?;
    engine.progress.finish();
    let ran = run_login(ctx, &engine, &record, command).await;
    // Whatever the login did: the sandbox goes, its state taken back first.
    let down = engine.down(&record.name, DownOptions { keep_branch: false, discard: true }).await;
    engine.progress.finish();
    let code = ran?;
    down?;
    let stored = engine.logins()?.into_iter().find(|p| p.template == template && p.profile == args.profile);
    let files = stored.as_ref().map_or(0, |p| p.files);
    if ctx.out.json_wanted() {
        ctx.out.json(&serde_json::json!({
            "template": template, "profile": args.profile, "exit_code": code, "files": files,
        }))?;
    } else if files == 0 {
        ctx.out.warn(format!(
            "nothing is stored for template {template}, profile {}: the login wrote none of the template's state files",
            args.profile
        ));
    } else {
        ctx.out.status(format!(
            "stored the login of template {template}, profile {} ({files} file{}); sandboxes of it start logged in",
            args.profile,
            if files == 1 { "" } else { "s" }
        ));
    }
    if code != 0 {
        return Err(Error::other(format!("the login command exited with code {code}")));
    }
    Ok(0)
}

/// Runs the login command in the sandbox, attached to this terminal (a
/// terminal inside when stdin is one; plain stdin and stdout otherwise); its
/// exit code. Ctrl-C outside a terminal ends it.
async fn run_login(ctx: &Ctx, engine: &Engine<Docker>, record: &Record, command: Vec<String>) -> Result<i64> {
    let tty = std::io::stdin().is_terminal();
    if tty {
        ctx.out.status(format!(
            "running `{}` for template {}; exit it once logged in",
            command.join(" "),
            record.template
        ));
    }
    let size = tty.then(terminal::window_size).flatten();
    let session = engine.exec(&record.name, command, true, tty, size).await?;
    let id = session.id.clone();
    tokio::select! {
        done = terminal::connect(engine, session, tty, true) => done?,
        () = engine.cancel.triggered() => return Err(Error::other("interrupted")),
    }
    Ok(engine.exit_code(&id).await?.unwrap_or(-1))
}

pub async fn logout(ctx: &Ctx, args: LogoutArgs) -> Result<i32> {
    let engine = ctx.engine().await?;
    if !engine.logout(&args.template, &args.profile).await? {
        return Err(Error::not_found(format!(
            "nothing is stored for template {}, profile {}",
            args.template, args.profile
        ))
        .hint_run("{command} lists what is", ["login", "--list"]));
    }
    if ctx.out.json_wanted() {
        ctx.out.json(&serde_json::json!({"template": args.template, "profile": args.profile, "removed": true}))?;
        return Ok(0);
    }
    ctx.out.status(format!("removed the stored state of template {}, profile {}", args.template, args.profile));
    Ok(0)
}

fn list(ctx: &Ctx, engine: &Engine<Docker>) -> Result<i32> {
    let all = engine.logins()?;
    if ctx.out.json_wanted() {
        ctx.out.json(&all)?;
        return Ok(0);
    }
    if all.is_empty() {
        // Said on stderr: a script reading the table gets nothing to parse.
        ctx.out.status("no agent logins or state are stored");
        ctx.out.hint_text("`forage-ctl login TEMPLATE` runs an agent's own login once and keeps it");
        return Ok(0);
    }
    let mut table = Table::new(["TEMPLATE", "PROFILE", "FILES", "CHANGED"]);
    for p in &all {
        table.row([
            shown(&p.template),
            shown(&p.profile),
            p.files.to_string(),
            p.changed_at.map(age).unwrap_or_default(),
        ]);
    }
    ctx.out.data_block(table.to_string());
    Ok(0)
}
