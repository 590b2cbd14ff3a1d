//! `network: restricted` on the real engine: a sandbox on an internal network
//! of its own whose only way out is forage's egress proxy. Every destination is
//! a container or a host socket the test starts itself; nothing needs the
//! internet. The destination server (`Server`) sits on the proxy's outside
//! network under the aliases `allowed.egress.test`, `other.egress.test` and `denied.egress.test`,
//! which the engine's resolver answers for the proxy there; the attacks run
//! from inside the sandbox through `forage-ctl exec`.

use std::collections::HashMap;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::Command;

use bollard::models::{
    ContainerCreateBody, EndpointSettings, HostConfig, NetworkCreateRequest, NetworkDisconnectRequest,
};
use bollard::query_parameters::{CreateContainerOptions, ListContainersOptions, LogsOptions, RemoveContainerOptions};
use futures_util::StreamExt;

use crate::real_agent::fixture;
use crate::support::*;

/// A shell in an image built from host tools, with what the attacks need.
const TEMPLATE: &str = "description: egress tests
host_image:
  require: [sh, bash, curl, openssl, getent, timeout, od]
  tools: [sh, bash, cat, curl, openssl, getent, timeout, sleep, grep, env, od]
agent:
  command: [sleep, infinity]
network_allow: [allowed.egress.test]
";

/// One test's world: its Env, the `net` template, and the servers it started;
/// on drop every container and network of this FORAGE_HOME goes, the proxy's
/// included, whatever the test did.
pub(crate) struct World {
    pub(crate) env: Env,
    pub(crate) servers: Vec<String>,
    pub(crate) workspace: std::path::PathBuf,
}

impl World {
    pub(crate) fn new() -> World {
        let env = Env::new();
        let templates = env.mkdir("config/forage/templates");
        std::fs::write(templates.join("net.yaml"), TEMPLATE).unwrap();
        let workspace = env.mkdir("ws");
        World { env, servers: Vec::new(), workspace }
    }

    pub(crate) fn up(&self, name: &str, extra: &[&str]) {
        let ws = self.workspace.display().to_string();
        let mut args = vec!["up", name, "--workspace", &ws, "-t", "net", "--network", "restricted"];
        args.extend_from_slice(extra);
        self.env.ok(&args);
    }

    /// `status --json`'s `network` and the record's `egress`.
    pub(crate) fn network(&self, name: &str) -> (serde_json::Value, serde_json::Value) {
        let s = self.env.json(&["status", name, "--json"]);
        (s["network"].clone(), s["record"]["egress"].clone())
    }

    /// Runs `script` in the sandbox: its exit code and output (stdout, then stderr).
    pub(crate) fn sh(&self, name: &str, script: &str) -> (i32, String) {
        let out = self.env.run(&["exec", name, "--", "bash", "-c", script]);
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        (out.status.code().unwrap_or(-1), text)
    }

    /// Starts the destination server on the proxy's outside network; its address there.
    pub(crate) fn server(&mut self, outside: &str) -> Ipv4Addr {
        fixture::bookworm();
        let name = self.env.unique("forage-test-egress-server");
        let script = self.env.path("egress_server.py");
        std::fs::write(&script, include_str!("fixtures/egress_server.py")).unwrap();
        let aliases = ["allowed.egress.test", "other.egress.test", "denied.egress.test"].map(String::from).to_vec();
        let config = ContainerCreateBody {
            image: Some(fixture::BOOKWORM.into()),
            cmd: Some(["python3", "-u", "/server.py"].map(String::from).into()),
            host_config: Some(HostConfig {
                binds: Some(vec![format!("{}:/server.py:ro", script.display())]),
                network_mode: Some(outside.to_owned()),
                ulimits: test_container_ulimits(),
                ..Default::default()
            }),
            networking_config: Some(bollard::models::NetworkingConfig {
                endpoints_config: Some(HashMap::from([(
                    outside.to_owned(),
                    EndpointSettings { aliases: Some(aliases), ..Default::default() },
                )])),
            }),
            ..Default::default()
        };
        let api = docker();
        let options = CreateContainerOptions { name: Some(name.clone()), ..Default::default() };
        block_on(api.create_container(Some(options), config)).unwrap();
        self.servers.push(name.clone());
        block_on(api.start_container(&name, None)).unwrap();
        assert!(eventually(120, || logs(&name).contains("listening")), "the server did not start: {}", logs(&name));
        let inspected = block_on(api.inspect_container(&name, None)).unwrap();
        let ip = inspected.network_settings.unwrap().networks.unwrap()[outside].ip_address.clone().unwrap();
        ip.parse().unwrap()
    }

    pub(crate) fn home_label(&self) -> String {
        self.env.home.display().to_string()
    }

    /// Networks labelled as this FORAGE_HOME's (sandbox networks, the
    /// proxy's and port forwarders').
    pub(crate) fn networks(&self) -> Vec<String> {
        let mut names = Vec::new();
        let home = self.home_label();
        for label in [format!("forage.home={home}"), format!("forage.egress.home={home}"), self.ports_label()] {
            names.extend(networks_labelled(&label));
        }
        names.sort();
        names
    }

    fn ports_label(&self) -> String {
        format!("forage.ports.home={}", self.home_label())
    }

    /// The proxy's container, if this FORAGE_HOME has one.
    pub(crate) fn proxies(&self) -> Vec<String> {
        containers_labelled(&format!("forage.egress.home={}", self.home_label()))
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let api = docker();
        let remove = RemoveContainerOptions { force: true, v: true, ..Default::default() };
        let mut containers = self.servers.clone();
        containers.extend(self.env.containers().iter().map(|n| n.trim_start_matches('/').to_owned()));
        containers.extend(self.proxies());
        containers.extend(containers_labelled(&self.ports_label()));
        for c in containers {
            let _ = block_on(api.remove_container(&c, Some(remove.clone())));
        }
        // Cleaning up must not panic: a panic while a failed test unwinds
        // aborts the whole test binary.
        let networks = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.networks())).unwrap_or_default();
        for network in networks {
            let joined = std::panic::catch_unwind(|| containers_on_network(&network)).unwrap_or_default();
            for container in joined {
                let request = NetworkDisconnectRequest { container, force: Some(true) };
                let _ = block_on(api.disconnect_network(&network, request));
            }
            let _ = block_on(api.remove_network(&network));
        }
    }
}

pub(crate) fn logs(container: &str) -> String {
    let options = LogsOptions { stdout: true, stderr: true, tail: "all".into(), ..Default::default() };
    let chunks: Vec<_> = block_on(docker().logs(container, Some(options)).collect());
    chunks.into_iter().filter_map(Result::ok).map(|c| String::from_utf8_lossy(&c.into_bytes()).into_owned()).collect()
}

fn network_exists(name: &str) -> bool {
    engine_network_exists(name)
}

pub(crate) fn str_of(v: &serde_json::Value) -> String {
    v.as_str().unwrap_or_else(|| panic!("not a string: {v}")).to_owned()
}

/// The gateway (the host's address) of an engine network: as its IPAM
/// says, else (the default bridge) its bridge interface's address.
fn gateway(network: &str) -> Ipv4Addr {
    // (Through Podman's own API: its compat inspect fails while any
    // container on the engine cannot be described, as another test makes.)
    if let (_, Some(gw)) = engine_network_subnet(network) {
        return gw.parse().unwrap();
    }
    let bridge = bridge_of(network);
    nix::ifaddrs::getifaddrs()
        .unwrap()
        .filter(|i| i.interface_name == bridge)
        .find_map(|i| Some(i.address?.as_sockaddr_in()?.ip()))
        .unwrap_or_else(|| panic!("network {network}'s bridge {bridge} has no address"))
}

/// Where a sandbox network's gateway is, or would be: its subnet's first
/// address. On Docker that is the gateway (an address of nobody's:
/// `inhibit_ipv4`); Podman's sandbox networks have none, and their bridge
/// no IPv4 address at all (asserted here), which on rootful Podman would be
/// the host's.
fn sandbox_gateway(network: &str) -> Ipv4Addr {
    let (subnet, gateway) = engine_network_subnet(network);
    let first = forage::egress::subnet::Subnet::parse(&subnet).unwrap_or_else(|| panic!("{network}: {subnet}")).host(1);
    match test_engine() {
        TestEngine::Docker => assert_eq!(gateway, Some(first.to_string()), "{network}"),
        _ => assert_eq!(gateway, None, "Podman gave the sandbox's network {network} a gateway"),
    }
    first
}

/// The host's address as a container on `outside` reaches it, checked
/// there: from `container` (a server of the test's on that network), the
/// host's socket at `port` is reached. Docker's and rootful Podman's networks
/// are the host's own bridges, and the host is their gateway. Rootless
/// Podman's live in its own network namespace, whose gateway is no address
/// of the host's, and whose way out (slirp4netns) reaches the host at the
/// host's own addresses: the one its default route leaves from.
fn host_address_on(outside: &str, container: &str, port: u16) -> Ipv4Addr {
    let ip = match test_engine() {
        TestEngine::Docker | TestEngine::PodmanRootful => gateway(outside),
        TestEngine::PodmanRootless => {
            let probe = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
            probe.connect("192.0.2.1:9").expect("the host has a default route");
            match probe.local_addr().unwrap().ip() {
                std::net::IpAddr::V4(ip) => ip,
                other => panic!("the host's default route leaves from {other}, not an IPv4 address"),
            }
        }
    };
    let connect = format!("import socket; socket.create_connection(('{ip}', {port}), 10)");
    let (code, out) = exec_in(container, &["python3", "-c", &connect]);
    assert_eq!(code, 0, "the host's socket is not reached from network {outside} at {ip}:{port}: {out}");
    ip
}

/// Runs `cmd` in `container` (one of the test's own, not a sandbox): its exit
/// code and output.
fn exec_in(container: &str, cmd: &[&str]) -> (i64, String) {
    let api = docker();
    let config = bollard::models::ExecConfig {
        cmd: Some(cmd.iter().map(|s| (*s).to_owned()).collect()),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        ..Default::default()
    };
    let exec = block_on(api.create_exec(container, config)).unwrap();
    let mut text = String::new();
    if let bollard::exec::StartExecResults::Attached { output, .. } = block_on(api.start_exec(&exec.id, None)).unwrap()
    {
        let chunks: Vec<_> = block_on(output.collect());
        for chunk in chunks.into_iter().filter_map(Result::ok) {
            text.push_str(&String::from_utf8_lossy(&chunk.into_bytes()));
        }
    }
    (block_on(api.inspect_exec(&exec.id)).unwrap().exit_code.unwrap_or(-1), text)
}

#[test]
fn allowed_names_pass_the_proxy_and_everything_else_is_denied_logged_or_unreachable() {
    let mut w = World::new();
    // The user's allow file adds a host to every restricted sandbox.
    std::fs::write(w.env.path("config/forage/allow"), "# mine\nother.egress.test:8443\n").unwrap();
    let name = w.env.unique("net-a");
    w.up(&name, &["--allow", "nothing.test"]);
    let (network, egress) = w.network(&name);
    assert_eq!(network["mode"], "restricted", "{network}");
    let allow: Vec<String> = network["allow"].as_array().unwrap().iter().map(str_of).collect();
    assert_eq!(
        allow,
        ["allowed.egress.test", "other.egress.test:8443", "nothing.test"],
        "template, allow file, --allow"
    );
    let proxy = str_of(&egress["proxy_address"]);
    let sandbox_net = str_of(&egress["network"]);
    let outside = str_of(&network["outside_network"]);
    let server = w.server(&outside);

    // The agent is pointed at the proxy.
    let (_, env_out) = w.sh(&name, "env");
    assert!(env_out.contains(&format!("HTTPS_PROXY=http://{proxy}:3128")), "{env_out}");
    assert!(env_out.contains("NO_PROXY=localhost,127.0.0.1"), "{env_out}");

    // An allowed name, over plain HTTP and HTTPS through CONNECT.
    let (code, out) = w.sh(&name, "curl -sS -m 30 http://allowed.egress.test/");
    assert_eq!((code, out.trim()), (0, "hello from allowed.egress.test over http"), "{out}");
    // A plain request keeps the allowed Host, whatever it says (a shared
    // server routes by it).
    let (code, out) = w.sh(&name, "curl -sS -m 30 -H 'Host: denied.egress.test' http://allowed.egress.test/");
    assert_eq!((code, out.trim()), (0, "hello from allowed.egress.test over http"), "{out}");
    let (code, out) = w.sh(&name, "curl -sSk -m 30 https://allowed.egress.test/");
    assert_eq!((code, out.trim()), (0, "hello from allowed.egress.test over https"), "{out}");

    // A name not allowed: 403, naming the host and how to allow it.
    let (code, out) = w.sh(&name, "curl -sS -m 30 -w '\\n%{http_code}' http://denied.egress.test/");
    assert_eq!(code, 0, "{out}");
    assert!(out.trim_end().ends_with("403"), "{out}");
    assert!(out.contains("may not reach denied.egress.test:80") && out.contains("--allow denied.egress.test"), "{out}");
    let (code, out) = w.sh(&name, "curl -sSk -m 30 https://denied.egress.test/");
    assert_ne!(code, 0, "CONNECT to a denied name must fail: {out}");
    assert!(out.contains("403"), "{out}");

    // DNS from inside answers nothing, not even for the names the proxy resolves.
    for host in ["allowed.egress.test", "denied.egress.test", "example.com"] {
        let (code, out) = w.sh(&name, &format!("timeout 60 getent hosts {host}"));
        assert_eq!(code, 2, "{host} resolved inside the sandbox: {out}");
    }

    // The server's address answers (in its own container: rootless Podman's
    // networks are out of the host's reach), but not from the sandbox
    // directly, and the proxy refuses the literal address, not being allowed.
    let connect = format!("import socket; socket.create_connection(('{server}', 80), 10)");
    let (code, out) = exec_in(&w.servers[0], &["python3", "-c", &connect]);
    assert_eq!(code, 0, "the server does not listen at {server}:80: {out}");
    let (code, out) = w.sh(&name, &format!("timeout 30 bash -c 'exec 3<>/dev/tcp/{server}/80'"));
    assert_ne!(code, 0, "a direct connection to {server}:80 got through: {out}");
    let (_, out) = w.sh(&name, &format!("curl -sS -m 30 -w '\\n%{{http_code}}' http://{server}/"));
    assert!(out.trim_end().ends_with("403") && out.contains(&format!("--allow {server}")), "{out}");

    // The host: a socket of the test's on all its addresses, reachable from
    // the outside network at the host's address there (so the proxy could
    // reach it), but not from the sandbox: neither there, nor at the sandbox
    // network's gateway (which has no address), nor through the proxy.
    let host_socket = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = host_socket.local_addr().unwrap().port();
    let host_there = host_address_on(&outside, &w.servers[0], port);
    let sandbox_gw = sandbox_gateway(&sandbox_net);
    for ip in [sandbox_gw, host_there] {
        let (code, out) = w.sh(&name, &format!("timeout 30 bash -c 'exec 3<>/dev/tcp/{ip}/{port}'"));
        assert_ne!(code, 0, "the sandbox reached the host at {ip}: {out}");
    }
    let (_, out) = w.sh(&name, &format!("curl -sS -m 30 -w '\\n%{{http_code}}' http://{host_there}:{port}/"));
    assert!(out.trim_end().ends_with("403"), "the host was reached through the proxy: {out}");

    // A tunnel whose TLS names another host than its CONNECT is cut; the same
    // tunnel naming its host gets the server's certificate.
    let s_client = |sni: &str| {
        format!(
            "openssl s_client -proxy {proxy}:3128 -connect allowed.egress.test:443 -servername {sni} </dev/null 2>&1; echo exit=$?"
        )
    };
    let (_, out) = w.sh(&name, &s_client("allowed.egress.test"));
    assert!(out.contains("BEGIN CERTIFICATE") && out.contains("exit=0"), "{out}");
    // A server name holding a terminal escape: refused and logged
    // (counted below), never replayed raw.
    let (_, out) = w.sh(&name, &s_client("\"$(printf 'esc\\033[2Jape.test')\""));
    assert!(!out.contains("exit=0"), "{out}");
    let (_, out) = w.sh(&name, &s_client("evil.test"));
    assert!(!out.contains("BEGIN CERTIFICATE") && !out.contains("exit=0"), "a mismatched SNI got through: {out}");

    // The log: each destination with its decision and counts.
    let log = w.env.json(&["logs", &name, "--network", "--json"]);
    let find = |host: &str, port: u16, allowed: bool| {
        log.as_array()
            .unwrap()
            .iter()
            .find(|d| d["host"] == host && d["port"] == port && d["allowed"] == allowed)
            .cloned()
    };
    let denied =
        find("denied.egress.test", 80, false).unwrap_or_else(|| panic!("denied.egress.test:80 not logged: {log}"));
    assert!(denied["count"].as_u64().unwrap() >= 1 && denied["first"].as_u64().unwrap() > 0, "{denied}");
    assert!(find("denied.egress.test", 443, false).is_some(), "{log}");
    assert!(find("allowed.egress.test", 80, true).is_some(), "{log}");
    let sni = find("allowed.egress.test", 443, false).unwrap_or_else(|| panic!("the SNI refusal is not logged: {log}"));
    assert!(str_of(&sni["reason"]).contains("evil.test"), "{sni}");
    let text = w.env.ok(&["logs", &name, "--network"]);
    // Both refused tunnels reached the proxy: the escape's and evil.test's.
    assert!(sni["count"].as_u64().unwrap() >= 2, "the escape's tunnel was not logged: {sni}");
    assert!(!serde_json::to_string(&log).unwrap().contains("\\u001b") && !text.contains('\x1b'), "{text:?}");
    assert!(text.contains("denied   denied.egress.test:80"), "{text}");
}

#[test]
fn sandboxes_cannot_reach_each_other_and_the_proxy_outlives_them_until_gc() {
    let mut w = World::new();
    let (a, b) = (w.env.unique("net-b1"), w.env.unique("net-b2"));
    // A glob never reaches a private address; the template's exact entry does.
    w.up(&a, &["--allow", "*.egress.test"]);
    let (network, egress_a) = w.network(&a);
    let outside = str_of(&network["outside_network"]);
    let proxy = str_of(&network["proxy"]);
    let server = w.server(&outside);
    let (code, out) = w.sh(&a, "curl -sS -m 30 http://allowed.egress.test/");
    assert_eq!((code, out.trim()), (0, "hello from allowed.egress.test over http"), "{out}");
    let (_, out) = w.sh(&a, "curl -sS -m 30 -w '\\n%{http_code}' http://other.egress.test/");
    assert!(out.trim_end().ends_with("403") && out.contains("private"), "a glob reached a private address: {out}");

    // B may name the server's address, and even A's: only the first is reached.
    let a_ip = str_of(&egress_a["sandbox_address"]);
    let a_proxy = str_of(&egress_a["proxy_address"]);
    w.up(&b, &["--allow", &format!("{server}:80"), "--allow", &a_ip, "--allow", &format!("{a_proxy}:3128")]);
    let (_, egress_b) = w.network(&b);
    assert_ne!(egress_a["subnet"], egress_b["subnet"], "each sandbox has a network of its own");
    let (code, out) = w.sh(&b, &format!("curl -sS -m 30 http://{server}/"));
    assert_eq!((code, out.trim().to_owned()), (0, format!("hello from {server} over http")), "{out}");
    let (_, out) = w.sh(&b, &format!("curl -sS -m 30 -w '\\n%{{http_code}}' http://{a_ip}/"));
    assert!(out.trim_end().ends_with("403") && out.contains("sandbox networks"), "B reached A: {out}");
    // The proxy listens on A's network: A reaches it there, B does not.
    let probe = format!("timeout 30 bash -c 'exec 3<>/dev/tcp/{a_proxy}/3128' && echo reached");
    let (_, out) = w.sh(&a, &probe);
    assert!(out.contains("reached"), "A cannot reach its own proxy: {out}");
    let (code, out) = w.sh(&b, &probe);
    assert!(code != 0 && !out.contains("reached"), "B reached A's network: {out}");
    let (code, out) = w.sh(&b, &format!("timeout 30 bash -c 'exec 3<>/dev/tcp/{a_ip}/22'"));
    assert_ne!(code, 0, "{out}");

    // `down A` removes A's network; the proxy stays for B, which still works.
    let a_net = str_of(&egress_a["network"]);
    assert!(network_exists(&a_net));
    w.env.ok(&["down", &a]);
    assert!(!network_exists(&a_net), "down left network {a_net}");
    assert_eq!(w.proxies(), vec![proxy.clone()], "the proxy went with another sandbox's down");
    let (code, out) = w.sh(&b, &format!("curl -sS -m 30 http://{server}/"));
    assert_eq!(code, 0, "{out}");

    // The proxy stopped: the sandbox's way out is closed, not opened. Its next
    // start (here `restart`; `reset` the same) brings the proxy back, joined
    // to every restricted sandbox's network again.
    block_on(docker().stop_container(&proxy, None)).unwrap();
    // (A failure, however it comes: a refusal or a timeout.)
    let (code, out) = w.sh(&b, &format!("curl -sS -m 10 http://{server}/"));
    assert_ne!(code, 0, "traffic passed with the proxy stopped: {out}");
    let (code, out) = w.sh(&b, &format!("timeout 30 bash -c 'exec 3<>/dev/tcp/{server}/80'"));
    assert_ne!(code, 0, "with the proxy stopped, {server} was reached directly: {out}");
    w.env.ok(&["restart", &b]);
    let (code, out) = w.sh(&b, &format!("curl -sS -m 30 http://{server}/"));
    assert_eq!(code, 0, "the proxy did not come back with the sandbox's start: {out}");
    w.env.ok(&["reset", &b]);
    let (code, out) = w.sh(&b, &format!("curl -sS -m 30 http://{server}/"));
    assert_eq!(code, 0, "reset lost the sandbox's way out: {out}");
    let (code, out) = w.sh(&b, "curl -sS -m 30 -w '\\n%{http_code}' http://allowed.egress.test/");
    assert!(code == 0 && out.trim_end().ends_with("200"), "{out}");

    // Once no restricted sandbox is left, `gc --force` removes the proxy and its network.
    w.env.ok(&["down", &b]);
    assert_eq!(w.proxies(), vec![proxy.clone()], "down removed the proxy; gc does");
    let found = w.env.json(&["gc", "--json"]);
    assert!(found.to_string().contains("unused-proxy"), "{found}");
    w.env.ok(&["gc", "--force"]);
    assert_eq!(w.proxies(), Vec::<String>::new());
    assert!(!network_exists(&outside), "gc left the proxy's network {outside}");
    w.env.assert_nothing_left();
}

#[test]
fn a_failed_restricted_up_leaves_nothing_behind_and_bad_entries_are_refused() {
    let w = World::new();
    let ws = w.workspace.display().to_string();
    let name = w.env.unique("net-c");
    // Bad input: one clear error, exit 2, before anything is made.
    let err = w
        .env
        .fails(&["up", &name, "--workspace", &ws, "-t", "net", "--network", "restricted", "--allow", "not a host"], 2);
    assert!(err.contains("\"not a host\" is not an allowlist entry"), "{err}");
    let err = w.env.fails(&["up", &name, "--workspace", &ws, "-t", "net", "--allow", "a.test"], 2);
    assert!(
        err.contains("--allow a.test is for `network: restricted`") && err.contains("--network restricted"),
        "{err}"
    );
    let allow_file = w.env.path("config/forage/allow");
    std::fs::write(&allow_file, "ok.test\nhttp://bad.test/\n").unwrap();
    let err = w.env.fails(&["up", &name, "--workspace", &ws, "-t", "net", "--network", "restricted"], 2);
    assert!(err.contains("line 2") && err.contains(&allow_file.display().to_string()), "{err}");
    std::fs::remove_file(&allow_file).unwrap();
    assert_eq!(w.networks(), Vec::<String>::new());

    // A network of the sandbox's network's name that is not forage's: exit 4,
    // and it is left as it was (labelled so that the World removes it anyway).
    let squatter = format!("forage-{name}-net");
    let labels = HashMap::from([("forage.home".to_owned(), w.home_label())]);
    let request = NetworkCreateRequest { name: squatter.clone(), labels: Some(labels), ..Default::default() };
    block_on(docker().create_network(request)).unwrap();
    let err = w.env.fails(&["up", &name, "--workspace", &ws, "-t", "net", "--network", "restricted"], 4);
    assert!(err.contains(&format!("a network named {squatter} already exists")), "{err}");
    assert!(network_exists(&squatter), "forage removed a network it did not make");
    block_on(docker().remove_network(&squatter)).unwrap();
    assert_eq!(w.proxies(), Vec::<String>::new());
    w.env.assert_nothing_left();

    // An agent that dies as it starts: `up` fails after the network and the
    // proxy were made, and rolls both back.
    let templates = w.env.path("config/forage/templates");
    std::fs::write(templates.join("net-dies.yaml"), TEMPLATE.replace("[sleep, infinity]", "[sh, -c, 'exit 3']"))
        .unwrap();
    let out = w.env.run(&["up", &name, "--workspace", &ws, "-t", "net-dies", "--network", "restricted"]);
    assert!(!out.status.success(), "{}", describe(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("exited with code 3"), "{}", describe(&out));
    assert_eq!(w.networks(), Vec::<String>::new(), "networks left behind");
    assert_eq!(w.proxies(), Vec::<String>::new(), "the proxy was left behind");
    w.env.assert_nothing_left();

    // Killed just after the network step: the network and the proxy are left,
    // and `gc --force` removes them with the broken sandbox.
    w.env.killed_after(&["up", &name, "--workspace", &ws, "-t", "net", "--network", "restricted"], "network");
    assert_eq!(w.networks().len(), 2, "the sandbox's and the proxy's networks: {:?}", w.networks());
    assert_eq!(w.proxies().len(), 1);
    w.env.ok(&["gc", "--force"]);
    assert_eq!(w.networks(), Vec::<String>::new(), "gc left networks");
    assert_eq!(w.proxies(), Vec::<String>::new(), "gc left the proxy");
    w.env.assert_nothing_left();
}

#[test]
fn parallel_restricted_ups_share_one_proxy_each_on_a_network_of_its_own() {
    let w = World::new();
    let ws = w.workspace.display().to_string();
    let names: Vec<String> = (1..=3).map(|i| w.env.unique(&format!("net-p{i}"))).collect();
    let children: Vec<_> = names
        .iter()
        .map(|n| {
            let args = ["up", n.as_str(), "--workspace", &ws, "-t", "net", "--network", "restricted"];
            w.env.cmd(&args).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "a parallel up failed: {}", describe(&out));
    }
    let mut subnets: Vec<String> = names.iter().map(|n| str_of(&w.network(n).1["subnet"])).collect();
    subnets.sort();
    subnets.dedup();
    assert_eq!(subnets.len(), 3, "two sandboxes share a subnet: {subnets:?}");
    assert_eq!(w.proxies().len(), 1, "one proxy per FORAGE_HOME: {:?}", w.proxies());
    // Each is in the proxy's map: its requests are its own (a denial names it).
    for n in &names {
        let (_, out) = w.sh(n, "curl -sS -m 30 http://denied.egress.test/");
        assert!(out.contains(&format!("sandbox {n} may not reach denied.egress.test:80")), "{out}");
    }
    let mut args = vec!["down"];
    args.extend(names.iter().map(String::as_str));
    w.env.ok(&args);
    w.env.ok(&["gc", "--force"]);
    assert_eq!(w.networks(), Vec::<String>::new());
    assert_eq!(w.proxies(), Vec::<String>::new());
    w.env.assert_nothing_left();
}

/// Builds tests/it/fixtures/netprobe.c into the World's workspace (the
/// sandbox's /workspace/netprobe); its path on the host.
fn netprobe(w: &World) -> std::path::PathBuf {
    let source = crate::templates::write(&w.env.path("netprobe.c"), include_str!("fixtures/netprobe.c"));
    let probe = w.workspace.join("netprobe");
    static_program(&source, &probe);
    probe
}

/// A command on the host's side of the engine's networks, with the powers
/// of their owner: on the host itself (Docker, rootful Podman; as the test's
/// user, root in CI), or, for rootless Podman, in the network namespace it
/// keeps its bridges in, as root there (`podman unshare --rootless-netns`).
fn network_side(program: &std::path::Path) -> Command {
    match test_engine() {
        TestEngine::PodmanRootless => {
            let mut command = Command::new("podman");
            command.args(["unshare", "--rootless-netns"]).arg(program);
            command
        }
        TestEngine::Docker | TestEngine::PodmanRootful => Command::new(program),
    }
}

/// Runs the probe on the host's side of the engine's networks.
fn on_host(probe: &std::path::Path, args: &[&str]) -> String {
    let out = network_side(probe).args(args).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The IPv6 addresses on the host's side of the engine's networks but
/// loopback and the link-local ones of interfaces other than `bridge` (other
/// tests' bridges come and go): (address, interface). As the kernel lists
/// them there (`/proc/net/if_inet6`: address in hex, index, prefix, scope,
/// flags, interface).
fn host_v6(bridge: &str) -> Vec<(std::net::Ipv6Addr, String)> {
    let out = network_side(std::path::Path::new("cat")).arg("/proc/net/if_inet6").output().unwrap();
    assert!(out.status.success(), "reading the IPv6 addresses: {}", describe(&out));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let hex = u128::from_str_radix(fields.first()?, 16).ok()?;
            Some((std::net::Ipv6Addr::from(hex), fields.last()?.to_string()))
        })
        .filter(|(ip, interface)| !ip.is_loopback() && (!ip.is_unicast_link_local() || interface == bridge))
        .collect()
}

/// A TCP socket on `[::]` on the host's side of the engine's networks
/// (netprobe's `listen6`), taking connections until dropped.
struct V6Listener {
    child: std::process::Child,
    port: String,
}

impl V6Listener {
    fn start(probe: &std::path::Path) -> Self {
        use std::io::BufRead;
        let mut child =
            network_side(probe).args(["listen6", "600"]).stdout(std::process::Stdio::piped()).spawn().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().strip_prefix("listening ").unwrap_or_else(|| panic!("listen6 said {line:?}"));
        V6Listener { port: port.to_owned(), child }
    }
}

impl Drop for V6Listener {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn raw_sockets_and_ipv6_get_a_restricted_sandbox_nowhere() {
    let mut w = World::new();
    let probe = netprobe(&w);
    let name = w.env.unique("net-raw");
    w.up(&name, &[]);
    let (network, egress) = w.network(&name);
    let outside = str_of(&network["outside_network"]);
    let server = w.server(&outside).to_string();
    let proxy_inside = str_of(&egress["proxy_address"]);
    let proxy = inspect(&str_of(&network["proxy"])).unwrap();
    let proxy_outside = proxy.network_settings.unwrap().networks.unwrap()[&outside].ip_address.clone().unwrap();

    // Raw sockets: the host (root) opens them and its pings are answered.
    let host = on_host(&probe, &["raw"]);
    assert!(host.contains("raw-icmp: open") && host.contains("packet: open"), "{host}");
    for ip in [&server, &proxy_outside] {
        let out = on_host(&probe, &["ping", ip]);
        assert!(out.contains(": reply"), "the host cannot ping {ip}: {out}");
    }
    // Inside, neither opens; the unprivileged ping socket Docker and rootful
    // Podman allow reaches the proxy on the sandbox's own network, and
    // nothing beyond it. (Rootless Podman allows ping sockets to group 0
    // only, `ping_group_range=0 0`, which the agent is not in: there no ping
    // leaves at all.)
    let (_, inside) = w.sh(&name, "/workspace/netprobe raw");
    assert!(inside.contains("raw-icmp: Operation not permitted"), "{inside}");
    assert!(inside.contains("packet: Operation not permitted"), "{inside}");
    let (_, out) = w.sh(&name, &format!("/workspace/netprobe ping {proxy_inside}"));
    if test_engine() != TestEngine::PodmanRootless {
        assert!(out.contains("reply") && !out.contains("no reply"), "the sandbox cannot ping its proxy: {out}");
    } else {
        assert!(out.contains("socket: Operation not permitted"), "the sandbox opened a ping socket: {out}");
    }
    for ip in [&server, &proxy_outside, &gateway(&outside).to_string(), &gateway(default_network()).to_string()] {
        let (_, out) = w.sh(&name, &format!("/workspace/netprobe ping {ip}"));
        assert!(!out.contains(": reply"), "the sandbox pinged {ip}: {out}");
    }

    // IPv6: a host socket on `::`, reached from the host at each of its own
    // addresses (the sandbox network's bridge's link-local one included);
    // the sandbox has no IPv6 address, not even ::1, and reaches none.
    let listener = V6Listener::start(&probe);
    let port = listener.port.clone();
    let bridge = bridge_of(&str_of(&egress["network"]));
    let targets = host_v6(&bridge);
    assert!(targets.iter().any(|(_, i)| *i == bridge), "no link-local address on {bridge}: {targets:?}");
    for (ip, interface) in &targets {
        // (A new bridge's link-local address is usable once the kernel's
        // duplicate check is done.)
        let mut out = String::new();
        let reached = eventually(30, || {
            out = on_host(&probe, &["v6", &ip.to_string(), interface, &port]);
            out.contains("connected")
        });
        assert!(reached, "the host cannot reach its own [{ip}%{interface}]:{port}: {out}");
        let inside_interface = if *interface == bridge { "eth0" } else { "-" };
        let (_, out) = w.sh(&name, &format!("/workspace/netprobe v6 {ip} {inside_interface} {port}"));
        assert!(out.contains(&format!("v6 {ip}: ")) && !out.contains("connected"), "reached {ip}: {out}");
    }
    let (_, addresses) = w.sh(&name, "cat /proc/net/if_inet6; echo end");
    assert_eq!(addresses.trim(), "end", "the sandbox has IPv6 addresses");
    // (forage asks for it; Podman's inspect does not show a container's sysctls.)
    let (_, disabled) = w.sh(&name, "cat /proc/sys/net/ipv6/conf/all/disable_ipv6");
    assert_eq!(disabled.trim(), "1", "IPv6 is not disabled in the sandbox");
    if test_engine() == TestEngine::Docker {
        let sysctls = inspect(&format!("forage-{name}")).unwrap().host_config.unwrap().sysctls.unwrap_or_default();
        assert_eq!(sysctls.get("net.ipv6.conf.all.disable_ipv6").map(String::as_str), Some("1"), "{sysctls:?}");
    }
    let (_, out) = w.sh(&name, &format!("curl -sS -m 30 -w '\\n%{{http_code}}' 'http://[{}]:{port}/'", targets[0].0));
    // The proxy takes no IPv6 address, allowed or not.
    assert!(out.trim_end().ends_with("400") && out.contains("is not a host"), "the proxy took an IPv6 literal: {out}");
    w.env.ok(&["down", &name]);
    w.env.ok(&["gc", "--force"]);
    w.env.assert_nothing_left();
}

/// The host's side of an engine network: its bridge interface (Podman's,
/// read through its own API: its compat inspect names none).
fn bridge_of(network: &str) -> String {
    if let Some(host) = test_engine_host().filter(|_| test_engine() != TestEngine::Docker) {
        let filters = HashMap::from([("name".to_owned(), vec![format!("^{network}$")])]);
        let found = block_on(forage::runtime::libpod::networks(&host, &filters)).unwrap();
        return found.into_iter().find_map(|n| n.network_interface).unwrap_or_else(|| panic!("{network}: no bridge"));
    }
    let n = block_on(docker().inspect_network(network, None)).unwrap();
    let named = n.options.and_then(|o| o.get("com.docker.network.bridge.name").cloned());
    named.unwrap_or_else(|| format!("br-{}", &n.id.unwrap()[..12]))
}

/// The body an HTTP server at `ip:port` answers on the host's side of the
/// engine's networks (`network_side`), if it does: the host's own `host_get`,
/// or curl's in rootless Podman's network namespace.
fn network_side_get(ip: &str, port: u16) -> Option<String> {
    if test_engine() != TestEngine::PodmanRootless {
        return host_get(ip, port);
    }
    let out = curl_on_network_side(ip, port, false);
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What `curl -v` to `ip:port` on rootless Podman's network namespace said
/// (its output, then its log).
fn network_side_curl_v(ip: &str, port: u16) -> String {
    let out = curl_on_network_side(ip, port, true);
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

fn curl_on_network_side(ip: &str, port: u16, verbose: bool) -> std::process::Output {
    let verbose: &[&str] = if verbose { &["-v"] } else { &[] };
    let url = format!("http://{ip}:{port}/");
    let args = [verbose, &["-sS", "-m", "10", "--noproxy", "*", &url]].concat();
    network_side(std::path::Path::new("curl")).args(args).output().unwrap()
}

/// The body an HTTP server at `ip:port` answers the host, if it does.
fn host_get(ip: &str, port: u16) -> Option<String> {
    use std::io::{Read, Write};
    let at = std::net::SocketAddr::new(ip.parse().unwrap(), port);
    let mut s = TcpStream::connect_timeout(&at, std::time::Duration::from_secs(10)).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    text.split_once("\r\n\r\n").map(|(_, body)| body.to_owned())
}

/// Whether `curl -v` says the server closed the connection it took without
/// an answer (closed at once, or reset: the request was still arriving).
fn closed_unanswered(curl_said: &str) -> bool {
    !curl_said.contains(A_ANSWERS)
        && (curl_said.contains("Empty reply from server") || curl_said.contains("Connection reset by peer"))
}

/// What sandbox A's server answers.
const A_ANSWERS: &str = "served by sandbox A";

/// Sandbox A (restricted) serving `A_ANSWERS` on :3000 from tests/it/fixtures/serve.c
/// and publishing it: its host port, its address, and its forwarder's two
/// (on the network it publishes from, then on A's network).
fn serving_a(w: &World, a: &str) -> (u16, String, [String; 2]) {
    let ws = w.env.mkdir("ws-a");
    let source = crate::templates::write(&w.env.path("serve.c"), include_str!("fixtures/serve.c"));
    static_program(&source, &ws.join("serve"));
    std::fs::write(ws.join("id"), A_ANSWERS).unwrap();
    let template = TEMPLATE.replace("[sleep, infinity]", "[/workspace/serve, '3000']");
    std::fs::write(w.env.path("config/forage/templates/net-serve.yaml"), template).unwrap();
    let ws = ws.display().to_string();
    w.env.ok(&["up", a, "--workspace", &ws, "-t", "net-serve", "--network", "restricted", "--publish", "3000"]);
    let status = w.env.json(&["status", a, "--json"]);
    let host_port = status["record"]["ports"][0]["host_port"].as_u64().unwrap() as u16;
    let forwarder = format!("forage-{a}-Ports");
    let mut networks = inspect(&forwarder).unwrap().network_settings.unwrap().networks.unwrap();
    assert_eq!(networks.len(), 2, "{networks:?}");
    let mut ip_on = |network: &str| networks.remove(network).and_then(|e| e.ip_address).unwrap();
    let own = ip_on(&forwarders_network(&forwarder));
    let on_a = ip_on(&str_of(&status["record"]["egress"]["network"]));
    (host_port, str_of(&status["record"]["egress"]["sandbox_address"]), [own, on_a])
}

/// The network through which the engine publishes `forwarder`'s ports: the
/// default network, but on rootless Podman, where it is one of its own
/// (`Docker::forwarder_on_default_network` says why).
fn forwarders_network(forwarder: &str) -> String {
    match test_engine() {
        TestEngine::PodmanRootless => forwarder.to_owned(),
        _ => default_network().to_owned(),
    }
}

/// The port `forwarder` listens on for sandbox port `port` (random, made
/// anew with each forwarder: its command says `--forward INSIDE=IP:PORT`).
fn inside_port(forwarder: &str, port: u16) -> u16 {
    let cmd = inspect(forwarder).and_then(|c| c.config?.cmd).unwrap();
    let forward = cmd.iter().find(|a| a.ends_with(&format!(":{port}"))).unwrap_or_else(|| panic!("{cmd:?}"));
    forward.split('=').next().unwrap().parse().unwrap()
}

#[test]
fn a_published_port_is_reachable_from_the_host_and_from_no_other_sandbox() {
    let w = World::new();
    let (a, b, c) = (w.env.unique("net-pa"), w.env.unique("net-pb"), w.env.unique("net-pc"));
    let (host_port, a_ip, [forwarder_ip, forwarder_on_a]) = serving_a(&w, &a);
    // The forwarder listens on a port of its own, not 3000; the attacks
    // below are given it (the worst case: only the engine knows it).
    let inside = inside_port(&format!("forage-{a}-Ports"), 3000);
    assert_ne!(inside, 3000);
    // The way in works: the host at 127.0.0.1, and at the forwarder's own
    // network (the host's address there is the one the engine's published
    // port comes from); A at its own address. Rootless Podman's published
    // port comes from inside the forwarder instead, and the gateway of its
    // network, an address of Podman's network namespace that a container on
    // Podman's default network is masqueraded as, is not served.
    assert!(eventually(60, || host_get("127.0.0.1", host_port).as_deref() == Some(A_ANSWERS)), "A is not published");
    if test_engine() == TestEngine::PodmanRootless {
        // The connection is made (the attack step), and closed unanswered.
        let said = network_side_curl_v(&forwarder_ip, inside);
        assert!(said.contains(&format!("Connected to {forwarder_ip}")), "the gateway did not reach it: {said}");
        assert!(closed_unanswered(&said), "the forwarder served its gateway: {said}");
    } else {
        let from_the_host = network_side_get(&forwarder_ip, inside);
        assert_eq!(from_the_host.as_deref(), Some(A_ANSWERS), "the forwarder does not serve the host");
    }
    let (_, out) = w.sh(&a, &format!("curl -sS -m 30 --noproxy '*' http://{a_ip}:3000/"));
    assert_eq!(out.trim(), A_ANSWERS, "A does not answer at its own address");
    // The forwarder serves nobody else, even a container on its own
    // network: A at the forwarder's address there gets no answer (nor does
    // the host, which has no address on A's internal network).
    let (_, out) = w.sh(&a, &format!("curl -v -sS -m 30 --noproxy '*' http://{forwarder_on_a}:{inside}/"));
    assert!(out.contains(&format!("Connected to {forwarder_on_a}")), "A did not reach its forwarder: {out}");
    assert!(closed_unanswered(&out), "the forwarder served A: {out}");
    assert_ne!(
        network_side_get(&forwarder_on_a, inside).as_deref(),
        Some(A_ANSWERS),
        "the forwarder served the host on A's network"
    );
    let targets = [format!("{a_ip}:3000"), format!("{forwarder_ip}:{inside}"), format!("{forwarder_on_a}:{inside}")];

    // B (restricted) and C (full) reach none of it, directly or (B) through
    // the proxy. (Reaching is getting A's answer: on some hosts, a
    // connection to an address no route leads to is accepted upstream.)
    // B's allowlist names the forwarder's address on the network it is
    // published through exactly, which lets a private address through: the
    // proxy must refuse it all the same (the default network, or the
    // forwarders' own range), whose connection would come from the gateway
    // there, which the forwarder serves as the host.
    let forwarder_entry = format!("{forwarder_ip}:{inside}");
    w.up(&b, &["--allow", &forwarder_entry]);
    let allowed: Vec<String> = w.network(&b).0["allow"].as_array().unwrap().iter().map(str_of).collect();
    assert!(allowed.contains(&forwarder_entry), "B's allowlist lacks the attack's entry: {allowed:?}");
    let ws = w.workspace.display().to_string();
    // (On rootless Podman a full sandbox is on the default network only when
    // it publishes a port: else on slirp4netns, a network of its own, which
    // it could not leave for the forwarder's below.)
    let publish: &[&str] = if test_engine() == TestEngine::PodmanRootless { &["--publish", "3001"] } else { &[] };
    w.env.ok(&[&["up", &c, "--workspace", &ws, "-t", "net", "--network", "full"], publish].concat());
    let docker0 = gateway(default_network());
    let outside = str_of(&w.network(&b).0["outside_network"]);
    for sandbox in [&b, &c] {
        let mut direct = targets.to_vec();
        direct.push(format!("{docker0}:{host_port}"));
        for target in &direct {
            let (_, out) = w.sh(sandbox, &format!("curl -sS -m 20 --noproxy '*' http://{target}/"));
            assert!(!out.contains(A_ANSWERS), "{sandbox} reached {target}: {out}");
        }
    }
    let mut proxied = targets.to_vec();
    proxied.push(format!("{}:{host_port}", gateway(&outside)));
    proxied.push(format!("127.0.0.1:{host_port}"));
    let proxy = str_of(&w.network(&b).1["proxy_address"]);
    for target in &proxied {
        let (_, out) = w.sh(
            &b,
            &format!("curl -sS -m 30 -x http://{proxy}:3128 --noproxy '' -w '\\n%{{http_code}}' http://{target}/"),
        );
        assert!(
            out.trim_end().ends_with("403") && !out.contains(A_ANSWERS),
            "B reached {target} through the proxy: {out}"
        );
    }
    let (_, out) = w.sh(
        &b,
        &format!("curl -sS -m 30 -x http://{proxy}:3128 --noproxy '' -w '\\n%{{http_code}}' http://{forwarder_entry}/"),
    );
    let why = match test_engine() {
        TestEngine::PodmanRootless => "an address of forage's port forwarders",
        _ => "an address of the engine's default network",
    };
    assert!(
        out.contains(why) && out.trim_end().ends_with("403"),
        "the allowed forwarder was not refused for {why:?}: {out}"
    );
    // C on the network the forwarder is published through, given the
    // forwarder's port: C's connection is taken, and closed unanswered. C is
    // on it already where that is the default network; on rootless Podman it
    // is joined to the forwarder's own.
    let forwarder = forwarders_network(&format!("forage-{a}-Ports"));
    let join_and_leave = forwarder != default_network();
    if join_and_leave {
        let join = bollard::models::NetworkConnectRequest { container: format!("forage-{c}"), ..Default::default() };
        block_on(docker().connect_network(&forwarder, join)).unwrap();
    }
    let (_, out) = w.sh(&c, &format!("curl -v -sS -m 30 --noproxy '*' http://{forwarder_ip}:{inside}/"));
    if join_and_leave {
        let leave = NetworkDisconnectRequest { container: format!("forage-{c}"), force: Some(true) };
        block_on(docker().disconnect_network(&forwarder, leave)).unwrap();
    }
    assert!(out.contains(&format!("Connected to {forwarder_ip}")), "C did not reach the forwarder: {out}");
    assert!(closed_unanswered(&out), "the forwarder served C: {out}");
    w.env.ok(&["down", &a, &b, &c]);
    w.env.ok(&["gc", "--force"]);
    assert_eq!(w.networks(), Vec::<String>::new());
    w.env.assert_nothing_left();
}

/// A container the engine cannot describe, elsewhere on the engine, stops no
/// restricted `up` or `down`. On Podman, one in its database whose storage is
/// gone (what every removal leaves for a moment, and a failed one for good):
/// Podman 4.3's compat network list and inspect then fail with 500
/// "container not known" (the test checks that they do), which failed this
/// suite's `up`s in CI; forage reads networks through Podman's own API. On
/// Docker, where no container can be in that state, a container is made and
/// removed over and over meanwhile.
#[test]
fn a_container_the_engine_cannot_describe_stops_no_restricted_up_or_down() {
    let _alone = ONE_BROKEN_CONTAINER_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let w = World::new();
    let (a, b) = (w.env.unique("net-ga"), w.env.unique("net-gb"));
    w.up(&a, &[]);
    let image = inspect(&format!("forage-{a}")).and_then(|c| c.config?.image).unwrap();
    let ghost = w.env.unique("ghost");
    let options = bollard::query_parameters::CreateContainerOptions { name: Some(ghost.clone()), ..Default::default() };
    let config = ContainerCreateBody { image: Some(image), cmd: Some(vec!["true".into()]), ..Default::default() };
    let id = block_on(docker().create_container(Some(options.clone()), config.clone())).unwrap().id;
    let _removed_at_the_end = RemovedOnDrop(ghost.clone());
    let churn = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let churner = if test_engine() == TestEngine::Docker {
        let (churn, options, config) = (churn.clone(), options, config);
        let remove = RemoveContainerOptions { force: true, v: true, ..Default::default() };
        block_on(docker().remove_container(&id, Some(remove.clone()))).unwrap();
        Some(std::thread::spawn(move || {
            let mut cycles = 0;
            while churn.load(std::sync::atomic::Ordering::Relaxed) {
                let made = block_on(docker().create_container(Some(options.clone()), config.clone())).is_ok();
                let name = options.name.as_deref().unwrap();
                cycles += usize::from(made && block_on(docker().remove_container(name, Some(remove.clone()))).is_ok());
            }
            cycles
        }))
    } else {
        delete_podman_storage_of(&id);
        let listed = block_on(docker().list_networks(None::<bollard::query_parameters::ListNetworksOptions>));
        let err = listed.expect_err("Podman's compat network list answered with a container it cannot describe");
        assert!(err.to_string().contains("container not known"), "{err}");
        None
    };
    w.up(&b, &[]);
    let (_, out) = w.sh(&b, "curl -sS -m 30 http://denied.egress.test/");
    assert!(out.contains(&format!("sandbox {b} may not reach denied.egress.test:80")), "{out}");
    w.env.ok(&["down", &a, &b]);
    w.env.ok(&["gc", "--force"]);
    churn.store(false, std::sync::atomic::Ordering::Relaxed);
    if let Some(churner) = churner {
        assert!(churner.join().unwrap() > 0, "no container was made and removed while up and down ran");
    }
    // Podman removes such a container (it takes the storage as gone already).
    let remove = RemoveContainerOptions { force: true, v: true, ..Default::default() };
    let _ = block_on(docker().remove_container(&ghost, Some(remove)));
    assert!(inspect(&ghost).is_none(), "the container {ghost} is still there");
    block_on(docker().list_networks(None::<bollard::query_parameters::ListNetworksOptions>)).unwrap();
    assert_eq!(w.networks(), Vec::<String>::new());
    assert_eq!(w.proxies(), Vec::<String>::new());
    w.env.assert_nothing_left();
}

/// Podman 4.3 takes a container onto a network in its database before it
/// sets the interface up, and leaves it there when the setup fails: from
/// then on it answers that container's inspect, and every compat container
/// listing on the engine, with 500 "network inspection mismatch" (a
/// teardown that fails half way, as when the rootless network namespace
/// goes away under it, does the same the other way round). The attack: the
/// proxy joined to a network at an address outside it. `list` still
/// works, the next `up` replaces the proxy (joined again to every sandbox's
/// network), and `down` and `gc` clean up. Docker refuses the join whole.
#[test]
fn a_proxy_the_engine_cannot_describe_is_replaced_and_list_still_works() {
    use bollard::models::{EndpointIpamConfig, Ipam, IpamConfig, NetworkConnectRequest};
    let _alone = ONE_BROKEN_CONTAINER_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let w = World::new();
    let (a, b) = (w.env.unique("net-pa"), w.env.unique("net-pb"));
    w.up(&a, &[]);
    let proxy = w.proxies().pop().expect("the proxy's container");
    let trap = w.env.unique("trap");
    let request = NetworkCreateRequest {
        name: trap.clone(),
        internal: Some(true),
        ipam: Some(Ipam {
            config: Some(vec![IpamConfig { subnet: Some("10.219.252.0/29".into()), ..Default::default() }]),
            ..Default::default()
        }),
        ..Default::default()
    };
    block_on(docker().create_network(request)).unwrap();
    let _trap_removed_at_the_end = NetworkRemovedOnDrop(trap.clone());
    let join = NetworkConnectRequest {
        container: proxy.clone(),
        endpoint_config: Some(EndpointSettings {
            ipam_config: Some(EndpointIpamConfig { ipv4_address: Some("10.99.0.5".into()), ..Default::default() }),
            ..Default::default()
        }),
    };
    let joined = block_on(docker().connect_network(&trap, join));
    assert!(joined.is_err(), "the engine joined the proxy at an address outside the network");
    let described = block_on(docker().inspect_container(&proxy, None));
    let listed = block_on(docker().list_containers(None::<ListContainersOptions>));
    if test_engine() == TestEngine::Docker {
        described.unwrap();
        listed.unwrap();
    } else {
        let err = described.expect_err("Podman described the proxy it half joined");
        assert!(err.to_string().contains("network inspection mismatch"), "{err}");
        let err = listed.expect_err("Podman listed containers with one it cannot describe");
        assert!(err.to_string().contains("network inspection mismatch"), "{err}");
    }

    let list = w.env.json(&["list", "--json"]);
    assert_eq!((list[0]["name"].as_str(), list[0]["status"].as_str()), (Some(a.as_str()), Some("running")), "{list}");
    w.up(&b, &[]);
    for sandbox in [&a, &b] {
        let (_, out) = w.sh(sandbox, "curl -sS -m 30 http://denied.egress.test/");
        assert!(out.contains(&format!("sandbox {sandbox} may not reach denied.egress.test:80")), "{out}");
    }
    block_on(docker().inspect_container(&proxy, None)).expect("the proxy was not made again");
    w.env.ok(&["down", &a, &b]);
    w.env.ok(&["gc", "--force"]);
    assert_eq!(w.proxies(), Vec::<String>::new());
    assert_eq!(w.networks(), Vec::<String>::new());
    w.env.assert_nothing_left();
}

/// The tests that break a container on purpose each check how Podman's
/// compat API then fails: one at a time, so that each sees its own.
static ONE_BROKEN_CONTAINER_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Removes the network of that name when dropped (whatever is on it first).
struct NetworkRemovedOnDrop(String);

impl Drop for NetworkRemovedOnDrop {
    fn drop(&mut self) {
        let joined = std::panic::catch_unwind(|| containers_on_network(&self.0)).unwrap_or_default();
        for container in joined {
            let request = NetworkDisconnectRequest { container, force: Some(true) };
            let _ = block_on(docker().disconnect_network(&self.0, request));
        }
        let _ = block_on(docker().remove_network(&self.0));
    }
}

/// Removes the container of that name when dropped, whatever the test did:
/// a ghost left behind would fail every compat network listing after it.
struct RemovedOnDrop(String);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let remove = RemoveContainerOptions { force: true, v: true, ..Default::default() };
        let _ = block_on(docker().remove_container(&self.0, Some(remove)));
    }
}

/// Deletes container `id`'s storage under Podman, leaving it in Podman's
/// database (containers-storage, Debian's package of that name, inside the
/// user's namespace when rootless).
fn delete_podman_storage_of(id: &str) {
    let info = |field: &str| {
        let out = Command::new("podman").args(["info", "--format", field]).output().unwrap();
        assert!(out.status.success(), "podman info: {}", describe(&out));
        String::from_utf8(out.stdout).unwrap().trim().to_owned()
    };
    let (graph, run) = (info("{{.Store.GraphRoot}}"), info("{{.Store.RunRoot}}"));
    let delete = ["containers-storage", "-g", &graph, "-R", &run, "-s", "overlay", "delete-container", id];
    let out = match test_engine() {
        TestEngine::PodmanRootless => Command::new("podman").arg("unshare").args(delete).output(),
        _ => Command::new(delete[0]).args(&delete[1..]).output(),
    }
    .unwrap();
    assert!(out.status.success(), "{delete:?}: {}", describe(&out));
}

/// `dns_query SERVER NAME`: an A query for NAME sent to SERVER:53 over UDP,
/// in bash alone (one `printf`: one datagram); prints the answer's header
/// (12 bytes, in hex), or nothing when no server answers there in 10 seconds.
const DNS_QUERY: &str = r#"dns_query() {
  local question= label labels
  IFS=. read -ra labels <<<"$2"
  for label in "${labels[@]}"; do question+="\\x$(printf %02x ${#label})$label"; done
  exec 3<>"/dev/udp/$1/53" || return
  printf "\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00$question\x00\x00\x01\x00\x01" >&3
  timeout 10 od -An -tx1 -N12 <&3
}"#;

/// The answer's header, if a DNS server answered our query (id 0x1234).
fn dns_answer(probe_said: &str) -> Option<Vec<String>> {
    let bytes: Vec<String> = probe_said.split_whitespace().map(str::to_owned).collect();
    (bytes.len() == 12 && bytes[..2] == ["12", "34"]).then_some(bytes)
}

/// Podman gives every network its compat API makes a DNS server at the
/// gateway (aardvark-dns) that answers any name, asking the host's
/// resolvers for what it does not know: from a sandbox's network, a way
/// out around the proxy (a name is data, and the resolvers pass it on).
/// The attack: a DNS query sent straight to the gateway of the sandbox's
/// network. On a network made as the engine makes one by default, with a
/// container of the sandbox's image on it, the same query is answered on
/// Podman (the hole); from the sandbox, only the proxy answers (NXDOMAIN),
/// and nothing at the gateway.
#[test]
fn no_dns_server_but_the_proxys_answers_a_restricted_sandbox() {
    let w = World::new();
    let name = w.env.unique("net-dns");
    w.up(&name, &[]);
    let (_, egress) = w.network(&name);
    let (proxy, sandbox_net) = (str_of(&egress["proxy_address"]), str_of(&egress["network"]));
    let proxy_name = w.proxies().pop().expect("the proxy's container");
    let image = inspect(&format!("forage-{name}")).and_then(|c| c.config?.image).unwrap();

    // The query works: the proxy answers it, with NXDOMAIN.
    let (_, out) = w.sh(&name, &format!("{DNS_QUERY}; dns_query {proxy} {proxy_name}"));
    let answer = dns_answer(&out).unwrap_or_else(|| panic!("the proxy did not answer the query: {out}"));
    assert_eq!(answer[2..4], ["81", "03"], "the proxy's answer is not NXDOMAIN (QR, RD, rcode 3): {out}");

    // The hole, where the engine has it: a DNS server at the gateway of an
    // internal network made as the engine makes one.
    let default_network_answers = dns_at_the_gateway_of_a_default_internal_network(&w.env.unique("dnsctl"), &image);
    assert_eq!(default_network_answers, test_engine() != TestEngine::Docker);

    // From the sandbox, nothing answers where its network's gateway would be.
    let gw = sandbox_gateway(&sandbox_net);
    let (_, out) = w.sh(&name, &format!("{DNS_QUERY}; dns_query {gw} {proxy_name}"));
    assert_eq!(dns_answer(&out), None, "a DNS server answered the sandbox at its gateway {gw}: {out}");
    // The sandbox's resolvers: the proxy, or on Docker the engine's own
    // (127.0.0.11, which asks the proxy); neither knows a name.
    let (_, resolv) = w.sh(&name, "cat /etc/resolv.conf");
    let servers: Vec<&str> = resolv.lines().filter_map(|l| l.strip_prefix("nameserver")).map(str::trim).collect();
    let expected = if test_engine() == TestEngine::Docker { "127.0.0.11" } else { proxy.as_str() };
    assert_eq!(servers, [expected], "{resolv}");
    let (_, out) = w.sh(&name, &format!("{DNS_QUERY}; dns_query {expected} allowed.egress.test"));
    let answer = dns_answer(&out).unwrap_or_else(|| panic!("the sandbox's resolver did not answer: {out}"));
    assert_eq!(answer[3], "03", "the sandbox's resolver {expected} knew the name: {out}");
    w.env.ok(&["down", &name]);
    w.env.ok(&["gc", "--force"]);
    assert_eq!(w.networks(), Vec::<String>::new());
}

/// Whether a DNS server answers, at the gateway of an internal network
/// made as the engine makes one by default (as forage made it before), a
/// container of `image` on it asking for its own name.
fn dns_at_the_gateway_of_a_default_internal_network(name: &str, image: &str) -> bool {
    // Outside every range forage picks subnets from (10.213-10.215/16), and
    // not ports::'s probe's, so that no concurrent test's network holds it.
    let (subnet, gateway) = ("10.219.251.0/29", Ipv4Addr::new(10, 219, 251, 1));
    create_internal_network_the_compat_way(name, subnet, gateway);
    let config = ContainerCreateBody {
        image: Some(image.to_owned()),
        cmd: Some(vec!["sleep".into(), "infinity".into()]),
        host_config: Some(HostConfig {
            network_mode: Some(name.to_owned()),
            ulimits: test_container_ulimits(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let options = CreateContainerOptions { name: Some(name.to_owned()), ..Default::default() };
    let made = block_on(docker().create_container(Some(options), config))
        .and_then(|_| block_on(docker().start_container(name, None)));
    let said =
        made.is_ok().then(|| exec_in(name, &["bash", "-c", &format!("{DNS_QUERY}; dns_query {gateway} {name}")]));
    let remove = RemoveContainerOptions { force: true, v: true, ..Default::default() };
    let _ = block_on(docker().remove_container(name, Some(remove)));
    block_on(docker().remove_network(name)).unwrap();
    made.unwrap();
    let (_, out) = said.unwrap();
    dns_answer(&out).is_some()
}
