//! Published ports on the real engine: an agent serving HTTP (a static
//! server from tests/it/fixtures/serve.c, in the workspace) reached from the
//! host at 127.0.0.1:HOSTPORT through the sandbox's forwarder, and nowhere
//! else; the set changed on a running sandbox without touching its container.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use bollard::query_parameters::RemoveContainerOptions;

use crate::support::*;

/// The agent serves ports 3000 and 4000.
const TEMPLATE: &str = "description: ports tests
host_image:
  require: [sh]
  tools: [sh, sleep]
agent:
  command: [/workspace/serve, '3000', '4000']
";

/// One test's world; on drop every forwarder and proxy of its FORAGE_HOME
/// goes, with their networks, whatever the test did.
struct World {
    env: Env,
}

impl World {
    fn new() -> World {
        let env = Env::new();
        let templates = env.mkdir("config/forage/templates");
        std::fs::write(templates.join("serve.yaml"), TEMPLATE).unwrap();
        World { env }
    }

    /// A workspace whose server answers `id`.
    fn workspace(&self, id: &str) -> String {
        let ws = self.env.mkdir(&format!("ws-{id}"));
        static_program(
            &crate::templates::write(&self.env.path("serve.c"), include_str!("fixtures/serve.c")),
            &ws.join("serve"),
        );
        std::fs::write(ws.join("id"), id).unwrap();
        ws.display().to_string()
    }

    fn home_label(&self) -> String {
        self.env.home.display().to_string()
    }

    /// Forage's port forwarders and egress proxy of this FORAGE_HOME (containers or networks).
    fn leftovers(&self) -> (Vec<String>, Vec<String>) {
        let labels =
            [format!("forage.ports.home={}", self.home_label()), format!("forage.egress.home={}", self.home_label())];
        let (mut containers, mut networks) = (Vec::new(), Vec::new());
        for label in labels {
            containers.extend(containers_labelled(&label));
            networks.extend(networks_labelled(&label));
        }
        (containers, networks)
    }

    /// `list --json`'s ports of sandbox `name`: sandbox port to host port.
    fn ports(&self, name: &str) -> HashMap<u16, u16> {
        let rows = self.env.json(&["list", "--json"]);
        let row = rows.as_array().unwrap().iter().find(|r| r["name"] == name).unwrap_or_else(|| panic!("{rows}"));
        row["ports"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .map(|p| (p["port"].as_u64().unwrap() as u16, p["host_port"].as_u64().unwrap() as u16))
                    .collect()
            })
            .unwrap_or_default()
    }

    fn container_id(&self, name: &str) -> String {
        inspect(&format!("forage-{name}")).and_then(|c| c.id).unwrap()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        let (containers, networks) = self.leftovers();
        let remove = RemoveContainerOptions { force: true, v: true, ..Default::default() };
        for c in containers {
            let _ = block_on(docker().remove_container(c.trim_start_matches('/'), Some(remove.clone())));
        }
        for n in networks {
            let _ = block_on(docker().remove_network(&n));
        }
    }
}

/// The body the server at `at` answers, or why there is none.
fn get(at: SocketAddr) -> Result<String, String> {
    let mut s = TcpStream::connect_timeout(&at, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\n\r\n").map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| e.to_string())?;
    text.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).ok_or_else(|| format!("no HTTP answer: {text:?}"))
}

fn local(port: u16) -> SocketAddr {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port))
}

/// The server answers `id` at 127.0.0.1:`port` (the agent may still be starting).
fn answers(port: u16, id: &str) -> bool {
    let mut last = Err(String::new());
    let ok = eventually(30, || {
        last = get(local(port));
        last.as_deref() == Ok(id)
    });
    assert!(ok, "127.0.0.1:{port} should answer {id:?}, got {last:?}");
    ok
}

/// Every IPv4 address of the host but loopback ones.
fn other_addresses() -> Vec<Ipv4Addr> {
    let mut found: Vec<Ipv4Addr> = nix::ifaddrs::getifaddrs()
        .unwrap()
        .filter_map(|i| i.address?.as_sockaddr_in().map(|a| a.ip()))
        .filter(|ip| !ip.is_loopback())
        .collect();
    found.sort();
    found.dedup();
    found
}

#[test]
fn published_ports_are_on_loopback_only_and_change_without_recreating_the_sandbox() {
    let w = World::new();
    let env = &w.env;
    let (a, b) = (env.unique("pa"), env.unique("pb"));
    let (ws_a, ws_b) = (w.workspace("a"), w.workspace("b"));
    // Both serve :3000 and neither names a host port: no collision.
    env.ok(&["up", &a, "--workspace", &ws_a, "-t", "serve", "--network", "full", "--publish", "3000"]);
    env.ok(&["up", &b, "--workspace", &ws_b, "-t", "serve", "--network", "restricted", "--publish", "3000"]);
    let (pa, pb) = (w.ports(&a), w.ports(&b));
    assert_eq!(pa.keys().collect::<Vec<_>>(), [&3000], "{pa:?}");
    assert_eq!(pb.keys().collect::<Vec<_>>(), [&3000], "{pb:?}");
    assert_ne!(pa[&3000], pb[&3000], "two sandboxes got one host port");
    assert!(answers(pa[&3000], "a") && answers(pb[&3000], "b"));
    let status = env.json(&["status", &a, "--json"]);
    assert_eq!(status["record"]["ports"][0]["host_port"], pa[&3000], "{status}");
    assert!(env.ok(&["status", &a]).contains(&format!("3000 -> 127.0.0.1:{}", pa[&3000])));
    assert!(env.ok(&["list"]).contains(&format!("{}->3000", pa[&3000])));

    // Not on any of the host's other addresses: the engine bound 127.0.0.1 only.
    let others = other_addresses();
    assert!(!others.is_empty(), "the host has no address but loopback to try");
    for ip in &others {
        for port in [pa[&3000], pb[&3000]] {
            let at = SocketAddr::new(IpAddr::V4(*ip), port);
            assert!(get(at).is_err(), "{at} answers: published beyond loopback");
        }
    }
    // It publishes through the default network, with none of its own
    // (`Docker::forwarder_on_default_network` says why); on rootless Podman
    // through its own, carved from forage's range, not the engine's pools.
    let forwarder = inspect(&format!("forage-{a}-Ports")).unwrap();
    let on: Vec<String> = forwarder.network_settings.clone().unwrap().networks.unwrap().into_keys().collect();
    if test_engine() != TestEngine::PodmanRootless {
        assert!(!engine_network_exists(&format!("forage-{a}-Ports")), "a forwarder's own network");
        assert!(on.iter().any(|n| n == default_network()), "{on:?}");
    } else {
        let (subnet, _) = engine_network_subnet(&format!("forage-{a}-Ports"));
        assert!(subnet.starts_with("10.215.") && subnet.ends_with("/29"), "{subnet}");
        assert!(on.contains(&format!("forage-{a}-Ports")), "{on:?}");
    }
    let bindings = forwarder.host_config.and_then(|h| h.port_bindings).unwrap();
    for binding in bindings.values().flatten().flatten() {
        assert_eq!(binding.host_ip.as_deref(), Some("127.0.0.1"), "{bindings:?}");
    }

    // Added and removed on the running sandboxes: their containers stay.
    let (id_a, id_b) = (w.container_id(&a), w.container_id(&b));
    let added = env.json(&["port", &a, "add", "4000", "--json"]);
    assert_eq!(added["ports"].as_array().unwrap().len(), 2, "{added}");
    let pa2 = w.ports(&a);
    assert_eq!(pa2[&3000], pa[&3000], "adding a port moved another");
    assert!(answers(pa2[&4000], "a") && answers(pa[&3000], "a"));
    env.ok(&["port", &b, "add", "4000"]);
    assert!(answers(w.ports(&b)[&4000], "b"));
    env.ok(&["port", &a, "rm", "3000"]);
    assert_eq!(w.ports(&a).keys().collect::<Vec<_>>(), [&4000]);
    assert!(get(local(pa[&3000])).is_err(), "a removed port still answers");
    assert!(answers(pa2[&4000], "a"));
    assert_eq!((w.container_id(&a), w.container_id(&b)), (id_a, id_b), "a port change recreated a sandbox");
    let listed = env.ok(&["port", &a]);
    assert!(listed.contains(&format!("4000 -> 127.0.0.1:{}", pa2[&4000])), "{listed}");
    let err = env.fails(&["port", &a, "rm", "5000"], 3);
    assert!(err.contains("5000"), "{err}");

    // A restart may give a `full` sandbox another address on the bridge:
    // its ports follow it, on the same host ports.
    env.ok(&["restart", &a]);
    env.ok(&["reset", &a]);
    assert_eq!(w.ports(&a), HashMap::from([(4000, pa2[&4000])]));
    assert!(answers(pa2[&4000], "a"));
    // A restricted sandbox's forwarder removed by hand comes back at its next start.
    let remove = RemoveContainerOptions { force: true, v: true, ..Default::default() };
    block_on(docker().remove_container(&format!("forage-{b}-Ports"), Some(remove))).unwrap();
    assert!(get(local(pb[&3000])).is_err(), "the forwarder was not removed");
    env.ok(&["restart", &b]);
    assert!(answers(pb[&3000], "b"));

    // A host port that is taken: refused, naming it; the set stays as it was.
    let taken = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let before = w.ports(&b);
    let err = env.fails(&["port", &b, "add", &format!("{port}:3001")], 4);
    assert!(err.contains(&format!("host port {port}")), "{err}");
    assert_eq!(w.ports(&b), before, "{err}");
    assert!(answers(before[&3000], "b"));
    let c = env.unique("pc");
    let ws_c = w.workspace("c");
    let err = env.fails(&["up", &c, "--workspace", &ws_c, "-t", "serve", "--publish", &format!("{port}:3000")], 4);
    assert!(err.contains(&format!("host port {port}")), "{err}");
    assert!(env.run(&["status", &c]).status.code() == Some(3), "a failed up left its sandbox");
    let rolled_back = format!("forage-{c}-Ports");
    assert!(inspect(&rolled_back).is_none(), "a failed up left its forwarder");
    assert!(!engine_network_exists(&rolled_back), "a failed up left its forwarder's network");
    drop(taken);

    // network: none has nothing to publish on.
    let err = env.fails(&["up", &c, "--workspace", &ws_c, "-t", "serve", "--network", "none", "--publish", "3000"], 2);
    assert!(err.contains("--publish 3000") && err.contains("none"), "{err}");
    let files: Vec<_> = env.home_files().into_iter().filter(|f| f.to_string_lossy().contains(&c)).collect();
    assert_eq!(files, Vec::<std::path::PathBuf>::new(), "a refused up left files of {c}");
    assert!(inspect(&format!("forage-{c}")).is_none() && inspect(&rolled_back).is_none());

    // A forwarder whose sandbox lost its record (and container) by hand: `gc` finds it.
    env.ok(&["up", &c, "--workspace", &ws_c, "-t", "serve", "--publish", "3000"]);
    std::fs::remove_file(env.home.join(format!("sandboxes/{c}.json"))).unwrap();
    let remove = RemoveContainerOptions { force: true, v: true, ..Default::default() };
    block_on(docker().remove_container(&format!("forage-{c}"), Some(remove))).unwrap();
    let found = env.json(&["gc", "--json"]);
    let orphan = format!("forage-{c}-Ports");
    assert!(found.to_string().contains("orphan-forwarder") && found.to_string().contains(&orphan), "{found}");

    // Nothing left after `down` (and `gc --force` for the egress proxy and the orphan).
    env.ok(&["down", &a, &b]);
    env.ok(&["gc", "--force"]);
    assert_eq!(w.leftovers(), (Vec::new(), Vec::new()), "forwarders or their networks left after down");
    assert!(get(local(pa2[&4000])).is_err());
    env.assert_nothing_left();
}

#[test]
fn sixteen_sandboxes_serving_3000_at_once_get_sixteen_loopback_ports() {
    let w = World::new();
    let env = &w.env;
    let serve = env.path("serve");
    static_program(&crate::templates::write(&env.path("serve.c"), include_str!("fixtures/serve.c")), &serve);
    let names: Vec<String> = (0..16).map(|i| env.unique(&format!("p{i}"))).collect();
    let workspaces: Vec<String> = names
        .iter()
        .map(|n| {
            let ws = env.mkdir(&format!("ws-{n}"));
            std::fs::copy(&serve, ws.join("serve")).unwrap();
            std::fs::write(ws.join("id"), n).unwrap();
            ws.display().to_string()
        })
        .collect();
    // All sixteen `up`s at once, none naming a host port.
    std::thread::scope(|s| {
        for (name, ws) in names.iter().zip(&workspaces) {
            s.spawn(move || env.ok(&["up", name, "--workspace", ws, "-t", "serve", "--publish", "3000"]));
        }
    });
    let ports: Vec<u16> = names.iter().map(|n| w.ports(n)[&3000]).collect();
    let mut distinct = ports.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 16, "host ports shared: {ports:?}");
    let others = other_addresses();
    for (name, port) in names.iter().zip(&ports) {
        assert!(answers(*port, name));
        for ip in &others {
            let at = SocketAddr::new(IpAddr::V4(*ip), *port);
            assert!(get(at).is_err(), "{at} answers: published beyond loopback");
        }
    }
    let mut down = vec!["down"];
    down.extend(names.iter().map(String::as_str));
    env.ok(&down);
    assert_eq!(w.leftovers(), (Vec::new(), Vec::new()), "forwarders or their networks left after down");
    env.assert_nothing_left();
}

#[test]
fn ports_asked_for_while_a_sandbox_is_stopped_are_published_at_its_start() {
    let w = World::new();
    let env = &w.env;
    let (f, r) = (env.unique("sf"), env.unique("sr"));
    let (ws_f, ws_r) = (w.workspace("f"), w.workspace("r"));
    env.ok(&["up", &f, "--workspace", &ws_f, "-t", "serve", "--network", "full", "--publish", "3000", "--no-start"]);
    env.ok(&[
        "up",
        &r,
        "--workspace",
        &ws_r,
        "-t",
        "serve",
        "--network",
        "restricted",
        "--publish",
        "3000",
        "--no-start",
    ]);
    // A `full` sandbox has no address before it runs: its port waits for
    // the start, and says so.
    assert_eq!(w.ports(&f), HashMap::new());
    let listed = env.ok(&["port", &f]);
    assert!(listed.contains("3000 -> a free port of 127.0.0.1 when the sandbox starts"), "{listed}");
    assert!(env.ok(&["status", &f]).contains("when the sandbox starts"));
    // A restricted sandbox's address is forage's, fixed at `up`: its host
    // port is bound at once, and answers once the agent runs.
    let pr = w.ports(&r)[&3000];
    assert!(get(local(pr)).is_err(), "127.0.0.1:{pr} answers before the agent runs");
    env.ok(&["start", &f]);
    env.ok(&["start", &r]);
    let pf = w.ports(&f)[&3000];
    assert!(answers(pf, "f") && answers(pr, "r"));
    assert_eq!(w.ports(&r)[&3000], pr, "the start moved a bound port");

    // `stop` takes the `full` sandbox's forwarder away until its start (its
    // old address may be another container's by then); `port add` on a
    // stopped sandbox: the same as at `up`.
    env.ok(&["stop", &f]);
    assert!(inspect(&format!("forage-{f}-Ports")).is_none(), "a stopped full sandbox kept its forwarder");
    let listed = env.ok(&["port", &f]);
    assert!(listed.contains(&format!("3000 -> 127.0.0.1:{pf} when the sandbox starts")), "{listed}");
    env.ok(&["stop", &r]);
    let added = env.ok(&["port", &f, "add", "4000"]);
    assert!(added.contains(&format!("3000 -> 127.0.0.1:{pf} when the sandbox starts")), "{added}");
    assert!(added.contains("4000 -> a free port of 127.0.0.1 when the sandbox starts"), "{added}");
    let json = env.json(&["port", &r, "add", "4000", "--json"]);
    assert_eq!(json["ports"].as_array().unwrap().len(), 2, "{json}");
    let pr4 = w.ports(&r)[&4000];
    env.ok(&["start", &f]);
    env.ok(&["start", &r]);
    let after = w.ports(&f);
    assert_eq!(after[&3000], pf, "the start gave the port another host port");
    assert!(answers(after[&4000], "f") && answers(pf, "f"));
    assert!(answers(pr4, "r") && answers(pr, "r"));
    assert_eq!(env.json(&["status", &f, "--json"])["record"]["unpublished"], serde_json::Value::Null);

    env.ok(&["down", &f, &r]);
    env.ok(&["gc", "--force"]);
    assert_eq!(w.leftovers(), (Vec::new(), Vec::new()), "forwarders or their networks left after down");
    env.assert_nothing_left();
}

#[test]
fn a_killed_restricted_up_with_ports_leaves_nothing_gc_force_cannot_clean() {
    let w = World::new();
    let env = &w.env;
    let ws = w.workspace("k");
    for step in ["record", "network", "container", "start", "init", "forwarder"] {
        let name = env.unique(&format!("k-{step}"));
        let up = ["up", &name, "--workspace", &ws, "-t", "serve", "--network", "restricted", "--publish", "3000"];
        env.killed_after(&up, step);
        let list = env.json(&["list", "--json"]);
        assert_eq!(list[0]["status"], "broken", "{step}: {list}");
        if step == "forwarder" {
            assert!(inspect(&format!("forage-{name}-Ports")).is_some(), "{step}: the forwarder was not made");
        }
        env.ok(&["gc", "--force"]);
        assert_eq!(w.leftovers(), (Vec::new(), Vec::new()), "{step}: gc left a forwarder, the proxy or a network");
        let network = format!("forage-{name}-net");
        assert!(!engine_network_exists(&network), "{step}: gc left {network}");
        env.assert_nothing_left();
        assert_eq!(env.json(&["gc", "--json"]), serde_json::json!([]), "{step}");
    }
}

/// A restricted sandbox's ports answer the host on every engine, and its
/// network carries no address of the host's on any. The attack it is kept
/// from: an internal network made the engine's default way has one on
/// rootful Podman (the gateway, on the host's bridge: the probe proves it),
/// where the agent would reach every service on the host. On rootful Podman
/// where the host filters bridged traffic (as wherever Docker runs: CI's
/// rootful pass runs this test so first, then with the filter off), such a
/// network would carry nothing, and `up --network restricted` is refused
/// before it makes anything. A full sandbox's ports asked for at `up`
/// answer on every engine; one added later too, but on rootless Podman.
#[test]
fn published_ports_answer_the_host_on_every_engine_and_no_restricted_network_has_a_host_address() {
    let w = World::new();
    let env = &w.env;
    let (r, f) = (env.unique("pr"), env.unique("pf"));
    let (ws_r, ws_f) = (w.workspace("r"), w.workspace("f"));
    let restricted = ["up", &r, "--workspace", &ws_r, "-t", "serve", "--network", "restricted", "--publish", "3000"];
    let mut names = Vec::new();
    let image = {
        let probe = env.unique("img");
        env.ok(&["up", &probe, "--workspace", &w.workspace("img"), "-t", "serve", "--network", "none", "--no-start"]);
        let image = inspect(&format!("forage-{probe}")).and_then(|c| c.config?.image).unwrap();
        env.ok(&["down", &probe]);
        image
    };
    let host_on_internal_network = host_has_address_on_an_internal_network(&env.unique("probe"), &image);
    assert_eq!(host_on_internal_network, test_engine() == TestEngine::PodmanRootful);

    if test_engine() == TestEngine::PodmanRootful && forage::runtime::engine_choice::bridged_traffic_filtered() {
        let err = env.fails(&restricted, 4);
        assert!(err.contains("rootful Podman") && err.contains("bridge-nf-call-iptables = 1"), "{err}");
        assert_eq!(env.run(&["status", &r]).status.code(), Some(3), "a refused up left its sandbox");
        assert_eq!(w.leftovers(), (Vec::new(), Vec::new()), "a refused up made a proxy or a network");
    } else {
        restricted_sandbox_has_no_host_address_and_publishes(&w, &restricted, &r);
        names.push(r.clone());
    }

    env.ok(&["up", &f, "--workspace", &ws_f, "-t", "serve", "--network", "full", "--publish", "3000"]);
    assert!(answers(w.ports(&f)[&3000], "f"));
    names.push(f.clone());
    // A full sandbox made without ports: rootless Podman runs it on
    // slirp4netns, where a port added later is refused, saying so; every
    // other engine publishes it.
    let g = env.unique("pg");
    env.ok(&["up", &g, "--workspace", &w.workspace("g"), "-t", "serve", "--network", "full"]);
    names.push(g.clone());
    if test_engine() == TestEngine::PodmanRootless {
        let err = env.fails(&["port", &g, "add", "3000"], 4);
        assert!(err.contains("slirp4netns") && err.contains("up --publish PORT"), "{err}");
        assert_eq!(w.ports(&g), HashMap::new());
    } else {
        env.ok(&["port", &g, "add", "3000"]);
        assert!(answers(w.ports(&g)[&3000], "g"));
    }
    if !names.is_empty() {
        let mut down = vec!["down"];
        down.extend(names.iter().map(String::as_str));
        env.ok(&down);
    }
    env.ok(&["gc", "--force"]);
    assert_eq!(w.leftovers(), (Vec::new(), Vec::new()), "forwarders or their networks left after down");
    env.assert_nothing_left();
}

/// Ups the restricted sandbox `r`, publishing port 3000; checks the host has
/// no address on its network; adds port 4000; both answer.
fn restricted_sandbox_has_no_host_address_and_publishes(w: &World, restricted: &[&str], r: &str) {
    let env = &w.env;
    env.ok(restricted);
    let status = env.json(&["status", r, "--json"]);
    let sandbox_net = status["record"]["egress"]["network"].as_str().unwrap_or_else(|| panic!("{status}")).to_owned();
    let (subnet, _) = engine_network_subnet(&sandbox_net);
    let subnet = forage::egress::subnet::Subnet::parse(&subnet).unwrap();
    let host_addresses: Vec<Ipv4Addr> = nix::ifaddrs::getifaddrs()
        .unwrap()
        .filter_map(|i| Some(i.address?.as_sockaddr_in()?.ip()))
        .filter(|ip| forage::egress::policy::in_range(*ip, (subnet.base, subnet.bits)))
        .collect();
    assert_eq!(host_addresses, Vec::<Ipv4Addr>::new(), "the host has addresses on {sandbox_net} ({subnet:?})");
    assert!(answers(w.ports(r)[&3000], "r"));
    env.ok(&["port", r, "add", "4000"]);
    let ports = w.ports(r);
    assert!(answers(ports[&4000], "r") && answers(ports[&3000], "r"));
}

/// Makes an internal network as forage makes a restricted sandbox's (no
/// route out, Docker's `inhibit_ipv4`), says whether its gateway address is
/// one of the host's own, and removes it.
fn host_has_address_on_an_internal_network(name: &str, image: &str) -> bool {
    // Outside every range forage picks subnets from (10.213-10.215/16), so
    // that no concurrent test's network holds it.
    let (subnet, gateway) = ("10.219.250.0/29", Ipv4Addr::new(10, 219, 250, 1));
    create_internal_network_the_compat_way(name, subnet, gateway);
    // Podman makes the bridge when a container first joins; a container
    // that never starts is enough for Docker, which makes it at once.
    let probe = bollard::models::ContainerCreateBody {
        image: Some(image.to_owned()),
        cmd: Some(vec!["sh".into(), "-c".into(), ":".into()]),
        host_config: Some(bollard::models::HostConfig {
            network_mode: Some(name.to_owned()),
            ulimits: test_container_ulimits(),
            ..Default::default()
        }),
        ..Default::default()
    };
    let options =
        bollard::query_parameters::CreateContainerOptions { name: Some(name.to_owned()), ..Default::default() };
    block_on(docker().create_container(Some(options), probe)).unwrap();
    let started = block_on(docker().start_container(name, None));
    let on_host = nix::ifaddrs::getifaddrs()
        .unwrap()
        .any(|i| i.address.and_then(|a| a.as_sockaddr_in().map(|s| s.ip())) == Some(gateway));
    let remove = RemoveContainerOptions { force: true, v: true, ..Default::default() };
    block_on(docker().remove_container(name, Some(remove))).unwrap();
    block_on(docker().remove_network(name)).unwrap();
    started.unwrap();
    on_host
}
