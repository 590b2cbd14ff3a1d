//! `.forage/template.yaml`: a project's own word on its toolchain. It may set
//! only what stays inside the sandbox — `image` or `build`, `env`, `init` —
//! and anything else (mounts, secrets, network, resources, the agent…) is
//! refused: a repository never decides what of the host a sandbox sees.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::read::Checkout;
use super::{ProjectImage, Toolchain};
use crate::error::{Error, Result};

const ALLOWED: [&str; 4] = ["image", "build", "env", "init"];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ProjectFile {
    image: Option<String>,
    build: Option<Build>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    init: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Build {
    /// Relative to `.forage/`.
    #[serde(default = "dot")]
    context: String,
    /// Relative to the context, as in a template.
    #[serde(default = "dockerfile")]
    dockerfile: String,
}

fn dot() -> String {
    ".".into()
}
fn dockerfile() -> String {
    "Dockerfile".into()
}

pub fn parse(checkout: &Checkout, rel: &str, text: &str) -> Result<Toolchain> {
    let shown = format!("{}/{rel}", checkout.root.display());
    let bad = |what: String| Error::usage(format!("{shown}: {what}"));
    // The fields first, so that a mount or a secret gets the reason, not a parse error.
    let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).map_err(|e| bad(e.to_string()))?;
    if let Some(map) = value.as_mapping() {
        for key in map.keys() {
            let key = key.as_str().unwrap_or("?");
            if !ALLOWED.contains(&key) {
                return Err(bad(format!(
                    "`{key}` is not for a repository to set: a repository never decides what of the host a sandbox sees (mounts, secrets, network, resources) nor the agent; it may set only {}. Remove `{key}` from it, or pass --no-project-toolchain",
                    ALLOWED.join(", ")
                )));
            }
        }
    }
    let file: ProjectFile = serde_yaml_ng::from_value(value).map_err(|e| bad(e.to_string()))?;
    if let Some(key) = file.env.keys().find(|k| !super::env_allowed(k)) {
        return Err(bad(format!(
            "env: {key:?} is not a variable a project may set (HOME and FORAGE_* are forage's); rename or remove it"
        )));
    }
    if let Some(arg) = file.init.iter().chain(file.env.values()).find(|a| a.contains('\0')) {
        return Err(bad(format!("{arg:?} holds a NUL character, which no command or environment can carry")));
    }
    let (image, summary) = match (file.image, file.build) {
        (Some(reference), None) => {
            crate::template::check_image_reference(&reference).map_err(|why| bad(format!("image: {why}")))?;
            (ProjectImage::Reference(reference.clone()), format!("image {reference}"))
        }
        (None, Some(build)) => {
            let fix = "name a directory of the repository, relative to .forage/";
            let context = checkout.inside(".forage", &build.context, "build.context", fix, false)?;
            let fix = "name a file inside the build context, relative to it";
            let path = checkout.inside(&context, &build.dockerfile, "build.dockerfile", fix, true)?;
            let dockerfile = relative_to(&path, &context).ok_or_else(|| {
                bad(format!("build.dockerfile {:?} is outside the build context {context:?}; {fix}", build.dockerfile))
            })?;
            let summary = format!("build {path}");
            (
                ProjectImage::Build {
                    name: super::image_name(&checkout.root),
                    context: checkout.root.join(&context),
                    dockerfile,
                    args: BTreeMap::new(),
                },
                summary,
            )
        }
        (Some(_), Some(_)) => return Err(bad("set `image` or `build`, not both".into())),
        (None, None) => return Err(bad("set `image` (an image in the engine) or `build` (a Dockerfile)".into())),
    };
    Ok(Toolchain { source: rel.to_owned(), summary, image, env: file.env, init: file.init, forward_ports: Vec::new() })
}

/// `path` relative to the directory `dir` (both relative to the root), if it is beneath it.
pub fn relative_to(path: &str, dir: &str) -> Option<String> {
    if dir.is_empty() {
        return Some(path.to_owned());
    }
    path.strip_prefix(dir).and_then(|rest| rest.strip_prefix('/')).map(str::to_owned)
}
