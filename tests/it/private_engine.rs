//! An engine of a test's own, of the kind the run is aimed at
//! (FORAGE_TEST_ENGINE), so a test can stop, crash and restart "the engine"
//! without touching the shared one every other test is using.
//!
//! Docker: a second dockerd on its own socket, data root and containerd. It
//! needs root and the `dockerd` binary (both true on CI, which fails the test
//! rather than skipping it when they are not). The daemon runs in a network
//! namespace of its own with no bridge and no iptables rules.
//!
//! Podman: a second `podman system service`, as the user running the tests
//! (rootless for the rootless pass), on its own socket, storage, run and
//! temporary directories. Podman's containers outlive its service (each has
//! its own `conmon`), so stopping or killing the service leaves them running,
//! where dockerd's go with it.
//!
//! Sandboxes on either use `--network none`; each starts with no images, and
//! forage builds its offline image there itself.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{block_on, connect, test_engine, TestEngine};

pub struct PrivateEngine {
    dir: tempfile::TempDir,
    podman: bool,
    /// dockerd, or the Podman service.
    dockerd: Option<Child>,
}

impl PrivateEngine {
    /// Starts a fresh engine and waits until it answers.
    pub fn start() -> Self {
        let podman = test_engine() != TestEngine::Docker;
        assert!(
            podman || nix::unistd::geteuid().is_root(),
            "a private Docker engine needs root; run the tests as root (CI does)"
        );
        // Short: the socket's path must fit in a sockaddr_un (108 bytes).
        let base = if podman { std::env::temp_dir() } else { PathBuf::from("/tmp") };
        let dir = tempfile::Builder::new().prefix("forage-engine-").tempdir_in(base).unwrap();
        // An empty config, so /etc/docker/daemon.json (the shared engine's data root
        // and storage driver) is not read.
        std::fs::write(dir.path().join("daemon.json"), "{}").unwrap();
        if podman {
            // forage (and its messages) know a Podman socket by this path's end.
            std::fs::create_dir(dir.path().join("podman")).unwrap();
        }
        let mut engine = PrivateEngine { dir, podman, dockerd: None };
        engine.restart();
        engine
    }

    /// The value for DOCKER_HOST.
    pub fn host(&self) -> String {
        let socket = if self.podman { "podman/podman.sock" } else { "docker.sock" };
        format!("unix://{}", self.path(socket).display())
    }

    /// Whether this is a Podman service, whose containers outlive it.
    pub fn is_podman(&self) -> bool {
        self.podman
    }

    /// What a refusal for want of this engine tells the user to start.
    pub fn start_advice(&self) -> &'static str {
        if self.podman {
            "podman system service"
        } else {
            "dockerd"
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    /// Starts dockerd again on the same data, as `systemctl start docker` would.
    pub fn restart(&mut self) {
        if let Err(e) = self.try_restart() {
            panic!("{e}");
        }
    }

    fn try_restart(&mut self) -> Result<(), String> {
        assert!(self.dockerd.is_none(), "the private engine is already running");
        let log = std::fs::File::options().create(true).append(true).open(self.path("engine.log")).unwrap();
        let child = if self.podman { self.spawn_podman(log)? } else { self.spawn_dockerd(log)? };
        self.dockerd = Some(child);
        let host = self.host();
        let deadline = Instant::now() + Duration::from_secs(60);
        while connect(Some(&host)).is_err() {
            if let Some(status) = self.dockerd.as_mut().unwrap().try_wait().unwrap() {
                self.dockerd = None;
                return Err(format!("the private engine exited ({status}) while starting:\n{}", self.log_tail()));
            }
            if Instant::now() > deadline {
                return Err(format!("the private engine did not answer in 60 s:\n{}", self.log_tail()));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(())
    }

    /// The global options that keep a Podman command on this engine's own
    /// storage and state, apart from the shared service's.
    fn podman_globals(&self) -> Vec<String> {
        let at = |rel: &str| self.path(rel).display().to_string();
        vec![
            "--root".into(),
            at("storage"),
            "--runroot".into(),
            at("run"),
            "--tmpdir".into(),
            at("tmp"),
            "--storage-driver".into(),
            "vfs".into(),
        ]
    }

    fn spawn_podman(&self, log: std::fs::File) -> Result<Child, String> {
        Command::new("podman")
            .args(self.podman_globals())
            .args(["system", "service", "--time=0", &self.host()])
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting podman system service: {e}; the engine tests on Podman need podman"))
    }

    fn spawn_dockerd(&self, log: std::fs::File) -> Result<Child, String> {
        let cgroup_parent = format!("/{}", self.dir.path().file_name().unwrap().to_string_lossy());
        let mut command = Command::new(dockerd_binary());
        command
            .arg("--config-file")
            .arg(self.path("daemon.json"))
            .arg("--host")
            .arg(self.host())
            .arg("--data-root")
            .arg(self.path("data"))
            .arg("--exec-root")
            .arg(self.path("exec"))
            .arg("--pidfile")
            .arg(self.path("docker.pid"))
            .args(["--bridge=none", "--iptables=false", "--ip-masq=false", "--storage-driver=vfs"])
            .arg(format!("--cgroup-parent={cgroup_parent}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        // A network namespace of its own: with no bridge, dockerd deletes the host's
        // docker0, which the shared engine's containers need.
        // SAFETY: unshare(2) is a single system call, safe between fork and exec.
        unsafe {
            command
                .pre_exec(|| nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).map_err(std::io::Error::from));
        }
        command.spawn().map_err(|e| {
            format!("starting {}: {e}; the engine tests need Docker Engine's dockerd", dockerd_binary().display())
        })
    }

    /// Stops the engine the way a service manager does (SIGTERM: dockerd
    /// stops its containers and exits; Podman's service exits, leaving them
    /// running), and waits until it has.
    pub fn stop(&mut self) {
        self.end(nix::sys::signal::Signal::SIGTERM).unwrap();
    }

    /// Kills the engine outright, as a crash or the OOM killer would. For
    /// dockerd, waits for its containerd to notice and exit (a second or so),
    /// as a service manager's restart delay would: a new dockerd cannot start
    /// its containerd before then.
    pub fn crash(&mut self) {
        if self.podman {
            self.end(nix::sys::signal::Signal::SIGKILL).unwrap();
            return;
        }
        let containerd = std::fs::read_to_string(self.path("exec/containerd/containerd.pid")).unwrap();
        let containerd = nix::unistd::Pid::from_raw(containerd.trim().parse().unwrap());
        self.end(nix::sys::signal::Signal::SIGKILL).unwrap();
        let deadline = Instant::now() + Duration::from_secs(60);
        while nix::sys::signal::kill(containerd, None).is_ok() {
            assert!(Instant::now() < deadline, "the crashed engine's containerd did not exit in 60 s");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn end(&mut self, signal: nix::sys::signal::Signal) -> Result<(), String> {
        let Some(mut child) = self.dockerd.take() else {
            return Err("the private engine is not running".into());
        };
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).map_err(|e| e.to_string())?;
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().map_err(|e| e.to_string())?.is_none() {
            if Instant::now() > deadline {
                return Err(format!("the private engine did not exit in 60 s:\n{}", self.log_tail()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(())
    }

    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.path("engine.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }
}

impl Drop for PrivateEngine {
    /// Leaves no daemon, container or process behind, even after a failed test (so
    /// nothing here may panic): an engine left stopped or crashed is started once
    /// more so that it can remove its containers.
    fn drop(&mut self) {
        if self.dockerd.is_none() && self.try_restart().is_err() {
            return;
        }
        if let Ok(api) = connect(Some(&self.host())) {
            let containers = block_on(api.list_containers(Some(bollard::query_parameters::ListContainersOptions {
                all: true,
                ..Default::default()
            })))
            .unwrap_or_default();
            for c in containers {
                let opts = bollard::query_parameters::RemoveContainerOptions { force: true, ..Default::default() };
                let _ = block_on(api.remove_container(c.id.as_deref().unwrap_or_default(), Some(opts)));
            }
        }
        let _ = self.end(nix::sys::signal::Signal::SIGTERM);
        if self.podman && !nix::unistd::geteuid().is_root() {
            // Its storage holds files of the user namespace's other ids, which
            // only its root may delete.
            let _ = Command::new("podman")
                .args(self.podman_globals())
                .args(["unshare", "rm", "-rf"])
                .args([self.path("storage"), self.path("run"), self.path("tmp")])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            return;
        }
        // dockerd bind-mounts its data root onto itself and leaves it mounted.
        let _ = nix::mount::umount2(&self.path("data"), nix::mount::MntFlags::MNT_DETACH);
    }
}

/// Debian installs dockerd in /usr/sbin, which an ordinary user's PATH may lack.
fn dockerd_binary() -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|d| d.join("dockerd"))
        .find(|p| p.exists())
        .unwrap_or_else(|| Path::new("dockerd").to_path_buf())
}
