//! Injected keys on the real engine: a template's `inject` has the egress
//! proxy set the model API's key, so the sandbox holds only a placeholder. A
//! stub API (a container on the proxy's outside network, with a certificate
//! of the test's own CA, which forage-ctl is given as `SSL_CERT_FILE`) says
//! which key each request carried; the test then looks for the real key
//! everywhere in the sandbox: its files (the container exported), every
//! process's environment and memory (read from the host), `docker inspect`.

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Command;

use bollard::models::{ContainerCreateBody, EndpointSettings, HostConfig};
use bollard::query_parameters::CreateContainerOptions;
use futures_util::StreamExt;

use crate::network::{logs, str_of, World};
use crate::real_agent::fixture;
use crate::support::*;

const TEMPLATE: &str = "description: injected keys
host_image:
  require: [sh, bash, curl, cat]
  tools: [sh, bash, cat, curl, env, sleep]
agent:
  command: [sh, -c, 'echo \"agent has $ANTHROPIC_API_KEY\" > /tmp/agent-saw; exec sleep infinity']
  secrets: {ANTHROPIC_API_KEY: anthropic}
network: restricted
inject:
  api.inject.test: {header: x-api-key, secret: anthropic}
";

const API: &str = "api.inject.test";

/// The test's CA (`ca.pem`) and a certificate for `host` signed by it
/// (`server.pem`, `server.key`), made with the host's openssl.
pub(crate) fn certificates(dir: &Path, host: &str) {
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
    let run = |args: &[&str]| {
        let out = Command::new("openssl").args(args).current_dir(dir).output().unwrap();
        assert!(out.status.success(), "openssl {args:?}: {}", describe(&out));
    };
    let mut ca =
        vec!["req", "-x509", "-days", "2", "-subj", "/CN=inject test CA", "-keyout", "ca.key", "-out", "ca.pem"];
    ca.extend(ec);
    ca.extend(["-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign"]);
    run(&ca);
    let subject = format!("/CN={host}");
    let mut csr = vec!["req", "-subj", &subject, "-keyout", "server.key", "-out", "server.csr"];
    csr.extend(ec);
    run(&csr);
    std::fs::write(dir.join("ext"), format!("subjectAltName=DNS:{host}\nextendedKeyUsage=serverAuth\n")).unwrap();
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-out",
        "server.pem",
        "-extfile",
        "ext",
    ]);
    // The stub's python reads the key as another user may: world-readable here.
    for f in ["server.key", "server.pem", "ca.pem"] {
        std::fs::set_permissions(dir.join(f), std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    }
}

/// Starts the stub API on the proxy's outside network as `api.inject.test`.
fn start_api(w: &mut World, outside: &str, certs: &Path, key: &str) {
    fixture::bookworm();
    let name = w.env.unique("forage-test-inject-api");
    let script = w.env.path("inject_server.py");
    std::fs::write(&script, include_str!("fixtures/inject_server.py")).unwrap();
    let config = ContainerCreateBody {
        image: Some(fixture::BOOKWORM.into()),
        cmd: Some(["python3", "-u", "/server.py"].map(String::from).into()),
        env: Some(vec![format!("EXPECTED_KEY={key}")]),
        host_config: Some(HostConfig {
            binds: Some(vec![format!("{}:/server.py:ro", script.display()), format!("{}:/certs:ro", certs.display())]),
            network_mode: Some(outside.to_owned()),
            ulimits: test_container_ulimits(),
            ..Default::default()
        }),
        networking_config: Some(bollard::models::NetworkingConfig {
            endpoints_config: Some(HashMap::from([(
                outside.to_owned(),
                EndpointSettings { aliases: Some(vec![API.to_owned()]), ..Default::default() },
            )])),
        }),
        ..Default::default()
    };
    let api = docker();
    let options = CreateContainerOptions { name: Some(name.clone()), ..Default::default() };
    block_on(api.create_container(Some(options), config)).unwrap();
    w.servers.push(name.clone());
    block_on(api.start_container(&name, None)).unwrap();
    assert!(eventually(120, || logs(&name).contains("listening")), "the stub did not start: {}", logs(&name));
}

/// The host pids of the container's processes: every process in the pid
/// namespace of its first one (as the engine reports it). Not the engine's
/// `top`, which Podman 4.3 answers with an empty body.
fn pids(container: &str) -> Vec<u32> {
    let first = inspect(container).and_then(|c| c.state?.pid).unwrap();
    let namespace = |pid: &str| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
    let theirs = namespace(&first.to_string()).unwrap();
    let all = std::fs::read_dir("/proc").unwrap().filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok());
    all.filter(|pid| namespace(&pid.to_string()).as_ref() == Some(&theirs)).collect()
}

/// Whether `needle` is anywhere in the readable memory of host process `pid`.
fn in_memory(pid: u32, needle: &[u8]) -> bool {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let mut mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else { continue };
        let (start, end) = range.split_once('-').unwrap();
        let (start, end) = (u64::from_str_radix(start, 16).unwrap(), u64::from_str_radix(end, 16).unwrap());
        if !perms.starts_with('r') || end - start > 1 << 30 {
            continue;
        }
        let mut bytes = vec![0u8; (end - start) as usize];
        // Some regions ([vvar]) cannot be read; skipping them hides nothing a dump holds.
        if mem.seek(SeekFrom::Start(start)).is_ok() && mem.read_exact(&mut bytes).is_ok() && contains(&bytes, needle) {
            return true;
        }
    }
    false
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The container's whole file system, as `docker export` gives it.
fn exported(container: &str) -> Vec<u8> {
    let chunks: Vec<_> = block_on(docker().export_container(container).collect());
    chunks.into_iter().flat_map(|c| c.unwrap().to_vec()).collect()
}

/// Every file under `dir` holding `needle`.
fn files_holding(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.is_dir() {
                todo.push(path);
            } else if meta.is_file() && contains(&std::fs::read(&path).unwrap(), needle) {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

#[test]
fn the_proxy_sets_the_key_and_the_sandbox_never_holds_it() {
    let mut w = World::new();
    std::fs::write(w.env.path("config/forage/templates/inject.yaml"), TEMPLATE).unwrap();
    let certs = w.env.mkdir("certs");
    certificates(&certs, API);
    let real = format!("sk-real-{}", w.env.unique("key"));
    let key_file = w.env.path("anthropic-key");
    std::fs::write(&key_file, format!("{real}\n")).unwrap();
    let name = w.env.unique("inject");
    let ws = w.workspace.display().to_string();
    let secret = format!("anthropic={}", key_file.display());
    let out = w
        .env
        .cmd(&["up", &name, "-t", "inject", "--workspace", &ws, "--secret", &secret])
        .env("SSL_CERT_FILE", certs.join("ca.pem"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let (network, egress) = w.network(&name);
    let allow: Vec<String> = network["allow"].as_array().unwrap().iter().map(str_of).collect();
    assert_eq!(allow, [format!("{API}:443")], "an injected host is allowed over HTTPS");
    assert_eq!(egress["inject"][0]["host"], API, "{egress}");
    let shown = w.env.ok(&["status", &name]);
    assert!(
        shown.contains("inject:     api.inject.test: x-api-key <- secret anthropic (the sandbox has a placeholder)"),
        "{shown}"
    );
    start_api(&mut w, &str_of(&network["outside_network"]), &certs, &real);

    // The sandbox has the placeholder, and so does the agent's variable.
    let (_, held) = w.sh(&name, "cat /run/secrets/anthropic");
    assert!(held.starts_with("forage-placeholder-anthropic"), "{held}");
    assert!(eventually(30, || w.sh(&name, "cat /tmp/agent-saw").1.contains("agent has forage-placeholder-anthropic")));

    // A request with the placeholder, one with none, one with a key of the
    // agent's own and two on one connection: the API sees the real key each time.
    let url = format!("https://{API}/v1/messages");
    let tries = [
        format!("curl -sS -m 30 {url} -H \"x-api-key: $(cat /run/secrets/anthropic)\" -d '{{}}'"),
        format!("curl -sS -m 30 {url}"),
        format!("curl -sS -m 30 {url} -H 'x-api-key: the-agents-own' -H 'X-Api-Key: another'"),
        format!("curl -sS -m 30 {url} {url}"),
    ];
    for script in &tries {
        let (code, out) = w.sh(&name, script);
        assert_eq!(code, 0, "{script}: {out}");
        assert!(out.lines().count() >= 1 && out.lines().all(|l| l == "key ok"), "{script}: {out}");
    }
    let stub = logs(&w.servers[0]);
    let seen = stub.lines().filter(|l| l.starts_with("request")).count();
    assert_eq!(seen, 5, "five requests reached the API: {stub}");
    assert!(stub.lines().filter(|l| l.starts_with("request")).all(|l| l.contains(&format!("keys=['{real}']"))));
    // The host's key goes over HTTPS only: plain HTTP to it is refused.
    let (_, out) = w.sh(&name, &format!("curl -sS -m 30 -w '\\n%{{http_code}}' http://{API}/"));
    assert!(out.trim_end().ends_with("403") && out.contains("only over HTTPS"), "{out}");

    // The real key is nowhere in the sandbox: its files, every process's
    // environment and memory, its configuration.
    let container = format!("forage-{name}");
    assert!(!contains(&exported(&container), real.as_bytes()), "the key is in a file of the sandbox");
    let processes = pids(&container);
    assert!(processes.len() >= 2, "{processes:?}");
    for pid in &processes {
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        assert!(!contains(&environ, real.as_bytes()), "process {pid}'s environment holds the key");
        assert!(!in_memory(*pid, real.as_bytes()), "process {pid}'s memory holds the key");
    }
    // (The search itself works: the placeholder is found in the agent's memory.)
    let placeholder = held.trim().as_bytes();
    assert!(processes.iter().any(|pid| in_memory(*pid, placeholder)), "the memory search finds nothing");
    let inspected = serde_json::to_string(&inspect(&container).unwrap()).unwrap();
    assert!(!inspected.contains(&real) && inspected.contains("SSL_CERT_FILE=/etc/forage/ca-bundle.pem"));
    let proxy = w.proxies().pop().unwrap();
    assert!(!serde_json::to_string(&inspect(&proxy).unwrap()).unwrap().contains(&real));
    for args in [["status", &name, "--json"], ["logs", "--network", &name]] {
        assert!(!w.env.ok(&args).contains(&real), "{args:?}");
    }
    // On the host, the key is in the proxy's keys file and forage's own copy,
    // both readable by the user alone.
    let holding = files_holding(&w.env.home, real.as_bytes());
    let expected = [
        w.env.home.join(format!("egress/policy/keys/{name}.json")),
        w.env.home.join(format!("secrets/{name}/.injected.anthropic")),
    ];
    assert_eq!(holding.len(), 2, "{holding:?}");
    for (file, want) in holding.iter().zip([&expected[0], &expected[1]]) {
        assert_eq!(file, want);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(file).unwrap().permissions().mode() & 0o777, 0o600, "{}", file.display());
    }

    w.env.ok(&["down", &name]);
    assert!(files_holding(&w.env.home, real.as_bytes()).is_empty(), "down left the key behind");
}

#[test]
fn a_key_that_cannot_be_a_header_is_refused_before_anything_is_made() {
    let w = World::new();
    std::fs::write(w.env.path("config/forage/templates/inject.yaml"), TEMPLATE).unwrap();
    let key_file = w.env.path("two-lines");
    std::fs::write(&key_file, "sk-one\nsk-two\n").unwrap();
    let name = w.env.unique("inject-bad");
    let ws = w.workspace.display().to_string();
    let secret = format!("anthropic={}", key_file.display());
    let err = w.env.fails(&["up", &name, "-t", "inject", "--workspace", &ws, "--secret", &secret], 2);
    assert!(
        err.contains("secret \"anthropic\" is injected into a request header") && err.contains("one line"),
        "{err}"
    );
    assert_eq!(w.networks(), Vec::<String>::new());
    assert_eq!(w.proxies(), Vec::<String>::new());
    w.env.assert_nothing_left();
}
