//! Templates: where they are found (the search path, then the built-ins in
//! `templates/`, embedded in the binary), and reading one: its shape first
//! (`shape`), then the YAML into a checked `Template` (`model`), with errors that
//! point at file:line:column.

mod model;
mod reference;
mod shape;

use std::path::PathBuf;

use serde::Serialize;

pub use model::{
    env_name_ok, secret_name_ok, Agent, BuildSpec, CowPolicy, ImageSpec, Memory, MountSpec, Resources, StopSignal,
    Template, WorkspacePolicy, SECRET_NAME_RULE,
};
pub use reference::check_image_reference;
use shape::{check_shape, MAX_TEMPLATE_BYTES};

use crate::env::Settings;
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
            yaml: include_str!(concat!("../../templates/", $name, "/template.yaml")),
            dockerfile: Some(include_str!(concat!("../../templates/", $name, "/Dockerfile"))),
        }
    };
}

const BUILTINS: &[Builtin] = &[
    Builtin { name: "shell", yaml: include_str!("../../templates/shell.yaml"), dockerfile: None },
    Builtin { name: "review", yaml: include_str!("../../templates/review.yaml"), dockerfile: None },
    builtin_with_dockerfile!("claude"),
    builtin_with_dockerfile!("codex"),
    builtin_with_dockerfile!("aider"),
    builtin_with_dockerfile!("opencode"),
];

/// A built-in template's own files, as shipped: `template.yaml` (comments
/// and all) and, for one built from a Dockerfile, its `Dockerfile`.
pub fn builtin_files(name: &str) -> Option<(&'static str, Option<&'static str>)> {
    BUILTINS.iter().find(|b| b.name == name).map(|b| (b.yaml, b.dockerfile))
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

/// Where templates are found: the search path (first match wins), then the
/// built-ins.
#[derive(Debug, Clone)]
pub struct Templates {
    search_path: Vec<PathBuf>,
    /// The user's own template directory (`$XDG_CONFIG_HOME/forage/templates`).
    user_dir: Option<PathBuf>,
    /// Relative directories the environment named, left out of `search_path`.
    ignored: Vec<PathBuf>,
}

impl Templates {
    /// `$FORAGE_TEMPLATES_PATH`, `~/.config/forage/templates`, `/etc/forage/templates`:
    /// absolute directories only. A relative one would be taken from the
    /// current directory, which may be a workspace an agent writes: it is left
    /// out (`ignored`), as the XDG specification says of relative paths.
    pub fn new(settings: &Settings) -> Templates {
        let mut dirs = settings.templates_path.clone();
        let absolute = |p: &PathBuf| p.is_absolute();
        let config = settings
            .xdg_config_home
            .clone()
            .filter(absolute)
            .or_else(|| settings.home.as_ref().map(|h| h.join(".config")));
        let user_dir = config.map(|c| c.join("forage/templates"));
        dirs.extend(user_dir.clone());
        dirs.extend(settings.xdg_config_home.clone().filter(|p| !p.is_absolute()));
        dirs.push(PathBuf::from("/etc/forage/templates"));
        let (search_path, ignored) = dirs.into_iter().partition(absolute);
        Templates { search_path, user_dir, ignored }
    }

    /// The user's own template directory, where `templates export` writes
    /// (never a relative one, which would be the current directory's).
    pub fn user_dir(&self) -> Option<&std::path::Path> {
        self.user_dir.as_deref().filter(|d| d.is_absolute())
    }

    /// The template directories, in precedence order.
    pub fn search_path(&self) -> &[PathBuf] {
        &self.search_path
    }

    /// A warning for each relative directory the environment named, which
    /// forage does not search.
    pub fn warnings(&self) -> Vec<String> {
        self.ignored
            .iter()
            .map(|d| {
                format!(
                    "ignoring the template directory {:?}: it is relative, and templates are never taken from the current directory; name it by its absolute path",
                    d.display().to_string()
                )
            })
            .collect()
    }

    /// Finds and parses template `name`: `<dir>/<name>.yaml` or
    /// `<dir>/<name>/template.yaml` on the search path, then the built-ins.
    pub fn resolve(&self, name: &str) -> Result<Resolved> {
        if !template_name_ok(name) {
            return Err(Error::usage(format!("invalid template name {name:?}: use letters, digits, '-', '_' or '.'")));
        }
        for dir in &self.search_path {
            for candidate in [dir.join(format!("{name}.yaml")), dir.join(name).join("template.yaml")] {
                if let Some(text) = read_template(&candidate)? {
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
            return Ok(Resolved {
                name: name.into(),
                origin: Origin::Builtin,
                template,
                builtin_dockerfile: b.dockerfile,
            });
        }
        Err(self.not_found(name))
    }

    /// `name` is no template: where forage looked, and the closest name if one
    /// is close. The suggestion leads the hint, so that nothing stands between
    /// the message and it when there is none.
    fn not_found(&self, name: &str) -> Error {
        let searched = self.search_path.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(", ");
        let suggestion = closest(name, &self.names()).map(|n| format!("did you mean {n:?}? ")).unwrap_or_default();
        Error::not_found(format!("template {name:?} not found (searched {searched} and the built-ins)"))
            .hint_run(format!("{suggestion}{{command}} lists the available ones"), ["templates"])
    }

    /// Every template visible on the search path, shadowed ones omitted.
    pub fn list(&self) -> Result<Vec<Resolved>> {
        self.names().iter().map(|n| self.resolve(n)).collect()
    }

    /// The names of every template on the search path and of the built-ins, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = BUILTINS.iter().map(|b| b.name.to_string()).collect();
        for dir in &self.search_path {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let path = entry.path();
                let file_name = entry.file_name().to_string_lossy().into_owned();
                let name = if let Some(stem) = file_name.strip_suffix(".yaml") {
                    stem.to_owned()
                } else if path.join("template.yaml").exists() {
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
}

/// The text of the template file `path` (a symlink to one is followed), or
/// `None` if there is none. Read only as a regular file: opened without
/// blocking (a FIFO would block an ordinary open, and a device never ends), its
/// kind checked on the descriptor before a byte is read, and no more read than
/// one byte past the limit `parse` enforces. Anything else there is an error
/// naming it.
fn read_template(path: &std::path::Path) -> Result<Option<String>> {
    use std::io::Read;
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let unreadable = |e: std::io::Error| Error::usage(format!("cannot read template {}: {e}", path.display()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path);
    let file = match file {
        Ok(f) => f,
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT) | Some(libc::ENOTDIR)) => return Ok(None),
        Err(e) => return Err(unreadable(e)),
    };
    let kind = file.metadata().map_err(unreadable)?.file_type();
    if !kind.is_file() {
        let what = if kind.is_fifo() {
            "a FIFO"
        } else if kind.is_char_device() || kind.is_block_device() {
            "a device"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_dir() {
            "a directory"
        } else {
            "not a regular file"
        };
        return Err(Error::usage(format!(
            "template {} is {what}, not a regular file; forage reads templates only from regular files",
            path.display()
        ))
        .hint("remove it, or put the template there as a file"));
    }
    let mut text = String::new();
    file.take(MAX_TEMPLATE_BYTES as u64 + 1).read_to_string(&mut text).map_err(unreadable)?;
    Ok(Some(text))
}

fn template_name_ok(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && !name.starts_with('.')
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

/// Parses and checks a template; errors carry `source:line:column`.
pub fn parse(text: &str, source: &str) -> Result<Template> {
    check_shape(text, source)?;
    serde_yaml_ng::from_str(text).map_err(|e| {
        let at =
            e.location().map(|l| format!("{source}:{}:{}", l.line(), l.column())).unwrap_or_else(|| source.to_owned());
        Error::usage(format!("{at}: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_parse() {
        for b in BUILTINS {
            let t = parse(b.yaml, b.name).unwrap();
            assert_eq!(matches!(t.image, ImageSpec::Build(_)), b.dockerfile.is_some(), "{}", b.name);
        }
    }

    #[test]
    fn the_builtin_agent_dockerfiles_can_be_layered_on_a_project_image() {
        for name in ["claude", "codex", "opencode"] {
            let (_, dockerfile) = builtin_files(name).unwrap();
            assert!(crate::runtime::dockerfile::takes_base(dockerfile.unwrap()), "{name}");
        }
    }

    #[test]
    fn the_agent_templates_keep_their_state_and_say_how_to_log_in() {
        let agent = |name: &str| parse(BUILTINS.iter().find(|b| b.name == name).unwrap().yaml, name).unwrap().agent;
        assert_eq!(agent("claude").state, [".claude/.credentials.json", ".claude/.claude.json"]);
        assert_eq!(agent("claude").login, ["claude"]);
        assert_eq!(agent("codex").login, ["codex", "login"]);
        assert_eq!(agent("opencode").state, [".local/share/opencode/auth.json", ".config/opencode/"]);
        assert!(agent("aider").login.is_empty() && !agent("aider").state.is_empty());
        assert!(agent("shell").state.is_empty());
    }

    #[test]
    fn a_state_path_outside_the_home_is_refused_where_it_is_written() {
        for bad in ["/etc/passwd", "../x", "a/../b", "a//b", "''"] {
            let yaml = format!("image: x\nagent:\n  command: [sh]\n  state: [.ok, {bad}]\n");
            let err = parse(&yaml, "t.yaml").unwrap_err().to_string();
            assert!(err.starts_with("t.yaml:") && err.contains("agent.state:"), "{bad}: {err}");
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
    fn a_template_not_found_says_where_forage_looked_and_the_closest_name_once() {
        let templates = Templates {
            search_path: vec![PathBuf::from("/t1"), PathBuf::from("/t2")],
            user_dir: None,
            ignored: Vec::new(),
        };
        let shown = |e: &Error| {
            let hints: Vec<String> = e.hints().iter().map(|h| h.render(|_| "`forage-ctl templates`".into())).collect();
            format!("{e}; {}", hints.join("; "))
        };
        let far = templates.resolve("kubernetes").unwrap_err();
        assert_eq!(far.exit_code(), 3);
        assert_eq!(
            shown(&far),
            "template \"kubernetes\" not found (searched /t1, /t2 and the built-ins); \
            `forage-ctl templates` lists the available ones"
        );
        let near = templates.resolve("claude-code").unwrap_err();
        assert_eq!(
            shown(&near),
            "template \"claude-code\" not found (searched /t1, /t2 and the built-ins); \
            did you mean \"claude\"? `forage-ctl templates` lists the available ones"
        );
    }

    #[test]
    fn relative_template_directories_are_ignored_with_a_warning() {
        let settings = Settings {
            templates_path: vec![PathBuf::from("templates"), PathBuf::from("/abs")],
            xdg_config_home: Some(PathBuf::from("rel-config")),
            home: Some(PathBuf::from("/home/u")),
            ..Default::default()
        };
        let templates = Templates::new(&settings);
        let expected = ["/abs", "/home/u/.config/forage/templates", "/etc/forage/templates"].map(PathBuf::from);
        assert_eq!(templates.search_path(), expected);
        let warnings = templates.warnings();
        assert_eq!(warnings.len(), 2, "{warnings:?}");
        assert!(warnings[0].contains("\"templates\": it is relative"), "{warnings:?}");
        assert!(warnings[1].contains("\"rel-config\""), "{warnings:?}");
    }

    #[test]
    fn a_template_that_is_a_fifo_or_a_device_is_named_not_read() {
        let t = tempfile::tempdir().unwrap();
        nix::unistd::mkfifo(&t.path().join("fifo.yaml"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        std::os::unix::fs::symlink("/dev/zero", t.path().join("zero.yaml")).unwrap();
        std::fs::write(t.path().join("ok.yaml"), "image: x\nagent: {command: [sh]}\n").unwrap();
        let templates = Templates { search_path: vec![t.path().to_path_buf()], user_dir: None, ignored: Vec::new() };
        for (name, what) in [("fifo", "a FIFO"), ("zero", "a device")] {
            let e = templates.resolve(name).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{e}");
            assert!(e.to_string().contains(&format!("{name}.yaml is {what}, not a regular file")), "{e}");
        }
        assert!(templates.resolve("ok").is_ok());
        let e = templates.list().unwrap_err().to_string();
        assert!(e.contains("fifo.yaml is a FIFO"), "the listing names the bad one: {e}");
    }

    #[test]
    fn a_mistyped_template_name_gets_the_closest_one() {
        let names: Vec<String> = ["aider", "claude", "codex", "opencode", "review", "shell"].map(String::from).into();
        assert_eq!(closest("claude-code", &names).as_deref(), Some("claude"));
        assert_eq!(closest("shel", &names).as_deref(), Some("shell"));
        assert_eq!(closest("codx", &names).as_deref(), Some("codex"));
        assert_eq!(closest("kubernetes", &names), None);
    }
}
