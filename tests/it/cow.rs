//! `up --cow` (docs/adr/0003): the same agent actions in a copy-on-write
//! sandbox and in a full checkout give the same `diff`, DIRTY, `sync`,
//! `merge`, `down` archive and `restore`; sandboxes on one base never see
//! each other's files; the base is never written; `gc` removes a base no
//! sandbox uses; a crash at any step of `up --cow` leaves nothing `gc`
//! cannot clean.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bollard::query_parameters::ListVolumesOptions;

use crate::git::{git, repo_state};
use crate::support::*;

/// Every kind of change an agent makes: an edit, a delete, a renamed file and
/// directory, a directory made and removed, a mode change, a file replaced by
/// a symlink, a directory deleted and made again (opaque), an ignored file,
/// a commit, and work left uncommitted after it.
const AGENT_ACTIONS: &str = "cd /workspace \
    && printf 'more\\n' >> a.txt && rm d/b.txt && mv d/e d/moved && mv mv-src.txt mv-dst.txt \
    && mkdir -p new/dir && printf 'n\\n' > new/dir/n.txt && mkdir gone && rmdir gone \
    && chmod +x run.sh && rm link-me.txt && ln -s a.txt link-me.txt \
    && rm -rf r && mkdir r && printf 'fresh\\n' > r/f.txt && printf 'x\\n' > x.log \
    && git add -A new && git commit -qm 'agent commit' \
    && printf 'after\\n' > after.txt && printf 'edited\\n' > keep/k.txt";

/// A repository holding a file for each of `AGENT_ACTIONS`.
fn cow_repo(env: &Env, rel: &str) -> PathBuf {
    let dir = env.mkdir(rel);
    git(&dir, &["init", "-q", "-b", "main"]);
    for (path, content) in [
        ("a.txt", "orig\n"),
        (".gitignore", "*.log\n"),
        ("d/b.txt", "b\n"),
        ("d/e/c.txt", "c\n"),
        ("run.sh", "#!/bin/sh\n"),
        ("link-me.txt", "a file\n"),
        ("mv-src.txt", "moved\n"),
        ("r/old.txt", "old\n"),
        ("r/sub/deep.txt", "deep\n"),
        ("keep/k.txt", "k\n"),
    ] {
        let file = dir.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, content).unwrap();
    }
    git(&dir, &["add", "."]);
    git(&dir, &["commit", "-qm", "initial"]);
    dir
}

fn sh(env: &Env, name: &str, script: &str) -> String {
    env.ok(&["exec", name, "--", "sh", "-c", script])
}

/// `up --cow`, asserting it said it made a copy-on-write workspace.
fn up_cow(env: &Env, name: &str, repo: &Path) {
    let out = env.run(&["up", name, "--git-worktree", repo.to_str().unwrap(), "--cow"]);
    assert!(out.status.success(), "{}", describe(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("workspace: copy-on-write over the shared base checkout"), "{said}");
}

/// The one base checkout under FORAGE_HOME/bases.
fn only_base(env: &Env) -> PathBuf {
    let bases: Vec<PathBuf> = std::fs::read_dir(env.home.join("bases")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(bases.len(), 1, "{bases:?}");
    bases[0].clone()
}

/// The files of a checkout but its `.git`.
fn checkout_files(dir: &Path) -> Snapshot {
    snapshot(dir).into_iter().filter(|(p, ..)| !p.starts_with(".git")).collect()
}

fn tree(repo: &Path, rev: &str) -> String {
    git(repo, &["rev-parse", &format!("{rev}^{{tree}}")])
}

/// Overlay volumes whose upper layer is under this test's FORAGE_HOME.
fn cow_volumes(env: &Env) -> Vec<String> {
    let filters = HashMap::from([("label".to_string(), vec!["forage.cow.upper".to_string()])]);
    let list = block_on(env.docker().list_volumes(Some(ListVolumesOptions { filters: Some(filters) }))).unwrap();
    let home = env.home.display().to_string();
    list.volumes
        .unwrap_or_default()
        .into_iter()
        .filter(|v| v.labels.get("forage.cow.upper").is_some_and(|u| u.starts_with(&home)))
        .map(|v| v.name)
        .collect()
}

#[test]
fn the_same_agent_actions_give_the_same_results_with_and_without_cow() {
    let env = Env::new();
    let (full_repo, cow_repo_dir) = (cow_repo(&env, "full"), cow_repo(&env, "cow"));
    assert_eq!(tree(&full_repo, "main"), tree(&cow_repo_dir, "main"));
    let (full, cow) = (env.unique("full"), env.unique("cow"));
    env.ok(&["up", &full, "--git-worktree", full_repo.to_str().unwrap()]);
    up_cow(&env, &cow, &cow_repo_dir);
    let base = only_base(&env);
    let base_before = snapshot(&base.join("tree"));

    // The agent's git finds the index valid at once: `git status` rehashes
    // nothing, so it rewrites nothing.
    let status = "cd /workspace && git hash-object /forage/git/index && git status --porcelain && git hash-object /forage/git/index";
    let out = sh(&env, &cow, status);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "clean, and the index unchanged: {out}");
    assert_eq!(lines[0], lines[1], "{out}");

    for name in [&full, &cow] {
        sh(&env, name, AGENT_ACTIONS);
    }
    let upper = env.home.join("workspaces").join(&cow).join("upper");
    // The upper layer holds the changes only: a whiteout for a deleted file,
    // a directory made again without the old one's files.
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::symlink_metadata(upper.join("d/b.txt")).unwrap().file_type().is_char_device());
    assert!(!upper.join("r/sub").exists() && upper.join("r/f.txt").is_file());
    assert!(!upper.join("r/old.txt").exists() && !upper.join(".gitignore").exists(), "untouched files stay below");

    // What the host reads of the agent's files is the same.
    let uncommitted = |name: &str| env.ok(&["diff", name, "--uncommitted"]);
    assert_eq!(uncommitted(&cow), uncommitted(&full));
    assert!(uncommitted(&cow).contains("after.txt"), "{}", uncommitted(&cow));
    let dirty = |name: &str| env.json(&["status", name, "--json"])["git"]["dirty"].clone();
    assert_eq!(dirty(&cow), dirty(&full));
    assert_eq!(dirty(&cow).as_array().map(Vec::len), Some(13), "{}", dirty(&cow));
    // list counts them the same way, against the agent's own HEAD (its
    // commit not synced yet).
    let rows = env.json(&["list", "--json"]);
    let listed = |name: &str| {
        let row = rows.as_array().unwrap().iter().find(|r| r["name"] == name).unwrap().clone();
        (row["dirty"].as_u64(), row["ahead"].as_u64())
    };
    assert_eq!(listed(&cow), listed(&full));
    assert_eq!(listed(&cow), (Some(13), Some(1)), "{rows}");
    let diff = |name: &str| env.ok(&["diff", name]);
    assert_eq!(diff(&cow), diff(&full));
    env.ok(&["sync", &full]);
    env.ok(&["sync", &cow]);
    assert_eq!(tree(&cow_repo_dir, &format!("forage-{cow}")), tree(&full_repo, &format!("forage-{full}")));

    // down archives the same tree, and restore brings back the same branch.
    let archived = |repo: &Path, name: &str| {
        let out = env.ok(&["down", name]);
        assert!(out.contains("archived"), "{out}");
        let refs = git(repo, &["for-each-ref", "--format=%(refname)", &format!("refs/forage/archive/{name}")]);
        tree(repo, refs.trim())
    };
    assert_eq!(archived(&cow_repo_dir, &cow), archived(&full_repo, &full));
    env.ok(&["restore", &full]);
    env.ok(&["restore", &cow]);
    assert_eq!(tree(&cow_repo_dir, &format!("forage-{cow}")), tree(&full_repo, &format!("forage-{full}")));
    git(&full_repo, &["branch", "-D", &format!("forage-{full}")]);
    git(&cow_repo_dir, &["branch", "-D", &format!("forage-{cow}")]);
    assert_eq!(cow_volumes(&env), Vec::<String>::new(), "the overlay volume went with its container");

    // merge lands the same files in the user's checkout (a second pair, on
    // the base the first one left).
    let (full2, cow2) = (env.unique("full2"), env.unique("cow2"));
    env.ok(&["up", &full2, "--git-worktree", full_repo.to_str().unwrap()]);
    up_cow(&env, &cow2, &cow_repo_dir);
    assert_eq!(only_base(&env), base, "the base is shared");
    for name in [&full2, &cow2] {
        sh(&env, name, AGENT_ACTIONS);
    }
    env.ok(&["merge", &full2, "--yes"]);
    env.ok(&["merge", &cow2, "--yes"]);
    assert_eq!(tree(&cow_repo_dir, "main"), tree(&full_repo, "main"));
    assert_eq!(checkout_files(&cow_repo_dir), checkout_files(&full_repo));
    assert_eq!(snapshot(&base.join("tree")), base_before, "the base checkout was never written");

    env.ok(&["down", &full2]);
    env.ok(&["down", &cow2]);
    let found = env.ok(&["gc", "--force"]);
    assert!(found.contains("unused-base") && found.contains(base.to_str().unwrap()), "{found}");
    assert!(!base.exists());
    assert_eq!(cow_volumes(&env), Vec::<String>::new());
    env.assert_nothing_left_but_archives();
}

#[test]
fn sandboxes_on_one_base_never_see_each_others_changes() {
    let env = Env::new();
    let repo = cow_repo(&env, "repo");
    let before = repo_state(&repo);
    let (one, two) = (env.unique("cow-one"), env.unique("cow-two"));
    up_cow(&env, &one, &repo);
    up_cow(&env, &two, &repo);
    let base = only_base(&env);
    let users: Vec<String> = std::fs::read_dir(base.join("users"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(users.len(), 2, "{users:?}");

    // Each private repository starts with the base's index as a hard link
    // (no disk of its own), which no agent can write or chmod in place.
    use std::os::unix::fs::MetadataExt;
    let index = |name: &str| env.home.join("private").join(name).join("git/index");
    let shared = std::fs::metadata(base.join("index")).unwrap();
    for name in [&one, &two] {
        assert_eq!(std::fs::metadata(index(name)).unwrap().ino(), shared.ino(), "{name}'s index is the base's");
    }
    let base_index = std::fs::read(base.join("index")).unwrap();
    let attack = "cd /workspace && (printf x >> /forage/git/index) 2>&1; chmod 666 /forage/git/index 2>&1; \
                  (: > /forage/git/index) 2>&1; stat -c %a /forage/git/index";
    let out = sh(&env, &one, attack);
    assert_eq!(out.matches("Permission denied").count(), 2, "{out}");
    assert!(out.contains("Operation not permitted") && out.ends_with("444\n"), "{out}");
    assert_eq!(std::fs::read(base.join("index")).unwrap(), base_index, "the shared index was never written");
    // git replaces an index by renaming a new one over it: the shared one stays.
    sh(&env, &one, "cd /workspace && printf z > z.txt && git add z.txt && git rm -q --cached z.txt && rm z.txt");
    assert_ne!(std::fs::metadata(index(&one)).unwrap().ino(), shared.ino(), "one's git wrote an index of its own");
    assert_eq!(std::fs::read(base.join("index")).unwrap(), base_index);
    assert_eq!(std::fs::metadata(index(&two)).unwrap().ino(), shared.ino());
    assert_eq!(sh(&env, &two, "cd /workspace && git status --porcelain"), "", "two's index is still valid");

    sh(&env, &one, "cd /workspace && printf 'one\\n' > a.txt && printf 'only one\\n' > one.txt && rm -r d");
    sh(&env, &two, "cd /workspace && rm a.txt && printf 'two\\n' > d/b.txt");
    let look =
        "cd /workspace && for f in a.txt one.txt d/b.txt; do if test -e $f; then cat $f; else echo no $f; fi; done";
    assert_eq!(sh(&env, &one, look), "one\nonly one\nno d/b.txt\n");
    assert_eq!(sh(&env, &two, look), "no a.txt\nno one.txt\ntwo\n");
    let dirty = |name: &str| env.json(&["status", name, "--json"])["git"]["dirty"].clone();
    assert_eq!(dirty(&one), serde_json::json!(["a.txt", "d/b.txt", "d/e/c.txt", "one.txt"]));
    assert_eq!(dirty(&two), serde_json::json!(["a.txt", "d/b.txt"]));

    // The host view: the merged files, while the sandbox runs.
    let merged = PathBuf::from(env.ok(&["path", &one]).trim());
    assert_eq!(std::fs::read_to_string(merged.join("one.txt")).unwrap(), "only one\n");
    assert_eq!(std::fs::read_to_string(merged.join("keep/k.txt")).unwrap(), "k\n");
    env.ok(&["stop", &one]);
    let err = env.fails(&["path", &one], 4);
    assert!(err.contains("copy-on-write") && err.contains("forage-ctl start"), "{err}");

    env.ok(&["down", &one, "--discard"]);
    assert!(base.exists(), "two still uses the base");
    assert_eq!(env.json(&["gc", "--json"]), serde_json::json!([]));
    env.ok(&["down", &two, "--discard"]);
    env.ok(&["gc", "--force"]);
    assert!(!base.exists());
    assert_eq!(repo_state(&repo), before);
    env.assert_nothing_left();
}

#[test]
fn parallel_ups_on_one_new_tree_share_one_base() {
    let env = Env::new();
    let repo = cow_repo(&env, "repo");
    let names: Vec<String> = (0..4).map(|i| env.unique(&format!("cow-par{i}"))).collect();
    let children: Vec<_> = names
        .iter()
        .map(|n| {
            env.cmd(&["up", n, "--git-worktree", repo.to_str().unwrap(), "--cow"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", describe(&out));
    }
    let base = only_base(&env);
    assert_eq!(std::fs::read_dir(base.join("users")).unwrap().count(), 4);
    for n in &names {
        assert_eq!(sh(&env, n, "cd /workspace && git status --porcelain && cat d/b.txt"), "b\n");
    }
    env.ok(&["down", "--all"]);
    env.ok(&["gc", "--force"]);
    env.assert_nothing_left();
}

/// The steps of `up --cow` after which a crash is injected.
const COW_STEPS: &[&str] = &["record", "git-branch", "git-worktree", "private-repo", "container", "start", "ready"];

#[test]
fn a_crash_at_any_step_of_up_cow_leaves_nothing_gc_cannot_clean() {
    let env = Env::new();
    let repo = cow_repo(&env, "repo");
    let before = repo_state(&repo);
    for step in COW_STEPS {
        let name = env.unique(&format!("cow-kill-{step}"));
        env.killed_after(&["up", &name, "--git-worktree", repo.to_str().unwrap(), "--cow"], step);
        env.ok(&["gc", "--force"]);
        if *step == "ready" {
            // A whole sandbox, which gc leaves alone.
            env.ok(&["down", &name, "--discard"]);
            env.ok(&["gc", "--force"]);
        }
        env.assert_nothing_left_but_archives();
        assert_eq!(cow_volumes(&env), Vec::<String>::new(), "{step}");
        assert_eq!(repo_state(&repo), before, "{step}: the repository is as it was");
        assert_eq!(env.json(&["gc", "--json"]), serde_json::json!([]), "{step}");
    }
}

#[test]
fn cow_falls_back_to_a_full_checkout_saying_why_or_is_refused() {
    let env = Env::new();
    let repo = cow_repo(&env, "repo");
    let r = repo.to_str().unwrap();

    // A directory mounted as it is has nothing to copy: refused, nothing made.
    let dir = env.mkdir("plain");
    let err = env.fails(&["up", &env.unique("cow-direct"), "--workspace", dir.to_str().unwrap(), "--cow"], 2);
    assert!(err.contains("--cow") && err.contains("--git-worktree"), "{err}");
    env.assert_nothing_left();

    // Your uncommitted changes are copied into a full checkout.
    std::fs::write(repo.join("a.txt"), "yours\n").unwrap();
    let name = env.unique("cow-uncommitted");
    let out = env.run(&["up", &name, "--git-worktree", r, "--cow", "--include-uncommitted", "--no-start"]);
    assert!(out.status.success(), "{}", describe(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("--cow: --include-uncommitted") && said.contains("full checkout"), "{said}");
    assert!(!said.contains("workspace: copy-on-write"), "{said}");
    let ws = env.home.join("workspaces").join(&name);
    assert_eq!(std::fs::read_to_string(ws.join("a.txt")).unwrap(), "yours\n");
    assert!(!env.home.join("bases").exists());
    env.ok(&["down", &name, "--discard"]);
    git(&repo, &["checkout", "-q", "a.txt"]);

    env.assert_nothing_left_but_archives();

    // forage-ctl not running as root could not delete what the overlay leaves
    // (a FORAGE_HOME of the user's own).
    let env = Env::new();
    let repo = cow_repo(&env, "repo");
    let r = repo.to_str().unwrap();
    let uid = 4245;
    env.give(env.dir.path(), uid);
    std::process::Command::new("chown").arg("-R").arg(uid.to_string()).arg(&repo).status().unwrap();
    let name = env.unique("cow-user");
    let out = env.cmd_as(uid, &["up", &name, "--git-worktree", r, "--cow", "--no-start"]).output().unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("does not run as root") && said.contains("full checkout"), "{said}");
    assert!(env.home.join("workspaces").join(&name).join("a.txt").is_file());
    let out = env.cmd_as(uid, &["down", &name, "--discard"]).output().unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    env.assert_nothing_left_but_archives();
}

/// `up --cow` on this run's engine: an overlay on Docker; on Podman, whose
/// Engine API mounts the overlay volume empty, a full checkout instead, with
/// a warning naming Podman (as for any engine that cannot make the overlay).
#[test]
fn up_cow_makes_an_overlay_on_docker_and_a_full_checkout_on_podman() {
    let env = Env::new();
    let repo = cow_repo(&env, "repo");
    let name = env.unique("cow-engine");
    let out = env.run(&["up", &name, "--git-worktree", repo.to_str().unwrap(), "--cow", "--no-start"]);
    assert!(out.status.success(), "{}", describe(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    let cow = !env.json(&["status", &name, "--json"])["record"]["workspace"]["cow"].is_null();
    match test_engine() {
        TestEngine::Docker => assert!(cow && said.contains("workspace: copy-on-write"), "{said}"),
        TestEngine::PodmanRootless | TestEngine::PodmanRootful => {
            assert!(!cow, "{said}");
            // Rootless, forage-ctl is no root and says that first.
            let rootful = matches!(test_engine(), TestEngine::PodmanRootful);
            assert!(said.contains("full checkout") && (!rootful || said.contains("Podman")), "{said}");
            assert!(env.home.join("workspaces").join(&name).join("a.txt").is_file());
        }
    }
    env.ok(&["down", &name, "--discard"]);
    env.ok(&["gc", "--force"]);
    env.assert_nothing_left_but_archives();
}

/// A template of the host's tools whose `workspace.cow` is `policy`.
fn cow_template(env: &Env, name: &str, policy: &str) {
    let text = format!(
        "description: cow tests\nhost_image:\n  require: [sh]\n  tools: [sh, cat, git]\nagent:\n  command: [sh]\nworkspace:\n  cow: {policy}\n"
    );
    std::fs::write(env.mkdir("config/forage/templates").join(format!("{name}.yaml")), text).unwrap();
}

/// `up --no-start` with FORAGE_COW_THRESHOLD at `threshold`: whether the
/// sandbox's record is copy-on-write, and what `up` said.
fn up_with_threshold(env: &Env, name: &str, threshold: &str, args: &[&str]) -> (bool, String) {
    let out =
        env.cmd(&[&["up", name, "--no-start"], args].concat()).env("FORAGE_COW_THRESHOLD", threshold).output().unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let cow = !env.json(&["status", name, "--json"])["record"]["workspace"]["cow"].is_null();
    (cow, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn the_checkout_is_chosen_by_the_flags_then_the_template_then_the_tree_s_size() {
    let env = Env::new();
    let repo = cow_repo(&env, "repo");
    let r = repo.to_str().unwrap();
    let index_before = std::fs::read(repo.join(".git/index")).unwrap();
    let files = git(&repo, &["ls-files"]).lines().count().to_string();
    let one_more = (git(&repo, &["ls-files"]).lines().count() + 1).to_string();

    // By default: copy-on-write from the threshold's number of files on.
    let at = env.unique("cow-at");
    let (cow, said) = up_with_threshold(&env, &at, &files, &["--git-worktree", r]);
    assert!(cow, "{said}");
    assert!(said.contains("copy-on-write over the shared base checkout"), "{said}");
    assert!(said.contains(&format!("the tree has at least {files} files")), "{said}");
    let below = env.unique("cow-below");
    let (cow, said) = up_with_threshold(&env, &below, &one_more, &["--git-worktree", r]);
    assert!(!cow, "{said}");
    assert!(said.contains(&format!("workspace: a full checkout (the tree has fewer than {one_more} files")), "{said}");
    assert!(env.home.join("workspaces").join(&below).join("a.txt").is_file());
    // Making the base leaves the user's index as it was.
    assert_eq!(std::fs::read(repo.join(".git/index")).unwrap(), index_before, "the user's index was rewritten");

    // `--full-checkout` wins over the size, `--cow` over it.
    let full = env.unique("cow-full");
    let (cow, said) = up_with_threshold(&env, &full, "1", &["--git-worktree", r, "--full-checkout"]);
    assert!(!cow && said.contains("workspace: a full checkout (--full-checkout)"), "{said}");
    let asked = env.unique("cow-asked");
    let (cow, said) = up_with_threshold(&env, &asked, &one_more, &["--git-worktree", r, "--cow"]);
    assert!(cow && said.contains("(--cow; "), "{said}");

    // The template's `workspace.cow`, unless a flag says otherwise.
    cow_template(&env, "never", "never");
    cow_template(&env, "always", "always");
    let never = env.unique("cow-never");
    let (cow, said) = up_with_threshold(&env, &never, "1", &["--git-worktree", r, "-t", "never"]);
    assert!(!cow && said.contains("workspace: a full checkout (the template's workspace.cow: never)"), "{said}");
    let always = env.unique("cow-always");
    let (cow, said) = up_with_threshold(&env, &always, &one_more, &["--git-worktree", r, "-t", "always"]);
    assert!(cow && said.contains("the template's workspace.cow: always"), "{said}");
    let overridden = env.unique("cow-overridden");
    let (cow, _) = up_with_threshold(&env, &overridden, &one_more, &["--git-worktree", r, "-t", "never", "--cow"]);
    assert!(cow);

    for name in [&at, &below, &full, &asked, &never, &always, &overridden] {
        env.ok(&["down", name, "--discard"]);
    }
    env.ok(&["gc", "--force"]);
    env.assert_nothing_left_but_archives();
}

#[test]
fn cow_and_full_checkout_together_or_a_bad_threshold_are_refused_with_nothing_made() {
    let env = Env::new();
    let repo = cow_repo(&env, "repo");
    let before = repo_state(&repo);
    let r = repo.to_str().unwrap();
    let name = env.unique("cow-both");
    let err = env.fails(&["up", &name, "--git-worktree", r, "--cow", "--full-checkout"], 2);
    assert!(err.contains("--cow") && err.contains("--full-checkout"), "{err}");
    let out = env.cmd(&["up", &name, "--git-worktree", r]).env("FORAGE_COW_THRESHOLD", "many").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("FORAGE_COW_THRESHOLD=\"many\"") && err.contains("whole number"), "{err}");
    assert_eq!(repo_state(&repo), before);
    env.assert_nothing_left();
    assert_eq!(cow_volumes(&env), Vec::<String>::new());
}

/// An agent whose HEAD is a tree bomb (four trees of 1,000 entries, each
/// naming the one below: 10^12 paths from 4,000 entries) and who deleted a
/// directory of the base: `list` stops walking at its bound and says DIRTY
/// is unknown, and why, instead of walking the paths.
#[test]
fn a_head_that_names_one_tree_again_and_again_leaves_dirty_unknown() {
    let env = Env::new();
    let repo = cow_repo(&env, "repo");
    let name = env.unique("cow-bomb");
    up_cow(&env, &name, &repo);
    let bomb = "cd /workspace && rm -r r && blob=$(echo x | git hash-object -w --stdin) && \
        lines() { i=0; while [ $i -lt 1000 ]; do printf '%s %s %s\\te%s\\n' \"$1\" \"$2\" \"$3\" $i; i=$((i+1)); done; } && \
        t=$(lines 100644 blob $blob | git mktree) && \
        for d in 1 2 3; do t=$(lines 040000 tree $t | git mktree); done && \
        git reset -q --soft $(git commit-tree $t -m bomb) && git cat-file -p HEAD^{tree} | wc -l";
    // The attack took: HEAD's tree has 1,000 entries naming one tree.
    assert_eq!(sh(&env, &name, bomb).trim(), "1000");
    let rows = env.json(&["list", "--json"]);
    let row = rows.as_array().unwrap().iter().find(|r| r["name"] == name.as_str()).unwrap().clone();
    assert!(row["dirty"].is_null(), "{row}");
    assert!(row["dirty_unknown"].as_str().unwrap_or("").contains("more than 2000000 entries"), "{row}");
    env.ok(&["down", &name, "--discard"]);
    env.ok(&["gc", "--force"]);
    env.assert_nothing_left_but_archives();
}
