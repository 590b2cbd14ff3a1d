//! Templates: the YAML model, the search path, and validation that points at
//! file:line:column. The built-ins in `templates/` are embedded in the binary.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The template `up` uses when none is named.
pub const DEFAULT_TEMPLATE: &str = "shell";

/// Built-in templates: (name, YAML).
const BUILTINS: &[(&str, &str)] = &[("shell", include_str!("../templates/shell.yaml"))];

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Template {
    #[serde(default)]
    pub description: String,
    /// An image reference already present in the engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Build the image offline from tools installed on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_image: Option<HostImage>,
    #[serde(default)]
    pub agent: Agent,
    #[serde(default)]
    pub workspace: WorkspacePolicy,
    #[serde(default)]
    pub network: Network,
    #[serde(default)]
    pub resources: Resources,
    /// Signal sent to the agent on stop/down (e.g. SIGHUP for interactive shells,
    /// which ignore SIGTERM).
    #[serde(default = "default_stop_signal")]
    pub stop_signal: String,
    /// Seconds between the stop signal and SIGKILL.
    #[serde(default = "default_stop_timeout")]
    pub stop_timeout: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostImage {
    /// Programs looked up on the host's PATH; each is copied with its shared
    /// libraries. Missing ones are skipped, except those in `require`.
    pub tools: Vec<String>,
    #[serde(default)]
    pub require: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Agent {
    /// The agent's main process; `up NAME … -- ARGS` appends ARGS.
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WorkspacePolicy {
    #[serde(default)]
    pub read_only: bool,
}

#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    #[default]
    Full,
    None,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// Memory limit, e.g. `512m`, `4g`.
    #[serde(default = "default_memory")]
    pub memory: String,
    /// CPU limit in cores, capped at what the host has.
    #[serde(default = "default_cpus")]
    pub cpus: f64,
    /// Maximum number of processes.
    #[serde(default = "default_pids")]
    pub pids: i64,
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            memory: default_memory(),
            cpus: default_cpus(),
            pids: default_pids(),
        }
    }
}

fn default_memory() -> String {
    "4g".into()
}
fn default_cpus() -> f64 {
    2.0
}
fn default_pids() -> i64 {
    1024
}
fn default_stop_signal() -> String {
    "SIGTERM".into()
}
fn default_stop_timeout() -> u32 {
    10
}

/// Parses a Docker-style byte size: `1024`, `512k`, `256m`, `4g` (binary units).
pub fn parse_memory(raw: &str) -> Result<i64, String> {
    let s = raw.trim().to_ascii_lowercase();
    let s = s.strip_suffix('b').unwrap_or(&s);
    let (digits, mult) = match s.chars().last() {
        Some('k') => (&s[..s.len() - 1], 1i64 << 10),
        Some('m') => (&s[..s.len() - 1], 1 << 20),
        Some('g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    let bytes = digits
        .parse::<i64>()
        .ok()
        .and_then(|n| n.checked_mul(mult))
        .filter(|b| *b >= 6 << 20)
        .ok_or_else(|| {
            format!(
                "invalid memory size {raw:?}: use a number with k, m or g, at least 6m (e.g. 4g)"
            )
        })?;
    Ok(bytes)
}

/// Where a template was found.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "lowercase", tag = "kind", content = "path")]
pub enum Origin {
    File(PathBuf),
    Builtin,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Origin::File(p) => write!(f, "{}", p.display()),
            Origin::Builtin => f.write_str("built-in"),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Resolved {
    pub name: String,
    pub origin: Origin,
    pub template: Template,
}

/// The template directories, in precedence order (first match wins).
pub fn search_path() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(p) = std::env::var_os("FORAGE_TEMPLATES_PATH") {
        dirs.extend(std::env::split_paths(&p).filter(|d| !d.as_os_str().is_empty()));
    }
    let config = std::env::var_os("XDG_CONFIG_HOME")
        .filter(|c| !c.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
    if let Some(c) = config {
        dirs.push(c.join("forage/templates"));
    }
    dirs.push(PathBuf::from("/etc/forage/templates"));
    dirs
}

fn template_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && !name.starts_with('.')
}

/// Finds and parses template `name`: `<dir>/<name>.yaml` or `<dir>/<name>/template.yaml`
/// on the search path, then the built-ins.
pub fn resolve(name: &str) -> Result<Resolved> {
    if !template_name_ok(name) {
        return Err(Error::Usage(format!(
            "invalid template name {name:?}: use letters, digits, '-', '_' or '.'"
        )));
    }
    for dir in search_path() {
        for candidate in [
            dir.join(format!("{name}.yaml")),
            dir.join(name).join("template.yaml"),
        ] {
            if candidate.is_file() {
                let text = std::fs::read_to_string(&candidate).map_err(|e| {
                    Error::Usage(format!("cannot read template {}: {e}", candidate.display()))
                })?;
                let template = parse(&text, &candidate.display().to_string())?;
                return Ok(Resolved {
                    name: name.into(),
                    origin: Origin::File(candidate),
                    template,
                });
            }
        }
    }
    if let Some((_, text)) = BUILTINS.iter().find(|(n, _)| *n == name) {
        let template = parse(text, &format!("built-in template {name}"))?;
        return Ok(Resolved {
            name: name.into(),
            origin: Origin::Builtin,
            template,
        });
    }
    Err(Error::NotFound(format!(
        "template {name:?} not found; `forage-ctl templates` lists the available ones (searched {} and the built-ins)",
        search_path().iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
    )))
}

/// Every template visible on the search path, shadowed ones omitted.
pub fn list() -> Result<Vec<Resolved>> {
    let mut names: Vec<String> = BUILTINS.iter().map(|(n, _)| n.to_string()).collect();
    for dir in search_path() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let file_name = entry.file_name().to_string_lossy().into_owned();
            let name = if let Some(stem) = file_name.strip_suffix(".yaml") {
                stem.to_owned()
            } else if path.join("template.yaml").is_file() {
                file_name
            } else {
                continue;
            };
            if template_name_ok(&name) && !names.contains(&name) {
                names.push(name);
            }
        }
    }
    names.sort();
    names.iter().map(|n| resolve(n)).collect()
}

/// Parses and validates a template; errors carry `source:line:column`.
pub fn parse(text: &str, source: &str) -> Result<Template> {
    let template: Template = serde_yaml_ng::from_str(text).map_err(|e| {
        let at = e
            .location()
            .map(|l| format!("{source}:{}:{}", l.line(), l.column()))
            .unwrap_or_else(|| source.to_owned());
        Error::Usage(format!("{at}: {e}"))
    })?;
    validate(&template).map_err(|msg| Error::Usage(format!("{source}: {msg}")))?;
    Ok(template)
}

fn validate(t: &Template) -> Result<(), String> {
    match (&t.image, &t.host_image) {
        (Some(_), Some(_)) => return Err("set only one of `image` and `host_image`".into()),
        (None, None) => return Err("set `image` (an image in the engine) or `host_image`".into()),
        _ => {}
    }
    if t.agent.command.is_empty() {
        return Err("`agent.command` is empty: name the program the sandbox runs".into());
    }
    parse_memory(&t.resources.memory)?;
    if t.resources.cpus.is_nan() || t.resources.cpus <= 0.0 {
        return Err(format!(
            "resources.cpus must be above 0, not {}",
            t.resources.cpus
        ));
    }
    if t.resources.pids < 16 {
        return Err(format!(
            "resources.pids must be at least 16, not {}",
            t.resources.pids
        ));
    }
    // The Engine API request that stops a container times out after 120 s.
    if t.stop_timeout > 100 {
        return Err(format!(
            "stop_timeout is at most 100 seconds, not {}",
            t.stop_timeout
        ));
    }
    if !t.stop_signal.starts_with("SIG") {
        return Err(format!(
            "stop_signal {:?} must be a signal name such as SIGTERM",
            t.stop_signal
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_parse() {
        for (name, text) in BUILTINS {
            parse(text, name).unwrap();
        }
    }

    #[test]
    fn unknown_field_points_at_line_and_column() {
        let err = parse("image: x\nagent: {command: [sh]}\nbogus: 1\n", "t.yaml").unwrap_err();
        let msg = err.to_string();
        assert!(msg.starts_with("t.yaml:3:1: "), "{msg}");
        assert!(msg.contains("bogus"), "{msg}");
    }

    #[test]
    fn wrong_type_points_at_line_and_column() {
        let err = parse(
            "image: x\nagent: {command: [sh]}\nresources: {pids: many}\n",
            "t.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("t.yaml:3:"), "{err}");
    }

    #[test]
    fn memory_sizes() {
        assert_eq!(parse_memory("4g").unwrap(), 4 << 30);
        assert_eq!(parse_memory("512m").unwrap(), 512 << 20);
        assert_eq!(parse_memory("512MB").unwrap(), 512 << 20);
        assert!(parse_memory("lots").is_err());
        assert!(parse_memory("1k").is_err(), "below Docker's minimum");
    }
}
