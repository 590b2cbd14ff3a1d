use clap::{Args, Subcommand};

use super::render::{shown, Table};
use super::Ctx;
use crate::error::{Error, Result};
use crate::template::ImageSpec;
use crate::template::Templates;

#[derive(Debug, Args)]
pub struct TemplatesArgs {
    #[command(subcommand)]
    pub action: Option<TemplatesAction>,
}

#[derive(Debug, Subcommand)]
pub enum TemplatesAction {
    /// Print one template as forage resolves it, with defaults filled in (a
    /// built-in's Dockerfile follows, as comments).
    Show {
        #[arg(add = super::complete::templates())]
        name: String,
        /// Print only the built-in's Dockerfile, as it is.
        #[arg(long)]
        dockerfile: bool,
    },
    /// Write a built-in template's files (template.yaml, Dockerfile) out for
    /// editing: into DIR, or by default your template directory, where the
    /// copy is used in place of the built-in.
    #[command(after_help = "Example: forage-ctl templates export claude")]
    Export {
        #[arg(add = super::complete::templates())]
        name: String,
        /// Where to write (a new or empty directory).
        dir: Option<std::path::PathBuf>,
    },
}

pub fn run(ctx: &Ctx, args: TemplatesArgs) -> Result<i32> {
    let templates = Templates::new(&ctx.settings);
    for warning in templates.warnings() {
        ctx.out.warn(warning);
    }
    match args.action {
        Some(TemplatesAction::Show { name, dockerfile: true }) => show_dockerfile(ctx, &templates, &name)?,
        Some(TemplatesAction::Show { name, dockerfile: false }) => show(ctx, &templates, &name)?,
        Some(TemplatesAction::Export { name, dir }) => export(ctx, &templates, &name, dir)?,
        None => list(ctx, &templates)?,
    }
    Ok(0)
}

/// `templates show NAME`: the template as resolved; a built-in's Dockerfile
/// after it as comments, so that the output stays the template's YAML.
fn show(ctx: &Ctx, templates: &Templates, name: &str) -> Result<()> {
    let t = templates.resolve(name)?;
    if ctx.out.json_wanted() {
        return ctx.out.json(&serde_json::json!({
            "name": t.name, "origin": t.origin, "template": t.template, "dockerfile": t.builtin_dockerfile,
        }));
    }
    ctx.out.data(format!("# {} ({})", t.name, t.origin));
    let yaml = serde_yaml_ng::to_string(&t.template).map_err(Error::other)?;
    ctx.out.data_block(super::shown_text(&yaml));
    if let Some(text) = t.builtin_dockerfile {
        let commented: String = text.lines().map(|l| format!("#   {l}\n").replace("#   \n", "#\n")).collect();
        ctx.out.data_block(format!(
            "# build.dockerfile, shipped inside forage-ctl (`templates show {name} --dockerfile` prints it alone,\n# `templates export {name}` writes it out for editing):\n{commented}"
        ));
    }
    Ok(())
}

/// `templates show NAME --dockerfile`: a built-in's Dockerfile, as shipped.
fn show_dockerfile(ctx: &Ctx, templates: &Templates, name: &str) -> Result<()> {
    let t = templates.resolve(name)?;
    let Some(text) = t.builtin_dockerfile else {
        return Err(Error::usage(match (&t.template.image, t.dir()) {
            (ImageSpec::Build(build), Some(dir)) => format!(
                "template {name:?} is the file {}: its Dockerfile is {}, which you can read there",
                t.origin,
                dir.join(&build.context).join(&build.dockerfile).display()
            ),
            _ => format!("template {name:?} is not built from a Dockerfile"),
        }));
    };
    ctx.out.data_block(text);
    Ok(())
}

/// `templates export NAME [DIR]`: each file written, and whether forage now
/// uses the copy.
fn export(ctx: &Ctx, templates: &Templates, name: &str, dir: Option<std::path::PathBuf>) -> Result<()> {
    let done = super::template_export::export(templates, name, dir)?;
    if ctx.out.json_wanted() {
        return ctx.out.json(&serde_json::json!({
            "name": name, "dir": done.dir, "files": done.files, "used_in_place_of_builtin": done.in_search_path,
        }));
    }
    for f in &done.files {
        ctx.out.data(f.display().to_string());
    }
    if done.in_search_path {
        ctx.out.status(format!(
            "template {name} is now your copy in {}; edit it there (remove the directory to use the built-in again)",
            done.dir.display()
        ));
    } else {
        ctx.out.status(format!(
            "wrote template {name} into {}; forage uses it when its parent directory is on FORAGE_TEMPLATES_PATH",
            done.dir.display()
        ));
    }
    Ok(())
}

/// `templates`: every template on the search path.
fn list(ctx: &Ctx, templates: &Templates) -> Result<()> {
    let all = templates.list()?;
    if ctx.out.json_wanted() {
        let rows: Vec<_> = all
            .iter()
            .map(|t| serde_json::json!({"name": t.name, "description": t.template.description, "origin": t.origin}))
            .collect();
        return ctx.out.json(&rows);
    }
    let mut table = Table::new(["NAME", "DESCRIPTION", "SOURCE"]);
    for t in &all {
        table.row([shown(&t.name), shown(&t.template.description), shown(&t.origin.to_string())]);
    }
    ctx.out.data_block(table.to_string());
    Ok(())
}
