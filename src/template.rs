//! Templates: the YAML model, the search path, and validation that points at
//! file:line:column. The built-ins in `templates/` are embedded in the binary.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The template `up` uses when none is named.
pub const DEFAULT_TEMPLATE: &str = "shell";

/// A template shipped inside the binary, with the Dockerfile its `build` uses.
struct Builtin {
    name: &'static str,
    yaml: &'static str,
    dockerfile: Option<&'static str>,
}

macro_rules! builtin_with_dockerfile {
    ($name:literal) => {
        Builtin {
            name: $name,
            yaml: include_str!(concat!("../templates/", $name, "/template.yaml")),
            dockerfile: Some(include_str!(concat!("../templates/", $name, "/Dockerfile"))),
        }
    };
}

const BUILTINS: &[Builtin] = &[
    Builtin { name: "shell", yaml: include_str!("../templates/shell.yaml"), dockerfile: None },
    Builtin { name: "review", yaml: include_str!("../templates/review.yaml"), dockerfile: None },
    builtin_with_dockerfile!("claude"),
    builtin_with_dockerfile!("codex"),
    builtin_with_dockerfile!("aider"),
    builtin_with_dockerfile!("opencode"),
];

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Template {
    #[serde(default)]
    pub description: String,
    /// An image reference already present in the engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// Build the image from a Dockerfile, through the Engine API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<BuildSpec>,
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
    /// Extra host paths to mount, read-only unless said otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<MountSpec>,
    /// Shell commands run in /workspace before the agent starts; one failing fails `up`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init: Vec<String>,
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

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct BuildSpec {
    /// The build context, relative to the template's directory.
    #[serde(default = "default_context")]
    pub context: String,
    /// The Dockerfile, relative to the context.
    #[serde(default = "default_dockerfile")]
    pub dockerfile: String,
}

fn default_context() -> String {
    ".".into()
}
fn default_dockerfile() -> String {
    "Dockerfile".into()
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MountSpec {
    /// A host path; `~/` means the invoking user's home, relative paths the template's directory.
    pub source: String,
    /// An absolute path inside the container.
    pub target: String,
    #[serde(default = "yes")]
    pub read_only: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Agent {
    /// The agent's main process; `up NAME … -- ARGS` appends ARGS.
    #[serde(default)]
    pub command: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Environment variables the agent process gets from secrets: VAR -> secret name.
    /// The value is read inside the container from /run/secrets/<name>, so it never
    /// appears in the container's configuration.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub secrets: BTreeMap<String, String>,
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
        Resources { memory: default_memory(), cpus: default_cpus(), pids: default_pids() }
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

pub const SECRET_NAME_RULE: &str =
    "1-63 characters: lowercase letters, digits, '_', '.', '-', starting with a letter or digit";

/// Secret names become file names under /run/secrets, so they follow the
/// sandbox-name alphabet.
pub fn secret_name_ok(name: &str) -> bool {
    crate::names::SandboxName::parse(name).is_ok()
}

/// POSIX environment variable names: letters, digits and '_', not starting with a digit.
pub fn env_name_ok(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
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
    let bytes =
        digits.parse::<i64>().ok().and_then(|n| n.checked_mul(mult)).filter(|b| *b >= 6 << 20).ok_or_else(|| {
            format!("invalid memory size {raw:?}: use a number with k, m or g, at least 6m (e.g. 4g)")
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
    /// A built-in's embedded Dockerfile (its whole build context).
    pub builtin_dockerfile: Option<&'static str>,
}

impl Resolved {
    /// The directory relative paths in the template are taken from.
    pub fn dir(&self) -> Option<&std::path::Path> {
        match &self.origin {
            Origin::File(f) => f.parent(),
            Origin::Builtin => None,
        }
    }
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
        && name.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && !name.starts_with('.')
}

/// Finds and parses template `name`: `<dir>/<name>.yaml` or `<dir>/<name>/template.yaml`
/// on the search path, then the built-ins.
pub fn resolve(name: &str) -> Result<Resolved> {
    if !template_name_ok(name) {
        return Err(Error::Usage(format!("invalid template name {name:?}: use letters, digits, '-', '_' or '.'")));
    }
    for dir in search_path() {
        for candidate in [dir.join(format!("{name}.yaml")), dir.join(name).join("template.yaml")] {
            if candidate.is_file() {
                let unreadable =
                    |e: std::io::Error| Error::Usage(format!("cannot read template {}: {e}", candidate.display()));
                // Read no more than one byte past the limit `parse` enforces.
                let mut text = String::new();
                std::fs::File::open(&candidate)
                    .and_then(|f| {
                        std::io::Read::read_to_string(
                            &mut std::io::Read::take(f, MAX_TEMPLATE_BYTES as u64 + 1),
                            &mut text,
                        )
                    })
                    .map_err(unreadable)?;
                let template = parse(&text, &candidate.display().to_string())?;
                return Ok(Resolved {
                    name: name.into(),
                    origin: Origin::File(candidate),
                    template,
                    builtin_dockerfile: None,
                });
            }
        }
    }
    if let Some(b) = BUILTINS.iter().find(|b| b.name == name) {
        let template = parse(b.yaml, &format!("built-in template {name}"))?;
        return Ok(Resolved { name: name.into(), origin: Origin::Builtin, template, builtin_dockerfile: b.dockerfile });
    }
    let suggestion = closest(name, &names()).map(|n| format!("did you mean {n:?}? ")).unwrap_or_default();
    Err(Error::NotFound(format!(
        "template {name:?} not found; {suggestion}`forage-ctl templates` lists the available ones (searched {} and the built-ins)",
        search_path().iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ")
    )))
}

/// Every template visible on the search path, shadowed ones omitted.
pub fn list() -> Result<Vec<Resolved>> {
    names().iter().map(|n| resolve(n)).collect()
}

/// The names of every template on the search path and of the built-ins, sorted.
fn names() -> Vec<String> {
    let mut names: Vec<String> = BUILTINS.iter().map(|b| b.name.to_string()).collect();
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
    names
}

/// The template name closest to a mistyped `wanted`, if one is close: one holds
/// the other (`claude-code` for `claude`), or few letters differ.
fn closest(wanted: &str, names: &[String]) -> Option<String> {
    let distance = |a: &str, b: &str| {
        let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
        let mut row: Vec<usize> = (0..=b.len()).collect();
        for i in 1..=a.len() {
            let mut prev = row[0];
            row[0] = i;
            for j in 1..=b.len() {
                let cost = usize::from(a[i - 1] != b[j - 1]);
                let next = (row[j] + 1).min(row[j - 1] + 1).min(prev + cost);
                prev = row[j];
                row[j] = next;
            }
        }
        row[b.len()]
    };
    names
        .iter()
        .map(|n| {
            let score = if wanted.contains(n.as_str()) || n.contains(wanted) { 0 } else { distance(wanted, n) };
            (score, n)
        })
        .filter(|(score, n)| *score <= (n.len() / 3).max(1))
        .min()
        .map(|(_, n)| n.clone())
}

/// Templates are short files: anything bigger, or nested deeper, than this is a
/// mistake or an attack (the YAML parser takes minutes on deep nesting), refused
/// before it is parsed.
const MAX_TEMPLATE_BYTES: usize = 64 << 10;
const MAX_NESTING: usize = 32;
const MAX_INDENT: usize = 128;

/// Refuses a template too big or too deeply nested, naming file:line.
fn check_shape(text: &str, source: &str) -> Result<()> {
    if text.len() > MAX_TEMPLATE_BYTES {
        return Err(Error::Usage(format!(
            "{source}: the template is larger than {} KiB, the most a template may be",
            MAX_TEMPLATE_BYTES >> 10
        )));
    }
    let too_deep = |line: usize| {
        Error::Usage(format!("{source}:{line}: nested more than {MAX_NESTING} levels deep; templates are flat"))
    };
    let mut depth: usize = 0;
    for (i, line) in text.lines().enumerate() {
        if line.len() - line.trim_start().len() > MAX_INDENT {
            return Err(too_deep(i + 1));
        }
        // Block sequences nested on one line: `- - - - x`.
        let dashes = line.split_whitespace().take_while(|w| *w == "-" || *w == "?").count();
        if dashes > MAX_NESTING {
            return Err(too_deep(i + 1));
        }
        let mut quote: Option<char> = None;
        let mut chars = line.chars().peekable();
        let mut previous = ' ';
        // The last character that was not blank: a quote opens a quoted scalar
        // only where a scalar may start (`a'` inside a plain scalar is just `'`).
        let mut last_solid: Option<char> = None;
        while let Some(c) = chars.next() {
            match (quote, c) {
                (Some('"'), '\\') => {
                    chars.next();
                }
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') if matches!(last_solid, None | Some('[' | '{' | ',' | ':' | '-' | '?')) => {
                    quote = Some(c)
                }
                (None, '#') if previous.is_whitespace() => break,
                (None, '[' | '{') => {
                    depth += 1;
                    if depth > MAX_NESTING {
                        return Err(too_deep(i + 1));
                    }
                }
                (None, ']' | '}') => depth = depth.saturating_sub(1),
                _ => {}
            }
            if !c.is_whitespace() {
                last_solid = Some(c);
            }
            previous = c;
        }
    }
    Ok(())
}

/// Parses and validates a template; errors carry `source:line:column`.
pub fn parse(text: &str, source: &str) -> Result<Template> {
    check_shape(text, source)?;
    let template: Template = serde_yaml_ng::from_str(text).map_err(|e| {
        let at =
            e.location().map(|l| format!("{source}:{}:{}", l.line(), l.column())).unwrap_or_else(|| source.to_owned());
        Error::Usage(format!("{at}: {e}"))
    })?;
    validate(&template).map_err(|msg| Error::Usage(format!("{source}: {msg}")))?;
    Ok(template)
}

/// Checks an image reference as the engine parses one
/// (`[host[:port]/]path[:tag][@sha256:hex]`), so that a bad one is refused with
/// a clear word before Docker is asked.
pub fn check_image_reference(reference: &str) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "{reference:?} is not an image reference ({why}); write it as name[:tag][@sha256:digest], e.g. ubuntu:24.04 or ghcr.io/org/agent:1"
        ))
    };
    let (rest, digest) = match reference.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (reference, None),
    };
    if let Some(digest) = digest {
        let ok = digest.strip_prefix("sha256:").is_some_and(|hex| {
            hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        });
        if !ok {
            return bad("a digest is sha256: and 64 lowercase hex digits");
        }
    }
    // A tag follows the last ':' after the last '/' (a ':' before it is a port).
    let (name, tag) = match rest.rfind(':').filter(|i| !rest[*i..].contains('/')) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    if let Some(tag) = tag {
        let mut chars = tag.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if !first_ok || tag.len() > 128 || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')) {
            return bad("a tag is up to 128 letters, digits, '_', '.' or '-', not starting with '.' or '-'");
        }
    }
    if name.is_empty() || name.len() > 255 {
        return bad("the name is empty or longer than 255 characters");
    }
    let mut parts: Vec<&str> = name.split('/').collect();
    // The first part is a registry host if it looks like one.
    if parts.len() > 1 && (parts[0].contains(['.', ':']) || parts[0] == "localhost") {
        let host = parts.remove(0);
        let (host, port) = host.split_once(':').unwrap_or((host, ""));
        let host_ok = !host.is_empty()
            && host.split('.').all(|l| {
                !l.is_empty()
                    && !l.starts_with('-')
                    && !l.ends_with('-')
                    && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            });
        if !host_ok || !(port.is_empty() || port.parse::<u16>().is_ok()) {
            return bad("the registry host or port is invalid");
        }
    }
    for part in parts {
        let separators_ok = !part.is_empty()
            && part.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
            && part.starts_with(|c: char| c.is_ascii_alphanumeric())
            && part.ends_with(|c: char| c.is_ascii_alphanumeric())
            && !part.contains("..")
            && !part.contains("___");
        if !separators_ok {
            return bad("each part of the name is lowercase letters and digits, separated by '.', '_', '__' or dashes");
        }
    }
    Ok(())
}

fn validate(t: &Template) -> Result<(), String> {
    let sources = [t.image.is_some(), t.build.is_some(), t.host_image.is_some()];
    match sources.iter().filter(|s| **s).count() {
        1 => {}
        0 => return Err("set one of `image` (an image in the engine), `build` or `host_image`".into()),
        _ => return Err("set only one of `image`, `build` and `host_image`".into()),
    }
    if let Some(image) = &t.image {
        check_image_reference(image).map_err(|why| format!("image: {why}"))?;
    }
    for (var, secret) in &t.agent.secrets {
        if !env_name_ok(var) {
            return Err(format!("agent.secrets: {var:?} is not an environment variable name"));
        }
        if !secret_name_ok(secret) {
            return Err(format!("agent.secrets.{var}: {secret:?} is not a secret name ({SECRET_NAME_RULE})"));
        }
    }
    for m in &t.mounts {
        let target = std::path::Path::new(&m.target);
        let reserved = [crate::runtime::WORKSPACE_TARGET, crate::sandbox::launcher::SECRETS_DIR];
        if !target.is_absolute()
            || target.parent().is_none()
            || target.components().any(|c| matches!(c, std::path::Component::ParentDir))
            || reserved.iter().any(|r| target.starts_with(r))
        {
            return Err(format!(
                "mounts: target {:?} must be an absolute path without '..', outside /workspace and /run/secrets",
                m.target
            ));
        }
    }
    if t.agent.command.is_empty() {
        return Err("`agent.command` is empty: name the program the sandbox runs".into());
    }
    // No program can be given a NUL byte: the engine would fail to start it.
    let with_nul = t.agent.command.iter().chain(&t.init).chain(t.agent.env.values()).find(|a| a.contains('\0'));
    if let Some(arg) = with_nul {
        return Err(format!("{arg:?} holds a NUL character (\\0 in YAML), which no command or environment can carry"));
    }
    parse_memory(&t.resources.memory)?;
    if t.resources.cpus.is_nan() || t.resources.cpus <= 0.0 {
        return Err(format!("resources.cpus must be above 0, not {}", t.resources.cpus));
    }
    if t.resources.pids < 16 {
        return Err(format!("resources.pids must be at least 16, not {}", t.resources.pids));
    }
    // The Engine API request that stops a container times out after 120 s.
    if t.stop_timeout > 100 {
        return Err(format!("stop_timeout is at most 100 seconds, not {}", t.stop_timeout));
    }
    if !t.stop_signal.starts_with("SIG") {
        return Err(format!("stop_signal {:?} must be a signal name such as SIGTERM", t.stop_signal));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_parse() {
        for b in BUILTINS {
            let t = parse(b.yaml, b.name).unwrap();
            assert_eq!(t.build.is_some(), b.dockerfile.is_some(), "{}", b.name);
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
        let err =
            parse("image: x\nagent: {command: [sh]}\nresources: {pids: many}\n", "t.yaml").unwrap_err().to_string();
        assert!(err.starts_with("t.yaml:3:"), "{err}");
    }

    #[test]
    fn image_references_are_checked_as_the_engine_parses_them() {
        for ok in [
            "ubuntu",
            "ubuntu:24.04",
            "forage-host/shell:984693ae91412137",
            "ghcr.io/org/agent:1",
            "localhost:5000/a/b_c__d-e:v1.2",
            "registry.example.com:443/x",
            "node@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            assert!(check_image_reference(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Ubuntu",
            "ubuntu:",
            "ubuntu:-x",
            "a//b",
            "a/b/",
            "-a",
            "a b",
            "a@sha256:xyz",
            "ex ample.com/a",
            "a:b:c",
            "a..b",
        ] {
            let err = check_image_reference(bad).unwrap_err();
            assert!(err.contains(&format!("{bad:?}")), "{bad}: {err}");
        }
    }

    #[test]
    fn a_mistyped_template_name_gets_the_closest_one() {
        let names: Vec<String> = ["aider", "claude", "codex", "opencode", "review", "shell"].map(String::from).into();
        assert_eq!(closest("claude-code", &names).as_deref(), Some("claude"));
        assert_eq!(closest("shel", &names).as_deref(), Some("shell"));
        assert_eq!(closest("codx", &names).as_deref(), Some("codex"));
        assert_eq!(closest("kubernetes", &names), None);
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
