//! jj mode against a hostile agent (SPEC §3a, docs/guarantees.md §3): each attack
//! made from inside the container through `forage-ctl exec`, then what the user
//! and forage do on the host, and proof that the attack gained nothing.

use std::path::Path;

use crate::jj::{bookmarks, jj, jj_repo};
use crate::support::*;

fn inside(env: &Env, name: &str, script: &str) -> String {
    env.ok(&["exec", name, "--", "sh", "-c", script])
}

/// The user's side of the repository: their working-copy commit, the files of
/// their checkout, and every bookmark but the ones forage makes.
fn users_state(repo: &Path) -> (String, Snapshot, String) {
    let wc = jj(repo, &["log", "-r", "@", "--no-graph", "-T", "commit_id ++ \" \" ++ change_id"]);
    let files = snapshot(repo).into_iter().filter(|(p, ..)| !p.starts_with(".jj") && !p.starts_with(".git")).collect();
    let marks = bookmarks(repo).lines().filter(|l| !l.starts_with("forage")).map(|l| format!("{l}\n")).collect();
    (wc, files, marks)
}

/// The operations run on the repository since `before` (ids, newest first).
fn new_operations(repo: &Path, before: &str) -> Vec<String> {
    let log = jj(repo, &["op", "log", "--no-graph", "-T", "id ++ \" \" ++ description ++ \"\\n\""]);
    log.lines().take_while(|l| !before.lines().any(|b| l.starts_with(b))).map(str::to_owned).collect()
}

/// Runs `script` inside and returns what it printed (stdout and stderr). Each
/// attack step of a script checks its own effect, inside, and prints
/// `ok: STEP` when it took effect: a step that did not happen must not pass
/// for a defence that held. Every one of `steps` must have printed so.
fn attack(env: &Env, name: &str, script: &str, steps: &[&str]) -> String {
    let out = inside(env, name, &format!("exec 2>&1\n{script}\ntrue"));
    for step in steps {
        assert!(out.contains(&format!("ok: {step}\n")), "attack step {step:?} did not take effect:\n{out}");
    }
    out
}

/// The change id of `rev` in the repository.
fn change_id(repo: &Path, rev: &str) -> String {
    jj(repo, &["log", "-r", rev, "--no-graph", "-T", "change_id"])
}

#[test]
fn nothing_the_agent_plants_runs_on_the_host_or_touches_the_users_repository() {
    for colocate in [true, false] {
        let env = Env::new();
        let repo = jj_repo(&env, "repo", colocate);
        let name = env.unique("jjx");
        let marker = env.path("pwned");
        let victim = env.mkdir("victim");
        std::fs::write(victim.join("keep"), "the user's\n").unwrap();
        let victim_before = snapshot(&victim);
        // A program any jj that signs would run: here on the host, where the agent
        // names it; it leaves the marker and a plausible signature.
        let evil = crate::templates::write(
            &env.path("evil.sh"),
            &format!("#!/bin/sh\ntouch {}\ncat >/dev/null\necho '-----BEGIN PGP SIGNATURE-----'\necho x\necho '-----END PGP SIGNATURE-----'\n", marker.display()),
        );
        std::fs::set_permissions(&evil, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        env.ok(&["up", &name, "--jj", repo.to_str().unwrap()]);
        let user_before = users_state(&repo);
        let ops_before = jj(&repo, &["op", "log", "--no-graph", "-T", "id ++ \"\\n\""]);
        let user_wc = change_id(&repo, "@");
        let main_change = change_id(&repo, "main");
        let objects = if colocate { repo.join(".git/objects") } else { repo.join(".jj/repo/store/git/objects") };

        // Each step checks, inside, that it took effect. The signing program
        // inside reads what jj signs, as gpg does: one that exits first makes
        // jj's write fail (a broken pipe, more often on a loaded machine), and
        // the agent's own `jj describe` with it.
        let script = format!(
            r#"cd /workspace
            mkdir -p {dir} && printf '#!/bin/sh\ncat >/dev/null\necho -----BEGIN PGP SIGNATURE-----\necho x\necho -----END PGP SIGNATURE-----\n' > {evil} && chmod +x {evil} && echo 'ok: signing program'
            evil_config="[signing]
behavior = 'force'
backend = 'gpg'
backends.gpg.program = '{evil}'
[ui]
pager = ['sh', '-c', 'touch {marker}']
diff-formatter = ['sh', '-c', 'touch {marker}']"
            printf '%s\n' "$evil_config" > .jj/repo/config.toml
            [ "$(jj config get signing.backends.gpg.program)" = {evil} ] && [ "$(jj config get signing.behavior)" = force ] && echo 'ok: planted config'
            # The user's repository, at its usual path: not there, so it stays in the container.
            mkdir -p {repo}/.jj/repo && printf '%s\n' "$evil_config" > {repo}/.jj/repo/config.toml && grep -q touch {repo}/.jj/repo/config.toml && echo 'ok: config at the users path'
            n=0; for o in {objects}/*; do if err=$( (echo x > $o/x) 2>&1 ); then echo WROTE objects; else case "$err" in *Read-only*) n=$((n+1));; esac; fi; done; [ $n -gt 0 ] && echo 'ok: tried the objects, read-only'
            # Redirect the store to a host directory, and plant symlinks to it.
            cp .jj/repo/store/git_target .jj/git_target.saved && echo 'ok: saved git_target'
            # Rewrite the user's commits the agent can see, move their bookmarks.
            jj describe 'main@host' --ignore-immutable -m 'rewritten by the agent' && [ "$(jj log --no-graph -r 'description(exact:"rewritten by the agent\n")' -T change_id)" = {main_change} ] && echo 'ok: rewrote main'
            jj bookmark set main -r @ --allow-backwards && [ "$(jj log --no-graph -r main -T commit_id)" = "$(jj log --no-graph -r @ -T commit_id)" ] && echo 'ok: moved main'
            jj edit {user_wc} || echo 'ok: tried to edit the users working copy'
            echo work > work.txt && jj describe -m 'agent work' && jj new && [ "$(jj log --no-graph -r @- -T description)" = 'agent work' ] && echo 'ok: agent work'
            # A symlink to the host directory as a fan-out directory of the
            # objects: one no object uses yet, planted after the agent's own
            # writes (a commit of its own landing behind it would fail them).
            p=$(for a in 0 1 2 3 4 5 6 7 8 9 a b c d e f; do for b in 0 1 2 3 4 5 6 7 8 9 a b c d e f; do [ -e .jj/repo/store/git/objects/$a$b ] || {{ echo $a$b; exit; }}; done; done)
            ln -s {victim} .jj/repo/store/git/objects/$p && [ "$(readlink .jj/repo/store/git/objects/$p)" = {victim} ] && echo 'ok: symlink'
            printf '{victim}' > .jj/repo/store/git_target && [ "$(cat .jj/repo/store/git_target)" = {victim} ] && echo 'ok: git_target'"#,
            dir = env.dir.path().display(),
            evil = evil.display(),
            marker = marker.display(),
            repo = repo.display(),
            objects = objects.display(),
            victim = victim.display(),
        );
        let steps = [
            "signing program",
            "planted config",
            "config at the users path",
            "tried the objects, read-only",
            "saved git_target",
            "rewrote main",
            "moved main",
            "tried to edit the users working copy",
            "agent work",
            "symlink",
            "git_target",
        ];
        let out = attack(&env, &name, &script, &steps);
        assert!(!out.contains("WROTE"), "{colocate}: {out}");
        // The user's working copy is in no repository the agent has.
        assert!(out.contains(&format!("Revision `{user_wc}` doesn't exist")), "{colocate}: {out}");

        // The git_target now names a host directory: a reset must not mount it,
        // nor anything but the sandbox's own paths and the repository's objects.
        env.ok(&["reset", &name]);
        let mounts: Vec<String> = inspect(&format!("forage-{name}"))
            .unwrap()
            .mounts
            .unwrap()
            .into_iter()
            .map(|m| m.source.unwrap())
            .collect();
        for m in &mounts {
            assert!(m.starts_with(env.home.to_str().unwrap()) || m.contains("objects"), "{colocate}: mounted {m}");
        }
        // The agent puts its store back, so that its own jj can snapshot at down.
        let restore = "cd /workspace && cp .jj/git_target.saved .jj/repo/store/git_target && [ \"$(cat .jj/repo/store/git_target)\" = git ] && jj log -r @- --no-graph -T description && echo 'ok: restored'";
        assert!(attack(&env, &name, restore, &["restored"]).contains("agent work"), "{colocate}");

        // The user's jj and git, then forage's sync, status and down.
        for args in [
            &["log", "-r", "all()"][..],
            &["st"],
            &["op", "log"],
            &["bookmark", "list", "--all"],
            &["diff", "-r", "@-"],
        ] {
            jj(&repo, args);
        }
        // The agent's rewrite of main keeps main's change id: brought over, jj
        // would take it for main's new version. Refused, and nothing moves.
        let refused = env.fails(&["sync", &name], 6);
        assert!(refused.contains("carries the change id") && refused.contains("nothing was brought"), "{refused}");
        env.ok(&["status", &name]);
        let out = env.run(&["down", &name]);
        assert!(out.status.success(), "{colocate}: {}", describe(&out));
        assert!(String::from_utf8_lossy(&out.stderr).contains("not archived"), "{colocate}: {}", describe(&out));
        jj(&repo, &["log", "-r", "all()"]);
        if colocate {
            crate::git::git(&repo, &["status"]);
        }

        assert!(!marker.exists(), "{colocate}: code the agent planted ran on the host");
        assert_eq!(users_state(&repo), user_before, "{colocate}: the user's working copy, files or bookmarks changed");
        assert_eq!(snapshot(&victim), victim_before, "{colocate}");
        assert!(
            !repo.join(".jj/repo/config.toml").exists()
                || !std::fs::read_to_string(repo.join(".jj/repo/config.toml")).unwrap().contains("touch")
        );
        // Every operation on the user's repository since `up` is forage's import of its own refs.
        let ops = new_operations(&repo, &ops_before);
        assert!(!ops.is_empty() && ops.iter().all(|o| o.ends_with("import git refs")), "{colocate}: {ops:?}");
        // The agent's work arrived as files (its changes were refused with the rewrite).
        let archive = format!("bookmarks(glob:\"forage/archive/{name}/*\")");
        let files = jj(&repo, &["file", "list", "-r", &archive]);
        assert!(files.contains("work.txt"), "{colocate}: {files}");
        assert_eq!(jj(&repo, &["log", "-r", "main", "--no-graph", "-T", "description"]), "base\n");
        env.assert_nothing_left_but_archives();
    }
}

/// A user's working copy on an unbookmarked change of their own (`user B`), as
/// jj users work: the sandbox's base (`@-`) is that change.
/// Returns B's commit id, and the working copy's commit and change ids.
fn user_on_unbookmarked_change(repo: &Path) -> (String, String, String) {
    std::fs::write(repo.join("b.txt"), "the user's B\n").unwrap();
    jj(repo, &["describe", "-m", "user B"]);
    jj(repo, &["new"]);
    std::fs::write(repo.join("w.txt"), "the user's wip\n").unwrap();
    jj(repo, &["describe", "-m", "user wip"]);
    let b = jj(repo, &["log", "-r", "@-", "--no-graph", "-T", "commit_id"]);
    let wc = jj(repo, &["log", "-r", "@", "--no-graph", "-T", "commit_id"]);
    let wc_change = jj(repo, &["log", "-r", "@", "--no-graph", "-T", "change_id"]);
    (b, wc, wc_change)
}

/// Commits of the repository whose description is `text`, as `commit_id` lines.
fn described(repo: &Path, text: &str) -> Vec<String> {
    let revset = format!("description(exact:\"{text}\\n\")");
    jj(repo, &["log", "-r", &revset, "--no-graph", "-T", "commit_id ++ \"\\n\""]).lines().map(str::to_owned).collect()
}

#[test]
fn a_discarded_sandbox_takes_nothing_of_the_users_with_it() {
    for colocate in [true, false] {
        let env = Env::new();
        let repo = jj_repo(&env, "repo", colocate);
        let (b, ..) = user_on_unbookmarked_change(&repo);
        let name = env.unique("jjd");
        env.ok(&["up", &name, "--jj", repo.to_str().unwrap()]);
        let user_before = users_state(&repo);
        inside(&env, &name, "cd /workspace && echo work > work.txt && jj describe -m 'agent work' && jj new");
        env.ok(&["sync", &name]);
        assert_eq!(described(&repo, "agent work").len(), 1, "{colocate}: the work arrived");
        // Discarding drops the sandbox's bookmark: jj's own import would then
        // abandon everything only that bookmark reached, the user's B included.
        env.ok(&["down", &name, "--discard"]);
        assert_eq!(described(&repo, "user B"), [b.trim()], "{colocate}: the user's change is still there");
        assert!(described(&repo, "agent work").is_empty(), "{colocate}: the discarded work is gone");
        assert_eq!(users_state(&repo), user_before, "{colocate}");
        assert!(repo.join("b.txt").exists() && repo.join("w.txt").exists(), "{colocate}");
        env.assert_nothing_left();
    }
}

#[test]
fn an_agent_cannot_take_the_users_commits_or_change_ids_for_its_own() {
    for colocate in [true, false] {
        let env = Env::new();
        let repo = jj_repo(&env, "repo", colocate);
        let (b, wc, wc_change) = user_on_unbookmarked_change(&repo);
        let name = env.unique("jjo");
        env.ok(&["up", &name, "--jj", repo.to_str().unwrap()]);
        let user_before = users_state(&repo);
        let ops_before = jj(&repo, &["op", "log", "--no-graph", "-T", "id ++ \"\\n\""]);
        let marker = env.path("pwned");
        let store = "/workspace/.jj/repo/store/git";
        // Commits the agent writes itself, on the user's B, and names as its
        // work by a ref and jj's import: `commit NAME HEADER TREE` prints the
        // id once jj inside has it.
        let commit = format!(
            r#"commit() {{ c=$(printf 'tree %s\nparent {b}\nauthor a <a@x> 1 +0000\ncommitter a <a@x> 1 +0000\n%b\n%s\n' "$3" "$2" "$1" | git --git-dir={store} hash-object -t commit -w --stdin) && git --git-dir={store} update-ref refs/heads/$1 $c && jj git import && [ "$(jj log --no-graph -r $1 -T commit_id)" = $c ] && echo $c; }}
            empty=$(git --git-dir={store} mktree </dev/null)"#,
            b = b.trim()
        );
        let wc_change = wc_change.trim();
        // A commit carrying the user's working-copy change id, spelled `spelled`,
        // which jj inside reads as that change.
        let carrying = |what: &str, spelled: &str| {
            format!("c=$(commit {what} 'change-id {spelled}\\n' $empty) && [ \"$(jj log --no-graph -r $c -T change_id)\" = {wc_change} ] && echo 'ok: {what}'")
        };
        let upper = wc_change.to_ascii_uppercase();
        let mixed = format!("{}{}", &wc_change[..16], &upper[16..]);
        let attacks = [
            // The user's working-copy commit (not the sandbox's base, so jj
            // inside lists it as work), by a ref of the agent's.
            ("grab", format!("git --git-dir={store} update-ref refs/heads/grab {wc} && jj git import && [ \"$(jj log --no-graph -r grab -T commit_id)\" = {wc} ] && echo 'ok: grab'", wc = wc.trim()), None),
            // A commit carrying the change id of the user's working copy.
            ("forged", carrying("forged", wc_change), Some("carries the change id")),
            // The same change id in the spellings jj also reads: upper case, and mixed.
            ("upper", carrying("upper", &upper), Some("change id")),
            ("mixed", carrying("mixed", &mixed), Some("change id")),
            // A tree holding a `.jj` whose store names a git directory of the agent's.
            (
                "dotjj",
                format!(
                    "t=$(echo ../../evil | git --git-dir={store} hash-object -w --stdin); for n in git_target store repo .jj; do k=blob; [ $n = git_target ] || k=tree; t=$(printf '%s %s %s\\t%s\\n' $([ $k = blob ] && echo 100644 || echo 040000) $k $t $n | git --git-dir={store} mktree); done; c=$(commit dotjj '' $t) && git --git-dir={store} ls-tree $c | grep -q '	.jj$' && echo 'ok: dotjj'"
                ),
                Some("would be a jj repository"),
            ),
            // 300 MB of zeros: a few hundred KB packed, each object read whole.
            (
                "bomb",
                format!(
                    "blob=$(head -c 300000000 /dev/zero | git --git-dir={store} hash-object -w --stdin) && [ $(git --git-dir={store} cat-file -s $blob) = 300000000 ] && t=$(printf '100644 blob %s\\tzeros\\n' $blob | git --git-dir={store} mktree) && commit bomb '' $t && echo 'ok: bomb'"
                ),
                Some("MiB"),
            ),
        ];
        for (what, script, refused) in attacks {
            attack(&env, &name, &format!("cd /workspace\n{commit}\n{script}"), &[what]);
            match refused {
                Some(needle) => {
                    let stderr = env.fails(&["sync", &name], 6);
                    assert!(stderr.contains(needle) && stderr.contains("nothing was"), "{colocate} {what}: {stderr}");
                }
                None => {
                    let out = env.run(&["sync", &name]);
                    assert!(out.status.success(), "{colocate} {what}: {}", describe(&out));
                    let stderr = String::from_utf8_lossy(&out.stderr);
                    assert!(stderr.contains("your repository's commit"), "{colocate} {what}: {stderr}");
                }
            }
            assert!(
                !bookmarks(&repo).lines().any(|l| l.starts_with(&format!("forage/{name}@"))),
                "{colocate} {what}: the sandbox got a bookmark: {}",
                bookmarks(&repo)
            );
            assert_eq!(
                jj(&repo, &["log", "-r", "divergent()", "--no-graph", "-T", "commit_id"]),
                "",
                "{colocate} {what}"
            );
            let drop = format!("cd /workspace && git --git-dir={store} update-ref -d refs/heads/{what} && jj git import && echo 'ok: dropped'");
            attack(&env, &name, &drop, &["dropped"]);
        }
        // The user's working-copy change is one commit, not divergent, and
        // nothing refused reached the repository's objects.
        let now = jj(
            &repo,
            &["log", "-r", &format!("change_id({})", wc_change.trim()), "--no-graph", "-T", "commit_id ++ \"\\n\""],
        );
        assert_eq!(now.trim(), wc.trim(), "{colocate}: the user's working copy is one commit, as it was");

        // A signing program that never returns, and a repository at the top of
        // the workspace whose config runs code: neither reaches forage or the user.
        let script = format!(
            r#"cd /workspace
            printf '#!/bin/sh\nsleep 1000\n' > /tmp/hang && chmod +x /tmp/hang
            jj config set --repo signing.behavior force && jj config set --repo signing.backend gpg && jj config set --repo signing.backends.gpg.program /tmp/hang
            [ "$(jj config get signing.behavior)" = force ] && echo 'ok: signing set'
            if mkdir .git || printf '[core]\nfsmonitor = touch {marker}\n' > .git; then echo PLANTED; else echo "ok: tried .git: $(cat .git)"; fi
            echo honest > honest.txt && jj describe -m honest --config signing.behavior=drop && echo 'ok: honest'
            # Not snapshotted yet: the next jj to run (forage's) writes a commit, and would sign it.
            echo more > more.txt && echo 'ok: more'"#,
            marker = marker.display()
        );
        let out = attack(
            &env,
            &name,
            &script,
            &["signing set", "tried .git: forage: a jj sandbox has no git repository here", "honest", "more"],
        );
        assert!(!out.contains("PLANTED"), "{colocate}: {out}");
        env.ok(&["sync", &name]);
        let ws = env.home.join("workspaces").join(&name);
        let _ = std::process::Command::new("git").arg("-C").arg(&ws).arg("status").output();
        assert!(!marker.exists(), "{colocate}: git on the host ran the agent's config");
        assert_eq!(described(&repo, "honest").len(), 1, "{colocate}: the honest work arrived");

        env.ok(&["down", &name]);
        assert_eq!(users_state(&repo), user_before, "{colocate}");
        assert_eq!(described(&repo, "user B"), [b.trim().to_owned()], "{colocate}");
        let ops = new_operations(&repo, &ops_before);
        assert!(ops.iter().all(|o| forages_own(o, &name)), "{colocate}: {ops:?}");
        env.assert_nothing_left_but_archives();
    }
}

/// Whether operation `op` (`id description`) is one of forage's for sandbox
/// `name`: an import, an abandon, or bookmarks of its own set or deleted.
fn forages_own(op: &str, name: &str) -> bool {
    let description = op.split_once(' ').map_or("", |(_, d)| d);
    let own = |b: &str| {
        [format!("forage/{name}"), format!("forage-import/{name}/"), format!("forage-heads/{name}/")]
            .iter()
            .any(|p| b == p.trim_end_matches('/') || b.starts_with(p.as_str()))
    };
    let bookmarks = |list: &str| list.split(", ").all(own);
    description == "import git refs"
        || description.starts_with("abandon ")
        || description.strip_prefix("delete bookmark ").is_some_and(bookmarks)
        || description
            .strip_prefix("point bookmark ")
            .and_then(|d| d.split_once(" to commit "))
            .is_some_and(|(b, _)| bookmarks(b))
}

/// `jj` as the user runs it in their repository, with jj's default settings
/// (a colocated repository's jj imports git's refs at the start of every
/// command, abandoning what a moved ref alone reached): whether it succeeded,
/// what it printed, and all it said.
fn users_jj(repo: &Path, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new("jj")
        .args(["--no-pager", "--color=never", "-R"])
        .arg(repo)
        .args(args)
        .env("JJ_USER", "Test")
        .env("JJ_EMAIL", "test@example.com")
        .output()
        .unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned(), describe(&out))
}

/// Where the user's working copy, its parent and main are: `commit_id`s on one line.
const WHERE: &str = "commit_id ++ \" \"";

#[test]
fn the_users_jj_running_during_syncs_never_imports_a_move_of_the_sandboxs_bookmarks() {
    let env = Env::new();
    let repo = jj_repo(&env, "repo", true);
    // The user works on an unbookmarked change B, the sandbox's base: no
    // bookmark keeps B, only the user's working copy sits on it.
    let (b, wc, wc_change) = user_on_unbookmarked_change(&repo);
    let main = jj(&repo, &["log", "-r", "main", "--no-graph", "-T", "commit_id"]);
    let name = env.unique("jjrace");
    env.ok(&["up", &name, "--jj", repo.to_str().unwrap()]);
    attack(
        &env,
        &name,
        "cd /workspace && echo work > work.txt && jj describe -m agent && jj new && echo 'ok: work'",
        &["work"],
    );
    env.ok(&["sync", &name]);

    // The user's jj, over and over, while the sandbox syncs.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let user = {
        let (repo, stop) = (repo.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut runs = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                runs.push(users_jj(
                    &repo,
                    &["log", "--no-graph", "-r", "@ | @- | main | (divergent() & ::@)", "-T", WHERE],
                ));
                runs.push(users_jj(&repo, &["status"]));
            }
            runs
        })
    };
    // Each time the agent moves its change between B and main, so that its
    // bookmark moves to a commit no longer on B: a jj that imported that move
    // itself would abandon B (which only the old commit and the user's working
    // copy reach) and rebase the user's working copy onto main.
    for round in 0..8 {
        let onto = if round % 2 == 0 { "main@host" } else { "forage-base" };
        let expected = if round % 2 == 0 { main.trim() } else { b.trim() };
        let script = format!(
            "cd /workspace && jj rebase -s @- -d '{onto}' && jj describe @- -m 'agent {round}' && [ \"$(jj log --no-graph -r @-- -T commit_id)\" = {expected} ] && echo 'ok: moved'"
        );
        attack(&env, &name, &script, &["moved"]);
        let synced = env.json(&["sync", &name, "--json"]);
        assert_eq!(synced["heads"].as_array().map(Vec::len), Some(1), "round {round}: {synced}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let runs = user.join().unwrap();
    assert!(runs.len() >= 8, "the user's jj ran {} times", runs.len());
    // Every time it looked, the user's working copy, B and main were where they
    // are, and none of the user's changes was divergent. (The agent's own
    // change may show both its versions for a moment, until forage abandons
    // the old one.)
    let (_, before, _) =
        users_jj(&repo, &["log", "--no-graph", "-r", "@ | @- | main | (divergent() & ::@)", "-T", WHERE]);
    assert_eq!(before, format!("{} {} {} ", wc.trim(), b.trim(), main.trim()));
    for (ok, _, said) in &runs {
        assert!(ok, "the user's jj failed: {said}");
    }
    for (_, printed, said) in runs.iter().step_by(2) {
        assert_eq!(printed, &before, "the user's jj saw: {said}");
    }

    // B, the user's working copy and main are as they were; nothing diverged.
    assert_eq!(described(&repo, "user B"), [b.trim()]);
    assert_eq!(jj(&repo, &["log", "-r", "@", "--no-graph", "-T", "commit_id"]), wc.trim());
    assert_eq!(jj(&repo, &["log", "-r", "@-", "--no-graph", "-T", "commit_id"]), b.trim());
    assert_eq!(jj(&repo, &["log", "-r", "main", "--no-graph", "-T", "commit_id"]), main.trim());
    assert_eq!(
        jj(&repo, &["log", "-r", &format!("change_id({})", wc_change.trim()), "--no-graph", "-T", "commit_id"]),
        wc.trim()
    );
    assert_eq!(jj(&repo, &["log", "-r", "divergent()", "--no-graph", "-T", "commit_id"]), "");
    // The sandbox's change is back on B (the last round's), once, and no staged ref is left.
    assert_eq!(jj(&repo, &["log", "-r", &format!("forage/{name}-"), "--no-graph", "-T", "commit_id"]), b.trim());
    assert_eq!(described(&repo, "agent 7").len(), 1);
    assert!(!bookmarks(&repo).contains("forage-import"), "{}", bookmarks(&repo));
    env.ok(&["down", &name, "--discard"]);
    env.assert_nothing_left();
}

#[test]
fn an_agent_that_breaks_its_own_repository_still_has_its_commits_synced_and_archived() {
    // Read from the operation log (its current operation, or with `op_heads`
    // gone the one that ended last), or with no operation log from the git
    // store's refs (every version jj wrote: the newest of each change counts).
    let breakages = [
        ("git_target", "printf 'garbage' > .jj/repo/store/git_target", true),
        ("op_heads", "rm -rf .jj/repo/op_heads", false),
        ("op_store", "rm -rf .jj/repo/op_heads .jj/repo/op_store", true),
    ];
    for (what, breakage, colocate) in breakages {
        let env = Env::new();
        let repo = jj_repo(&env, "repo", colocate);
        let name = env.unique("jjbroken");
        env.ok(&["up", &name, "--jj", repo.to_str().unwrap()]);
        let script = format!(
            "cd /workspace && echo work > work.txt && jj describe -m 'agent work' && jj new && echo 'ok: work'
            {breakage} && if jj status; then echo STILL-WORKS; else echo 'ok: broken'; fi"
        );
        let out = attack(&env, &name, &script, &["work", "broken"]);
        assert!(!out.contains("STILL-WORKS"), "{what}: {out}");

        // jj inside fails; forage reads the agent's commits from its repository.
        let out = env.run(&["sync", &name]);
        assert!(out.status.success(), "{what}: {}", describe(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("read from its repository instead"),
            "{what}: {}",
            describe(&out)
        );
        let mine = changes_described(&repo, &format!("::forage/{name}"));
        assert!(mine.contains(&"agent work".to_owned()), "{what}: {mine:?}");

        let out = env.run(&["down", &name]);
        assert!(out.status.success(), "{what}: {}", describe(&out));
        let archived = changes_described(&repo, &format!("::bookmarks(glob:\"forage/archive/{name}/*\")"));
        assert!(archived.contains(&"agent work".to_owned()), "{what}: {archived:?}\n{}", describe(&out));
        // (Without a working copy to start from, the files are archived on the base.)
        let archives = jj(
            &repo,
            &[
                "log",
                "-r",
                &format!("bookmarks(glob:\"forage/archive/{name}/*\")"),
                "--no-graph",
                "-T",
                "commit_id ++ \"\\n\"",
            ],
        );
        let files: Vec<String> = archives.lines().map(|a| jj(&repo, &["file", "list", "-r", a])).collect();
        assert!(files.iter().any(|f| f.contains("work.txt")), "{what}: {files:?}");
        assert_eq!(
            jj(&repo, &["log", "-r", "divergent()", "--no-graph", "-T", "commit_id"]),
            "",
            "{what}: only the newest version of each change"
        );
        env.assert_nothing_left_but_archives();
    }
}

/// The first lines of the descriptions of `revset`'s commits.
fn changes_described(repo: &Path, revset: &str) -> Vec<String> {
    jj(repo, &["log", "-r", revset, "--no-graph", "-T", "description.first_line() ++ \"\\n\""])
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn twenty_thousand_commits_and_four_thousand_heads_cost_linear_work_and_at_most_32_bookmarks() {
    let env = Env::new();
    let repo = jj_repo(&env, "repo", true);
    let user_before = users_state(&repo);
    let name = env.unique("jjbig");
    env.ok(&["up", &name, "--jj", repo.to_str().unwrap()]);
    // A chain of 20,000 commits and 4,000 more heads, all on the base, written
    // with git's fast-import into the agent's store and taken in by its jj;
    // then jj rewrites the newest 300 of the chain, which so carry change-id
    // headers (more than forage asks jj about one by one).
    let script = r#"cd /workspace
        s=.jj/repo/store/git
        base=$(git --git-dir=$s rev-parse refs/tags/forage-base)
        {
          printf 'reset refs/heads/chain\nfrom %s\n' $base
          i=0; while [ $i -lt 20000 ]; do i=$((i+1))
            printf 'commit refs/heads/chain\ncommitter a <a@x> %d +0000\ndata 7\nc%05d\nM 644 inline f\ndata 6\n%05d\n\n' $((1000000+i)) $i $i
          done
          i=0; while [ $i -lt 4000 ]; do i=$((i+1))
            printf 'reset refs/heads/h%d\nfrom %s\ncommit refs/heads/h%d\ncommitter a <a@x> %d +0000\ndata 7\nh%05d\nM 644 inline h\ndata 6\n%05d\n\n' $i $base $i $((2000000+i)) $i $i
          done
        } | git --git-dir=$s fast-import --quiet && jj git import >/dev/null && echo 'ok: imported'
        jj describe -r 'latest(::chain ~ ::forage-base, 300)' -m rewritten >/dev/null && echo 'ok: rewritten'
        [ "$(jj log --no-graph -r 'all() ~ ::forage-base' -T '"x"' | wc -c)" = 24001 ] && echo 'ok: counted'
        [ "$(jj log --no-graph -r 'chain- & description(exact:"rewritten\n")' -T '"x"')" = x ] && echo 'ok: headers'"#;
    attack(&env, &name, script, &["imported", "rewritten", "counted", "headers"]);

    let out = env.run(&["sync", &name]);
    assert!(out.status.success(), "{}", describe(&out));
    let said = describe(&out);
    assert!(said.contains("3969 further work heads"), "{said}");
    let own: Vec<String> = bookmarks(&repo)
        .lines()
        .filter(|l| l.starts_with(&format!("forage/{name}@")) || l.starts_with(&format!("forage-heads/{name}/")))
        .map(str::to_owned)
        .collect();
    let local: Vec<&String> = own.iter().filter(|l| l.split(' ').next().is_some_and(|b| b.ends_with('@'))).collect();
    assert_eq!(local.len(), 32, "{own:?}");
    assert!(!bookmarks(&repo).contains("forage-import"));
    // The chain arrived whole, under the sandbox's bookmark.
    assert_eq!(jj(&repo, &["log", "-r", &format!("forage/{name}"), "--no-graph", "-T", "description"]), "rewritten\n");
    assert_eq!(described(&repo, "c00001").len(), 1);

    env.ok(&["down", &name, "--discard"]);
    assert!(described(&repo, "c00001").is_empty(), "the discarded chain is abandoned");
    assert!(described(&repo, "rewritten").is_empty());
    assert_eq!(users_state(&repo), user_before);
    assert_eq!(jj(&repo, &["log", "-r", "divergent()", "--no-graph", "-T", "commit_id"]), "");
    env.assert_nothing_left();
}
