//! Commands that need no sandbox: templates, completions, man page, help.

use std::path::Path;
use std::process::Command;

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
    assert!(
        bash.contains("complete -o nospace -o bashdefault -o nosort -F _clap_complete_forage_ctl forage-ctl"),
        "{bash}"
    );
    let zsh = env.ok(&["completions", "zsh"]);
    assert!(zsh.contains("#compdef forage-ctl"));
    let fish = env.ok(&["completions", "fish"]);
    assert!(fish.contains("COMPLETE=fish forage-ctl"), "{fish}");
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

/// What bash offers at a Tab after `words` (the last one being completed),
/// with the script `completions bash` prints sourced, as a shell would, and
/// `forage-ctl` found on PATH. The engine is made unreachable: completion
/// must never ask it.
fn bash_completes(env: &Env, words: &[&str]) -> Vec<String> {
    let bin_dir = Path::new(BIN).parent().unwrap();
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let script = format!(
        "source <(forage-ctl completions bash) || exit 1\n\
         COMP_WORDS=(forage-ctl {words}); COMP_CWORD=${{#COMP_WORDS[@]}}; COMP_CWORD=$((COMP_CWORD - 1)); COMP_TYPE=9\n\
         _clap_complete_forage_ctl forage-ctl \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\" || exit 1\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        words = quoted.join(" ")
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .env("PATH", format!("{}:/usr/bin:/bin", bin_dir.display()))
        .env("FORAGE_HOME", &env.home)
        .env("XDG_CONFIG_HOME", env.path("config"))
        .env("FORAGE_TEMPLATES_PATH", env.path("templates"))
        .env("DOCKER_HOST", format!("unix://{}", env.path("no-engine.sock").display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{script}: {}", describe(&out));
    String::from_utf8(out.stdout).unwrap().lines().filter(|l| !l.is_empty()).map(str::to_owned).collect()
}

#[test]
fn completion_offers_sandbox_and_template_names() {
    let env = Env::new();
    // What completion reads: the names of the records, of the archive indexes
    // and of the templates on the search path (the files' contents do not matter).
    for (dir, file) in [
        ("sandboxes", "agent-a.json"),
        ("sandboxes", "agent-b.json"),
        ("sandboxes", "other.json"),
        ("archives", "gone.json"),
    ] {
        std::fs::create_dir_all(env.home.join(dir)).unwrap();
        std::fs::write(env.home.join(dir).join(file), "{}").unwrap();
    }
    std::fs::create_dir_all(env.path("templates")).unwrap();
    std::fs::write(env.path("templates/mine.yaml"), "image: x\n").unwrap();

    let names = bash_completes(&env, &["status", ""]);
    assert!(["agent-a", "agent-b", "other"].iter().all(|n| names.contains(&n.to_string())), "{names:?}");
    assert_eq!(bash_completes(&env, &["diff", "agent-a", "ag"]), ["agent-a", "agent-b"]);
    assert_eq!(bash_completes(&env, &["down", "oth"]), ["other"]);
    assert_eq!(bash_completes(&env, &["restore", "g"]), ["gone"]);
    assert_eq!(bash_completes(&env, &["up", "x", "-t", "mi"]), ["mine"]);
    assert_eq!(bash_completes(&env, &["templates", "show", "sh"]), ["shell"]);
    assert_eq!(bash_completes(&env, &["sto"]), ["stop"]);
}

/// The README's install commands, run as written for a user whose
/// `~/.cargo/bin` holds forage-ctl, leave the man pages where `man` finds
/// them with no MANPATH set: man-db looks next to each bin directory on PATH.
#[test]
fn the_readme_install_puts_man_pages_where_man_finds_them() {
    let env = Env::new();
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let install = readme.split("## Install").nth(1).unwrap().split("```").nth(1).unwrap();
    assert!(install.contains("cargo install --locked --path ."), "{install}");
    let home = env.mkdir("user");
    let bin = home.join(".cargo/bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(BIN, bin.join("forage-ctl")).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let in_home = |program: &str, args: &[&str]| {
        let mut c = Command::new(program);
        c.args(args).env("HOME", &home).env("PATH", &path).env_remove("MANPATH").env("FORAGE_HOME", &env.home);
        c.output().unwrap()
    };
    // Every line but the build itself, which the test binary stands for.
    for line in install.lines().map(|l| l.split(" #").next().unwrap().trim()).filter(|l| !l.is_empty()) {
        if line.starts_with("cargo ") {
            continue;
        }
        let out = in_home("bash", &["-c", line]);
        assert!(out.status.success(), "{line}: {}", describe(&out));
    }
    // The completion line the README gives: a new bash completes forage-ctl.
    let out = in_home("bash", &["-c", "source ~/.bashrc && complete -p forage-ctl"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("_clap_complete_forage_ctl"), "{}", describe(&out));
    for page in ["forage-ctl", "forage-ctl-up"] {
        let out = in_home("man", &["-w", page]);
        assert!(out.status.success(), "man -w {page}: {}", describe(&out));
        let found = String::from_utf8(out.stdout).unwrap();
        assert_eq!(found.trim(), home.join(format!(".cargo/share/man/man1/{page}.1")).display().to_string());
    }
}

/// `templates show` prints a built-in's Dockerfile (as comments after the
/// YAML, or alone with `--dockerfile`), and `templates export` writes the
/// built-in's files out for editing, all or nothing: by default into the
/// user's template directory, where the copy is used in place of the built-in.
#[test]
fn templates_show_the_embedded_dockerfile_and_export_writes_it_out_for_editing() {
    let env = Env::new();
    let dockerfile = env.ok(&["templates", "show", "claude", "--dockerfile"]);
    assert!(
        dockerfile.contains("\nARG BASE=node:22-bookworm-slim\nFROM ${BASE}\n") && dockerfile.contains("claude-code"),
        "{dockerfile}"
    );
    let shown = env.ok(&["templates", "show", "claude"]);
    let first = dockerfile.lines().next().unwrap();
    assert!(shown.contains(&format!("\n#   {first}\n")), "the Dockerfile follows as comments:\n{shown}");
    let json: serde_json::Value = serde_json::from_str(&env.ok(&["templates", "show", "claude", "--json"])).unwrap();
    assert_eq!(json["dockerfile"].as_str(), Some(dockerfile.as_str()));
    let out = env.cmd(&["templates", "show", "shell", "--dockerfile"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("\"shell\" is not built from a Dockerfile"));

    // Into a directory that holds a file: refused, nothing written.
    let taken = env.mkdir("taken");
    std::fs::write(taken.join("mine"), "x").unwrap();
    let out = env.cmd(&["templates", "export", "claude", taken.to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("already holds files"), "{}", describe(&out));
    assert_eq!(std::fs::read_dir(&taken).unwrap().count(), 1);

    // Into a new directory: the shipped files, byte for byte.
    let dir = env.path("mine/claude");
    let out = env.ok(&["templates", "export", "claude", dir.to_str().unwrap()]);
    assert_eq!(out, format!("{}\n{}\n", dir.join("template.yaml").display(), dir.join("Dockerfile").display()));
    assert_eq!(std::fs::read_to_string(dir.join("Dockerfile")).unwrap(), dockerfile);
    assert!(std::fs::read_to_string(dir.join("template.yaml")).unwrap().contains("description: Claude Code"));

    // By default into the user's template directory, which then wins.
    env.ok(&["templates", "export", "codex"]);
    let copy = env.dir.path().join("config/forage/templates/codex/template.yaml");
    assert!(copy.is_file());
    let listed = env.ok(&["templates"]);
    let row = listed.lines().find(|l| l.trim_start().starts_with("codex ")).unwrap();
    assert!(row.contains(copy.to_str().unwrap()), "the copy is used: {row}");
    // Exporting again into the same place: refused, the user's edits kept.
    std::fs::write(&copy, "description: edited\n").unwrap();
    let out = env.cmd(&["templates", "export", "codex"]).output().unwrap();
    assert_eq!(out.status.code(), Some(4), "{}", describe(&out));
    assert_eq!(std::fs::read_to_string(&copy).unwrap(), "description: edited\n");
    // A template of the user's own, not a built-in: nothing to export.
    std::fs::write(env.dir.path().join("config/forage/templates/own.yaml"), "image: x\n").unwrap();
    let out = env.cmd(&["templates", "export", "own", env.path("again").to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a built-in"), "{}", describe(&out));
    assert!(!env.path("again").exists());
}
