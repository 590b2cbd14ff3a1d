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
            &format!("#!/bin/sh\ntouch {}\necho '-----BEGIN PGP SIGNATURE-----'\necho x\necho '-----END PGP SIGNATURE-----'\n", marker.display()),
        );
        std::fs::set_permissions(&evil, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        env.ok(&["up", &name, "--jj", repo.to_str().unwrap()]);
        let user_before = users_state(&repo);
        let ops_before = jj(&repo, &["op", "log", "--no-graph", "-T", "id ++ \"\\n\""]);
        let user_wc = jj(&repo, &["log", "-r", "@", "--no-graph", "-T", "change_id"]);

        let script = format!(
            r#"cd /workspace
            # The same program inside (the agent's own jj runs it, harmlessly).
            mkdir -p {dir} && printf '#!/bin/sh\necho -----BEGIN PGP SIGNATURE-----\necho x\necho -----END PGP SIGNATURE-----\n' > {evil} && chmod +x {evil}
            evil_config="[signing]
behavior = 'force'
backend = 'gpg'
backends.gpg.program = '{evil}'
[ui]
pager = ['sh', '-c', 'touch {marker}']
diff-formatter = ['sh', '-c', 'touch {marker}']"
            printf '%s\n' "$evil_config" > .jj/repo/config.toml
            # The user's repository, at its usual path: not there, so it stays in the container.
            mkdir -p {repo}/.jj/repo && printf '%s\n' "$evil_config" > {repo}/.jj/repo/config.toml
            for o in {objects}/*; do (echo x > $o/x) 2>/dev/null && echo WROTE objects; done
            # Redirect the store to a host directory, and plant symlinks to it.
            cp .jj/repo/store/git_target .jj/git_target.saved
            ln -s {victim} .jj/repo/store/git/objects/ab
            # Rewrite the user's commits the agent can see, move their bookmarks.
            jj describe 'main@host' --ignore-immutable -m 'rewritten by the agent' >/dev/null 2>&1
            jj bookmark set main -r @ --allow-backwards >/dev/null 2>&1
            jj edit {user_wc} >/dev/null 2>&1 && echo EDITED the user\'s working copy
            echo work > work.txt && jj describe -m 'agent work' && jj new >/dev/null 2>&1
            printf '{victim}' > .jj/repo/store/git_target; echo DONE"#,
            dir = env.dir.path().display(),
            evil = evil.display(),
            marker = marker.display(),
            repo = repo.display(),
            objects =
                if colocate { repo.join(".git/objects") } else { repo.join(".jj/repo/store/git/objects") }.display(),
            victim = victim.display(),
            user_wc = user_wc.trim(),
        );
        let out = inside(&env, &name, &script);
        assert!(out.ends_with("DONE\n") && !out.contains("WROTE") && !out.contains("EDITED"), "{colocate}: {out}");

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
        inside(&env, &name, "cp /workspace/.jj/git_target.saved /workspace/.jj/repo/store/git_target");

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
        // work by a ref and jj's import: `commit NAME HEADER TREE` echoes the id.
        let commit = format!(
            r#"commit() {{ c=$(printf 'tree %s\nparent {b}\nauthor a <a@x> 1 +0000\ncommitter a <a@x> 1 +0000\n%b\n%s\n' "$3" "$2" "$1" | git --git-dir={store} hash-object -t commit -w --stdin) && git --git-dir={store} update-ref refs/heads/$1 $c && jj git import >/dev/null 2>&1 && echo $c; }}
            empty=$(git --git-dir={store} mktree </dev/null)"#,
            b = b.trim()
        );
        let attacks = [
            // The user's working-copy commit (not the sandbox's base, so jj
            // inside lists it as work), by a ref of the agent's.
            ("grab", format!("git --git-dir={store} update-ref refs/heads/grab {} && jj git import >/dev/null 2>&1", wc.trim()), None),
            // A commit carrying the change id of the user's working copy.
            ("forged", format!("commit forged 'change-id {}\\n' $empty", wc_change.trim()), Some("carries the change id")),
            // A tree holding a `.jj` whose store names a git directory of the agent's.
            (
                "dotjj",
                format!(
                    "t=$(echo ../../evil | git --git-dir={store} hash-object -w --stdin); for n in git_target store repo .jj; do k=blob; [ $n = git_target ] || k=tree; t=$(printf '%s %s %s\\t%s\\n' $([ $k = blob ] && echo 100644 || echo 040000) $k $t $n | git --git-dir={store} mktree); done; commit dotjj '' $t"
                ),
                Some("would be a jj repository"),
            ),
            // 300 MB of zeros: a few hundred KB packed, each object read whole.
            (
                "bomb",
                format!(
                    "blob=$(head -c 300000000 /dev/zero | git --git-dir={store} hash-object -w --stdin); t=$(printf '100644 blob %s\\tzeros\\n' $blob | git --git-dir={store} mktree); commit bomb '' $t"
                ),
                Some("MiB"),
            ),
        ];
        for (what, script, refused) in attacks {
            inside(&env, &name, &format!("cd /workspace\n{commit}\n{script}"));
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
            inside(&env, &name, &format!("cd /workspace && git --git-dir={store} update-ref -d refs/heads/{what} && jj git import >/dev/null 2>&1; true"));
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
            [ "$(jj config get signing.behavior)" = force ] || echo NOT-SET
            (mkdir .git || printf '[core]\nfsmonitor = touch {marker}\n' > .git) 2>/dev/null && echo PLANTED
            echo honest > honest.txt && jj describe -m honest --config signing.behavior=drop >/dev/null 2>&1
            # Not snapshotted yet: the next jj to run (forage's) writes a commit, and would sign it.
            echo more > more.txt; echo DONE"#,
            marker = marker.display()
        );
        let out = inside(&env, &name, &script);
        assert!(out.contains("DONE") && !out.contains("PLANTED") && !out.contains("NOT-SET"), "{colocate}: {out}");
        env.ok(&["sync", &name]);
        let ws = env.home.join("workspaces").join(&name);
        let _ = std::process::Command::new("git").arg("-C").arg(&ws).arg("status").output();
        assert!(!marker.exists(), "{colocate}: git on the host ran the agent's config");
        assert_eq!(described(&repo, "honest").len(), 1, "{colocate}: the honest work arrived");

        env.ok(&["down", &name]);
        assert_eq!(users_state(&repo), user_before, "{colocate}");
        assert_eq!(described(&repo, "user B"), [b.trim().to_owned()], "{colocate}");
        let ops = new_operations(&repo, &ops_before);
        assert!(ops.iter().all(|o| o.ends_with("import git refs") || o.contains("abandon")), "{colocate}: {ops:?}");
        env.assert_nothing_left_but_archives();
    }
}
