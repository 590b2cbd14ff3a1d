//! devcontainer.json, as far as forage uses it. Used: `image`,
//! `build.dockerfile` (and the older `dockerFile`), `build.context`,
//! `build.args`, `containerEnv` and `remoteEnv`, `postCreateCommand`,
//! `forwardPorts` (kept). `features` are not supported (a warning). What
//! would reach the host or widen the sandbox is never used, and named:
//! `initializeCommand` (it runs on the host), `runArgs`, `privileged`,
//! `capAdd`, `securityOpt`, `mounts`, `workspaceMount`, the users.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::read::Checkout;
use super::{ForwardPort, ProjectImage, Toolchain};
use crate::error::{Error, Result};

/// Fields forage never uses, and why.
const NEVER_USED: &[(&str, &str)] = &[
    ("initializeCommand", "it would run on your machine"),
    ("runArgs", "forage decides how the container runs"),
    ("privileged", "the agent never gets privileges"),
    ("capAdd", "the agent never gets capabilities"),
    ("securityOpt", "forage decides the security options"),
    ("mounts", "a repository never decides what of the host a sandbox sees"),
    ("workspaceMount", "forage mounts the workspace"),
    ("workspaceFolder", "the workspace is /workspace"),
    ("remoteUser", "forage runs the agent as your uid"),
    ("containerUser", "forage runs the agent as your uid"),
    ("appPort", "ports are for the network policy"),
    ("dockerComposeFile", "docker compose is not supported"),
    ("onCreateCommand", "only postCreateCommand is run"),
    ("updateContentCommand", "only postCreateCommand is run"),
    ("postStartCommand", "only postCreateCommand is run"),
    ("postAttachCommand", "only postCreateCommand is run"),
];

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct DevContainer {
    image: Option<String>,
    build: Option<BuildSection>,
    /// The older spelling of `build.dockerfile`, beside `context`.
    #[serde(rename = "dockerFile")]
    docker_file: Option<String>,
    context: Option<String>,
    #[serde(default)]
    container_env: BTreeMap<String, String>,
    #[serde(default)]
    remote_env: BTreeMap<String, Option<String>>,
    post_create_command: Option<Commands>,
    #[serde(default)]
    forward_ports: Vec<serde_json::Value>,
    #[serde(default)]
    features: serde_json::Map<String, serde_json::Value>,
}

#[derive(Deserialize, Default)]
struct BuildSection {
    dockerfile: Option<String>,
    context: Option<String>,
    #[serde(default)]
    args: BTreeMap<String, String>,
}

/// A lifecycle command: a string (run by `sh -c`), an array (argv), or an
/// object of either (each run, in the order written).
#[derive(Debug, PartialEq)]
pub struct Commands(Vec<String>);

impl<'de> Deserialize<'de> for Commands {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Commands, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Commands;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a command: a string, an array of strings, or an object of those")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> std::result::Result<Commands, E> {
                Ok(Commands(vec![s.to_owned()]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> std::result::Result<Commands, A::Error> {
                let mut argv = Vec::new();
                while let Some(arg) = seq.next_element::<String>()? {
                    argv.push(arg);
                }
                Ok(Commands(vec![quote_argv(&argv)]))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> std::result::Result<Commands, A::Error> {
                let mut all = Vec::new();
                while let Some((_, one)) = map.next_entry::<String, Commands>()? {
                    all.extend(one.0);
                }
                Ok(Commands(all))
            }
        }
        d.deserialize_any(V)
    }
}

/// An argv as one `sh -c` script that runs exactly it.
fn quote_argv(argv: &[String]) -> String {
    argv.iter().map(|a| format!("'{}'", a.replace('\'', "'\\''"))).collect::<Vec<_>>().join(" ")
}

/// The toolchain `text` (the file `rel` of the checkout) describes, if it
/// names an image, and the warnings for what of it forage does not use.
pub fn parse(checkout: &Checkout, rel: &str, text: &str) -> Result<(Option<Toolchain>, Vec<String>)> {
    let shown = format!("{}/{rel}", checkout.root.display());
    let bad = |what: String| Error::usage(format!("{shown}: {what}; fix it, or pass --no-project-toolchain"));
    let json = super::jsonc::to_json(text);
    let raw: serde_json::Value =
        serde_json::from_str(&json).map_err(|e| bad(format!("line {} column {}: {e}", e.line(), e.column())))?;
    let mut warnings = Vec::new();
    if let Some(map) = raw.as_object() {
        let unused: Vec<String> =
            NEVER_USED.iter().filter(|(k, _)| map.contains_key(*k)).map(|(k, why)| format!("{k} ({why})")).collect();
        if !unused.is_empty() {
            warnings.push(format!("{rel}: not used: {}", unused.join("; ")));
        }
    }
    let mut dc: DevContainer = serde_json::from_str(&json).map_err(|e| bad(e.to_string()))?;
    if !dc.features.is_empty() {
        let names: Vec<&str> = dc.features.keys().map(String::as_str).collect();
        warnings.push(format!(
            "{rel}: devcontainer features are not supported ({}); install what they would in the Dockerfile",
            names.join(", ")
        ));
    }
    let build = dc.build.take().unwrap_or_default();
    let Some((image, summary)) = image_of(checkout, rel, &mut dc, build, &mut warnings)? else {
        return Ok((None, warnings));
    };
    let mut env = dc.container_env;
    env.extend(dc.remote_env.into_iter().filter_map(|(k, v)| Some((k, v?))));
    let env = checked_env(env, "containerEnv", &mut warnings, rel, super::env_allowed);
    let init = dc.post_create_command.map(|c| c.0).unwrap_or_default();
    if let Some(cmd) = init.iter().find(|c| c.contains('\0')) {
        return Err(bad(format!("postCreateCommand {cmd:?} holds a NUL character")));
    }
    let forward_ports = forward_ports(dc.forward_ports, rel, &mut warnings);
    let toolchain = Toolchain { source: rel.to_owned(), summary, image, env, init, forward_ports };
    Ok((Some(toolchain), warnings))
}

/// Variables with names forage allows and values it passes as they are:
/// devcontainer's `${localEnv:…}` would read your machine's environment, so
/// no `${…}` is expanded, and a value holding one is left out.
fn checked_env(
    vars: BTreeMap<String, String>,
    field: &str,
    warnings: &mut Vec<String>,
    rel: &str,
    name_ok: impl Fn(&str) -> bool,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut left_out = Vec::new();
    for (k, v) in vars {
        if !name_ok(&k) || v.contains("${") || v.contains('\0') {
            left_out.push(k);
        } else {
            out.insert(k, v);
        }
    }
    if !left_out.is_empty() {
        warnings.push(format!(
            "{rel}: {field}: left out {} (variables such as ${{localEnv:…}} are never expanded, and HOME and FORAGE_* are forage's)",
            left_out.join(", ")
        ));
    }
    out
}

fn forward_ports(raw: Vec<serde_json::Value>, rel: &str, warnings: &mut Vec<String>) -> Vec<ForwardPort> {
    let mut out = Vec::new();
    for v in raw {
        match &v {
            serde_json::Value::Number(n) if n.as_u64().is_some_and(|p| (1..=65535).contains(&p)) => {
                out.push(ForwardPort::Port(n.as_u64().unwrap_or(0) as u16))
            }
            serde_json::Value::String(s)
                if s.len() <= 255 && s.chars().all(|c| c.is_ascii_alphanumeric() || ".-_:".contains(c)) =>
            {
                out.push(ForwardPort::Named(s.clone()))
            }
            _ => warnings.push(format!("{rel}: forwardPorts: {v} is not a port; left out")),
        }
    }
    out
}

/// The project's image, and how it is made in words; `None` (and a warning)
/// when the file names neither an image nor a Dockerfile.
fn image_of(
    checkout: &Checkout,
    rel: &str,
    dc: &mut DevContainer,
    build: BuildSection,
    warnings: &mut Vec<String>,
) -> Result<Option<(ProjectImage, String)>> {
    let shown = format!("{}/{rel}", checkout.root.display());
    let bad = |what: String| Error::usage(format!("{shown}: {what}; fix it, or pass --no-project-toolchain"));
    let dir = rel.rsplit_once('/').map_or("", |(d, _)| d);
    let dockerfile = build.dockerfile.or(dc.docker_file.take());
    Ok(Some(match (dc.image.take(), dockerfile) {
        (_, Some(dockerfile)) => {
            let context = build.context.or(dc.context.take()).unwrap_or_else(|| ".".into());
            let fix = "set it to a directory of the repository, relative to the devcontainer.json (e.g. \"..\")";
            let context = checkout.inside(dir, &context, "build.context", fix, false)?;
            let fix = "name a Dockerfile of the repository inside the build context";
            let path = checkout.inside(dir, &dockerfile, "build.dockerfile", fix, true)?;
            let in_context = super::forage_file::relative_to(&path, &context).ok_or_else(|| {
                bad(format!(
                    "build.dockerfile {dockerfile:?} is outside the build context {:?}: set build.context to a directory holding it",
                    if context.is_empty() { "." } else { context.as_str() }
                ))
            })?;
            let args = checked_env(build.args, "build.args", warnings, rel, |_| true);
            let name = super::image_name(&checkout.root);
            let image =
                ProjectImage::Build { name, context: checkout.root.join(&context), dockerfile: in_context, args };
            (image, format!("build {path}"))
        }
        (Some(reference), None) => {
            crate::template::check_image_reference(&reference).map_err(|why| bad(format!("image: {why}")))?;
            (ProjectImage::Reference(reference.clone()), format!("image {reference}"))
        }
        (None, None) => {
            warnings.push(format!(
                "{rel} names no image nor Dockerfile (`image` or `build.dockerfile`), so forage does not use it"
            ));
            return Ok(None);
        }
    }))
}
