//! Test harness: a sandboxed FORAGE_HOME per test, the binary under test, and
//! direct Engine API checks (what `docker inspect` would show).

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use bollard::models::ContainerInspectResponse;
use bollard::query_parameters::ListContainersOptions;
use nix::fcntl::{Flock, FlockArg};

pub const BIN: &str = env!("CARGO_BIN_EXE_forage-ctl");

/// Tests that use the default image hold this shared; the test that deletes and
/// rebuilds it holds it exclusively, so it never pulls the image from under another.
pub fn image_lock(exclusive: bool) -> Flock<File> {
    lock_file("forage-it-default-image.lock", exclusive)
}

/// A lock shared by every test process on this machine, on file `name` in the
/// temporary directory (e.g. around building a fixture image once).
pub fn lock_file(name: &str, exclusive: bool) -> Flock<File> {
    let path = std::env::temp_dir().join(name);
    let file = File::options().create(true).truncate(false).write(true).open(path).unwrap();
    let arg = if exclusive { FlockArg::LockExclusive } else { FlockArg::LockShared };
    Flock::lock(file, arg).map_err(|(_, e)| e).unwrap()
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap())
}

pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    runtime().block_on(f)
}

/// The engine the whole run is aimed at, from `FORAGE_TEST_ENGINE`: unset or
/// `docker` is Docker (DOCKER_HOST or the default socket); `podman-rootless`
/// is the rootless Podman service of the user running the tests, at
/// `$XDG_RUNTIME_DIR/podman/podman.sock` (run the test binary as that user);
/// `podman-rootful` is root's Podman service at `/run/podman/podman.sock`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestEngine {
    Docker,
    PodmanRootless,
    PodmanRootful,
}

pub fn test_engine() -> TestEngine {
    match std::env::var("FORAGE_TEST_ENGINE").as_deref() {
        Err(_) | Ok("" | "docker") => TestEngine::Docker,
        Ok("podman-rootless") => TestEngine::PodmanRootless,
        Ok("podman-rootful") => TestEngine::PodmanRootful,
        Ok(other) => panic!("FORAGE_TEST_ENGINE={other:?}: use `docker`, `podman-rootless` or `podman-rootful`"),
    }
}

/// The open-file and process limits a test's own container is given: on
/// rootful Podman, whose defaults fail a start where root may not raise a
/// hard limit, forage's (as for a sandbox); elsewhere the engine's.
pub fn test_container_ulimits() -> Option<Vec<bollard::models::ResourcesUlimits>> {
    let rootful = forage::runtime::engine_choice::EngineInfo {
        host: String::new(),
        podman: true,
        rootless: false,
        version: String::new(),
        socket_owner: None,
    };
    (test_engine() == TestEngine::PodmanRootful).then(|| rootful.rlimits()).flatten()
}

/// Whether the engine applies a sandbox's memory, CPU and process limits.
/// Rootless Podman on a cgroups v1 host accepts them and silently drops them
/// (forage warns at `up`: "the Podman engine did not apply ..."), so a test
/// asserts the limits where they hold and that warning where they cannot.
pub fn engine_applies_limits() -> bool {
    test_engine() != TestEngine::PodmanRootless || Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
}

/// Where the engine drops the limits (`!engine_applies_limits()`), the
/// command that made the container (`up`, `reset`) says so, naming them.
pub fn assert_limits_dropped_warning(made: &Output) {
    let stderr = String::from_utf8_lossy(&made.stderr);
    assert!(stderr.contains("the Podman engine did not apply the sandbox's memory, CPU"), "{stderr}");
}

/// The network mode of a sandbox with the full network and no published
/// ports: rootless Podman's is slirp4netns (forage's choice there:
/// runtime/docker.rs), every other engine's the default bridge.
pub fn full_network_mode() -> &'static str {
    match test_engine() {
        TestEngine::PodmanRootless => "slirp4netns",
        TestEngine::Docker | TestEngine::PodmanRootful => "bridge",
    }
}

/// The engine's default network, where `--network bridge` puts a container:
/// Docker's `bridge`, Podman's `podman`.
pub fn default_network() -> &'static str {
    match test_engine() {
        TestEngine::Docker => "bridge",
        TestEngine::PodmanRootless | TestEngine::PodmanRootful => "podman",
    }
}

/// The socket every forage-ctl and bollard call of this run goes to, when it
/// is not Docker's default.
pub fn test_engine_host() -> Option<String> {
    match test_engine() {
        TestEngine::Docker => None,
        TestEngine::PodmanRootless => {
            let dir =
                std::env::var("XDG_RUNTIME_DIR").expect("FORAGE_TEST_ENGINE=podman-rootless needs XDG_RUNTIME_DIR");
            Some(format!("unix://{dir}/podman/podman.sock"))
        }
        TestEngine::PodmanRootful => Some("unix:///run/podman/podman.sock".to_owned()),
    }
}

/// The shared engine every test uses (DOCKER_HOST or the default socket, or
/// FORAGE_TEST_ENGINE's).
pub fn docker() -> bollard::Docker {
    connect(None).expect("a running Docker engine")
}

/// Connects to the engine at `host` (`unix://…`), or to the shared one.
pub fn connect(host: Option<&str>) -> Result<bollard::Docker, bollard::errors::Error> {
    let shared = test_engine_host();
    block_on(async {
        let api = match host.or(shared.as_deref()) {
            Some(host) => bollard::Docker::connect_with_unix(host, 120, bollard::API_DEFAULT_VERSION)?,
            None => bollard::Docker::connect_with_defaults()?,
        };
        api.negotiate_version().await
    })
}

/// Names of the engine's networks matching `filters` (Docker's keys:
/// `label`, `name`). Podman's are read through its libpod API, as forage
/// reads them (src/runtime/libpod.rs): its compat listing fails while any
/// container on the engine is half removed.
pub fn engine_networks(filters: HashMap<String, Vec<String>>) -> Vec<String> {
    match test_engine_host().filter(|_| test_engine() != TestEngine::Docker) {
        Some(host) => {
            let found = block_on(forage::runtime::libpod::networks(&host, &filters)).unwrap();
            found.into_iter().map(|n| n.name).collect()
        }
        None => {
            let options = bollard::query_parameters::ListNetworksOptions { filters: Some(filters) };
            let found = block_on(docker().list_networks(Some(options))).unwrap();
            found.into_iter().filter_map(|n| n.name).collect()
        }
    }
}

/// Names of the engine's networks labelled `label`.
pub fn networks_labelled(label: &str) -> Vec<String> {
    engine_networks(HashMap::from([("label".to_owned(), vec![label.to_owned()])]))
}

/// Network `name`'s first subnet and its gateway, as the engine has them
/// (Podman's read through its own API, as `engine_networks`).
pub fn engine_network_subnet(name: &str) -> (String, Option<String>) {
    match test_engine_host().filter(|_| test_engine() != TestEngine::Docker) {
        Some(host) => {
            let filters = HashMap::from([("name".to_owned(), vec![format!("^{name}$")])]);
            let found = block_on(forage::runtime::libpod::networks(&host, &filters)).unwrap();
            let subnet = found.iter().flat_map(|n| n.subnets.iter().flatten()).next().cloned();
            let subnet = subnet.unwrap_or_else(|| panic!("network {name} has no subnet: {found:?}"));
            (subnet.subnet, subnet.gateway)
        }
        None => {
            let network = block_on(docker().inspect_network(name, None)).unwrap();
            let config = network.ipam.and_then(|i| i.config).and_then(|c| c.into_iter().next()).unwrap_or_default();
            (config.subnet.unwrap_or_default(), config.gateway)
        }
    }
}

/// Whether the engine has a network of that name (as `engine_networks` reads it).
pub fn engine_network_exists(name: &str) -> bool {
    match test_engine_host().filter(|_| test_engine() != TestEngine::Docker) {
        Some(host) => block_on(forage::runtime::libpod::network_exists(&host, name)).unwrap(),
        None => match block_on(docker().inspect_network(name, None)) {
            Ok(_) => true,
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => false,
            Err(e) => panic!("inspecting network {name}: {e}"),
        },
    }
}

/// Makes network `name` as forage made a restricted sandbox's through the
/// compat API (internal, Docker's `inhibit_ipv4`) on `subnet` (a /29 with
/// its gateway first): the tests' probes of what an engine does with one.
pub fn create_internal_network_the_compat_way(name: &str, subnet: &str, gateway: std::net::Ipv4Addr) {
    use bollard::models::{Ipam, IpamConfig, NetworkCreateRequest};
    let request = NetworkCreateRequest {
        name: name.to_owned(),
        internal: Some(true),
        ipam: Some(Ipam {
            config: Some(vec![IpamConfig {
                subnet: Some(subnet.into()),
                gateway: Some(gateway.to_string()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        options: Some(HashMap::from([("com.docker.network.bridge.inhibit_ipv4".to_owned(), "true".to_owned())])),
        ..Default::default()
    };
    block_on(docker().create_network(request)).unwrap();
}

/// The containers matching `filters` (Docker's keys: `label`, `network`),
/// stopped ones too: (id, name). Podman's are listed through its libpod
/// API, as forage lists them (src/runtime/libpod.rs): its compat list fails
/// while any one container on the engine cannot be described.
pub fn engine_containers(filters: HashMap<String, Vec<String>>) -> Vec<(String, String)> {
    match test_engine_host().filter(|_| test_engine() != TestEngine::Docker) {
        Some(host) => {
            let found = block_on(forage::runtime::libpod::containers(&host, &filters)).unwrap();
            found.into_iter().map(|c| (c.id, c.names.into_iter().next().unwrap_or_default())).collect()
        }
        None => {
            let options = ListContainersOptions { all: true, filters: Some(filters), ..Default::default() };
            let found = block_on(docker().list_containers(Some(options))).unwrap();
            found
                .into_iter()
                .filter_map(|c| {
                    let name = c.names.into_iter().flatten().next().unwrap_or_default();
                    Some((c.id?, name.trim_start_matches('/').to_owned()))
                })
                .collect()
        }
    }
}

/// The names of the containers labelled `label`, stopped ones too.
pub fn containers_labelled(label: &str) -> Vec<String> {
    let filters = HashMap::from([("label".to_owned(), vec![label.to_owned()])]);
    engine_containers(filters).into_iter().map(|(_, name)| name).collect()
}

/// The ids of the containers on network `name`, stopped ones too.
pub fn containers_on_network(name: &str) -> Vec<String> {
    let filters = HashMap::from([("network".to_owned(), vec![name.to_owned()])]);
    engine_containers(filters).into_iter().map(|(id, _)| id).collect()
}

/// One test's world: its own FORAGE_HOME and config dirs, a scratch dir, and a
/// guard that removes whatever containers it left, even when the test fails.
///
/// Container names (`forage-<name>`) are global to the engine, so a sandbox name
/// that reaches Docker must be used by one test only (or come from `unique`).
pub struct Env {
    pub dir: tempfile::TempDir,
    pub home: PathBuf,
    /// The engine this test's forage-ctl talks to; `None` is the shared one.
    docker_host: Option<String>,
    _image: Flock<File>,
}

impl Env {
    pub fn new() -> Self {
        Self::with_image_lock(false)
    }

    pub fn with_image_lock(exclusive: bool) -> Self {
        let image = image_lock(exclusive);
        let dir = tempfile::Builder::new().prefix("forage-it-").tempdir().unwrap();
        let home = dir.path().join("forage-home");
        std::fs::create_dir_all(dir.path().join("config")).unwrap();
        Env { dir, home, docker_host: None, _image: image }
    }

    /// A world whose forage-ctl talks to the engine at `docker_host` (DOCKER_HOST).
    pub fn on_engine(docker_host: &str) -> Self {
        let mut env = Self::new();
        env.docker_host = Some(docker_host.to_owned());
        env
    }

    /// This test's engine.
    pub fn docker(&self) -> bollard::Docker {
        connect(self.docker_host.as_deref()).expect("the test's Docker engine is running")
    }

    /// A sandbox name no other test uses.
    pub fn unique(&self, prefix: &str) -> String {
        let suffix = self.dir.path().file_name().unwrap().to_string_lossy().to_ascii_lowercase();
        format!("{prefix}-{}", suffix.trim_start_matches("forage-it-"))
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// A fresh directory under the test's scratch dir.
    pub fn mkdir(&self, rel: &str) -> PathBuf {
        let p = self.path(rel);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args)
            .env("FORAGE_HOME", &self.home)
            .env("XDG_CONFIG_HOME", self.dir.path().join("config"))
            .env_remove("FORAGE_TEMPLATES_PATH")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        if let Some(host) = self.docker_host.clone().or_else(test_engine_host) {
            c.env("DOCKER_HOST", host);
        }
        c
    }

    /// `forage-ctl` run as an ordinary user (`uid`, in the docker group, HOME in the
    /// scratch dir): CI runs as root, for whom uids and permissions prove nothing.
    pub fn cmd_as(&self, uid: u32, args: &[&str]) -> Command {
        use std::os::unix::process::CommandExt;
        let mut c = self.cmd(args);
        c.uid(uid).gid(user_gid()).env("HOME", self.dir.path());
        c
    }

    /// Hands `path` to `uid` (group `user_gid()`), so a `cmd_as` user may use it.
    pub fn give(&self, path: &Path, uid: u32) {
        nix::unistd::chown(path, Some(uid.into()), Some(user_gid().into())).unwrap();
    }

    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// Runs and asserts success, returning stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "forage-ctl {args:?} failed: {}", describe(&out));
        String::from_utf8(out.stdout).unwrap()
    }

    /// Runs a `--json` command, asserting success, and parses its output.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let out = self.ok(args);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("forage-ctl {args:?} printed no JSON ({e}): {out}"))
    }

    /// Runs with `FORAGE_DEBUG_KILL_AFTER=step` and asserts that forage-ctl died
    /// of SIGKILL there, leaving what a crash at that point would leave.
    pub fn killed_after(&self, args: &[&str], step: &str) {
        use std::os::unix::process::ExitStatusExt;
        let out = self.cmd(args).env("FORAGE_DEBUG_KILL_AFTER", step).output().unwrap();
        assert_eq!(out.status.signal(), Some(9), "{args:?} killed after {step}: {}", describe(&out));
    }

    /// Runs and asserts the exit code, returning stderr.
    pub fn fails(&self, args: &[&str], code: i32) -> String {
        let out = self.run(args);
        assert_eq!(out.status.code(), Some(code), "forage-ctl {args:?}: {}", describe(&out));
        String::from_utf8(out.stderr).unwrap()
    }

    /// Containers labelled as belonging to this FORAGE_HOME.
    pub fn containers(&self) -> Vec<String> {
        self.containers_on(&self.docker()).unwrap()
    }

    fn containers_on(&self, api: &bollard::Docker) -> Result<Vec<String>, bollard::errors::Error> {
        let label = format!("forage.home={}", self.home.display());
        if self.docker_host.is_none() && test_engine() != TestEngine::Docker {
            return Ok(containers_labelled(&label));
        }
        let filters = HashMap::from([("label".to_string(), vec![label])]);
        let list = block_on(api.list_containers(Some(ListContainersOptions {
            all: true,
            filters: Some(filters),
            ..Default::default()
        })))?;
        Ok(list.into_iter().flat_map(|c| c.names.unwrap_or_default()).collect())
    }

    /// Files under FORAGE_HOME other than forage's own empty directories.
    pub fn home_files(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        walk(&self.home, &mut out);
        out
    }

    /// Like `assert_nothing_left`, but allows the index of archived work that
    /// `restore` reads (FORAGE_HOME/archives).
    pub fn assert_nothing_left_but_archives(&self) {
        assert_eq!(self.containers(), Vec::<String>::new(), "containers left behind");
        let archives = self.home.join("archives");
        let files: Vec<PathBuf> = self.home_files().into_iter().filter(|f| !f.starts_with(&archives)).collect();
        assert_eq!(files, Vec::<PathBuf>::new(), "files left in FORAGE_HOME");
    }

    /// Asserts that this test left no container and no sandbox state behind.
    pub fn assert_nothing_left(&self) {
        assert_eq!(self.containers(), Vec::<String>::new(), "containers left behind");
        assert_eq!(self.home_files(), Vec::<PathBuf>::new(), "files left in FORAGE_HOME");
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(&p, out);
        } else {
            out.push(p);
        }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        // A test that stopped its private engine and failed has nothing to clean here.
        // Nor does one whose engine went away: a panic here, while the
        // test's own panic unwinds, would abort every test in the binary.
        let Ok(api) = connect(self.docker_host.as_deref()) else {
            return;
        };
        let Ok(names) = self.containers_on(&api) else { return };
        for name in names {
            let opts = bollard::query_parameters::RemoveContainerOptions { force: true, v: true, ..Default::default() };
            let _ = block_on(api.remove_container(name.trim_start_matches('/'), Some(opts)));
        }
    }
}

/// The group `cmd_as` users run with: docker's, so that they may use its
/// socket; for a test run that is itself an ordinary user (the rootless
/// Podman pass, whose engine is that user's), that user's own.
pub fn user_gid() -> u32 {
    if nix::unistd::geteuid().is_root() {
        docker_gid()
    } else {
        nix::unistd::getegid().as_raw()
    }
}

/// An ordinary user for a test that must not run forage-ctl as root: `uid`
/// when the test run is root (it may act as anyone), else the test run's own.
pub fn ordinary_user(uid: u32) -> u32 {
    let me = nix::unistd::geteuid();
    if me.is_root() {
        uid
    } else {
        me.as_raw()
    }
}

/// The group that may use the Docker socket.
pub fn docker_gid() -> u32 {
    nix::unistd::Group::from_name("docker").unwrap().expect("a docker group owns the Docker socket").gid.as_raw()
}

pub fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub fn inspect(container: &str) -> Option<ContainerInspectResponse> {
    block_on(docker().inspect_container(container, None)).ok()
}

/// Every file of a directory tree: (relative path, mode, uid, content), sorted.
pub type Snapshot = Vec<(PathBuf, u32, u32, Vec<u8>)>;

/// A snapshot of a directory tree.
pub fn snapshot(dir: &Path) -> Snapshot {
    use std::os::unix::fs::MetadataExt;
    let mut files = Vec::new();
    walk(dir, &mut files);
    let mut snap: Vec<_> = files
        .into_iter()
        .map(|p| {
            let m = std::fs::symlink_metadata(&p).unwrap();
            let content = std::fs::read(&p).unwrap_or_default();
            (p.strip_prefix(dir).unwrap().to_path_buf(), m.mode(), m.uid(), content)
        })
        .collect();
    snap.sort();
    snap
}

/// Kills every process in sandbox `name`, the agent with them. The exec's own
/// shell may go down with the container before it reports its exit (Podman
/// ends exec sessions as the container stops): 137 is as good as 0 here.
pub fn kill_everything_inside(env: &Env, name: &str) {
    let killed = env.run(&["exec", name, "--", "sh", "-c", "kill -KILL -1"]);
    assert!(matches!(killed.status.code(), Some(0 | 137)), "{}", describe(&killed));
}

/// Polls `check` for up to `secs` seconds.
pub fn eventually(secs: u64, mut check: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < deadline {
        if check() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    check()
}

/// Builds the C program `source` into `out`, statically linked, so that it
/// runs inside any image: for attacks the image's shell cannot make, or not
/// quickly.
pub fn static_program(source: &Path, out: &Path) {
    let built = Command::new("cc").args(["-static", "-O1", "-o"]).arg(out).arg(source).output().unwrap();
    assert!(built.status.success(), "building {}: {}", source.display(), describe(&built));
}

/// Held by a test while it has a template of its own in /etc/forage/templates
/// (the system's directory, which no test's environment can move elsewhere),
/// and by a test whose output lists every template, which would show it.
static SYSTEM_TEMPLATES: std::sync::Mutex<()> = std::sync::Mutex::new(());

pub fn system_templates_held() -> std::sync::MutexGuard<'static, ()> {
    SYSTEM_TEMPLATES.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
