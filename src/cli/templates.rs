use clap::{Args, Subcommand};

use super::render::print_json;
use crate::error::{Error, Result};
use crate::template;

#[derive(Debug, Args)]
pub struct TemplatesArgs {
    #[command(subcommand)]
    pub action: Option<TemplatesAction>,
    /// Machine-readable output.
    #[arg(long, global = true)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum TemplatesAction {
    /// Print one template as forage resolves it, with defaults filled in.
    Show { name: String },
}

pub fn run(args: TemplatesArgs) -> Result<i32> {
    match args.action {
        Some(TemplatesAction::Show { name }) => {
            let t = template::resolve(&name)?;
            if args.json {
                print_json(&serde_json::json!({"name": t.name, "origin": t.origin, "template": t.template}))?;
            } else {
                say!("# {} ({})", t.name, t.origin);
                print!("{}", serde_yaml_ng::to_string(&t.template).map_err(Error::other)?);
            }
        }
        None => {
            let all = template::list()?;
            if args.json {
                let rows: Vec<_> = all
                    .iter()
                    .map(|t| serde_json::json!({"name": t.name, "description": t.template.description, "origin": t.origin}))
                    .collect();
                print_json(&rows)?;
            } else {
                let width = all.iter().map(|t| t.name.len()).max().unwrap_or(4).max(4);
                let desc = all.iter().map(|t| t.template.description.len()).max().unwrap_or(11).max(11);
                say!("{:width$}  {:desc$}  SOURCE", "NAME", "DESCRIPTION");
                for t in &all {
                    say!("{:width$}  {:desc$}  {}", t.name, t.template.description, t.origin);
                }
            }
        }
    }
    Ok(0)
}
