use clap::{Args, Subcommand};

use super::render::{shown, Table};
use super::Ctx;
use crate::error::{Error, Result};
use crate::template::Templates;

#[derive(Debug, Args)]
pub struct TemplatesArgs {
    #[command(subcommand)]
    pub action: Option<TemplatesAction>,
}

#[derive(Debug, Subcommand)]
pub enum TemplatesAction {
    /// Print one template as forage resolves it, with defaults filled in.
    Show {
        #[arg(add = super::complete::templates())]
        name: String,
    },
}

pub fn run(ctx: &Ctx, args: TemplatesArgs) -> Result<i32> {
    let templates = Templates::new(&ctx.settings);
    for warning in templates.warnings() {
        ctx.out.warn(warning);
    }
    match args.action {
        Some(TemplatesAction::Show { name }) => {
            let t = templates.resolve(&name)?;
            if ctx.out.json_wanted() {
                ctx.out.json(&serde_json::json!({"name": t.name, "origin": t.origin, "template": t.template}))?;
            } else {
                ctx.out.data(format!("# {} ({})", t.name, t.origin));
                let yaml = serde_yaml_ng::to_string(&t.template).map_err(Error::other)?;
                ctx.out.data_block(super::shown_text(&yaml));
            }
        }
        None => {
            let all = templates.list()?;
            if ctx.out.json_wanted() {
                let rows: Vec<_> = all
                    .iter()
                    .map(|t| serde_json::json!({"name": t.name, "description": t.template.description, "origin": t.origin}))
                    .collect();
                ctx.out.json(&rows)?;
            } else {
                let mut table = Table::new(["NAME", "DESCRIPTION", "SOURCE"]);
                for t in &all {
                    table.row([shown(&t.name), shown(&t.template.description), shown(&t.origin.to_string())]);
                }
                ctx.out.data_block(table.to_string());
            }
        }
    }
    Ok(0)
}
