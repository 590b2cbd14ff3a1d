//! A real agent end to end: Aider (`aider-chat` from PyPI) in a sandbox, given a
//! task with `up --task`, talking to a local OpenAI-compatible stub that answers
//! with a fixed edit. No registry: the images are built on this machine, from a
//! Debian root file system made with debootstrap (Debian's mirror) and PyPI.
//!
//! The path a user takes: the repository's `.devcontainer/devcontainer.json`
//! names its toolchain image (a Debian bookworm root file system made with
//! debootstrap, built once per machine and reused: `fixture`), and `up -t aider`
//! builds the built-in aider template's Dockerfile on top of it, installing
//! `aider-chat` from PyPI. The template's default network, `restricted`, is
//! kept: the stub runs as a test container on the egress proxy's outside
//! network as `api.openai.com`, over HTTPS with a certificate of the test's own
//! CA (given to forage-ctl as `SSL_CERT_FILE`), and the proxy injects the key,
//! which the sandbox never holds (`Stub`).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use bollard::models::{ContainerCreateBody, EndpointSettings, HostConfig};
use bollard::query_parameters::{CreateContainerOptions, LogsOptions, RemoveContainerOptions};
use futures_util::StreamExt;

use crate::agent_state::StateLeft;
use crate::support::*;

/// The project's toolchain image: Debian bookworm made with debootstrap
/// (also the egress tests' destination server).
pub(crate) mod fixture {
    use std::io::Read;
    use std::path::Path;
    use std::process::{Command, Stdio};
    use std::time::Instant;

    use bollard::query_parameters::CreateImageOptions;
    use futures_util::StreamExt;

    use crate::support::*;

    /// `:2` holds the host's CA bundle for pip (`:1` did not).
    pub const BOOKWORM: &str = "forage-test-bookworm:2";
    /// The CA bundle pip inside the build trusts: the host's, which knows the
    /// machine's TLS proxy if there is one. The image names it in `PIP_CERT`,
    /// as a project image on such a network would.
    const HOST_CA: &str = "/etc/ssl/certs/ca-certificates.crt";
    const CA_INSIDE: &str = "etc/forage-test/host-ca.crt";

    fn has_image(reference: &str) -> bool {
        block_on(docker().inspect_image(reference)).is_ok()
    }

    /// `debootstrap --variant=minbase` into a scratch directory, imported as an
    /// image through the Engine API (what `docker import` does), unless the
    /// engine has it; under a lock of its own so that two test runs never build
    /// it at once (and never the default image's lock, which other tests hold
    /// shared for their whole run).
    pub fn bookworm() {
        let _lock = lock_file("forage-it-aider-fixture.lock", true);
        if has_image(BOOKWORM) {
            return;
        }
        assert!(
            nix::unistd::geteuid().is_root(),
            "{BOOKWORM} is not in the engine, and debootstrap needs root to make it: load it from an engine that \
             has it (`docker save {BOOKWORM} | podman load`, as .ci/podman-pass does)"
        );
        let started = Instant::now();
        let debootstrap = ["/usr/sbin/debootstrap", "/sbin/debootstrap", "/usr/bin/debootstrap"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .expect("debootstrap is installed (apt-get install debootstrap; .ci/run does it)");
        let scratch = tempfile::Builder::new().prefix("forage-it-bookworm-").tempdir().unwrap();
        let root = scratch.path().join("root");
        let out = Command::new(debootstrap)
            .args(["--variant=minbase", "--include=python3,python3-venv,git,ca-certificates", "bookworm"])
            .arg(&root)
            .arg("http://deb.debian.org/debian")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "debootstrap of bookworm failed (Debian's mirror reachable?): {}",
            describe(&out)
        );
        let ca = root.join(CA_INSIDE);
        std::fs::create_dir_all(ca.parent().unwrap()).unwrap();
        std::fs::copy(HOST_CA, &ca).unwrap_or_else(|e| panic!("the host's CA bundle {HOST_CA}: {e}"));
        // A tar of the tree, streamed from tar(1) to the engine; /dev is the
        // engine's business at run time.
        let mut tar = Command::new("tar")
            .args(["--numeric-owner", "--exclude=./dev/*", "-C"])
            .arg(&root)
            .args(["-cf", "-", "."])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = tar.stdout.take().unwrap();
        let chunks = futures_util::stream::unfold(stdout, |mut out| async move {
            let mut buf = vec![0u8; 1 << 20];
            match out.read(&mut buf) {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok(bytes::Bytes::from(buf)), out))
                }
                Err(e) => Some((Err(e), out)),
            }
        });
        let (repo, tag) = BOOKWORM.split_once(':').unwrap();
        let options = CreateImageOptions {
            from_src: Some("-".into()),
            repo: Some(repo.into()),
            tag: Some(tag.into()),
            changes: vec!["CMD [\"bash\"]".into(), format!("ENV PIP_CERT=/{CA_INSIDE}")],
            ..Default::default()
        };
        let imported: Vec<_> =
            block_on(docker().create_image(Some(options), Some(bollard::body_try_stream(chunks)), None).collect());
        assert!(tar.wait().unwrap().success(), "tar of the bookworm tree failed");
        for item in imported {
            item.unwrap_or_else(|e| panic!("importing {BOOKWORM}: {e}"));
        }
        assert!(has_image(BOOKWORM), "{BOOKWORM} is not in the engine after its import");
        eprintln!("fixture: {BOOKWORM} made in {:.0?}", started.elapsed());
    }
}

/// The OpenAI-compatible stub, a test container on the egress proxy's
/// outside network, removed when dropped, whatever the test did.
struct Stub {
    container: String,
}

/// The stub's port, and the name the proxy reaches it by: the real API's.
const STUB_PORT: u16 = 443;
const STUB_ALIAS: &str = "api.openai.com";

impl Stub {
    /// Starts the stub on `network` as `api.openai.com`, over HTTPS with the
    /// certificate in `certs` (server.pem, server.key).
    fn start(env: &Env, name: &str, network: &str, certs: &Path, edit: [&str; 3]) -> Stub {
        let stub = Stub { container: format!("forage-test-stub-{name}") };
        let script = env.path("openai_stub.py");
        std::fs::write(&script, include_str!("fixtures/openai_stub.py")).unwrap();
        let endpoint = EndpointSettings { aliases: Some(vec![STUB_ALIAS.into()]), ..Default::default() };
        let [file, content, commit_message] = edit;
        let config = ContainerCreateBody {
            image: Some(fixture::BOOKWORM.into()),
            cmd: Some(
                ["python3", "-u", "/stub.py", &STUB_PORT.to_string(), file, content, commit_message]
                    .map(String::from)
                    .into(),
            ),
            env: Some(vec!["STUB_CERT=/certs/server.pem".into(), "STUB_KEY=/certs/server.key".into()]),
            host_config: Some(HostConfig {
                binds: Some(vec![
                    format!("{}:/stub.py:ro", script.display()),
                    format!("{}:/certs:ro", certs.display()),
                ]),
                network_mode: Some(network.to_owned()),
                ..Default::default()
            }),
            networking_config: Some(bollard::models::NetworkingConfig {
                endpoints_config: Some(HashMap::from([(network.to_owned(), endpoint)])),
            }),
            ..Default::default()
        };
        let options = CreateContainerOptions { name: Some(stub.container.clone()), ..Default::default() };
        block_on(docker().create_container(Some(options), config)).unwrap();
        block_on(docker().start_container(&stub.container, None)).unwrap();
        assert!(
            eventually(120, || stub.requests_raw().contains("\"listening\"")),
            "the stub did not start: {}",
            stub.requests_raw()
        );
        stub
    }

    /// Everything the stub printed: one JSON line per request.
    fn requests_raw(&self) -> String {
        let options = LogsOptions { stdout: true, stderr: true, tail: "all".into(), ..Default::default() };
        let chunks: Vec<_> = block_on(docker().logs(&self.container, Some(options)).collect());
        chunks
            .into_iter()
            .filter_map(Result::ok)
            .map(|c| String::from_utf8_lossy(&c.into_bytes()).into_owned())
            .collect()
    }

    fn requests(&self) -> Vec<serde_json::Value> {
        self.requests_raw().lines().filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()).collect()
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        let options = RemoveContainerOptions { force: true, v: true, ..Default::default() };
        let _ = block_on(docker().remove_container(&self.container, Some(options)));
    }
}

fn git(dir: &Path, args: &[&str]) -> String {
    // The repository is the ordinary user's; root's git asks to be told it is safe.
    let out = Command::new("git").args(["-c", "safe.directory=*", "-C"]).arg(dir).args(args).output().unwrap();
    assert!(out.status.success(), "git {args:?}: {}", describe(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// Every file under `dir` whose bytes contain `needle`.
fn files_containing(dir: &Path, needle: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap().flatten() {
            let path = entry.path();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                let bytes = std::fs::read(&path).unwrap();
                if bytes.windows(needle.len()).any(|w| w == needle.as_bytes()) {
                    found.push(path);
                }
            }
        }
    }
    found
}

#[test]
fn aider_takes_a_task_edits_commits_and_exits_and_its_key_stays_secret() {
    let started = std::time::Instant::now();
    fixture::bookworm();
    eprintln!("fixture ready after {:.0?}", started.elapsed());

    // forage run by an ordinary user: as root, file ownership would prove
    // nothing. (The rootless Podman pass is one already: it runs as itself.)
    let uid = ordinary_user(4251);
    let env = Env::new();
    env.give(env.dir.path(), uid);
    let name = env.unique("aider");
    let key = format!("sk-forage-test-{}", name.replace('-', ""));

    let repo = env.mkdir("repo");
    std::fs::write(repo.join("hello.txt"), "Hello, world!\n").unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    git(&repo, &["config", "user.name", "Forage Tester"]);
    git(&repo, &["config", "user.email", "tester@forage.invalid"]);
    // The project's toolchain: its devcontainer names the image, and forage
    // layers the built-in aider template on it.
    std::fs::create_dir(repo.join(".devcontainer")).unwrap();
    let devcontainer = format!(
        "// the project's toolchain\n{{\"image\": \"{}\", \"containerEnv\": {{\"PROJECT_TOOLCHAIN\": \"bookworm\"}},}}\n",
        fixture::BOOKWORM
    );
    std::fs::write(repo.join(".devcontainer/devcontainer.json"), devcontainer).unwrap();
    // As docs/agents.md advises: Aider's own files (chat history, caches)
    // are ignored, so its work merges without them.
    std::fs::write(repo.join(".gitignore"), ".aider*\n").unwrap();
    git(&repo, &["add", "hello.txt", ".devcontainer", ".gitignore"]);
    git(&repo, &["commit", "-qm", "init"]);
    Command::new("chown").arg("-R").arg(uid.to_string()).arg(&repo).status().unwrap();

    let edited = "Hello, forage!\n";
    let commit_message = "Greet forage instead of the world";
    // The test's CA, which the proxy trusts for the upstream (SSL_CERT_FILE).
    let certs = env.mkdir("certs");
    crate::inject::certificates(&certs, STUB_ALIAS);
    env.give(&certs, uid);
    let as_user = |args: &[&str]| {
        let mut cmd = env.cmd_as(uid, args);
        let out = cmd.env("OPENAI_API_KEY", &key).env("SSL_CERT_FILE", certs.join("ca.pem")).output().unwrap();
        assert!(out.status.success(), "forage-ctl {args:?}: {}", describe(&out));
        String::from_utf8(out.stdout).unwrap()
    };

    // The first run builds the aider image (pip from PyPI), minutes on a
    // loaded machine; later runs find it by its key.
    let up = as_user(&[
        "up",
        &name,
        "-t",
        "aider",
        "--git-worktree",
        repo.to_str().unwrap(),
        "--secret",
        "openai=env:OPENAI_API_KEY",
        "--no-start",
        "--task",
        "Change hello.txt so that it greets forage instead of the world.",
        "--",
        "--model",
        "openai/forage-stub",
    ]);
    let container = format!("forage-{name}");
    let image = inspect(&container).unwrap().config.unwrap().image.unwrap();
    // (Podman names a built image `docker.io/forage-build/…`.)
    let built = image.strip_prefix("docker.io/").unwrap_or(&image);
    assert!(built.starts_with("forage-build/aider:"), "{image}: not the built-in template's image\n{up}");
    let status: serde_json::Value = serde_json::from_str(&as_user(&["status", &name, "--json"])).unwrap();
    let toolchain = &status["record"]["toolchain"];
    assert_eq!(toolchain["source"], ".devcontainer/devcontainer.json", "{toolchain}");
    // The template's default: restricted, the key injected by the proxy.
    assert_eq!(status["network"]["mode"], "restricted", "{status}");
    assert_eq!(status["record"]["egress"]["inject"][0]["host"], STUB_ALIAS, "{status}");
    let outside = status["network"]["outside_network"].as_str().unwrap().to_owned();
    let stub = Stub::start(&env, &name, &outside, &certs, ["hello.txt", edited, commit_message]);
    as_user(&["start", &name]);

    // Generous: a loaded machine, and Aider imports a lot before its first request.
    let waited = env.cmd_as(uid, &["wait", &name, "--until", "exited", "--timeout", "15m"]).output().unwrap();
    let logs = as_user(&["logs", &name]);
    assert_eq!(waited.status.code(), Some(0), "wait: {}\n--- agent's log\n{logs}", describe(&waited));
    let state = inspect(&container).expect("the sandbox's container").state.unwrap();
    assert_eq!(state.exit_code, Some(0), "Aider's exit code; its log:\n{logs}");

    // The stub was asked for the edit and for a commit message, with the key.
    let requests = stub.requests();
    let kinds: Vec<&str> = requests.iter().filter_map(|r| r["kind"].as_str()).collect();
    assert!(kinds.contains(&"edit") && kinds.contains(&"commit"), "{requests:?}\n--- agent's log\n{logs}");
    let bearer = format!("Bearer {key}");
    for request in requests.iter().filter(|r| r["method"] == "POST") {
        assert_eq!(request["authorization"].as_str(), Some(bearer.as_str()), "{request}");
    }

    // The edit and Aider's own commit, on forage-NAME once synced.
    as_user(&["sync", &name]);
    let branch = format!("forage-{name}");
    assert_eq!(git(&repo, &["show", &format!("{branch}:hello.txt")]), edited);
    let message = git(&repo, &["log", "-1", "--format=%B", &branch]);
    assert!(message.starts_with(commit_message), "{message}");
    assert!(message.contains("Co-authored-by: aider (openai/forage-stub)"), "not Aider's commit: {message}");
    assert_eq!(
        git(&repo, &["log", "-1", "--format=%an <%ae>", &branch]).trim(),
        "Forage Tester <tester@forage.invalid>"
    );
    assert_eq!(git(&repo, &["rev-parse", &format!("{branch}~1")]), git(&repo, &["rev-parse", "main"]));
    assert_eq!(git(&repo, &["diff", "--name-only", "main", &branch]), "hello.txt\n");

    // The files Aider wrote are the user's.
    let worktree = env.home.join("workspaces").join(&name);
    // Aider writes the questions `--yes-always` answered into its chat history:
    // the one about the file it edits, none about .gitignore or analytics.
    let history = std::fs::read_to_string(worktree.join(".aider.chat.history.md")).unwrap();
    let answered: Vec<&str> = history.lines().filter(|l| l.contains("(Y)es/(N)o")).collect();
    assert_eq!(answered, ["> Add file to the chat? (Y)es/(N)o/(D)on't ask again [Yes]: y  "], "{history}");
    let gid = user_gid();
    for file in ["hello.txt", ".aider.chat.history.md"] {
        let meta = std::fs::metadata(worktree.join(file)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (uid, gid), "{file}");
    }

    // The key: in no configuration, no log, not in the sandbox (whose copy
    // holds the placeholder), and on the host only in forage's private copy
    // and the proxy's keys file.
    let inspected = serde_json::to_string(&inspect(&container).unwrap()).unwrap();
    assert!(
        inspected.contains("PROJECT_TOOLCHAIN=bookworm") && !inspected.contains(&key),
        "the key is in docker inspect"
    );
    assert!(logs.contains("Applied edit to hello.txt") && !logs.contains(&key), "{logs}");
    // Non-interactive as the template promises: it asked nothing, and found the
    // git identity forage gives (else it writes "Your Name" into the repository).
    for question in ["(Y)es/(N)o", "Update git name", "Aider respects your privacy", "Added .aider", "pypi"] {
        assert!(!logs.contains(question), "{question:?} in the agent's log:\n{logs}");
    }
    let mounted = env.home.join("secrets").join(&name).join("openai");
    assert!(std::fs::read_to_string(&mounted).unwrap().starts_with("forage-placeholder-openai"));
    let mut holding = files_containing(&env.home, &key);
    holding.sort();
    let copies = [
        env.home.join(format!("egress/policy/keys/{name}.json")),
        env.home.join("secrets").join(&name).join(".injected.openai"),
    ];
    assert_eq!(holding, copies);
    for copy in &copies {
        assert_eq!(std::fs::metadata(copy).unwrap().mode() & 0o777, 0o600);
    }

    // The result lands with `merge`, onto the branch the sandbox came from,
    // in the user's checkout; nothing of the agent is left to archive then.
    as_user(&["merge", &name]);
    assert_eq!(std::fs::read_to_string(repo.join("hello.txt")).unwrap(), edited);
    assert_eq!(git(&repo, &["rev-parse", "main"]), git(&repo, &["rev-parse", &branch]));
    as_user(&["down", &name]);
    assert!(files_containing(&env.home, &key).is_empty());
    // What stays: Aider's settings (`agent.state`), kept for the next sandbox.
    let kept = env.home.join("agent-state/profiles/aider/default/files/.aider/analytics.json");
    assert!(kept.is_file(), "Aider's analytics settings were not kept");
    // The proxy stays until `gc --force` finds no restricted sandbox left.
    drop(stub);
    as_user(&["gc", "--force"]);
    env.assert_nothing_left_but_state();
    eprintln!("test done after {:.0?}", started.elapsed());
}
