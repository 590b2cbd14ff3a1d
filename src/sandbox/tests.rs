//! Ordering and rollback of the engine, against a fake runtime that records what
//! it is asked to do. (The real engine is exercised by tests/it.)

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::*;
use crate::progress::Silent;
use crate::record::{RecordState, Step};
use crate::runtime::{
    ContainerDetails, ContainerSpec, ContainerSummary, ExecOptions, ImageSource, OutputStream, ReadyImage, Session,
    SessionId, StartWatch,
};
use crate::workspace::Synced;

#[derive(Default)]
struct FakeRuntime {
    calls: Mutex<Vec<String>>,
    fail_start: bool,
    fail_image: AtomicBool,
    fail_upload: bool,
    /// A path that must still exist whenever the container is removed.
    workspace_must_exist: Option<PathBuf>,
    /// The mounts of each container created, as the engine would report them.
    mounts: Mutex<std::collections::HashMap<String, Vec<crate::runtime::Mount>>>,
}

impl FakeRuntime {
    fn log(&self, call: &str) {
        self.calls.lock().unwrap().push(call.to_owned());
    }
    fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
}

impl Runtime for FakeRuntime {
    async fn ping(&self) -> Result<()> {
        Ok(())
    }
    async fn ensure_image(&self, _: &ImageSource, _: &dyn crate::progress::Progress) -> Result<ReadyImage> {
        self.log("ensure_image");
        if self.fail_image.load(Ordering::SeqCst) {
            return Err(Error::other("image build failed on purpose"));
        }
        Ok(ReadyImage { reference: "fake:1".into(), has_identity: true, programs: None, base: None })
    }
    async fn create(&self, spec: &ContainerSpec) -> Result<()> {
        self.log(&format!("create {}", spec.name));
        self.mounts.lock().unwrap().insert(spec.name.clone(), spec.mounts.clone());
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
    async fn inspect(&self, name: &str) -> Result<Option<ContainerDetails>> {
        let mounts = self.mounts.lock().unwrap().get(name).cloned();
        Ok(mounts.map(|mounts| ContainerDetails {
            id: name.to_owned(),
            state: crate::runtime::ContainerState::Created,
            exit_code: None,
            started_at: None,
            finished_at: None,
            image: "fake:1".into(),
            mounts,
        }))
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
    async fn exec(&self, _: &str, _: Vec<String>, _: ExecOptions) -> Result<Session> {
        Err(Error::other("no sessions in the fake"))
    }
    async fn attach(&self, _: &str) -> Result<Session> {
        Err(Error::other("no sessions in the fake"))
    }
    async fn resize(&self, _: &SessionId, _: u16, _: u16) -> Result<()> {
        Ok(())
    }
    async fn exit_code(&self, _: &SessionId) -> Result<Option<i64>> {
        Ok(None)
    }
    fn logs(&self, _: &str, _: bool, _: Option<u64>) -> OutputStream {
        Box::pin(futures_util::stream::empty())
    }
    async fn last_output(&self, _: &str) -> Result<Option<std::time::SystemTime>> {
        Ok(None)
    }
    async fn upload(&self, _: &str, _: &str, _: Vec<u8>) -> Result<()> {
        self.log("upload");
        if self.fail_upload {
            return Err(Error::other("upload failed on purpose"));
        }
        Ok(())
    }
    async fn download(&self, _: &str, _: &str, _: &str, _: u64) -> Result<crate::runtime::Download> {
        Ok(crate::runtime::Download::Absent)
    }
}

/// An engine over `runtime`, with FORAGE_HOME at `<dir>/home` and one template,
/// `fake`, on the search path.
fn engine(dir: &Path, runtime: Arc<FakeRuntime>) -> Engine<FakeRuntime> {
    let templates = dir.join("templates");
    std::fs::create_dir_all(&templates).unwrap();
    std::fs::write(templates.join("fake.yaml"), "image: fake:1\nagent: {command: [sh]}\n").unwrap();
    let settings = crate::env::Settings { templates_path: vec![templates], ..Default::default() };
    Engine {
        home: Home::at(dir.join("home")).unwrap(),
        runtime,
        progress: Arc::new(Silent),
        cancel: Cancel::default(),
        settings: Arc::new(settings),
        identity: Identity { uid: 1000, gid: 1000 },
    }
}

/// `up NAME -t fake` with the given workspace.
fn request<R: Runtime>(engine: &Engine<R>, name: &str, workspace: WorkspaceSpec) -> UpRequest {
    let spec = UpSpec {
        name: SandboxName::parse(name).unwrap(),
        template: "fake".into(),
        workspace,
        base: None,
        branch: None,
        image: None,
        env: Vec::new(),
        secrets: Vec::new(),
        allow: Vec::new(),
        publish: Vec::new(),
        network: None,
        memory: None,
        cpus: None,
        read_only: false,
        allow_home: false,
        start: true,
        task: None,
        profile: None,
        agent_args: Vec::new(),
        include_uncommitted: false,
        cow: None,
        no_project_toolchain: false,
    };
    block_on(engine.prepare_up(spec)).unwrap()
}

/// A directory beside the test's FORAGE_HOME, for a direct workspace.
fn direct_workspace(dir: &Path) -> WorkspaceSpec {
    let ws = dir.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    WorkspaceSpec::Direct(ws)
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
}

/// A server holds an engine across threads and runs its futures on a
/// multi-threaded runtime: they must be `Send`, the engine `Send + Sync`.
#[allow(dead_code)]
fn engine_and_its_futures_are_send(engine: Engine<crate::runtime::docker::Docker>, name: SandboxName, req: UpRequest) {
    fn send<T: Send>(_: T) {}
    fn send_sync<T: Send + Sync>(_: &T) {}
    send_sync(&engine);
    send(engine.up(req));
    send(engine.down(&name, DownOptions::default()));
    send(engine.sync(&name));
    send(engine.status(&name));
    send(engine.list());
    send(engine.gc(true));
    send(engine.reset(&name, |_| Err(Error::other("x"))));
    send(engine.restore(&name, None, None, true, &[]));
    send(engine.attach(&name));
    send(engine.logout("t", "p"));
    let _: Option<Synced> = None;
}

#[test]
fn a_failing_step_undoes_the_finished_ones_in_reverse_and_forgets_the_sandbox() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = Arc::new(FakeRuntime { fail_start: true, ..Default::default() });
    let eng = engine(dir.path(), runtime.clone());
    let req = request(&eng, "a", direct_workspace(dir.path()));
    let err = block_on(eng.up(req)).unwrap_err();
    assert!(err.to_string().contains("start failed on purpose"));
    assert_eq!(runtime.calls(), ["ensure_image", "create forage-a", "start forage-a", "remove forage-a"]);
    let home = Home::at(dir.path().join("home")).unwrap();
    assert!(home.load(&SandboxName::parse("a").unwrap()).unwrap().is_none());
}

#[test]
fn up_journals_each_step_before_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let eng = engine(dir.path(), Arc::new(FakeRuntime::default()));
    let req = request(&eng, "b", direct_workspace(dir.path()));
    let record = block_on(eng.up(req)).unwrap();
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
    let runtime = Arc::new(FakeRuntime { workspace_must_exist: Some(worktree.clone()), ..Default::default() });
    let eng = engine(dir.path(), runtime.clone());
    let req = request(&eng, "c", WorkspaceSpec::GitWorktree(repo_dir.clone()));
    block_on(eng.up(req)).unwrap();
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
    let runtime = Arc::new(FakeRuntime::default());
    let eng = engine(dir.path(), runtime.clone());
    let req = request(&eng, "r", direct_workspace(dir.path()));
    block_on(eng.up(req)).unwrap();
    let name = SandboxName::parse("r").unwrap();
    let templates = eng.templates();
    let resolve = |n: &str| templates.resolve(n);

    runtime.fail_image.store(true, Ordering::SeqCst);
    let err = block_on(eng.reset(&name, resolve)).unwrap_err();
    assert!(err.to_string().contains("image build failed on purpose"));
    assert_eq!(runtime.calls()[3..], ["ensure_image"], "the old container is left alone");

    runtime.fail_image.store(false, Ordering::SeqCst);
    let record = block_on(eng.reset(&name, resolve)).unwrap();
    assert_eq!(
        runtime.calls()[4..],
        ["ensure_image", "stop forage-r", "remove forage-r", "create forage-r", "start forage-r"]
    );
    assert_eq!(record.state, RecordState::Ready);
    assert_eq!(record.journal, vec![Step::Container { name: "forage-r".into() }], "the journal is unchanged");
}

/// An engine whose template `fake` keeps `.tok`, with `t1` stored for it.
fn engine_with_stored_state(dir: &Path, runtime: Arc<FakeRuntime>) -> Engine<FakeRuntime> {
    let eng = engine(dir, runtime);
    std::fs::write(dir.join("templates/fake.yaml"), "image: fake:1\nagent: {command: [sh], state: [.tok]}\n").unwrap();
    // The store holds a token for the default profile.
    let store = crate::agent_state::store::StateStore::new(&eng.home);
    let given = crate::agent_state::Given {
        template: "fake".into(),
        profile: "default".into(),
        paths: vec![".tok".into()],
        ..Default::default()
    };
    let seen = crate::agent_state::archive::Seen {
        files: [(".tok".to_owned(), crate::agent_state::archive::SeenFile { bytes: b"t1".to_vec(), mtime: 1 })].into(),
        ..Default::default()
    };
    let paths = crate::agent_state::state_paths(&given.paths);
    store.write_back(&given, &paths, &[(".tok".to_owned(), seen)].into(), 2).unwrap();
    eng
}

#[test]
fn up_gives_the_agents_state_after_create_and_before_start_and_down_forgets_it() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = Arc::new(FakeRuntime::default());
    let eng = engine_with_stored_state(dir.path(), runtime.clone());
    let store = crate::agent_state::store::StateStore::new(&eng.home);
    let req = request(&eng, "s", direct_workspace(dir.path()));
    let record = block_on(eng.up(req)).unwrap();
    assert_eq!(record.options.profile.as_deref(), Some("default"));
    assert_eq!(runtime.calls(), ["ensure_image", "create forage-s", "upload", "start forage-s"]);
    assert!(record.journal.contains(&Step::AgentState));
    let name = SandboxName::parse("s").unwrap();
    let had = store.given(&name).unwrap().unwrap();
    assert_eq!(had.files[".tok"].as_deref(), Some(crate::agent_state::sha256(b"t1").as_str()));
    block_on(eng.down(&name, DownOptions::default())).unwrap();
    assert_eq!(store.given(&name).unwrap(), None, "down left what the sandbox was given");
}

#[test]
fn a_failed_copy_of_the_state_rolls_back_without_deleting_the_stored_copy() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = Arc::new(FakeRuntime { fail_upload: true, ..Default::default() });
    let eng = engine_with_stored_state(dir.path(), runtime.clone());
    let req = request(&eng, "f", direct_workspace(dir.path()));
    let err = block_on(eng.up(req)).unwrap_err();
    assert!(err.to_string().contains("upload failed on purpose"), "{err}");
    // The rollback read the container (the fake has no .tok): no deletion.
    let store = crate::agent_state::store::StateStore::new(&eng.home);
    let paths = crate::agent_state::state_paths(&[".tok".to_owned()]);
    let stored = store.read_for_giving("fake", "default", &paths).unwrap();
    assert_eq!(stored[".tok"].0, b"t1");
    assert_eq!(store.given(&SandboxName::parse("f").unwrap()).unwrap(), None);
}
