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
        env.ok(&["sync", &name]);
        env.ok(&["status", &name]);
        let out = env.run(&["down", &name]);
        assert!(out.status.success(), "{colocate}: {}", describe(&out));
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
        // The agent's honest work arrived; its rewrite of main is only on its own archive.
        let archive = format!("bookmarks(glob:\"forage/archive/{name}/*\")");
        let files = jj(&repo, &["file", "list", "-r", &archive]);
        assert!(files.contains("work.txt"), "{colocate}: {files}");
        assert_eq!(jj(&repo, &["log", "-r", "main", "--no-graph", "-T", "description"]), "base\n");
        env.assert_nothing_left_but_archives();
    }
}
