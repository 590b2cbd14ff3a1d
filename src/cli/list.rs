use clap::Args;
use tabled::settings::Style;
use tabled::{Table, Tabled};

use super::render::{age, print_json, shown};
use super::Ctx;
use crate::error::Result;
use crate::progress::Silent;

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Machine-readable output: a JSON array of sandboxes.
    #[arg(long)]
    pub json: bool,
}

#[derive(Tabled)]
struct Row {
    #[tabled(rename = "NAME")]
    name: String,
    #[tabled(rename = "MODE")]
    mode: String,
    #[tabled(rename = "TEMPLATE")]
    template: String,
    #[tabled(rename = "STATUS")]
    status: String,
    #[tabled(rename = "BRANCH")]
    branch: String,
    #[tabled(rename = "WORKSPACE")]
    workspace: String,
    #[tabled(rename = "AGE")]
    age: String,
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
        let table: Vec<Row> = rows
            .into_iter()
            .map(|r| Row {
                age: r.created_at.map(age).unwrap_or_else(|| "-".into()),
                branch: shown(r.branch.as_deref().unwrap_or("-")),
                name: shown(&r.name),
                mode: r.mode,
                template: shown(&r.template),
                status: r.status,
                workspace: shown(&r.workspace),
            })
            .collect();
        println!("{}", Table::new(table).with(Style::blank()));
    }
    Ok(0)
}
