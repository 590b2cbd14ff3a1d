//! git-worktree mode against a hostile agent (SPEC §3a, docs/guarantees.md §3).
//! Each test is an attack made from inside the container through `forage-ctl
//! exec`, as a prompt-injected agent would make it, followed by what the user and
//! forage then do on the host; the test proves the attack gains nothing.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::git::{archive_refs, git, repo, repo_state};
use crate::support::*;

fn inside(env: &Env, name: &str, script: &str) -> String {
    env.ok(&["exec", name, "--", "sh", "-c", script])
}

/// Every file of the host's git directory but its objects: what no agent may
/// change (the sandbox's own worktree entry, which `sync` keeps, left out).
fn git_dir_but_objects(repo: &Path, name: &str) -> Snapshot {
    let own = PathBuf::from(format!("worktrees/forage-{name}"));
    snapshot(&repo.join(".git"))
        .into_iter()
        .filter(|(p, ..)| !p.starts_with("objects") && !p.starts_with(&own))
        .collect()
}

/// Asserts that every object file the host had is still there, byte for byte.
fn assert_objects_kept(before: &Snapshot, repo: &Path) {
    let after = snapshot(&repo.join(".git/objects"));
    for entry in before {
        assert!(after.contains(entry), "object file {} changed or vanished", entry.0.display());
    }
}

fn fsck(repo: &Path) {
    git(repo, &["fsck", "--full", "--strict"]);
}

#[test]
fn the_agent_can_change_nothing_of_the_hosts_git_directory() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("gi-ro");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    let (config, objects, refs) =
        (git_dir_but_objects(&repo, &name), snapshot(&repo.join(".git/objects")), repo_state(&repo));
    let g = repo.join(".git");
    let an_object = objects.iter().find(|(p, ..)| p.components().count() == 2).unwrap().0.clone();
    let script = format!(
        r#"cd /workspace
        o={g}/objects
        echo x > $o/planted 2>/dev/null && echo WROTE objects
        chmod u+w $o/{obj} 2>/dev/null && echo CHMOD object
        (echo x > $o/{obj}) 2>/dev/null && echo OVERWROTE object
        rm -f $o/{obj} 2>/dev/null; [ -e $o/{obj} ] || echo REMOVED object
        mkdir -p $o/pack 2>/dev/null && touch $o/pack/x.pack 2>/dev/null && echo WROTE pack
        (echo 'gitdir: /tmp' > .git) 2>/dev/null && echo WROTE gitlink
        rm -f .git 2>/dev/null; mv .git .git-moved 2>/dev/null && echo MOVED gitlink
        [ -f .git ] || echo GITLINK GONE
        (echo x > /forage/git/refs/remotes/origin/main) 2>/dev/null && echo WROTE remotes
        # The host's git directory, outside its objects, is not there at all:
        # what the agent writes at its path stays in the container.
        mkdir -p {g}/hooks {g}/worktrees/forage-{name} && echo '#!/bin/sh' > {g}/hooks/post-checkout && echo /tmp > {g}/worktrees/forage-{name}/gitdir && echo x > {g}/config
        git status --short; git log --format=%s -1"#,
        g = g.display(),
        obj = an_object.display(),
    );
    assert_eq!(inside(&env, &name, &script), "initial\n", "the agent changed the host's git directory");
    assert_eq!(git_dir_but_objects(&repo, &name), config);
    assert_eq!(snapshot(&repo.join(".git/objects")), objects);
    assert_eq!(repo_state(&repo), refs);
    fsck(&repo);
    env.ok(&["down", &name]);
    env.assert_nothing_left();
}

#[test]
fn nothing_the_agent_plants_runs_in_the_users_git_or_in_forage() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    std::fs::create_dir(repo.join("dir")).unwrap();
    std::fs::write(repo.join("dir/f"), "f\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-qm", "dir"]);
    let name = env.unique("gi-exec");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    let marker = env.path("pwned");
    let git_dir_before = git_dir_but_objects(&repo, &name);
    // A config that runs code from every hook git has, planted everywhere the
    // agent can write and everywhere it might think the host reads.
    let script = format!(
        r##"cd /workspace && echo work > work.txt && printf '* filter=x\n' > .gitattributes && git add work.txt .gitattributes && git commit -qm work && echo COMMITTED
        m={marker}; g={g}; wt=$g/worktrees/forage-{name}
        evil="[core]
	fsmonitor = touch $m
	hooksPath = /forage/git/hooks
	pager = touch $m
	sshCommand = touch $m
	editor = touch $m
[diff]
	external = touch $m
[extensions]
	worktreeConfig = true
[filter \"x\"]
	clean = touch $m
	smudge = touch $m"
        hook="#!/bin/sh
touch $m"
        for d in /forage/git /forage/git/evil $g $wt $g/modules/sub; do
          mkdir -p $d/hooks 2>/dev/null
          for f in config config.worktree; do printf '%s\n' "$evil" > $d/$f 2>/dev/null; done
          for h in pre-commit post-commit post-checkout pre-auto-gc reference-transaction post-index-change; do printf '%s\n' "$hook" > $d/hooks/$h 2>/dev/null; chmod +x $d/hooks/$h 2>/dev/null; done
        done
        echo /forage/git/evil > /forage/git/commondir; echo /forage/git/evil > $wt/commondir; echo "$g" > /forage/git/commondir-host
        printf 'gitdir: /forage/git/evil\n' > $wt/gitdir
        mkdir -p /workspace/nested/.git && printf '%s\n' "$evil" > /workspace/nested/.git/config"##,
        marker = marker.display(),
        g = repo.join(".git").display(),
    );
    assert!(inside(&env, &name, &script).contains("COMMITTED"));
    assert_eq!(git_dir_but_objects(&repo, &name), git_dir_before, "the agent changed the host's git directory");

    // The user's git in their own checkout, and in the sandbox's worktree.
    for args in [
        &["status"][..],
        &["log", "--all", "-3"],
        &["show", "main"],
        &["diff", "HEAD~1"],
        &["checkout", "-q", "-b", "tmp"],
        &["checkout", "-q", "main"],
        &["branch", "-q", "-D", "tmp"],
        &["commit", "-q", "--allow-empty", "-m", "user"],
        &["sparse-checkout", "set", "dir"],
        &["sparse-checkout", "disable"],
        &["gc", "-q"],
        &["worktree", "list"],
    ] {
        git(&repo, args);
    }
    env.ok(&["sync", &name]);
    let wt = env.home.join("workspaces").join(&name);
    for args in [&["status"][..], &["log", "-1"], &["diff", "HEAD"], &["diff", "HEAD~1"]] {
        git(&wt, args);
    }
    env.ok(&["status", &name]);
    env.ok(&["down", &name]);
    git(&repo, &["status"]);
    assert!(!marker.exists(), "code the agent planted ran on the host");
    // The work itself arrived, as a plain commit.
    let archive = &archive_refs(&repo)[0];
    assert_eq!(git(&repo, &["show", &format!("{archive}:work.txt")]), "work\n");
    fsck(&repo);
}

#[test]
fn planted_links_and_symlinks_make_forage_delete_read_or_import_nothing_outside() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    // What the attacker is after: a directory to delete, a key to steal, and a
    // repository of the user's that this sandbox has nothing to do with.
    let victim = env.mkdir("victim");
    std::fs::write(victim.join("id_ed25519"), "-----BEGIN OPENSSH PRIVATE KEY-----\n").unwrap();
    let secret = crate::git::repo(&env, "secret-repo");
    std::fs::write(secret.join("plans.txt"), "secret plans\n").unwrap();
    git(&secret, &["add", "."]);
    git(&secret, &["commit", "-qm", "secret"]);
    let secret_tree = git(&secret, &["rev-parse", "HEAD^{tree}"]).trim().to_owned();
    let victim_before = snapshot(&victim);

    let name = env.unique("gi-links");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    let v = victim.display();
    let script = format!(
        r#"cd /workspace && echo mine > mine.txt && git add mine.txt && git commit -qm mine
        ln -s {v} victim-link && ln -s {v}/id_ed25519 key-link
        # A commit whose tree lives only in the secret repository, on a side branch.
        c=$(printf 'tree {secret_tree}\nauthor a <a> 1 +0000\ncommitter a <a> 1 +0000\n\nsteal\n' | git hash-object -t commit -w --literally --stdin)
        git update-ref refs/heads/steal $c
        cd /forage/git
        echo {v} > gitdir; echo {v} > commondir
        mkdir -p worktrees/x && echo {v}/.git > worktrees/x/gitdir
        ln -s {v} refs/heads/victim-dir; ln -s {v}/id_ed25519 refs/heads/victim-key
        ln -s {v}/id_ed25519 objects/ab; mkdir -p objects/cd && ln -s {v}/id_ed25519 objects/cd/0000000000000000000000000000000000000000
        echo {secret_objects} >> objects/info/alternates && echo PLANTED"#,
        secret_objects = secret.join(".git/objects").display(),
    );
    assert!(inside(&env, &name, &script).contains("PLANTED"));

    env.ok(&["sync", &name]);
    let out = env.run(&["down", &name]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("1 commit"), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not archived: branch steal") && err.contains(&secret_tree), "{err}");
    assert_eq!(snapshot(&victim), victim_before, "the victim directory was touched");
    // The agent's own work is archived; the symlinks are symlinks, never their targets.
    let archive = archive_refs(&repo).into_iter().find(|r| !r.contains("-branch-")).unwrap();
    assert_eq!(git(&repo, &["show", &format!("{archive}:mine.txt")]), "mine\n");
    assert_eq!(git(&repo, &["cat-file", "-p", &format!("{archive}:key-link")]), format!("{v}/id_ed25519"));
    let files = git(&repo, &["ls-tree", "-r", "--name-only", &archive]);
    assert!(!files.contains("id_ed25519\n"), "{files}");
    // Nothing of the secret repository reached this one.
    let probe = Command::new("git").arg("-C").arg(&repo).args(["cat-file", "-e", &secret_tree]).output().unwrap();
    assert!(!probe.status.success(), "the secret repository's tree was imported");
    assert!(archive_refs(&repo).iter().all(|r| !r.contains("steal")));
    env.assert_nothing_left_but_archives();
    fsck(&repo);
}

#[test]
fn the_users_refs_tags_and_other_sandboxes_work_cannot_be_moved() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    git(&repo, &["tag", "-a", "v1", "-m", "v1"]);
    // An archive of an earlier sandbox, and a second sandbox working alongside.
    let (old, other, name) = (env.unique("gi-old"), env.unique("gi-other"), env.unique("gi-refs"));
    env.ok(&["up", &old, "--git-worktree", repo.to_str().unwrap()]);
    inside(&env, &old, "cd /workspace && echo old > old.txt");
    env.ok(&["down", &old]);
    env.ok(&["up", &other, "--git-worktree", repo.to_str().unwrap()]);
    inside(&env, &other, "cd /workspace && echo o > o.txt && git add o.txt && git commit -qm other-work");
    env.ok(&["sync", &other]);
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    let refs = |repo: &Path| git(repo, &["for-each-ref", "--format=%(refname) %(objectname)"]);
    let before = refs(&repo);
    let objects = snapshot(&repo.join(".git/objects"));
    let main = git(&repo, &["rev-parse", "main"]);

    let archive = &archive_refs(&repo)[0];
    let script = format!(
        r#"cd /workspace && echo evil > a.txt && git commit -qam evil && evil=$(git rev-parse HEAD)
        git replace $(git rev-parse origin/main) $evil
        git update-ref refs/heads/main $evil; git update-ref refs/remotes/origin/main $evil 2>/dev/null
        git tag -f v1 $evil; git update-ref {archive} $evil; git update-ref refs/heads/forage-{other} $evil
        git update-ref -d refs/remotes/origin/forage-{other} 2>/dev/null
        git reset -q --hard origin/main && echo honest > h.txt && git add h.txt && git commit -qm honest && echo DONE"#,
    );
    assert!(inside(&env, &name, &script).contains("DONE"));
    env.ok(&["sync", &name]);

    // Only forage-NAME moved, to the agent's honest commit.
    let after = refs(&repo);
    let changed: Vec<&str> = after.lines().filter(|l| !before.contains(l)).collect();
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert!(changed[0].starts_with(&format!("refs/heads/forage-{name} ")), "{changed:?}");
    assert_eq!(git(&repo, &["log", "--format=%s", "-1", &format!("forage-{name}")]), "honest\n");
    assert_eq!(git(&repo, &["rev-parse", "main"]), main);
    assert_eq!(git(&repo, &["show", "-s", "--format=%s", "main"]), "initial\n");
    assert_eq!(git(&repo, &["show", "main:a.txt"]), "original\n");
    assert_eq!(git(&repo, &["replace", "-l"]), "");
    assert_objects_kept(&objects, &repo);
    env.ok(&["down", &name, "--discard"]);
    env.ok(&["down", &other]);
    fsck(&repo);
}

#[test]
fn submodule_metadata_is_out_of_the_agents_reach() {
    let env = Env::new();
    let lib = repo(&env, "lib");
    let repo = repo(&env, "repo");
    git(&repo, &["-c", "protocol.file.allow=always", "submodule", "add", "-q", lib.to_str().unwrap(), "sub"]);
    git(&repo, &["commit", "-qm", "add sub"]);
    let modules_before = snapshot(&repo.join(".git/modules"));
    let name = env.unique("gi-sub");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    let marker = env.path("pwned");
    let m = repo.join(".git/modules/sub");
    let script = format!(
        r#"mkdir -p {m}/hooks && printf '[core]\n\tfsmonitor = touch {marker}\n' > {m}/config && printf '#!/bin/sh\ntouch {marker}\n' > {m}/hooks/post-checkout
        chmod +x {m}/hooks/post-checkout; cd /workspace && printf '[submodule "sub"]\n\tpath = sub\n\turl = {lib}\n\tupdate = !touch {marker}\n' > .gitmodules
        git commit -qam gitmodules && echo DONE"#,
        m = m.display(),
        marker = marker.display(),
        lib = lib.display(),
    );
    assert!(inside(&env, &name, &script).contains("DONE"));
    // git's fsck refuses an update command in a .gitmodules (gitmodulesUpdate): so does sync.
    let err = env.fails(&["sync", &name], 6);
    assert!(err.contains("disallowed update command"), "{err}");
    git(&repo, &["status"]);
    git(&repo, &["-c", "protocol.file.allow=always", "submodule", "update", "--init"]);
    git(&repo, &["submodule", "status"]);
    assert!(!marker.exists());
    assert_eq!(snapshot(&repo.join(".git/modules")), modules_before);
    env.ok(&["down", &name, "--discard"]);
}

#[test]
fn commits_reach_the_host_by_sync_and_agents_see_each_others_work_read_only() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let r = repo.to_str().unwrap();
    let (a, b) = (env.unique("gi-a"), env.unique("gi-b"));
    env.ok(&["up", &a, "--git-worktree", r]);
    env.ok(&["up", &b, "--git-worktree", r]);
    let wt = env.home.join("workspaces").join(&a);

    // The agent sees the host's branches as origin/*, as they were at `up`.
    let out =
        inside(&env, &a, "cd /workspace && git branch -a --format='%(refname:short)' && git diff --stat origin/main");
    assert!(out.contains("origin/main") && out.contains(&format!("forage-{a}")), "{out}");
    inside(
        &env,
        &a,
        "cd /workspace && echo 1 > one.txt && git add one.txt && git commit -qm one && echo wip > wip.txt",
    );
    // Committed inside: on the host only after sync, and the host's view of the
    // worktree then shows the uncommitted file alone.
    assert_eq!(git(&repo, &["log", "--format=%s", "-1", &format!("forage-{a}")]), "initial\n");
    let out = env.json(&["sync", &a, "--json"]);
    assert_eq!(out["new_commits"], 1, "{out}");
    assert_eq!(git(&repo, &["log", "--format=%s", "-1", &format!("forage-{a}")]), "one\n");
    assert_eq!(git(&wt, &["status", "--porcelain"]), "?? wip.txt\n");
    let status = env.json(&["status", &a, "--json"]);
    assert_eq!(status["git"]["dirty"], serde_json::json!(["wip.txt"]), "{status}");

    // b sees a's synced work, and a branch the user moved, without being able to change them.
    git(&repo, &["commit", "-q", "--allow-empty", "-m", "user moved main"]);
    env.ok(&["sync", &b]);
    let out = inside(&env, &b, &format!("cd /workspace && git log --format=%s -1 origin/forage-{a} && git log --format=%s -1 origin/main && (git update-ref refs/remotes/origin/main HEAD 2>/dev/null || echo READ-ONLY)"));
    assert_eq!(out, "one\nuser moved main\nREAD-ONLY\n");
    inside(&env, &b, &format!("cd /workspace && git merge -q origin/forage-{a} && test -f one.txt"));

    // The agent rewriting its branch moves the host's branch with it; the user
    // committing on the host's side too makes sync refuse rather than drop either.
    inside(&env, &a, "cd /workspace && git commit -q --amend -m one-amended");
    env.ok(&["sync", &a]);
    assert_eq!(git(&repo, &["log", "--format=%s", "-1", &format!("forage-{a}")]), "one-amended\n");
    git(&wt, &["commit", "-q", "--allow-empty", "-m", "by the user, on the host"]);
    inside(&env, &a, "cd /workspace && git commit -q --allow-empty -m two");
    let err = env.fails(&["sync", &a], 4);
    assert!(err.contains("was changed") && err.contains("nothing was moved"), "{err}");
    assert_eq!(git(&repo, &["log", "--format=%s", "-1", &format!("forage-{a}")]), "by the user, on the host\n");
    let out = env.ok(&["down", &a]);
    assert!(out.contains(&format!("branch forage-{a} in the sandbox")), "{out}");
    let refs = archive_refs(&repo);
    assert_eq!(refs.len(), 2, "{refs:?}");
    let subjects: String = refs.iter().map(|r| git(&repo, &["log", "--format=%s", "-1", r])).collect();
    assert!(subjects.contains("two") && subjects.contains("forage: uncommitted work"), "{subjects}");
    env.ok(&["down", &b, "--discard"]);
}

#[test]
fn forged_objects_and_trees_git_would_refuse_are_never_imported() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("gi-forge");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    let before = repo_state(&repo);
    let objects = snapshot(&repo.join(".git/objects"));
    // A blob whose file holds another blob's content: its id no longer matches.
    let script = r#"cd /workspace && echo real > f.txt && git add f.txt && git commit -qm forged
        id=$(git rev-parse HEAD:f.txt); other=$(echo other | git hash-object -w --stdin)
        f=/forage/git/objects/$(echo $id | cut -c1-2)/$(echo $id | cut -c3-)
        o=/forage/git/objects/$(echo $other | cut -c1-2)/$(echo $other | cut -c3-)
        chmod u+w $f && cp $o $f && echo $id"#;
    let forged = inside(&env, &name, script).trim().to_owned();
    let err = env.fails(&["sync", &name], 6);
    assert!(err.contains(&forged) && err.contains("does not match its id"), "{err}");
    assert_eq!(repo_state(&repo), before);
    let probe = Command::new("git").arg("-C").arg(&repo).args(["cat-file", "-e", &forged]).output().unwrap();
    assert!(!probe.status.success(), "the forged object reached the host");
    let status = env.json(&["status", &name, "--json"]);
    assert!(status["sync_error"].as_str().unwrap().contains("does not match"), "{status}");

    // A tree holding `.git/hooks/post-checkout`, which an older git would run on checkout.
    let script = r#"cd /workspace && git reset -q --hard origin/main
        hook=$(printf '#!/bin/sh\ntouch /tmp/x\n' | git hash-object -w --stdin)
        hooks=$(printf '100755 blob %s\tpost-checkout\n' $hook | git mktree)
        dotgit=$(printf '040000 tree %s\thooks\n' $hooks | git mktree)
        root=$(printf '040000 tree %s\t.git\n' $dotgit | git mktree --missing)
        c=$(git commit-tree $root -p HEAD -m evil) && git update-ref refs/heads/forage-$FORAGE_SANDBOX $c && echo $root"#;
    let tree = inside(&env, &name, script).trim().to_owned();
    let err = env.fails(&["sync", &name], 6);
    assert!(err.contains(&tree) && err.contains(".git"), "{err}");
    assert_eq!(repo_state(&repo), before);

    // down keeps what it can (the worktree's files), says what it could not, and finishes.
    inside(&env, &name, "echo kept > /workspace/kept.txt");
    let out = env.run(&["down", &name]);
    assert!(out.status.success(), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not archived") && err.contains(".git"), "{err}");
    let archive = &archive_refs(&repo)[0];
    assert_eq!(git(&repo, &["show", &format!("{archive}:kept.txt")]), "kept\n");
    env.assert_nothing_left_but_archives();
    assert_objects_kept(&objects, &repo);
    fsck(&repo);
}

#[test]
fn work_anywhere_in_the_agents_repository_survives_down() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("gi-every");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    let script = r#"cd /workspace
        echo stashed > s.txt && git add s.txt && git stash -q
        git checkout -q -b feature && echo f > f.txt && git add f.txt && git commit -qm feature-work
        git checkout -q --detach && echo d > d.txt && git add d.txt && git commit -qm detached-work
        mkdir -p nested && cd nested && git init -q && echo n > n.txt && git add n.txt && git commit -qm nested && cd ..
        mkdir -p empty-dir; mkfifo pipe; echo staged > st.txt && git add st.txt && echo then-changed > st.txt; echo DONE"#;
    assert!(inside(&env, &name, script).contains("DONE"));
    let out = env.run(&["down", &name]);
    assert!(out.status.success(), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("detached HEAD") && stdout.contains("branch feature") && stdout.contains("stash@{0}"),
        "{stdout}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("pipe: not a file"), "{}", describe(&out));
    let refs = archive_refs(&repo);
    let find = |suffix: &str| refs.iter().find(|r| r.ends_with(suffix)).unwrap_or_else(|| panic!("{suffix}: {refs:?}"));
    assert_eq!(git(&repo, &["log", "--format=%s", "-1", find("-head")]), "detached-work\n");
    assert_eq!(git(&repo, &["log", "--format=%s", "-1", find("-branch-feature")]), "feature-work\n");
    assert_eq!(git(&repo, &["show", &format!("{}^2:s.txt", find("-stash-0"))]), "stashed\n");
    // The worktree's files: the nested repository's files (not its .git), and the
    // working-tree version of a file changed after staging.
    let main = refs.iter().find(|r| r.rsplit('/').next().unwrap().chars().all(|c| c.is_ascii_alphanumeric())).unwrap();
    let files = git(&repo, &["ls-tree", "-r", "--name-only", main]);
    assert!(files.contains("nested/n.txt") && files.contains("d.txt") && !files.contains("nested/.git"), "{files}");
    assert_eq!(git(&repo, &["show", &format!("{main}:st.txt")]), "then-changed\n");
    env.assert_nothing_left_but_archives();
    // Each archive can be restored by its name.
    env.ok(&["restore", &name, "--archive", find("-branch-feature"), "--branch", "got-feature"]);
    assert_eq!(git(&repo, &["log", "--format=%s", "-1", "got-feature"]), "feature-work\n");
    fsck(&repo);
}

#[test]
fn restore_uses_the_commit_down_recorded_not_a_moved_archive_ref() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("gi-restore");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    inside(&env, &name, "echo work > /workspace/work.txt");
    env.ok(&["down", &name]);
    let archive = archive_refs(&repo)[0].clone();
    let archived = git(&repo, &["rev-parse", &archive]);
    // Someone (another sandbox of an older forage, say) moves the archive ref.
    git(&repo, &["update-ref", &archive, "main"]);
    env.ok(&["restore", &name]);
    assert_eq!(git(&repo, &["rev-parse", &format!("forage-{name}")]), archived);
}

#[test]
fn an_agent_that_locks_its_files_away_cannot_stop_down_as_an_ordinary_user() {
    let uid = 4244;
    let env = Env::new();
    env.give(env.dir.path(), uid);
    let repo = repo(&env, "repo");
    Command::new("chown").arg("-R").arg(format!("{uid}")).arg(&repo).status().unwrap();
    let name = env.unique("gi-locked");
    let as_user = |args: &[&str]| {
        let out = env.cmd_as(uid, args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", describe(&out));
        String::from_utf8(out.stdout).unwrap()
    };
    as_user(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    as_user(&[
        "exec",
        &name,
        "--",
        "sh",
        "-c",
        "cd /workspace && mkdir -p locked/deeper && echo hidden > locked/deeper/h.txt && echo secret > unreadable.txt \
         && chmod 000 unreadable.txt locked/deeper && chmod 000 locked && chmod 500 /forage/git/objects",
    ]);
    // status only looks: what it may not read it leaves alone, and says the rest.
    as_user(&["status", &name]);
    as_user(&["down", &name]);
    // (root's git refuses a repository another user owns unless told it is safe)
    let show = |what: &str| git(&repo, &["-c", "safe.directory=*", "show", what]);
    let archive = git(&repo, &["-c", "safe.directory=*", "for-each-ref", "--format=%(refname)", "refs/forage/archive"]);
    let archive = archive.trim();
    assert_eq!(show(&format!("{archive}:locked/deeper/h.txt")), "hidden\n");
    assert_eq!(show(&format!("{archive}:unreadable.txt")), "secret\n");
    env.assert_nothing_left_but_archives();
}

#[test]
fn a_repository_the_agent_makes_at_a_submodules_path_runs_nothing_in_the_users_git() {
    let env = Env::new();
    let lib = repo(&env, "lib");
    let repo = repo(&env, "repo");
    git(&repo, &["-c", "protocol.file.allow=always", "submodule", "add", "-q", lib.to_str().unwrap(), "sub"]);
    git(&repo, &["commit", "-qm", "add sub"]);
    let name = env.unique("gi-sublink");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    let marker = env.path("pwned");
    // A repository at the submodule's path, and at a submodule the agent adds
    // itself, each with a config whose fsmonitor git runs on `status`.
    let script = format!(
        r#"cd /workspace && for d in sub evil; do rm -rf $d; git init -q $d && git -C $d commit -q --allow-empty -m x
          printf '[core]\n\tfsmonitor = touch {marker}\n\tuntrackedCache = false\n' >> $d/.git/config; done
        git update-index --add --cacheinfo 160000,$(git -C evil rev-parse HEAD),evil && git commit -qm 'a submodule of my own' && echo DONE"#,
        marker = marker.display(),
    );
    assert!(inside(&env, &name, &script).contains("DONE"));
    env.ok(&["sync", &name]);
    let wt = env.home.join("workspaces").join(&name);
    for args in [&["status"][..], &["diff"], &["diff", "HEAD~1"], &["log", "-1", "--stat"], &["add", "-A", "--dry-run"]]
    {
        git(&wt, args);
    }
    git(&repo, &["status"]);
    env.ok(&["status", &name]);
    assert!(!marker.exists(), "the user's git ran the agent's fsmonitor");
    env.ok(&["down", &name, "--discard"]);
    env.assert_nothing_left_but_archives();
}

/// Runs `args`, failing the test if forage-ctl has not finished within `secs`:
/// a hang (on a FIFO, say) fails here rather than at CI's timeout.
fn finishes_within(env: &Env, secs: u64, args: &[&str]) -> std::process::Output {
    let mut child =
        env.cmd(args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let finished = eventually(secs, || child.try_wait().unwrap().is_some());
    if !finished {
        child.kill().unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(finished, "forage-ctl {args:?} hung: {}", describe(&out));
    out
}

#[test]
fn fifos_huge_sparse_files_deep_trees_and_names_git_refuses_cost_forage_bounded_work() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("gi-hostile-files");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    let script = r#"cd /workspace && echo kept > kept.txt && rm .gitignore && mkfifo .gitignore pipe
        d=deep; i=0; while [ $i -lt 600 ]; do d=$d/d; i=$((i+1)); done; mkdir -p $d && echo bottom > $d/f
        mkdir -p shallow/a && echo near > shallow/a/f
        echo x > '.git.' && echo x > 'GIT~1' && echo x > '.jj ' && echo DONE"#;
    assert!(inside(&env, &name, script).contains("DONE"));
    // A 2 GiB sparse file, costing the agent nothing (made from the host side:
    // the image has no dd or truncate; the bind mount is the same directory).
    let huge = std::fs::File::create(env.home.join("workspaces").join(&name).join("huge")).unwrap();
    huge.set_len(2 << 30).unwrap();
    let status = finishes_within(&env, 300, &["status", &name, "--json"]);
    assert!(status.status.success(), "{}", describe(&status));
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let left_out = status["git"]["not_archivable"].as_array().unwrap();
    assert!(left_out.iter().any(|p| p.as_str().unwrap().starts_with("pipe: not a file")), "{status}");
    assert!(left_out.iter().any(|p| p.as_str().unwrap().starts_with("huge: larger than")), "{status}");
    let out = finishes_within(&env, 300, &["down", &name]);
    assert!(out.status.success(), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    for (path, why) in [
        ("huge", "larger than"),
        ("pipe", "not a file"),
        (".gitignore", "not a file"),
        ("deeper than", "deeper than"),
        (".git.", "git directory"),
        ("GIT~1", "git directory"),
    ] {
        assert!(err.contains(path) && err.contains(why), "down did not say it left {path} out ({why}): {err}");
    }
    let archive = &archive_refs(&repo)[0];
    let files = git(&repo, &["ls-tree", "-r", "--name-only", archive]);
    let files: Vec<&str> = files.lines().collect();
    // A path forage could not read keeps its last committed content: a FIFO in
    // place of .gitignore neither deletes the file from the work nor blocks down.
    assert_eq!(files, [".gitignore", "a.txt", "kept.txt", "shallow/a/f"], "what the archive holds");
    let kept = git(&repo, &["show", &format!("{archive}:.gitignore")]);
    assert_eq!(kept, git(&repo, &["show", "main:.gitignore"]), "the committed .gitignore, not the FIFO");
    fsck(&repo);
    env.assert_nothing_left_but_archives();
}

#[test]
fn refs_the_agent_forges_or_multiplies_cost_down_bounded_work_and_lose_nothing_else() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("gi-refs");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    let before = repo_state(&repo);
    // The sandbox's branch at a tree, another branch at a blob: written as
    // files, which git inside would have refused to do.
    let script = r#"cd /workspace && t=$(git rev-parse HEAD^{tree}) && b=$(git rev-parse HEAD:a.txt)
        echo $t > /forage/git/refs/heads/forage-$FORAGE_SANDBOX && echo $b > /forage/git/refs/heads/blob && echo DONE"#;
    assert!(inside(&env, &name, script).contains("DONE"));
    let err = env.fails(&["sync", &name], 6);
    assert!(err.contains("points at a tree"), "{err}");
    assert_eq!(repo_state(&repo), before, "sync moved a ref");

    // Two branches whose names make one archive name, 300 more, and a stash
    // reflog of 100,000 entries: forage looks at 256 places and says so.
    let script = r#"cd /workspace && git checkout -q -B work origin/main
        echo slash > f && git add f && git commit -qm 'on a/b' && git branch a/b
        echo dash > f && git commit -qam 'on a-b' && git branch a-b
        echo many > f && git commit -qam many && c=$(git rev-parse HEAD)
        i=0; while [ $i -lt 300 ]; do echo $c > /forage/git/refs/heads/many-$i; i=$((i+1)); done
        mkdir -p /forage/git/logs/refs && awk 'BEGIN { for (i = 0; i < 100000; i++) printf "%040d %040x x <x> 0 +0000\tstash\n", 0, i + 1 }' > /forage/git/logs/refs/stash
        git rev-parse a/b a-b"#;
    let tips = inside(&env, &name, script);
    let out = finishes_within(&env, 300, &["down", &name]);
    assert!(out.status.success(), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("branch blob") && err.contains("points at a blob"), "{err}");
    assert!(err.contains("more branches and stashes"), "{err}");
    let archives = archive_refs(&repo);
    assert!(archives.len() <= 256 + 2, "{} archive refs", archives.len());
    // Both branches that share an archive name are kept, each under its own ref.
    for tip in tips.lines() {
        assert!(
            archives.iter().any(|a| git(&repo, &["rev-parse", a]).trim() == tip),
            "branch at {tip} was not archived: {archives:?}"
        );
    }
    assert!(!archives.iter().any(|a| a.contains("..") || a.ends_with(".lock")), "{archives:?}");
    fsck(&repo);
    env.assert_nothing_left_but_archives();
}

/// Makes the agent's branch the commit the script (run inside, after the
/// `forage-$FORAGE_SANDBOX` branch is reset to `origin/main`) leaves in `$c`,
/// and prints `$c`'s type (proof the attack object was made and is the tip)
/// then the script's last line (the object the refusal must name).
fn plant_tip(env: &Env, name: &str, script: &str) -> String {
    let out = inside(
        env,
        name,
        &format!(
            "cd /workspace && git reset -q --hard origin/main && {script}
             git update-ref refs/heads/forage-$FORAGE_SANDBOX $c && git cat-file -t forage-$FORAGE_SANDBOX && echo $bad"
        ),
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 2, "the attack step did not take effect: {out}");
    assert_eq!(lines[0], "commit", "the sandbox's branch is not the planted commit: {out}");
    lines[1].to_owned()
}

#[test]
fn objects_git_fsck_or_jj_would_refuse_are_never_imported() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("gi-fsck");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    let before = repo_state(&repo);
    let objects = snapshot(&repo.join(".git/objects"));
    let blob = "b=$(echo x | git hash-object -w --stdin) && empty=$(git mktree </dev/null)";
    let commit = "c=$(git commit-tree $t -p HEAD -m attack)";
    let header = |line: &str| {
        format!(
            "{blob} && t=$(printf '100644 blob %s\\tf\\n' $b | git mktree) && \
             c=$(git cat-file commit HEAD | sed '/^committer/a {line}' | git hash-object -t commit --literally -w --stdin) && bad=$c"
        )
    };
    let attacks = [
        // A symlink `a` and a directory `a`, with `a.b` between them.
        (format!("{blob} && t=$(printf '120000 blob %s\\ta\\n100644 blob %s\\ta.b\\n040000 tree %s\\ta\\n' $b $b $empty | git mktree) && bad=$t && {commit}"), "two entries named"),
        // `.git` as HFS+ sees `.g\u200cit` and as NTFS sees `.git::$INDEX_ALLOCATION`.
        (format!("{blob} && t=$(printf '040000 tree %s\\t.g\\342\\200\\214it\\n' $empty | git mktree) && bad=$t && {commit}"), "git directory"),
        (format!("{blob} && t=$(printf '040000 tree %s\\t.git::$INDEX_ALLOCATION\\n' $empty | git mktree) && bad=$t && {commit}"), "git directory"),
        // A .gitmodules (spelt as its NTFS short name) whose url is an option to ssh.
        (format!("m=$(printf '[submodule \"s\"]\\n\\tpath = s\\n\\turl = -oProxyCommand=touch${{IFS}}/tmp/pwned\\n' | git hash-object -w --stdin) && t=$(printf '100644 blob %s\\tGITMOD~1\\n' $m | git mktree) && bad=$m && {commit}"), "disallowed url"),
        // Headers git and jj never write: an unknown one, and a change id in
        // uppercase (jj reads it as the lowercase one it copies).
        (header("x-agent: evil"), "x-agent"),
        (header("change-id ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ"), "change id"),
        // Trees nested 2049 deep: git's own `ls-tree -r` refuses them.
        (format!("{blob} && t=$empty && i=0 && while [ $i -le 2048 ]; do t=$(printf '040000 tree %s\\td\\n' $t | git mktree); i=$((i+1)); done && bad=$t && {commit}"), "core.maxTreeDepth"),
    ];
    for (script, why) in attacks {
        let bad = plant_tip(&env, &name, &script);
        let err = env.fails(&["sync", &name], 6);
        assert!(err.contains(&bad) && err.contains(why) && err.contains("nothing was imported"), "{why}: {err}");
        assert_eq!(repo_state(&repo), before, "{why}: a ref moved");
        assert_eq!(snapshot(&repo.join(".git/objects")), objects, "{why}: the host's objects changed");
    }
    let out = finishes_within(&env, 300, &["down", &name]);
    assert!(out.status.success(), "{}", describe(&out));
    env.assert_nothing_left_but_archives();
    fsck(&repo);
}

/// The files of the host's object store outside its packs.
fn loose_objects(repo: &Path) -> usize {
    snapshot(&repo.join(".git/objects"))
        .iter()
        .filter(|(p, ..)| !p.starts_with("pack") && !p.starts_with("info"))
        .count()
}

#[test]
fn many_commits_land_as_one_pack_and_sparse_or_padded_objects_cost_the_host_nothing() {
    let env = Env::new();
    let repo = repo(&env, "repo");
    let name = env.unique("gi-sizes");
    env.ok(&["up", &name, "--git-worktree", repo.to_str().unwrap()]);
    // 20,000 commits, each with a tree and a blob of its own, made as one pack
    // (one pack whatever their number: 20,000 show it within seconds).
    let script = r#"cd /workspace && tip=$(git rev-parse HEAD) && awk -v tip=$tip -v b=refs/heads/forage-$FORAGE_SANDBOX 'BEGIN {
        for (i = 1; i <= 20000; i++) {
            printf "commit %s\ncommitter a <a@example.com> %d +0000\ndata 5\nc%03d\n", b, 1700000000 + i, i % 1000
            if (i == 1) printf "from %s\n", tip
            printf "M 100644 inline f\ndata %d\n%d\n\n", length(i "") + 1, i
        } }' | git fast-import --quiet && git rev-list --count HEAD"#;
    assert_eq!(inside(&env, &name, script).trim(), "20001", "the agent's 20,000 commits were not made");
    let (loose, packs) = (loose_objects(&repo), std::fs::read_dir(repo.join(".git/objects/pack")).unwrap().count());
    let out = finishes_within(&env, 600, &["sync", &name]);
    assert!(out.status.success(), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("20000 new commits"), "{}", describe(&out));
    assert_eq!(loose_objects(&repo), loose, "the import wrote loose objects");
    assert_eq!(std::fs::read_dir(repo.join(".git/objects/pack")).unwrap().count(), packs + 2, "one pack and its index");
    assert_eq!(git(&repo, &["rev-list", "--count", &format!("forage-{name}")]).trim(), "20001");

    // A pack of 1 TiB that costs the agent nothing (made from the host side:
    // the image has no truncate; the bind mount is the same directory).
    let before = repo_state(&repo);
    let pack_dir = env.home.join("private").join(&name).join("git/objects/pack");
    let sparse = pack_dir.join(format!("pack-{}.pack", "0".repeat(40)));
    std::fs::File::create(&sparse).unwrap().set_len(1 << 40).unwrap();
    std::fs::write(pack_dir.join(format!("pack-{}.idx", "0".repeat(40))), b"idx").unwrap();
    let c =
        inside(&env, &name, "cd /workspace && echo more > g && git add g && git commit -qm more && git rev-parse HEAD");
    assert_eq!(c.len(), 41, "the agent's next commit was not made: {c}");
    let out = finishes_within(&env, 60, &["sync", &name]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{}", describe(&out));
    assert!(err.contains("sparse") && err.contains(sparse.file_name().unwrap().to_str().unwrap()), "{err}");
    assert_eq!(repo_state(&repo), before);
    assert!(!env.home.join("private").join(&name).join("import").exists(), "the staging copy was left");
    std::fs::remove_file(&sparse).unwrap();

    // A loose object padded to 3 GiB (sparse: the padding costs the agent nothing).
    let blob = inside(
        &env,
        &name,
        "cd /workspace && echo padded > h && git add h && git commit -qm padded && git rev-parse HEAD:h",
    );
    let blob = blob.trim();
    let file = env.home.join("private").join(&name).join("git/objects").join(&blob[..2]).join(&blob[2..]);
    let mut perms = std::fs::metadata(&file).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o644);
    std::fs::set_permissions(&file, perms).unwrap();
    std::fs::OpenOptions::new().write(true).open(&file).unwrap().set_len(3 << 30).unwrap();
    let out = finishes_within(&env, 60, &["sync", &name]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(6), "{}", describe(&out));
    assert!(err.contains(&blob[2..]) && (err.contains("sparse") || err.contains("more than")), "{err}");
    assert_eq!(repo_state(&repo), before);
    assert_eq!(loose_objects(&repo), loose, "a refused sync wrote objects");

    // The sparse pack again: `status` and `down` still finish, saying what they left.
    std::fs::File::create(&sparse).unwrap().set_len(1 << 40).unwrap();
    let status = finishes_within(&env, 60, &["status", &name]);
    assert!(
        status.status.success() && String::from_utf8_lossy(&status.stdout).contains("sparse"),
        "{}",
        describe(&status)
    );
    let out = finishes_within(&env, 300, &["down", &name]);
    assert!(out.status.success(), "{}", describe(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not archived") && err.contains("sparse"), "{err}");
    env.assert_nothing_left_but_archives();
    fsck(&repo);
}
