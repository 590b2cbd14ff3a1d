//! git-worktree mode against real git and the real engine: git works inside,
//! commits land on the host branch, and `down` loses nothing and leaves nothing.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::*;

/// Runs the git CLI on the host side of a test, asserting success.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .output()
        .unwrap();
    assert!(out.status.success(), "git {args:?}: {}", describe(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// A repository on `main` with one commit, a tracked file and a .gitignore.
pub fn repo(env: &Env, rel: &str) -> PathBuf {
    let dir = env.mkdir(rel);
    git(&dir, &["init", "-q", "-b", "main"]);
    std::fs::write(dir.join("a.txt"), "original\n").unwrap();
    std::fs::write(dir.join(".gitignore"), "*.log\n").unwrap();
    git(&dir, &["add", "."]);
    git(&dir, &["commit", "-qm", "initial"]);
    dir
}

/// Everything git knows that forage could have changed: refs and worktrees.
pub fn repo_state(repo: &Path) -> String {
    git(repo, &["for-each-ref", "--format=%(refname) %(objectname)"]) + &git(repo, &["worktree", "list", "--porcelain"])
}

/// `repo_state` leaving out the archive refs that `down` adds.
pub fn repo_state_but_archives(repo: &Path) -> String {
    repo_state(repo).lines().filter(|l| !l.starts_with("refs/forage/archive/")).map(|l| format!("{l}\n")).collect()
}

pub fn archive_refs(repo: &Path) -> Vec<String> {
    git(repo, &["for-each-ref", "--format=%(refname)", "refs/forage/archive"]).lines().map(str::to_owned).collect()
}

fn sh(env: &Env, name: &str, script: &str) -> String {
    env.ok(&["exec", name, "--", "sh", "-c", script])
}

#[test]
fn down_archives_every_byte_of_the_agents_work_and_restore_brings_it_back() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let before = repo_state(&repo);
    env.ok(&["up", "agent", "--git-worktree", repo.to_str().unwrap()]);

    // The agent uses git inside the container.
    let out = sh(&env, "agent", "cd /workspace && git status --short --branch && echo committed > committed.txt && git add committed.txt && git commit -qm 'agent work' && git log --format=%s -1 && git diff --stat HEAD~1");
    assert!(out.contains("## forage-agent") && out.contains("agent work") && out.contains("committed.txt"), "{out}");
    sh(&env, "agent", "cd /workspace && printf 'changed\\n' >> a.txt && printf 'new\\n' > untracked.txt && echo noise > debug.log && mkdir -p deep/er && printf 'nested\\n' > deep/er/n.txt");
    // The commit reaches the host's branch with `sync`, and only then.
    assert_eq!(git(&repo, &["log", "--format=%s", "-1", "forage-agent"]), "initial\n");
    let out = env.ok(&["sync", "agent"]);
    assert!(out.contains("forage-agent moved to") && out.contains("1 new commit"), "{out}");
    assert_eq!(git(&repo, &["log", "--format=%s", "-1", "forage-agent"]), "agent work\n");
    assert!(env.ok(&["sync", "agent"]).contains("up to date"));

    let down = env.run(&["down", "agent"]);
    assert!(down.status.success(), "{}", describe(&down));
    let (out, hints) = (String::from_utf8_lossy(&down.stdout), String::from_utf8_lossy(&down.stderr));
    assert!(out.contains("1 commit") && out.contains("3 uncommitted files"), "{out}");
    assert!(hints.contains("hint: restore it with `forage-ctl restore agent --archive "), "{hints}");

    // Nothing left: container, worktree registration, branch, record, directory.
    env.assert_nothing_left_but_archives();
    assert!(inspect("forage-agent").is_none());
    assert!(!repo.join(".git/worktrees/forage-agent").exists());
    assert!(!env.home.join("workspaces/agent").exists());
    let refs = archive_refs(&repo);
    assert_eq!(refs.len(), 1, "{refs:?}");
    assert_eq!(repo_state_but_archives(&repo), before);

    // Every byte is recoverable from the archive ref; ignored files are not archived.
    let r = &refs[0];
    assert_eq!(git(&repo, &["show", &format!("{r}:committed.txt")]), "committed\n");
    assert_eq!(git(&repo, &["show", &format!("{r}:a.txt")]), "original\nchanged\n");
    assert_eq!(git(&repo, &["show", &format!("{r}:untracked.txt")]), "new\n");
    assert_eq!(git(&repo, &["show", &format!("{r}:deep/er/n.txt")]), "nested\n");
    assert!(!git(&repo, &["ls-tree", "-r", "--name-only", r]).contains("debug.log"));
    assert_eq!(git(&repo, &["log", "--format=%s", "-1", &format!("{r}~1")]), "agent work\n");

    // restore: the work comes back as the branch.
    env.ok(&["restore", "agent"]);
    assert_eq!(git(&repo, &["rev-parse", "forage-agent"]), git(&repo, &["rev-parse", r]));
    env.fails(&["restore", "agent"], 4);
    git(&repo, &["branch", "-D", "forage-agent"]);

    // restore --up: a running sandbox on the archived work.
    env.ok(&["restore", "agent", "--up"]);
    assert_eq!(sh(&env, "agent", "cat /workspace/untracked.txt /workspace/committed.txt"), "new\ncommitted\n");
    env.ok(&["down", "agent", "--discard"]);
    assert!(git(&repo, &["branch", "--list", "forage-agent"]).is_empty());
    assert_eq!(archive_refs(&repo).len(), 1, "--discard archives nothing new, and never deletes old archives");
}

#[test]
fn clean_work_leaves_no_archive_and_keep_branch_keeps_the_branch() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let before = repo_state(&repo);
    env.ok(&["up", "clean", "--git-worktree", repo.to_str().unwrap()]);
    let out = env.ok(&["down", "clean"]);
    assert!(!out.contains("archived"), "{out}");
    assert_eq!(repo_state(&repo), before, "the repository is exactly as it was");
    env.assert_nothing_left();

    env.ok(&["up", "kept", "--git-worktree", repo.to_str().unwrap()]);
    sh(&env, "kept", "cd /workspace && echo x > x && git add x && git commit -qm x");
    let out = env.ok(&["down", "kept", "--keep-branch"]);
    assert!(out.contains("branch forage-kept kept"), "{out}");
    assert_eq!(git(&repo, &["log", "--format=%s", "-1", "forage-kept"]), "x\n");
    assert!(!repo.join(".git/worktrees/forage-kept").exists());
}

#[test]
fn two_sandboxes_on_one_repository_do_not_disturb_each_other() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let r = repo.to_str().unwrap();
    env.ok(&["up", "g-one", "--git-worktree", r]);
    env.ok(&["up", "g-two", "--repo", r]);
    sh(&env, "g-one", "cd /workspace && echo 1 > one.txt && git add . && git commit -qm one");
    sh(&env, "g-two", "cd /workspace && echo 2 > two.txt");
    env.ok(&["down", "g-one", "--discard"]);
    assert!(!repo.join(".git/worktrees/forage-g-one").exists());
    // two is untouched and still works.
    let out = sh(
        &env,
        "g-two",
        "cd /workspace && git status --short && git add . && git commit -qm two && git log --format=%s -1",
    );
    assert_eq!(out, "?? two.txt\ntwo\n");
    // status syncs first.
    let status = env.json(&["status", "g-two", "--json"]);
    assert_eq!(git(&repo, &["log", "--format=%s", "-1", "forage-g-two"]), "two\n");
    assert_eq!(status["git"]["ahead"], 1);
    assert_eq!(status["git"]["branch"], "forage-g-two");
    sh(&env, "g-two", "cd /workspace && echo dirty > dirty.txt");
    let text = env.ok(&["status", "g-two"]);
    assert!(
        text.contains("branch:     forage-g-two")
            && text.contains("base:       main (1 commit ahead, 0 commits behind)")
            && text.contains("changed:    dirty.txt"),
        "{text}"
    );
    env.ok(&["down", "g-two"]);
    env.assert_nothing_left_but_archives();
}

#[test]
fn eight_parallel_ups_on_one_repository_all_succeed() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let before = repo_state(&repo);
    let children: Vec<_> = (0..8)
        .map(|i| {
            env.cmd(&["up", &format!("par{i}"), "--git-worktree", repo.to_str().unwrap()])
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
    let worktrees = git(&repo, &["worktree", "list"]);
    assert_eq!(worktrees.lines().count(), 9, "{worktrees}");
    for i in 0..8 {
        assert_eq!(
            sh(&env, &format!("par{i}"), "cd /workspace && git rev-parse --abbrev-ref HEAD"),
            format!("forage-par{i}\n")
        );
    }
    env.ok(&["down", "--all"]);
    assert_eq!(repo_state(&repo), before);
    env.assert_nothing_left();
}

#[test]
fn edge_cases_are_handled_or_refused_clearly() {
    let env = Env::new();

    // A repository with no commits: refused, nothing created.
    let empty = env.mkdir("empty");
    git(&empty, &["init", "-q", "-b", "main"]);
    let stderr = env.fails(&["up", "e", "--git-worktree", empty.to_str().unwrap()], 6);
    assert!(stderr.contains("no commits yet") && stderr.contains("commit --allow-empty"), "{stderr}");
    assert!(git(&empty, &["for-each-ref"]).is_empty() && !empty.join(".git/worktrees").exists());

    // Not a repository: refused with the --workspace alternative.
    let plain = env.mkdir("plain");
    let stderr = env.fails(&["up", "p", "--repo", plain.to_str().unwrap()], 6);
    assert!(stderr.contains("not inside a git repository") && stderr.contains("--workspace"), "{stderr}");

    // An existing forage-<name> branch: refused, the branch untouched.
    let repo = repo(&env, "repo with spaces");
    let r = repo.to_str().unwrap();
    git(&repo, &["branch", "forage-dup"]);
    let tip = git(&repo, &["rev-parse", "forage-dup"]);
    let stderr = env.fails(&["up", "dup", "--git-worktree", r], 4);
    assert!(stderr.contains("\"forage-dup\" already exists") && stderr.contains("--branch"), "{stderr}");
    assert_eq!(git(&repo, &["rev-parse", "forage-dup"]), tip);
    // ... and --branch picks another name.
    env.ok(&["up", "dup", "--git-worktree", r, "--branch", "agent/dup"]);
    assert_eq!(sh(&env, "dup", "cd /workspace && git rev-parse --abbrev-ref HEAD"), "agent/dup\n");
    env.ok(&["down", "dup"]);
    assert_eq!(git(&repo, &["rev-parse", "forage-dup"]), tip, "never touches a branch it did not create");
    assert!(git(&repo, &["branch", "--list", "agent/dup"]).is_empty());

    // A bad --base: refused, nothing created.
    let stderr = env.fails(&["up", "b", "--git-worktree", r, "--base", "no-such-rev"], 6);
    assert!(stderr.contains("no-such-rev"), "{stderr}");
    // --base with --workspace makes no sense.
    env.fails(&["up", "b", "--workspace", r, "--base", "main"], 2);

    // A detached HEAD: the branch starts at the detached commit.
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "second"]);
    git(&repo, &["checkout", "-q", "--detach", "HEAD~1"]);
    let detached = git(&repo, &["rev-parse", "HEAD"]);
    env.ok(&["up", "det", "--git-worktree", r]);
    assert_eq!(git(&repo, &["rev-parse", "forage-det"]), detached);
    env.ok(&["down", "det"]);

    // --base: the branch starts there. A subdirectory means its repository.
    let sub = repo.join("sub dir");
    std::fs::create_dir(&sub).unwrap();
    env.ok(&["up", "based", "--git-worktree", sub.to_str().unwrap(), "--base", "main"]);
    assert_eq!(git(&repo, &["rev-parse", "forage-based"]), git(&repo, &["rev-parse", "main"]));
    assert_eq!(sh(&env, "based", "cd /workspace && ls a.txt && git log --format=%s -1"), "a.txt\nsecond\n");
    env.ok(&["down", "based"]);
    env.assert_nothing_left();
}

#[test]
fn a_bare_repository_works() {
    let env = Env::new();
    let src = repo(&env, "src");
    let bare = env.path("bare.git");
    let out = Command::new("git").args(["clone", "-q", "--bare"]).arg(&src).arg(&bare).output().unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    env.ok(&["up", "bare", "--git-worktree", bare.to_str().unwrap()]);
    let out = sh(&env, "bare", "cd /workspace && cat a.txt && echo b > b.txt && git add b.txt && git commit -qm bare-commit && git log --format=%s -1");
    assert_eq!(out, "original\nbare-commit\n");
    env.ok(&["sync", "bare"]);
    assert_eq!(git(&bare, &["log", "--format=%s", "-1", "forage-bare"]), "bare-commit\n");
    env.ok(&["down", "bare"]);
    assert_eq!(archive_refs(&bare).len(), 1);
    assert!(git(&bare, &["branch", "--list", "forage-bare"]).is_empty());
    assert!(!bare.join("worktrees/forage-bare").exists());
}

#[test]
fn down_that_cannot_archive_refuses_with_exit_7_and_deletes_nothing_of_the_work() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let before = repo_state(&repo);
    let name = env.unique("noarchive");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    let ws = env.home.join("workspaces").join(&name);
    std::fs::write(ws.join("precious.txt"), "the agent's only copy\n").unwrap();
    git(&ws, &["add", "precious.txt"]);
    git(&ws, &["commit", "-qm", "precious work"]);
    let tip = git(&repo, &["rev-parse", &format!("forage-{name}")]);
    // A ref where the archive's directory must go: git cannot write the archive.
    let blocker = format!("refs/forage/archive/{name}");
    git(&repo, &["update-ref", &blocker, "HEAD"]);

    let err = env.fails(&["down", &name], 7);
    assert!(
        err.contains(&format!("could not archive the work of sandbox {name}"))
            && err.contains("nothing was deleted")
            && err.contains(&format!("forage-ctl down --discard {name}")),
        "{err}"
    );
    // The container is gone; the work is all still there, and the sandbox says so.
    assert_eq!(env.containers(), Vec::<String>::new());
    assert_eq!(git(&repo, &["rev-parse", &format!("forage-{name}")]), tip);
    assert_eq!(std::fs::read_to_string(ws.join("precious.txt")).unwrap(), "the agent's only copy\n");
    let list = env.json(&["list", "--json"]);
    assert_eq!(list[0]["status"], "broken", "{list}");
    // gc --force meets the same refusal and reports it.
    let out = env.run(&["gc", "--force"]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("FAILED"), "{}", describe(&out));
    assert_eq!(git(&repo, &["rev-parse", &format!("forage-{name}")]), tip);

    // Once the cause is fixed, down finishes and the work is in the archive.
    git(&repo, &["update-ref", "-d", &blocker]);
    env.ok(&["down", &name]);
    env.assert_nothing_left_but_archives();
    assert_eq!(archive_refs(&repo).len(), 1);
    assert_eq!(git(&repo, &["show", &format!("{}:precious.txt", archive_refs(&repo)[0])]), "the agent's only copy\n");
    assert_eq!(repo_state_but_archives(&repo), before);
}
