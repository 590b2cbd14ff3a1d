//! Reviewing and landing an agent's work (`diff`, `log`, `merge`, `apply`,
//! `archives`, `wait`, `list`), against real git, jj and the real engine. The
//! agent works through `forage-ctl exec`; the user's side is checked with
//! git and jj run by the test on the host repository.

use std::collections::BTreeSet;
use std::path::Path;

use crate::git::{archive_refs, git, repo};
use crate::jj::{jj, jj_repo};
use crate::support::*;

fn inside(env: &Env, name: &str, script: &str) -> String {
    env.ok(&["exec", name, "--", "sh", "-c", script])
}

/// Two commits, then edits left uncommitted: a tracked file changed again, a
/// new file, and an ignored one (which is no work).
const TWO_COMMITS_AND_EDITS: &str =
    "cd /workspace && echo new > new.txt && git add new.txt && git commit -qm 'add new.txt' \
    && printf 'original\\nmore\\n' > a.txt && git commit -qam 'grow a.txt' \
    && echo again >> a.txt && echo untracked > u.txt && echo noise > x.log";

fn lines(text: &str) -> BTreeSet<String> {
    text.lines().filter(|l| !l.is_empty()).map(str::to_owned).collect()
}

fn loose_objects(repo: &Path) -> usize {
    walk_count(&repo.join(".git/objects"))
}

fn walk_count(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| if e.path().is_dir() { walk_count(&e.path()) } else { 1 }).sum())
        .unwrap_or(0)
}

#[test]
fn diff_and_log_show_what_git_on_the_host_sees_and_write_nothing() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let base = git(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
    let name = env.unique("rv-diff");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    inside(&env, &name, TWO_COMMITS_AND_EDITS);
    env.ok(&["sync", &name]);
    let objects = loose_objects(&repo);
    let wt = env.home.join("workspaces").join(&name);

    // Every path: committed and not, as git in the worktree lists them.
    let expected = lines(
        &(git(&wt, &["diff", "--name-only", &base]) + &git(&wt, &["ls-files", "--others", "--exclude-standard"])),
    );
    assert_eq!(lines(&env.ok(&["diff", &name, "--name-only"])), expected);
    assert!(!expected.contains("x.log"));
    // Committed only: the host's branch against the base.
    let branch = format!("forage-{name}");
    let committed = lines(&git(&repo, &["diff", "--name-only", &base, &branch]));
    assert_eq!(lines(&env.ok(&["diff", &name, "--name-only", "--committed"])), committed);
    let uncommitted = lines(&(git(&wt, &["diff", "--name-only", "HEAD"]) + "u.txt\n"));
    assert_eq!(lines(&env.ok(&["diff", &name, "--name-only", "--uncommitted"])), uncommitted);

    // --json's line counts are git's.
    let json = env.json(&["diff", &name, "--json"]);
    let numstat = git(&wt, &["diff", "--numstat", &base]);
    for line in numstat.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let file = json["files"].as_array().unwrap().iter().find(|x| x["path"] == f[2]).unwrap();
        assert_eq!(file["additions"].to_string(), f[0], "{line}: {file}");
        assert_eq!(file["deletions"].to_string(), f[1], "{line}: {file}");
    }
    let untracked = json["files"].as_array().unwrap().iter().find(|x| x["path"] == "u.txt").unwrap();
    assert_eq!((untracked["status"].as_str(), untracked["additions"].as_u64()), (Some("added"), Some(1)));
    // The patch itself, as text.
    let patch = env.ok(&["diff", &name]);
    assert!(
        patch.contains("diff --git a/a.txt b/a.txt") && patch.contains("+again") && patch.contains("+untracked"),
        "{patch}"
    );
    let stat = env.ok(&["diff", &name, "--stat"]);
    assert!(stat.contains("3 files changed"), "{stat}");

    // log: the two commits, newest first, as git lists them.
    let log = env.ok(&["log", &name]);
    let summaries: Vec<&str> = log.lines().map(|l| l.split_once(' ').unwrap().1).collect();
    assert_eq!(summaries, ["grow a.txt", "add new.txt"]);
    let ids: Vec<String> = env.json(&["log", &name, "--json"])["commits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(ids.join("\n") + "\n", git(&repo, &["rev-list", &format!("{base}..{branch}")]));

    assert_eq!(loose_objects(&repo), objects, "looking at the work wrote objects into the user's repository");
    env.ok(&["down", &name, "--discard"]);
    env.assert_nothing_left_but_archives();
}

#[test]
fn merge_lands_on_the_users_branch_and_refuses_a_dirty_checkout_or_a_conflict() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("rv-merge");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    inside(&env, &name, TWO_COMMITS_AND_EDITS);
    let main = || git(&repo, &["rev-parse", "main"]);
    let before = main();

    // Uncommitted files land only when the user says so.
    let err = env.fails(&["merge", &name], 2);
    assert!(err.contains("uncommitted") && err.contains("--yes"), "{err}");
    // A dirty checkout is refused, and stays as it was.
    std::fs::write(repo.join(".gitignore"), "*.log\nmine\n").unwrap();
    let err = env.fails(&["merge", &name, "--yes"], 4);
    assert!(err.contains("checked out") && err.contains(".gitignore"), "{err}");
    assert_eq!(main(), before);
    assert_eq!(std::fs::read_to_string(repo.join(".gitignore")).unwrap(), "*.log\nmine\n");
    git(&repo, &["checkout", "-q", ".gitignore"]);
    // A conflict is refused, and changes nothing.
    std::fs::write(repo.join("a.txt"), "mine\n").unwrap();
    git(&repo, &["commit", "-qam", "user edits a.txt"]);
    let user = main();
    let err = env.fails(&["merge", &name, "--yes", "--squash"], 4);
    assert!(err.contains("conflicts") && err.contains("a.txt"), "{err}");
    assert_eq!(main(), user);
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    git(&repo, &["reset", "-q", "--hard", "HEAD~1"]);

    // --dry-run says what would land, and lands nothing.
    let dry = env.ok(&["merge", &name, "--squash", "--dry-run"]);
    assert!(dry.contains("would land 2 commits and 2 uncommitted files"), "{dry}");
    assert_eq!(main(), before);
    env.ok(&["merge", &name, "--squash", "--yes", "-m", "the agent's work"]);
    assert_eq!(git(&repo, &["log", "--format=%s", "-2", "main"]), "the agent's work\ninitial\n");
    // In the user's checkout, clean.
    assert_eq!(std::fs::read_to_string(repo.join("a.txt")).unwrap(), "original\nmore\nagain\n");
    assert_eq!(std::fs::read_to_string(repo.join("u.txt")).unwrap(), "untracked\n");
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert!(!repo.join("x.log").exists(), "an ignored file landed");

    // down finds nothing of it to archive.
    let dry = env.ok(&["down", &name, "--dry-run"]);
    assert!(dry.contains("nothing of the agent's to archive"), "{dry}");
    env.ok(&["down", &name]);
    assert_eq!(archive_refs(&repo), Vec::<String>::new());
    env.assert_nothing_left();
}

#[test]
fn a_plain_merge_fast_forwards_or_merges_and_rebase_copies_the_commits() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let (a, b) = (env.unique("rv-ff"), env.unique("rv-rebase"));
    for n in [&a, &b] {
        env.ok(&["up", n, "--git-worktree", repo.to_str().unwrap()]);
    }
    inside(&env, &a, "cd /workspace && echo a > fa.txt && git add fa.txt && git commit -qm 'a: one'");
    inside(&env, &b, "cd /workspace && echo b > fb.txt && git add fb.txt && git commit -qm 'b: one' && echo b2 >> fb.txt && git commit -qam 'b: two'");
    // Nothing moved main: a fast-forward onto the agent's own commit.
    let out = env.ok(&["merge", &a]);
    assert!(out.contains("fast-forward"), "{out}");
    assert_eq!(git(&repo, &["rev-parse", "main"]), git(&repo, &["rev-parse", &format!("forage-{a}")]));
    // main moved: --rebase copies b's two commits on top, in order.
    env.ok(&["merge", &b, "--rebase"]);
    assert_eq!(git(&repo, &["log", "--format=%s", "-3", "main"]), "b: two\nb: one\na: one\n");
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    for n in [&a, &b] {
        let dry = env.ok(&["down", n, "--dry-run"]);
        assert!(dry.contains("nothing of the agent's to archive"), "{n}: {dry}");
        env.ok(&["down", n]);
    }
    assert_eq!(archive_refs(&repo), Vec::<String>::new());
    env.assert_nothing_left();
}

#[test]
fn apply_leaves_the_work_uncommitted_and_diff_compares_two_sandboxes() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let (a, b) = (env.unique("rv-a"), env.unique("rv-b"));
    for n in [&a, &b] {
        env.ok(&["up", n, "--git-worktree", repo.to_str().unwrap()]);
    }
    inside(
        &env,
        &a,
        "cd /workspace && echo a > fa.txt && echo changed-by-a > a.txt && git add fa.txt && git commit -qm a",
    );
    inside(&env, &b, "cd /workspace && echo b > fb.txt");
    // Which did what: a's files against b's.
    let json = env.json(&["diff", &a, &b, "--json"]);
    let status: BTreeSet<(String, String)> = json["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap().to_owned(), f["status"].as_str().unwrap().to_owned()))
        .collect();
    let expected: BTreeSet<(String, String)> =
        [("a.txt", "modified"), ("fa.txt", "deleted"), ("fb.txt", "added")].map(|(p, s)| (p.into(), s.into())).into();
    assert_eq!(status, expected);
    // The patch's headers name the two sandboxes, not git's a/ and b/.
    let patch = env.ok(&["diff", &a, &b, "--no-pager"]);
    for header in [format!("diff --git {a}/a.txt {b}/a.txt"), format!("--- {a}/a.txt"), format!("+++ {b}/a.txt")] {
        assert!(patch.lines().any(|l| l == header), "{header:?} in:\n{patch}");
    }

    let head = git(&repo, &["rev-parse", "HEAD"]);
    env.ok(&["apply", &a]);
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head, "apply committed");
    assert_eq!(git(&repo, &["status", "--porcelain"]), " M a.txt\n?? fa.txt\n");
    assert_eq!(std::fs::read_to_string(repo.join("a.txt")).unwrap(), "changed-by-a\n");
    // Again: it no longer applies, and nothing changes.
    let err = env.fails(&["apply", &a], 4);
    assert!(err.contains("does not apply cleanly"), "{err}");
    assert_eq!(git(&repo, &["status", "--porcelain"]), " M a.txt\n?? fa.txt\n");
    for n in [&a, &b] {
        env.ok(&["down", n, "--discard"]);
    }
    env.assert_nothing_left_but_archives();
}

/// Files of `dir` (not its `.git`): what a refused command must leave as it was.
fn checkout_files(dir: &Path) -> Snapshot {
    snapshot(dir).into_iter().filter(|(p, ..)| !p.starts_with(".git")).collect()
}

#[test]
fn apply_refuses_files_in_the_way_of_the_ones_it_adds_and_changes_nothing() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("rv-in-way");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    inside(
        &env,
        &name,
        "cd /workspace && echo agent > fa.txt && mkdir d && echo agent > d/f.txt && echo agent > secret.env \
        && git add . && git commit -qm a && echo changed > a.txt",
    );
    // Each of: an untracked file where the work adds one, an ignored one (the
    // user's own exclude, which the agent's repository does not share), and an
    // untracked file where the work adds a directory.
    for (path, setup) in [("fa.txt", None), ("secret.env", Some("secret.env\n")), ("d", None)] {
        if let Some(exclude) = setup {
            std::fs::write(repo.join(".git/info/exclude"), exclude).unwrap();
        }
        std::fs::write(repo.join(path), "mine\n").unwrap();
        let (files, status) = (checkout_files(&repo), git(&repo, &["status", "--porcelain", "--ignored"]));
        let err = env.fails(&["apply", &name], 4);
        assert!(err.contains("does not apply cleanly") && err.contains("nothing was changed"), "{err}");
        assert!(err.contains(&format!("{path} is in the way")), "{path}: {err}");
        assert_eq!(checkout_files(&repo), files, "{path}: apply changed the checkout");
        assert_eq!(git(&repo, &["status", "--porcelain", "--ignored"]), status, "{path}");
        assert_eq!(std::fs::read_to_string(repo.join(path)).unwrap(), "mine\n");
        std::fs::remove_file(repo.join(path)).unwrap();
    }
    // Out of the way, it applies.
    env.ok(&["apply", &name]);
    assert_eq!(std::fs::read_to_string(repo.join("fa.txt")).unwrap(), "agent\n");
    env.ok(&["down", &name, "--discard"]);
    env.assert_nothing_left_but_archives();
}

/// Makes the archives of `name` in the index look `days` days old.
fn age_archives(env: &Env, name: &str, days: u64) {
    let path = env.home.join("archives").join(format!("{name}.json"));
    let mut index: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    for entry in index.as_array_mut().unwrap() {
        let at = entry["archived_at"].as_u64().unwrap();
        entry["archived_at"] = (at - days * 86_400).into();
    }
    std::fs::write(&path, serde_json::to_vec(&index).unwrap()).unwrap();
}

#[test]
fn archives_lists_what_down_kept_and_prune_deletes_only_what_it_listed() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let (old, young, moved) = (env.unique("rv-old"), env.unique("rv-young"), env.unique("rv-moved"));
    for n in [&old, &young, &moved] {
        env.ok(&["up", n, "--git-worktree", repo.to_str().unwrap()]);
        inside(&env, n, "cd /workspace && echo work > work.txt");
        env.ok(&["down", n]);
    }
    let listed = env.json(&["archives", "--json"]);
    assert_eq!(listed.as_array().unwrap().len(), 3, "{listed}");
    let text = env.ok(&["archives", &old]);
    assert!(text.contains(&old) && !text.contains(&young), "{text}");
    age_archives(&env, &old, 40);
    age_archives(&env, &moved, 40);
    // The user moved one archive ref: it is theirs now.
    let moved_ref = archive_refs(&repo).into_iter().find(|r| r.contains(&moved)).unwrap();
    git(&repo, &["update-ref", &moved_ref, "main"]);

    let err = env.fails(&["archives", "prune", "--older-than", "30d"], 2);
    assert!(err.contains("--yes"), "{err}");
    let dry = env.ok(&["archives", "prune", "--older-than", "30d", "--dry-run"]);
    assert!(dry.contains(&old) && dry.contains(&moved) && !dry.contains(&young), "{dry}");
    assert_eq!(archive_refs(&repo).len(), 3, "a dry run deleted");

    let out = env.run(&["archives", "prune", "--older-than", "30d", "--yes"]);
    assert_eq!(out.status.code(), Some(1), "one archive was kept: {}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&moved_ref) && err.contains("no longer points"), "{err}");
    let refs = archive_refs(&repo);
    assert!(!refs.iter().any(|r| r.contains(&old)), "{refs:?}");
    assert!(refs.iter().any(|r| r.contains(&young)) && refs.contains(&moved_ref), "{refs:?}");
    let names: Vec<String> = env
        .json(&["archives", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(!names.contains(&old) && names.contains(&young) && names.contains(&moved), "{names:?}");
}

#[test]
fn wait_and_list_tell_which_agent_needs_you() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let (quiet, dead, busy) = (env.unique("rv-quiet"), env.unique("rv-dead"), env.unique("rv-busy"));
    for n in [&quiet, &dead, &busy] {
        env.ok(&["up", n, "--git-worktree", repo.to_str().unwrap()]);
    }
    kill_everything_inside(&env, &dead);
    inside(&env, &busy, "cd /workspace && echo one > one.txt && echo two > two.txt");

    let out = env.run(&["wait", &dead, "--until", "exited", "--timeout", "60s"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("exited with code 137"), "{}", describe(&out));
    let out = env.run(&["wait", &quiet, "--until", "idle", "--idle-for", "1s", "--timeout", "60s"]);
    assert_eq!(out.status.code(), Some(8), "{}", describe(&out));
    let out = env.run(&["wait", &quiet, "--until", "exited", "--timeout", "1s"]);
    assert_eq!(out.status.code(), Some(9), "{}", describe(&out));
    // Idle, as the timeout says, not busy.
    let out = env.run(&["wait", &quiet, "--until", "exited", "--idle-for", "1s", "--timeout", "1s"]);
    assert_eq!(out.status.code(), Some(9), "{}", describe(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.starts_with(&format!("timed out: no agent exited; {quiet} is idle (nothing printed for ")), "{said}");
    let out = env.run(&["wait", &quiet, "--until", "exited", "--idle-for", "1s", "--timeout", "1s", "--json"]);
    let waited: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (waited["agent"].as_str(), waited["idle"][0]["sandbox"].as_str()),
        (Some("timed-out"), Some(quiet.as_str()))
    );
    // Several at once: the first that needs you, by name. (quiet is not idle
    // yet for an hour: on a loaded machine it has been quiet for 30 s, the
    // default, by now.)
    let out = env.run(&["wait", &quiet, &dead, "--idle-for", "1h", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let waited: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((waited["sandbox"].as_str(), waited["agent"].as_str()), (Some(dead.as_str()), Some("exited")));

    let rows = env.json(&["list", "--json"]);
    let row = |n: &str| rows.as_array().unwrap().iter().find(|r| r["name"] == n).unwrap().clone();
    assert_eq!((row(&dead)["agent"].as_str(), row(&dead)["exit_code"].as_i64()), (Some("exited"), Some(137)));
    assert!(matches!(row(&quiet)["agent"].as_str(), Some("working" | "idle")), "{}", row(&quiet));
    assert_eq!((row(&busy)["dirty"].as_u64(), row(&busy)["ahead"].as_u64()), (Some(2), Some(0)));
    let table = env.ok(&["list"]);
    assert!(table.contains("exited (137)"), "{table}");
    // Stopped by forage, not an agent that exited with the stop signal's code;
    // started again, running.
    env.ok(&["stop", &busy]);
    let rows = env.json(&["list", "--json"]);
    let stopped = rows.as_array().unwrap().iter().find(|r| r["name"] == busy.as_str()).unwrap().clone();
    assert_eq!(
        (stopped["status"].as_str(), stopped["agent"].as_str(), stopped["exit_code"].as_i64()),
        (Some("stopped"), Some("stopped"), None),
        "{stopped}"
    );
    let table = env.ok(&["list"]);
    let line = table.lines().find(|l| l.contains(busy.as_str())).unwrap();
    assert!(line.contains(" stopped ") && !line.contains("exited"), "{table}");
    let status = env.ok(&["status", &busy]);
    assert!(status.contains("status:     stopped\n") && !status.contains("exit code"), "{status}");
    assert_eq!(env.json(&["status", &busy, "--json"])["status"], "stopped");
    let line = env.ok(&["list"]).lines().find(|l| l.contains(dead.as_str())).unwrap().to_owned();
    assert!(line.contains("exited (137)"), "{line}");
    env.ok(&["start", &busy]);
    assert_eq!(env.json(&["status", &busy, "--json"])["status"], "running");
    for n in [&quiet, &dead, &busy] {
        env.ok(&["down", n, "--discard"]);
    }
    env.assert_nothing_left_but_archives();
}

#[test]
fn jj_work_is_diffed_logged_and_landed_with_its_change_ids() {
    let env = Env::new();
    let repo = jj_repo(&env, "repo", false);
    let (name, other) = (env.unique("rv-jj"), env.unique("rv-jj-apply"));
    for n in [&name, &other] {
        env.ok(&["up", n, "--jj", repo.to_str().unwrap()]);
    }
    inside(&env, &name, "cd /workspace && echo new > new.txt && jj describe -m 'add new.txt' >/dev/null 2>&1 && jj new >/dev/null 2>&1 && echo more >> a.txt");
    inside(&env, &other, "cd /workspace && echo applied > applied.txt");

    assert_eq!(lines(&env.ok(&["diff", &name, "--name-only"])), lines("a.txt\nnew.txt\n"));
    assert_eq!(lines(&env.ok(&["diff", &name, "--name-only", "--committed"])), lines("new.txt\n"));
    assert_eq!(lines(&env.ok(&["diff", &name, "--name-only", "--uncommitted"])), lines("a.txt\n"));
    let log = env.json(&["log", &name, "--json"]);
    let described = log["commits"].as_array().unwrap().iter().find(|c| c["summary"] == "add new.txt").unwrap().clone();
    let change_id = described["change_id"].as_str().unwrap().to_owned();

    env.ok(&["merge", &name, "--yes"]);
    // main moved onto the agent's work, whose change keeps its id.
    let on_main =
        jj(&repo, &["log", "--no-graph", "-r", "::main & description(exact:\"add new.txt\n\")", "-T", "change_id"]);
    assert_eq!(on_main.trim(), change_id);
    assert_eq!(jj(&repo, &["file", "show", "-r", "main", "root:a.txt"]), "base\nmore\n");
    let dry = env.ok(&["down", &name, "--dry-run"]);
    assert!(dry.contains("nothing of the agent's to archive"), "{dry}");
    env.ok(&["down", &name]);
    assert!(!jj(&repo, &["bookmark", "list"]).contains("forage/archive"), "down archived landed work");

    // apply: the other sandbox's file in the user's working copy, which jj takes in.
    env.ok(&["apply", &other]);
    assert_eq!(std::fs::read_to_string(repo.join("applied.txt")).unwrap(), "applied\n");
    assert!(jj(&repo, &["diff", "--name-only"]).contains("applied.txt"));

    // main moved meanwhile: --squash makes one new change on it, and jj gets
    // to know it without a bookmark of forage's left behind.
    jj(&repo, &["new", "main", "-m", "user's own"]);
    std::fs::write(repo.join("user.txt"), "mine\n").unwrap();
    jj(&repo, &["bookmark", "set", "main", "-r", "@"]);
    jj(&repo, &["new"]);
    inside(&env, &other, "cd /workspace && jj describe -m 'the other change' >/dev/null 2>&1");
    env.ok(&["merge", &other, "--squash", "--yes", "-m", "squashed"]);
    let main = jj(&repo, &["log", "--no-graph", "-r", "main | main-", "-T", "description.first_line() ++ \"\\n\""]);
    assert_eq!(main, "squashed\nuser's own\n");
    assert_eq!(jj(&repo, &["file", "show", "-r", "main", "root:applied.txt"]), "applied\n");
    assert!(
        !jj(&repo, &["bookmark", "list", "--all"]).contains("forage-landing"),
        "{}",
        jj(&repo, &["bookmark", "list", "--all"])
    );
    let dry = env.ok(&["down", &other, "--dry-run"]);
    assert!(dry.contains("nothing of the agent's to archive"), "{dry}");
    env.ok(&["down", &other]);
    assert!(!jj(&repo, &["bookmark", "list"]).contains("forage/archive"), "down archived landed work");
    env.assert_nothing_left_but_archives();
}

/// `list` remembers each git sandbox's DIRTY count between runs (a memo in the
/// sandbox's private directory, which no container mounts) and uses it only
/// while nothing that decided it changed: every edit the agent makes shows at
/// the next `list`, even one that keeps a file's size, an ignore rule, or a
/// file put back exactly as it was. Checked against `git status` run inside.
#[test]
fn list_remembers_dirty_counts_only_while_nothing_changed() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("rv-memo");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    let memo = env.home.join("private").join(&name).join("dirty-memo");
    let dirty = || {
        let rows = env.json(&["list", "--json"]);
        rows.as_array().unwrap().iter().find(|r| r["name"] == name.as_str()).unwrap()["dirty"].as_u64().unwrap()
    };
    let git_says = || {
        let out = inside(&env, &name, "cd /workspace && git status --porcelain -uall | wc -l");
        out.trim().parse::<u64>().unwrap()
    };
    // Only times older than a second are remembered (a change within the same
    // clock tick could leave a file's stat data as it was).
    let settle = || std::thread::sleep(std::time::Duration::from_millis(1100));

    settle();
    assert_eq!(dirty(), 0);
    assert!(memo.is_file(), "list made no memo of a settled worktree");
    assert_eq!(dirty(), 0, "from the memo");
    let out = inside(&env, &name, "find / -name dirty-memo 2>/dev/null | wc -l");
    assert_eq!(out.trim(), "0", "the agent can reach the memo");

    let steps: &[(&str, u64)] = &[
        ("printf 'ORIGINAL\\n' > a.txt", 1),
        ("printf 'original\\n' > a.txt", 0),
        ("echo x > new.txt", 1),
        ("echo x > debug.log", 1),
        ("printf '*.log\\nnew.txt\\n' > .gitignore", 1),
        ("mkdir -p sub/deeper && echo y > sub/deeper/z.txt", 2),
        ("chmod +x a.txt", 3),
        ("chmod -x a.txt && rm -r sub new.txt && printf '*.log\\n' > .gitignore", 0),
    ];
    for (step, expected) in steps {
        inside(&env, &name, &format!("cd /workspace && {step}"));
        assert_eq!(git_says(), *expected, "{step}: git inside disagrees with the test");
        assert_eq!(dirty(), *expected, "{step}: right after");
        settle();
        assert_eq!(dirty(), *expected, "{step}: once settled");
        assert_eq!(dirty(), *expected, "{step}: from the memo");
    }

    env.ok(&["down", &name, "--discard"]);
    env.assert_nothing_left_but_archives();
}

/// `list` right after the agent commits, with no sync between: AHEAD counts
/// the agent's commits in its own repository and DIRTY what `git status`
/// inside calls changed (against the agent's HEAD, not the last sync's tip),
/// and a memo of the count made before a commit is not used after it.
/// jj: `list` never shows the last sync's counts as current once the agent's
/// jj recorded more work: AHEAD and DIRTY are `?` with why (`ahead_unknown`)
/// until a sync counts it, and exact again after.
#[test]
fn list_marks_a_jj_sandboxs_counts_pending_once_its_jj_recorded_more_work() {
    let env = Env::new();
    let repo = jj_repo(&env, "repo", false);
    let name = env.unique("rv-jj-count");
    env.ok(&["up", &name, "--jj", repo.to_str().unwrap()]);
    let row = || {
        let rows = env.json(&["list", "--json"]);
        rows.as_array().unwrap().iter().find(|r| r["name"] == name.as_str()).unwrap().clone()
    };
    let fresh = row();
    assert_eq!((fresh["ahead"].as_u64(), fresh["dirty"].as_u64()), (Some(0), Some(0)), "a new sandbox: {fresh}");
    inside(&env, &name, "cd /workspace && echo one > one.txt && jj commit -m one >/dev/null 2>&1");
    // Never synced yet: not 0 and 0.
    let unsynced = row();
    assert!(unsynced["ahead_unknown"].as_str().is_some_and(|w| w.contains("since up or the last sync")), "{unsynced}");
    env.ok(&["sync", &name]);
    let synced = row();
    assert_eq!((synced["ahead"].as_u64(), synced["dirty"].as_u64()), (Some(1), Some(0)), "{synced}");
    assert!(synced["ahead_unknown"].is_null(), "{synced}");

    // The agent commits again, which took effect inside (jj log there shows it) ...
    inside(&env, &name, "cd /workspace && echo two > two.txt && jj commit -m two >/dev/null 2>&1");
    let log =
        inside(&env, &name, "cd /workspace && jj log --no-graph -r 'description(exact:\"two\n\")' -T description");
    assert_eq!(log, "two\n", "the second commit was made inside");
    // ... and `list` says it cannot count it yet, rather than 1 and 0.
    let pending = row();
    assert!(pending["ahead"].is_null() && pending["dirty"].is_null(), "{pending}");
    assert!(pending["ahead_unknown"].as_str().unwrap().contains("since up or the last sync"), "{pending}");
    let table = env.ok(&["list"]);
    let line = table.lines().find(|l| l.contains(name.as_str())).unwrap();
    assert!(line.split_whitespace().collect::<Vec<_>>().windows(2).any(|w| w == ["?", "?"]), "{table}");
    env.ok(&["sync", &name]);
    let counted = row();
    assert_eq!((counted["ahead"].as_u64(), counted["dirty"].as_u64()), (Some(2), Some(0)), "{counted}");
    let seen = inside(&env, &name, "find / -name initial-working-copy 2>/dev/null | wc -l");
    assert_eq!(seen.trim(), "0", "the agent cannot reach what list compares with");
    env.ok(&["down", &name, "--discard"]);
    env.assert_nothing_left();
}

#[test]
fn list_counts_the_agents_commits_and_files_without_a_sync() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("rv-count");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    let counts = || {
        let rows = env.json(&["list", "--json"]);
        let row = rows.as_array().unwrap().iter().find(|r| r["name"] == name.as_str()).unwrap().clone();
        (row["ahead"].as_u64(), row["dirty"].as_u64())
    };
    let git_says = || {
        let out = inside(&env, &name, "cd /workspace && git status --porcelain -uall | wc -l");
        out.trim().parse::<u64>().unwrap()
    };
    let host_tip = || git(&repo, &["rev-parse", &format!("forage-{name}")]);
    let before = host_tip();

    inside(&env, &name, TWO_COMMITS_AND_EDITS);
    assert_eq!(git_says(), 2, "a.txt and u.txt, says git inside");
    assert_eq!(counts(), (Some(2), Some(2)), "right after the commits");
    // Settled, so that a memo is made; then a commit that changes no file of
    // the worktree, only what they are compared with.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(counts(), (Some(2), Some(2)), "once settled");
    inside(&env, &name, "cd /workspace && git add u.txt && git commit -qm 'add u.txt'");
    assert_eq!(counts(), (Some(3), Some(1)), "after a third commit");
    let table = env.ok(&["list"]);
    let line = table.lines().find(|l| l.contains(name.as_str())).unwrap();
    assert!(line.split_whitespace().collect::<Vec<_>>().windows(2).any(|w| w == ["3", "1"]), "{table}");
    assert_eq!(host_tip(), before, "list synced");

    // A sync agrees.
    env.ok(&["sync", &name]);
    assert_ne!(host_tip(), before);
    assert_eq!(counts(), (Some(3), Some(1)), "after a sync");
    env.ok(&["down", &name, "--discard"]);
    env.assert_nothing_left_but_archives();
}

/// The agent chooses how many commits there are and what its refs hold:
/// `list` reads at most a thousand unsynced commits (then shows `1000+`), and
/// a branch that is garbage, a symlink, or names a commit `list` cannot read
/// is `?` with why in `--json`, never an error or another sandbox's count.
#[test]
fn list_bounds_what_it_reads_of_the_agents_repository() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("rv-bound");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    let row = || {
        let rows = env.json(&["list", "--json"]);
        rows.as_array().unwrap().iter().find(|r| r["name"] == name.as_str()).unwrap().clone()
    };
    inside(
        &env,
        &name,
        "cd /workspace && i=0; while [ $i -lt 1005 ]; do git commit -q --allow-empty -m c$i; i=$((i+1)); done",
    );
    let r = row();
    assert_eq!(
        (r["ahead"].as_u64(), r["ahead_at_least"].as_bool(), r["dirty"].as_u64()),
        (Some(1000), Some(true), Some(0)),
        "{r}"
    );
    let table = env.ok(&["list"]);
    assert!(table.lines().any(|l| l.contains(name.as_str()) && l.contains(" 1000+ ")), "{table}");

    let branch = format!("/forage/git/refs/heads/forage-{name}");
    let cases = [
        ("garbage", format!("echo garbage > {branch}"), "not a commit id"),
        ("a symlink", format!("rm {branch} && ln -s /workspace/a.txt {branch}"), "symlink"),
        (
            "a missing commit",
            format!("rm {branch} && echo {} > {branch}", "1".repeat(40)),
            "not among the agent's loose objects",
        ),
    ];
    for (what, script, says) in cases {
        inside(&env, &name, &script);
        let r = row();
        assert!(r["ahead"].is_null() && r["ahead_unknown"].as_str().unwrap_or("").contains(says), "{what}: {r}");
        let out = env.run(&["list"]);
        assert_eq!(out.status.code(), Some(0), "{what}: {}", describe(&out));
        let table = String::from_utf8_lossy(&out.stdout);
        let line = table.lines().find(|l| l.contains(name.as_str())).unwrap();
        assert!(line.contains(" ? "), "{what}: {table}");
    }
    env.ok(&["down", &name, "--discard"]);
}

/// The number a counter file inside sandbox `name` holds (0 when it has none
/// yet, or is being rewritten).
fn counter(env: &Env, name: &str, file: &str) -> u64 {
    inside(env, name, &format!("cat {file} 2>/dev/null; true")).trim().parse().unwrap_or(0)
}

/// `merge A --into feature-b`, where `feature-b` is running sandbox B's
/// branch, would check A's files out in B's worktree while B's agent swaps a
/// directory A's work writes into for a symlink to a host directory. Refused,
/// as is a branch checked out in the worktree of a sandbox of another
/// FORAGE_HOME; nothing of A's lands anywhere.
#[test]
fn merge_never_checks_out_where_an_agent_writes() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let (a, b) = (env.unique("rv-to-a"), env.unique("rv-to-b"));
    env.ok(&["up", &b, "--git-worktree", repo.to_str().unwrap(), "--branch", "feature-b"]);
    env.ok(&["up", &a, "--git-worktree", repo.to_str().unwrap()]);
    inside(
        &env,
        &a,
        "cd /workspace && mkdir d && echo from-a > d/x.txt && echo from-a > fa.txt && git add . && git commit -qm a",
    );
    let outside = env.mkdir("outside");
    let worktree_b = env.home.join("workspaces").join(&b);
    let checkout = checkout_files(&repo);

    // B's agent plants, over and over, a symlink to a host directory where A's work adds `d/`.
    let plant = format!(
        "cd /workspace && (i=0; while :; do rm -rf d; ln -s {} d; i=$((i+1)); echo $i > /tmp/planted; done) \
        >/dev/null 2>&1 </dev/null & echo $! > /tmp/planter",
        outside.display()
    );
    inside(&env, &b, &plant);
    assert!(eventually(30, || counter(&env, &b, "/tmp/planted") > 100), "B's agent planted nothing");
    assert!(
        eventually(30, || std::fs::read_link(worktree_b.join("d")).is_ok_and(|t| t == outside)),
        "B's symlink never showed in its worktree on the host"
    );
    let feature_b = git(&repo, &["rev-parse", "feature-b"]);

    for args in [vec!["merge", &a, "--into", "feature-b", "--dry-run"], vec!["merge", &a, "--into", "feature-b"]] {
        let err = env.fails(&args, 4);
        assert!(err.contains(&format!("\"feature-b\" is the branch of sandbox {b}")), "{err}");
        assert!(err.contains("nothing was changed") && err.contains(&format!("forage-ctl down {b}")), "{err}");
    }
    let planted = counter(&env, &b, "/tmp/planted");
    assert!(
        eventually(30, || counter(&env, &b, "/tmp/planted") > planted),
        "B's agent stopped planting during the merge"
    );
    inside(&env, &b, "kill $(cat /tmp/planter)");
    assert_eq!(git(&repo, &["rev-parse", "feature-b"]), feature_b);
    assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "A's files reached the host directory");
    assert!(!worktree_b.join("fa.txt").exists(), "A's files reached B's worktree");
    assert_eq!(checkout_files(&repo), checkout);

    // A sandbox of another FORAGE_HOME: its worktree is found in the repository.
    let other = Env::new();
    let c = other.unique("rv-to-c");
    other.ok(&["up", &c, "--git-worktree", repo.to_str().unwrap(), "--branch", "feature-c"]);
    let feature_c = git(&repo, &["rev-parse", "feature-c"]);
    let err = env.fails(&["merge", &a, "--into", "feature-c"], 4);
    let worktree_c = other.home.join("workspaces").join(&c);
    assert!(err.contains(&format!("feature-c is checked out in {}", worktree_c.display())), "{err}");
    assert!(err.contains(&format!("the worktree of a forage sandbox (worktree forage-{c})")), "{err}");
    assert_eq!(git(&repo, &["rev-parse", "feature-c"]), feature_c);
    assert!(!worktree_c.join("fa.txt").exists(), "A's files reached C's worktree");
    other.ok(&["down", &c, "--discard"]);

    // On a branch of the user's, it lands.
    git(&repo, &["branch", "mine", "main"]);
    env.ok(&["merge", &a, "--into", "mine"]);
    assert_eq!(git(&repo, &["rev-parse", "mine"]), git(&repo, &["rev-parse", &format!("forage-{a}")]));
    for n in [&a, &b] {
        env.ok(&["down", n, "--discard"]);
    }
    env.assert_nothing_left_but_archives();
}

/// A direct sandbox over the user's checkout (or a directory inside it)
/// writes the files `merge` and `apply` would write: both are refused,
/// naming it, and the checkout stays as it was.
#[test]
fn merge_and_apply_refuse_a_checkout_a_direct_sandbox_writes() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let (a, d, e) = (env.unique("rv-wr-a"), env.unique("rv-wr-d"), env.unique("rv-wr-e"));
    env.ok(&["up", &a, "--git-worktree", repo.to_str().unwrap()]);
    inside(&env, &a, "cd /workspace && echo from-a > fa.txt && git add . && git commit -qm a");
    // A direct sandbox over the main checkout is refused outright while A
    // borrows the repository's objects (its agent could swap them).
    let err = env.fails(&["up", &d, "--workspace", repo.to_str().unwrap()], 4);
    assert!(err.contains(".git/objects") && err.contains(&a), "{err}");
    // Over a linked worktree of the user's, it is allowed; merging into the
    // branch checked out there is not.
    let linked = env.path("repo-feature");
    git(&repo, &["worktree", "add", "-q", "-b", "feature", linked.to_str().unwrap()]);
    env.ok(&["up", &d, "--workspace", linked.to_str().unwrap()]);
    inside(&env, &d, "echo planted > /workspace/planted.txt");
    assert_eq!(
        std::fs::read_to_string(linked.join("planted.txt")).unwrap(),
        "planted\n",
        "D does not write the checkout"
    );
    let (feature, files) = (git(&repo, &["rev-parse", "feature"]), checkout_files(&linked));
    let err = env.fails(&["merge", &a, "--into", "feature"], 4);
    let shown = linked.display();
    assert!(err.contains(&format!("feature is checked out in {shown}")), "{err}");
    assert!(
        err.contains(&format!("which is the workspace of sandbox {d}")) && err.contains("nothing was changed"),
        "{err}"
    );
    assert_eq!((git(&repo, &["rev-parse", "feature"]), checkout_files(&linked)), (feature, files));
    env.ok(&["down", &d]);
    let (main, files) = (git(&repo, &["rev-parse", "main"]), checkout_files(&repo));

    // A direct workspace inside the checkout: the checkout holds it.
    std::fs::create_dir(repo.join("sub")).unwrap();
    env.ok(&["up", &e, "--workspace", repo.join("sub").to_str().unwrap()]);
    let err = env.fails(&["merge", &a], 4);
    assert!(err.contains(&format!("which holds the workspace of sandbox {e}")), "{err}");
    let err = env.fails(&["apply", &a], 4);
    assert!(err.contains(&format!("which holds the workspace of sandbox {e}")), "{err}");
    assert_eq!((git(&repo, &["rev-parse", "main"]), checkout_files(&repo)), (main, files));
    env.ok(&["down", &e]);

    // No sandbox writes it any more: the work lands.
    env.ok(&["merge", &a]);
    assert_eq!(std::fs::read_to_string(repo.join("fa.txt")).unwrap(), "from-a\n");
    env.ok(&["down", &a]);
    env.assert_nothing_left_but_archives();
}

/// What a refused merge must leave exactly as it was: the checkout's files,
/// its index byte for byte, and what git says of it (untracked and ignored
/// files too; asked without letting git refresh the index).
fn checkout_state(repo: &Path) -> (Snapshot, Vec<u8>, String) {
    let index = std::fs::read(repo.join(".git/index")).unwrap();
    let status = git(repo, &["--no-optional-locks", "status", "--porcelain", "--ignored", "-uall"]);
    (checkout_files(repo), index, status)
}

/// The user commits, on the host, what the index of sandbox worktree `wt`
/// holds after `ops` (`git update-index` arguments), with git's plumbing:
/// the sandbox's branch moves to it, and its files in `wt` are the caller's.
fn commit_on_the_host(wt: &Path, ops: &[&[&str]]) {
    for op in ops {
        let mut args = vec!["-c", "core.protectNTFS=false", "update-index"];
        args.extend_from_slice(op);
        git(wt, &args);
    }
    let tree = git(wt, &["write-tree"]);
    let commit = git(wt, &["commit-tree", tree.trim(), "-p", "HEAD", "-m", "from the host"]);
    git(wt, &["update-ref", "HEAD", commit.trim()]);
}

/// Work whose checkout git refuses half way (a submodule whose
/// `.gitmodules` libgit2 cannot parse, read only after every other file is
/// written), or before a file is written (a symlink named like
/// `.gitmodules` on NTFS), or that would overwrite an ignored file, is
/// refused before anything of the user's changes, whatever made the commit.
#[test]
fn a_merge_git_would_fail_half_way_is_refused_before_a_file_changes() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    std::fs::write(repo.join("b.txt"), "b\n").unwrap();
    git(&repo, &["add", "b.txt"]);
    git(&repo, &["commit", "-qm", "b"]);
    let name = env.unique("rv-half");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    std::fs::write(repo.join("mine.txt"), "untracked\n").unwrap();
    std::fs::write(repo.join("debug.log"), "ignored\n").unwrap();
    std::fs::write(repo.join(".git/info/exclude"), "*.env\n").unwrap();
    std::fs::write(repo.join("secret.env"), "the user's\n").unwrap();
    let base = git(&repo, &["rev-parse", "main"]);
    let (wt, branch) = (env.home.join("workspaces").join(&name), format!("forage-{name}"));

    // A change to a.txt, b.txt deleted, c.txt added, and a submodule whose
    // .gitmodules does not parse.
    std::fs::write(wt.join("a.txt"), "hostile\n").unwrap();
    std::fs::remove_file(wt.join("b.txt")).unwrap();
    std::fs::write(wt.join("c.txt"), "c\n").unwrap();
    std::fs::write(wt.join(".gitmodules"), "[submodule\n").unwrap();
    std::fs::create_dir(wt.join("sub")).unwrap();
    let gitlink = format!("160000,{},sub", base.trim());
    commit_on_the_host(
        &wt,
        &[&["--add", "a.txt", "c.txt", ".gitmodules"], &["--remove", "b.txt"], &["--add", "--cacheinfo", &gitlink]],
    );
    let tree = git(&repo, &["ls-tree", &branch]);
    assert!(tree.contains(&format!("160000 commit {}\tsub", base.trim())) && tree.contains(".gitmodules"), "{tree}");
    assert_eq!(git(&repo, &["show", &format!("{branch}:.gitmodules")]), "[submodule\n");

    let before = checkout_state(&repo);
    let err = env.fails(&["merge", &name], 4);
    assert!(err.contains("git's checkout refuses the work's files (failed to parse config file"), "{err}");
    assert!(err.contains("nothing was changed"), "{err}");
    assert_eq!(checkout_state(&repo), before, "the checkout changed");
    assert_eq!(git(&repo, &["rev-parse", "main"]), base);

    // A symlink git refuses to check out, named as `.gitmodules` on NTFS.
    std::fs::remove_file(wt.join(".gitmodules")).unwrap();
    std::fs::remove_dir(wt.join("sub")).unwrap();
    std::os::unix::fs::symlink("a.txt", wt.join("gitmod~1")).unwrap();
    std::fs::write(env.path("target"), "a.txt").unwrap();
    let target = git(&repo, &["hash-object", "-w", env.path("target").to_str().unwrap()]);
    let link = format!("120000,{},gitmod~1", target.trim());
    commit_on_the_host(&wt, &[&["--force-remove", "sub", ".gitmodules"], &["--add", "--cacheinfo", &link]]);
    assert!(git(&repo, &["ls-tree", &branch]).contains("120000 blob"), "no symlink on {branch}");
    let err = env.fails(&["merge", &name], 4);
    assert!(err.contains("invalid path 'gitmod~1'") && err.contains("nothing was changed"), "{err}");
    assert_eq!(checkout_state(&repo), before, "the checkout changed");

    // A file the user's git ignores, where the work adds one.
    std::fs::remove_file(wt.join("gitmod~1")).unwrap();
    std::fs::write(wt.join("secret.env"), "the agent's\n").unwrap();
    commit_on_the_host(&wt, &[&["--force-remove", "gitmod~1"], &["--add", "secret.env"]]);
    let err = env.fails(&["merge", &name], 4);
    assert!(err.contains("\"secret.env\" is in the way") && err.contains("nothing was changed"), "{err}");
    assert_eq!(checkout_state(&repo), before, "the checkout changed");
    assert_eq!(std::fs::read_to_string(repo.join("secret.env")).unwrap(), "the user's\n");

    // Out of the way, it lands whole.
    std::fs::remove_file(repo.join("secret.env")).unwrap();
    env.ok(&["merge", &name]);
    assert_eq!(git(&repo, &["rev-parse", "main"]), git(&repo, &["rev-parse", &branch]));
    assert_eq!(std::fs::read_to_string(repo.join("secret.env")).unwrap(), "the agent's\n");
    assert_eq!(git(&repo, &["status", "--porcelain"]), "?? mine.txt\n");
    env.ok(&["down", &name]);
    env.assert_nothing_left_but_archives();
}

/// `forage-ctl ARGS` in a mount namespace of its own, where `dir` is mounted
/// read-only over itself (a fault no check before a checkout can foresee,
/// which root, who runs the tests, cannot write through).
fn with_read_only(env: &Env, dir: &Path, args: &[&str]) -> std::process::Output {
    const SCRIPT: &str = r#"d=$1; shift
        mount --bind "$d" "$d" && mount -o remount,bind,ro "$d" || exit 98
        if touch "$d/.probe" 2>/dev/null; then echo "$d is still writable" >&2; exit 99; fi
        exec "$@""#;
    let template = env.cmd(args);
    let mut cmd = std::process::Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "sh", "-c", SCRIPT, "sh"]).arg(dir).arg(BIN).args(args);
    for (key, value) in template.get_envs() {
        match value {
            Some(v) => cmd.env(key, v),
            None => cmd.env_remove(key),
        };
    }
    cmd.stdin(std::process::Stdio::null()).output().unwrap()
}

/// A checkout that fails half way for a reason no rehearsal foresees (here a
/// directory of the checkout that cannot be written) puts back every file
/// it had changed, deletes those it had added, restores the index byte for
/// byte, and says so; the branch does not move.
#[test]
fn a_checkout_that_fails_half_way_puts_every_file_back() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    std::fs::create_dir(repo.join("ro")).unwrap();
    std::fs::write(repo.join("ro/f.txt"), "f\n").unwrap();
    std::fs::write(repo.join("b.txt"), "b\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "more"]);
    let name = env.unique("rv-back");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    inside(
        &env,
        &name,
        "cd /workspace && echo changed > a.txt && git rm -q b.txt && echo c > c.txt && mkdir -p new/deep \
        && echo f > new/deep/f.txt && echo changed > ro/f.txt && git add -A && git commit -qm work",
    );
    std::fs::write(repo.join("mine.txt"), "untracked\n").unwrap();
    std::fs::write(repo.join("debug.log"), "ignored\n").unwrap();
    let (main, before) = (git(&repo, &["rev-parse", "main"]), checkout_state(&repo));

    let out = with_read_only(&env, &repo.join("ro"), &["merge", &name]);
    assert_eq!(out.status.code(), Some(6), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ro/f.txt' for writing: Read-only file system"), "{err}");
    // What the checkout had written before it failed, each put back.
    let written = ["\"a.txt\"", "\"b.txt\"", "\"c.txt\"", "\"new/deep/f.txt\""].join(", ");
    assert!(
        err.contains(&format!(
            "main did not move, and every file the checkout had changed was put back as it was ({written})"
        )),
        "{err}"
    );
    assert_eq!(checkout_state(&repo), before, "the checkout was not put back");
    assert!(!repo.join("new").exists(), "a directory the checkout made was left");
    assert_eq!(git(&repo, &["rev-parse", "main"]), main);

    // Writable again, it lands.
    env.ok(&["merge", &name]);
    assert_eq!(std::fs::read_to_string(repo.join("ro/f.txt")).unwrap(), "changed\n");
    assert_eq!(git(&repo, &["status", "--porcelain"]), "?? mine.txt\n");
    env.ok(&["down", &name]);
    env.assert_nothing_left_but_archives();
}

#[test]
fn merge_and_apply_name_what_they_did_not_read() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("rv-unread");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    let said = inside(&env, &name, "cd /workspace && echo new > new.txt && mkfifo pipe && [ -p pipe ] && echo MADE");
    assert_eq!(said, "MADE\n");
    for args in
        [vec!["merge", name.as_str(), "--dry-run", "--yes"], vec!["merge", name.as_str(), "--dry-run", "--json"]]
    {
        let out = env.run(&args);
        assert!(out.status.success(), "{}", describe(&out));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("not read, landed as committed: pipe"), "{args:?}: {}", describe(&out));
    }
    let plan = env.json(&["merge", &name, "--dry-run", "--json"]);
    assert!(plan["not_read"][0].as_str().unwrap().starts_with("pipe"), "{plan}");
    let out = env.run(&["apply", &name]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not read, applied as committed: pipe"),
        "{}",
        describe(&out)
    );
    assert_eq!(std::fs::read_to_string(repo.join("new.txt")).unwrap(), "new\n");
    env.ok(&["down", &name, "--discard"]);
    env.assert_nothing_left_but_archives();
}
