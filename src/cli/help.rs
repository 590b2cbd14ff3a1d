//! The top-level `--help`: the commands in the groups a user meets them in,
//! then the options (all global), then the exit codes. clap lists subcommands
//! in one flat block, so the groups are written here, from the commands' own
//! `about` lines, and a test keeps every command in exactly one group.

/// Each command's group, in the order `--help` shows them.
const GROUPS: [(&str, &[&str]); 5] = [
    (
        "Lifecycle",
        &[
            "up", "list", "status", "exec", "shell", "attach", "logs", "wait", "start", "stop", "restart", "reset",
            "port", "down", "restore",
        ],
    ),
    ("Review and land", &["sync", "diff", "log", "merge", "update", "apply", "path", "checkout"]),
    ("Agent logins", &["login", "logout"]),
    ("Jobs and programs", &["jobs", "mcp", "serve"]),
    ("Housekeeping", &["archives", "gc", "templates", "completions", "man", "help"]),
];

/// How wide a help line may be (clap's own width when stdout is no terminal).
const WIDTH: usize = 100;

/// `cmd` with a help template that shows its subcommands grouped.
pub fn grouped(cmd: clap::Command) -> clap::Command {
    let mut cmd = cmd;
    // The built-in `help` subcommand exists only once the command is built.
    cmd.build();
    let groups = render_groups(&cmd);
    cmd.help_template(format!(
        "{{before-help}}{{about-with-newline}}\n{{usage-heading}} {{usage}}\n\n{groups}Global options (before or after the command):\n{{options}}{{after-help}}"
    ))
}

/// One `Heading:` block per group, each command as `  name  about`, aligned
/// and wrapped as clap wraps its own lists.
fn render_groups(cmd: &clap::Command) -> String {
    let entries: Vec<(&str, String, String)> = GROUPS
        .iter()
        .flat_map(|(group, names)| names.iter().map(move |n| (*group, *n)))
        .filter_map(|(group, name)| {
            let sub = cmd.find_subcommand(name)?;
            let about = sub.get_about().map(|a| a.to_string()).unwrap_or_default();
            let aliases: Vec<&str> = sub.get_visible_aliases().collect();
            let about = if aliases.is_empty() { about } else { format!("{about} [alias: {}]", aliases.join(", ")) };
            Some((group, name.to_owned(), about))
        })
        .collect();
    let name_width = entries.iter().map(|(_, n, _)| n.len()).max().unwrap_or(0);
    let indent = 2 + name_width + 2;
    let mut out = String::new();
    let mut current = "";
    for (group, name, about) in &entries {
        if *group != current {
            if !current.is_empty() {
                out.push('\n');
            }
            out.push_str(&format!("{group}:\n"));
            current = group;
        }
        let lines = wrap(about, WIDTH - indent);
        out.push_str(&format!("  {name:<name_width$}  {}\n", lines.first().map_or("", String::as_str)));
        for line in lines.iter().skip(1) {
            out.push_str(&format!("{:indent$}{line}\n", ""));
        }
    }
    out.push('\n');
    out
}

/// `text` in lines of at most `width` characters, broken at spaces.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn every_command_is_in_exactly_one_group() {
        let mut cmd = crate::cli::Cli::command();
        cmd.build();
        let listed: Vec<&str> = GROUPS.iter().flat_map(|(_, names)| names.iter().copied()).collect();
        // Hidden commands (the egress proxy forage runs itself) are in none.
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            let n = listed.iter().filter(|l| **l == sub.get_name()).count();
            assert_eq!(n, 1, "command {} is in {n} groups of --help", sub.get_name());
        }
        for name in listed {
            assert!(cmd.find_subcommand(name).is_some(), "--help groups a command {name} that does not exist");
        }
    }

    #[test]
    fn wrap_breaks_at_spaces_within_the_width() {
        assert_eq!(wrap("aa bb cc", 5), ["aa bb", "cc"]);
        assert_eq!(wrap("", 5), Vec::<String>::new());
    }
}
