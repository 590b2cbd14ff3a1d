//! The agent's entry point when forage must do something inside the container
//! before the agent runs: wait for the template's `init` commands, and export
//! secrets to the agent process only. The script names secret *files*, never
//! values, so nothing secret reaches the container's configuration, argv or logs.

use crate::inside::{INIT_DONE_MARKER, SECRETS_DIR, TASK_FILE};

/// Wraps `command` in a POSIX sh launcher, or returns it unchanged when nothing
/// needs doing. `secret_env` is (VAR, secret name); both are validated names, so
/// they need no quoting. `task_args` (the template's `agent.task`, when `up`
/// was given a task) are appended to the command: `{task}` as the task file's
/// text, read inside, `{task_file}` as its path, anything else as it is.
pub fn wrap(
    command: Vec<String>,
    secret_env: &[(String, String)],
    wait_for_init: bool,
    task_args: &[String],
) -> Vec<String> {
    if secret_env.is_empty() && !wait_for_init && task_args.is_empty() {
        return command;
    }
    let mut script = String::new();
    if wait_for_init {
        // POSIX sleep takes whole seconds; GNU and busybox take fractions.
        script.push_str(&format!("while [ ! -e {INIT_DONE_MARKER} ]; do sleep 0.1 2>/dev/null || sleep 1; done; "));
    }
    for (var, secret) in secret_env {
        script.push_str(&format!("{var}=\"$(cat {SECRETS_DIR}/{secret})\" || exit 1; export {var}; "));
    }
    if !task_args.is_empty() {
        let args: Vec<String> = task_args
            .iter()
            .map(|a| match a.as_str() {
                "{task}" => format!("\"$(cat {TASK_FILE})\""),
                "{task_file}" => TASK_FILE.to_owned(),
                literal => quoted(literal),
            })
            .collect();
        script.push_str(&format!("set -- \"$@\" {}; ", args.join(" ")));
    }
    script.push_str("exec \"$@\"");
    let mut wrapped = vec!["sh".to_owned(), "-c".to_owned(), script, "forage-agent".to_owned()];
    wrapped.extend(command);
    wrapped
}

/// `text` as one word of sh, whatever it holds.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn leaves_plain_commands_alone() {
        assert_eq!(wrap(vec!["claude".into()], &[], false, &[]), vec!["claude"]);
    }

    #[test]
    fn exports_secrets_from_files_and_passes_arguments_through() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("key"), "s3cret value").unwrap();
        let cmd = wrap(
            vec![
                "sh".into(),
                "-c".into(),
                "printf '%s|%s' \"$API_KEY\" \"$1\"".into(),
                "zero".into(),
                "arg one".into(),
            ],
            &[("API_KEY".into(), "key".into())],
            false,
            &[],
        );
        assert!(!cmd.iter().any(|a| a.contains("s3cret")), "the value is never in argv");
        let script = cmd[2].replace(SECRETS_DIR, dir.path().to_str().unwrap());
        let out = Command::new(&cmd[0]).arg("-c").arg(script).args(&cmd[3..]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "s3cret value|arg one");
    }

    #[test]
    fn a_missing_secret_file_stops_the_agent() {
        let cmd = wrap(vec!["true".into()], &[("K".into(), "absent-secret-xyz".into())], false, &[]);
        let out = Command::new(&cmd[0]).args(&cmd[1..]).output().unwrap();
        assert!(!out.status.success());
    }

    #[test]
    fn a_task_is_read_inside_and_passed_as_the_template_says() {
        let dir = tempfile::tempdir().unwrap();
        let task = dir.path().join("task.md");
        std::fs::write(&task, "fix the 'bug' in $HOME\nand `this`").unwrap();
        let args =
            ["--message".to_owned(), "{task}".to_owned(), "it's {task_file}".to_owned(), "{task_file}".to_owned()];
        let cmd = wrap(vec!["printf".into(), "[%s]".into()], &[], false, &args);
        assert!(!cmd.iter().any(|a| a.contains("bug")), "the text is never in argv");
        let script = cmd[2].replace(TASK_FILE, task.to_str().unwrap());
        let out = Command::new(&cmd[0]).arg("-c").arg(script).args(&cmd[3..]).output().unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            format!("[--message][fix the 'bug' in $HOME\nand `this`][it's {{task_file}}][{}]", task.display())
        );
    }
}
