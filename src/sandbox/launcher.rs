//! The agent's entry point when forage must do something inside the container
//! before the agent runs: wait for the template's `init` commands, and export
//! secrets to the agent process only. The script names secret *files*, never
//! values, so nothing secret reaches the container's configuration, argv or logs.

use crate::inside::{INIT_DONE_MARKER, SECRETS_DIR};

/// Wraps `command` in a POSIX sh launcher, or returns it unchanged when nothing
/// needs doing. `secret_env` is (VAR, secret name); both are validated names, so
/// they need no quoting.
pub fn wrap(command: Vec<String>, secret_env: &[(String, String)], wait_for_init: bool) -> Vec<String> {
    if secret_env.is_empty() && !wait_for_init {
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
    script.push_str("exec \"$@\"");
    let mut wrapped = vec!["sh".to_owned(), "-c".to_owned(), script, "forage-agent".to_owned()];
    wrapped.extend(command);
    wrapped
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn leaves_plain_commands_alone() {
        assert_eq!(wrap(vec!["claude".into()], &[], false), vec!["claude"]);
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
        );
        assert!(!cmd.iter().any(|a| a.contains("s3cret")), "the value is never in argv");
        let script = cmd[2].replace(SECRETS_DIR, dir.path().to_str().unwrap());
        let out = Command::new(&cmd[0]).arg("-c").arg(script).args(&cmd[3..]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "s3cret value|arg one");
    }

    #[test]
    fn a_missing_secret_file_stops_the_agent() {
        let cmd = wrap(vec!["true".into()], &[("K".into(), "absent-secret-xyz".into())], false);
        let out = Command::new(&cmd[0]).args(&cmd[1..]).output().unwrap();
        assert!(!out.status.success());
    }
}
