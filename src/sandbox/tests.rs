//! Ordering and rollback of the engine, against a fake runtime that records what
//! it is asked to do. (The real engine is exercised by tests/it.)

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use super::*;
use crate::progress::Silent;
use crate::runtime::{ContainerDetails, ContainerSummary, ImageSource, ReadyImage, StartWatch};
use crate::template;
use crate::workspace::direct::DirectPath;
use crate::workspace::git::GitRequest;

#[derive(Default)]
struct FakeRuntime {
    calls: RefCell<Vec<String>>,
    fail_start: bool,
    fail_image: std::cell::Cell<bool>,
    /// A path that must still exist whenever the container is removed.
    workspace_must_exist: Option<PathBuf>,
}

impl FakeRuntime {
    fn log(&self, call: &str) {
        self.calls.borrow_mut().push(call.to_owned());
    }
    fn calls(&self) -> Vec<String> {
        self.calls.borrow().clone()
    }
}

impl Runtime for FakeRuntime {
    async fn ensure_image(&self, _: &ImageSource, _: &dyn Progress) -> Result<ReadyImage> {
        self.log("ensure_image");
        if self.fail_image.get() {
            return Err(Error::other("image build failed on purpose"));
        }
        Ok(ReadyImage { reference: "fake:1".into(), has_identity: true, programs: None })
    }
    async fn create(&self, spec: &ContainerSpec) -> Result<()> {
        self.log(&format!("create {}", spec.name));
        Ok(())
    }
    async fn start(&self, name: &str) -> Result<()> {
        self.log(&format!("start {name}"));
        if self.fail_start {
            return Err(Error::other("start failed on purpose"));
        }
        Ok(())
    }
    async fn stop(&self, name: &str, _: u32) -> Result<()> {
        self.log(&format!("stop {name}"));
        Ok(())
    }
    async fn remove(&self, name: &str) -> Result<()> {
        if let Some(p) = &self.workspace_must_exist {
            assert!(p.exists(), "the workspace was touched before the container was gone");
        }
        self.log(&format!("remove {name}"));
        Ok(())
    }
    async fn inspect(&self, _: &str) -> Result<Option<ContainerDetails>> {
        Ok(None)
    }
    async fn run_captured(&self, _: &str, command: Vec<String>, _: Identity) -> Result<(i64, String)> {
        self.log(&format!("run {}", command.join(" ")));
        Ok((0, String::new()))
    }
    async fn run_to_end(&self, spec: &ContainerSpec) -> Result<(i64, String)> {
        self.log(&format!("run_to_end {}", spec.name));
        Ok((0, String::new()))
    }
    async fn watch(&self, _: &str) -> Result<StartWatch> {
        Ok(StartWatch::unwatched())
    }
    async fn list(&self, _: &str) -> Result<Vec<ContainerSummary>> {
        Ok(Vec::new())
    }
}

/// A direct workspace beside the test's FORAGE_HOME (`<dir>/home`).
fn direct_workspace(dir: &Path) -> DirectPath {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    DirectPath::validate(&ws, &dir.join("home"), true).unwrap()
}

fn template() -> template::Resolved {
    template::Resolved {
        name: "fake".into(),
        origin: template::Origin::Builtin,
        template: template::parse("image: fake:1\nagent: {command: [sh]}\n", "fake").unwrap(),
        builtin_dockerfile: None,
    }
}

fn request(name: &str, workspace: WorkspaceRequest) -> UpRequest {
    UpRequest::new(SandboxName::parse(name).unwrap(), template(), workspace)
}

fn engine<'a>(home: &Path, runtime: &'a FakeRuntime) -> Engine<'a, FakeRuntime> {
    Engine { home: Home::at(home.to_path_buf()).unwrap(), runtime, progress: &Silent, cancel: Cancel::default() }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

#[test]
fn a_failing_step_undoes_the_finished_ones_in_reverse_and_forgets_the_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = FakeRuntime { fail_start: true, ..Default::default() };
    let ws = WorkspaceRequest::Direct(direct_workspace(dir.path()));
    let err = block_on(engine(&dir.path().join("home"), &runtime).up(request("a", ws))).unwrap_err();
    assert!(err.to_string().contains("start failed on purpose"));
    assert_eq!(runtime.calls(), ["ensure_image", "create forage-a", "start forage-a", "remove forage-a"]);
    let home = Home::at(dir.path().join("home")).unwrap();
    assert!(home.load(&SandboxName::parse("a").unwrap()).unwrap().is_none());
}

#[test]
fn up_journals_each_step_before_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = FakeRuntime::default();
    let ws = WorkspaceRequest::Direct(direct_workspace(dir.path()));
    let record = block_on(engine(&dir.path().join("home"), &runtime).up(request("b", ws))).unwrap();
    assert_eq!(record.state, RecordState::Ready);
    assert_eq!(record.journal, vec![Step::Container { name: "forage-b".into() }]);
}

#[test]
fn down_removes_the_container_before_it_touches_the_worktree() {
    let dir = tempfile::tempdir().unwrap();
    let repo_dir = dir.path().join("repo");
    let repo = git2::Repository::init(&repo_dir).unwrap();
    std::fs::write(repo_dir.join("a"), "a").unwrap();
    let mut index = repo.index().unwrap();
    index.add_path(Path::new("a")).unwrap();
    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
    let sig = git2::Signature::now("t", "t@example.com").unwrap();
    repo.commit(Some("HEAD"), &sig, &sig, "init", &tree, &[]).unwrap();

    let home = dir.path().join("home");
    let name = SandboxName::parse("c").unwrap();
    let worktree = home.join("workspaces/c");
    let private = home.join("private/c");
    let git = GitRequest::validate(&repo_dir, None, None, &name, worktree.clone(), private.clone()).unwrap();
    let ws = WorkspaceRequest::GitWorktree(git);
    let runtime = FakeRuntime { workspace_must_exist: Some(worktree.clone()), ..Default::default() };
    let eng = engine(&home, &runtime);
    block_on(eng.up(request("c", ws))).unwrap();
    assert!(worktree.join("a").exists());

    let report = block_on(eng.down(&name, DownOptions::default())).unwrap();
    assert!(report.archived.is_none(), "nothing to archive");
    assert_eq!(runtime.calls()[3..], ["stop forage-c", "remove forage-c"]);
    assert!(!worktree.exists(), "the worktree goes once the container is gone");
    assert!(!private.exists(), "and so does the private repository");
    assert!(repo.find_branch("forage-c", git2::BranchType::Local).is_err());
}

#[test]
fn reset_settles_the_image_before_it_touches_the_old_container() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = FakeRuntime::default();
    let eng = engine(&dir.path().join("home"), &runtime);
    let ws = WorkspaceRequest::Direct(direct_workspace(dir.path()));
    block_on(eng.up(request("r", ws))).unwrap();
    let name = SandboxName::parse("r").unwrap();
    let resolve = |_: &str| Ok(template());

    runtime.fail_image.set(true);
    let err = block_on(eng.reset(&name, resolve)).unwrap_err();
    assert!(err.to_string().contains("image build failed on purpose"));
    assert_eq!(runtime.calls()[3..], ["ensure_image"], "the old container is left alone");

    runtime.fail_image.set(false);
    let record = block_on(eng.reset(&name, resolve)).unwrap();
    assert_eq!(
        runtime.calls()[4..],
        ["ensure_image", "stop forage-r", "remove forage-r", "create forage-r", "start forage-r"]
    );
    assert_eq!(record.state, RecordState::Ready);
    assert_eq!(record.journal, vec![Step::Container { name: "forage-r".into() }], "the journal is unchanged");
}
