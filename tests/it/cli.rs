//! Commands that need no sandbox: templates, completions, man page, help.

use crate::support::*;

#[test]
fn templates_lists_the_builtin_default_with_its_origin() {
    let env = Env::new();
    let out = env.ok(&["templates"]);
    let shell = out.lines().find(|l| l.trim_start().starts_with("shell ")).unwrap_or_else(|| panic!("{out}"));
    assert!(shell.contains("built-in"), "{shell}");
    let json = env.json(&["templates", "--json"]);
    assert!(json.as_array().unwrap().iter().any(|t| t["name"] == "shell" && t["origin"]["kind"] == "builtin"));
    let shown = env.ok(&["templates", "show", "shell"]);
    assert!(shown.contains("host_image:") && shown.contains("stop_signal: SIGHUP"), "{shown}");
    env.fails(&["templates", "show", "nope"], 3);
}

#[test]
fn completions_and_man_page() {
    let env = Env::new();
    let bash = env.ok(&["completions", "bash"]);
    assert!(bash.contains("forage-ctl") && bash.contains("attach"), "bash completions");
    let zsh = env.ok(&["completions", "zsh"]);
    assert!(zsh.contains("#compdef forage-ctl"));
    let man = env.ok(&["man"]);
    assert!(man.contains(".TH forage-ctl"), "{}", &man[..200.min(man.len())]);
    env.fails(&["completions", "tcsh"], 2);
}

#[test]
fn json_is_refused_in_words_true_of_each_command() {
    let env = Env::new();
    let cases: [(&[&str], &str); 6] = [
        (&["man"], "`man` prints or writes man pages"),
        (&["completions", "bash"], "`completions` prints a shell's completion script"),
        (&["exec", "x", "--", "true"], "`exec` passes the command's own output through"),
        (&["shell", "x"], "`shell` streams the container's terminal"),
        (&["attach", "x"], "`attach` streams the agent's terminal"),
        (&["logs", "x"], "`logs` prints the agent's output as it is"),
    ];
    for (args, says) in cases {
        let args: Vec<&str> = ["--json"].into_iter().chain(args.iter().copied()).collect();
        let out = env.run(&args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", describe(&out));
        assert!(out.stdout.is_empty(), "{args:?}: {}", describe(&out));
        let err: serde_json::Value = serde_json::from_slice(&out.stderr).unwrap();
        assert_eq!(err["error"]["message"], format!("{says}; it has no --json output"), "{args:?}");
    }
}
