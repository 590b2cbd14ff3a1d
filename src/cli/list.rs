use clap::Args;

use super::render::{age, print_json, shown, Table};
use super::Ctx;
use crate::error::Result;
use crate::progress::Silent;

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Machine-readable output: a JSON array of sandboxes.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(ctx: &Ctx, args: ListArgs) -> Result<i32> {
    let docker = ctx.docker().await?;
    let rows = ctx.engine(&docker, &Silent).list().await?;
    if args.json {
        print_json(&rows)?;
    } else if ctx.quiet {
        for r in &rows {
            say!("{}", r.name);
        }
    } else {
        let mut table = Table::new(["NAME", "MODE", "TEMPLATE", "STATUS", "BRANCH", "WORKSPACE", "AGE"]);
        for r in rows {
            table.row([
                shown(&r.name),
                r.mode,
                shown(&r.template),
                r.status,
                shown(r.branch.as_deref().unwrap_or("-")),
                shown(&r.workspace),
                r.created_at.map(age).unwrap_or_else(|| "-".into()),
            ]);
        }
        print!("{table}");
    }
    Ok(0)
}
