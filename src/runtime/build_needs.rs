//! What a Dockerfile fetches from the network, read from its text, so that a
//! build that fails offline can name every place it needed (a base image's
//! registry, apt, npm, PyPI, …) rather than only the first that failed.

use std::collections::BTreeMap;

use super::dockerfile::{global_args, logical_lines, substitute};

/// Each network source the Dockerfile's instructions use, in the order they
/// first appear, in words for the user. `args` are the build's arguments: a
/// `FROM ${BASE}` names the image they (or the ARG's default) make it.
pub fn network_needs(dockerfile: &str, args: &BTreeMap<String, String>) -> Vec<String> {
    let args = global_args(dockerfile, args);
    let mut needs: Vec<String> = Vec::new();
    let mut stages: Vec<String> = Vec::new();
    let mut add = |need: String| {
        if !needs.contains(&need) {
            needs.push(need);
        }
    };
    for line in logical_lines(dockerfile) {
        let mut words = line.split_whitespace();
        let Some(instruction) = words.next().map(str::to_ascii_uppercase) else { continue };
        let rest: Vec<&str> = words.collect();
        match instruction.as_str() {
            "FROM" => {
                let words: Vec<String> =
                    rest.iter().filter(|w| !w.starts_with("--")).map(|w| substitute(w, &args)).collect();
                let words: Vec<&str> = words.iter().map(String::as_str).collect();
                if let Some(image) = words.first() {
                    if *image != "scratch" && !stages.iter().any(|s| s.eq_ignore_ascii_case(image)) {
                        add(format!("the base image {image} ({})", registry_of(image)));
                    }
                }
                if let [_, as_word, stage, ..] = words.as_slice() {
                    if as_word.eq_ignore_ascii_case("as") {
                        stages.push((*stage).to_owned());
                    }
                }
            }
            "RUN" => {
                let command = rest.join(" ");
                for (needle, need) in RUN_NEEDS {
                    if command
                        .split(|c: char| c.is_whitespace() || c == ';' || c == '&' || c == '|')
                        .any(|w| w == *needle)
                    {
                        add((*need).to_owned());
                    }
                }
            }
            "ADD" if rest.iter().any(|w| w.starts_with("http://") || w.starts_with("https://")) => {
                add("the URLs its ADD instructions download".to_owned());
            }
            _ => {}
        }
    }
    needs
}

/// A word of a RUN command and the network source it stands for.
const RUN_NEEDS: &[(&str, &str)] = &[
    ("apt-get", "the distribution's package mirror (apt-get)"),
    ("apt", "the distribution's package mirror (apt)"),
    ("apk", "Alpine's package mirror (apk)"),
    ("dnf", "the distribution's package mirror (dnf)"),
    ("npm", "the npm registry (npm)"),
    ("npx", "the npm registry (npx)"),
    ("pip", "PyPI (pip)"),
    ("pip3", "PyPI (pip)"),
    ("pipx", "PyPI (pipx)"),
    ("uv", "PyPI (uv)"),
    ("cargo", "crates.io (cargo)"),
    ("go", "the Go module proxy (go)"),
    ("curl", "the URLs it downloads (curl)"),
    ("wget", "the URLs it downloads (wget)"),
];

/// The registry an image reference is pulled from, as the engine decides it:
/// a first component with a `.` or `:`, or `localhost`, is a host.
fn registry_of(image: &str) -> String {
    match image.split_once('/') {
        Some((host, _)) if host.contains('.') || host.contains(':') || host == "localhost" => {
            format!("from registry {host}")
        }
        _ => "from Docker Hub".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_network_source_is_named_once_in_order() {
        let dockerfile = "# comment: RUN npm\nFROM node:22-bookworm-slim\nRUN apt-get update \\\n && apt-get install -y git\nRUN npm install -g x && pip install y\n";
        assert_eq!(
            network_needs(dockerfile, &BTreeMap::new()),
            [
                "the base image node:22-bookworm-slim (from Docker Hub)",
                "the distribution's package mirror (apt-get)",
                "the npm registry (npm)",
                "PyPI (pip)",
            ]
        );
    }

    #[test]
    fn stages_scratch_and_registries_are_told_apart() {
        let dockerfile = "FROM --platform=linux/amd64 ghcr.io/o/builder:1 AS build\nFROM build\nFROM scratch\nFROM localhost:5000/x\nADD https://example.com/f /f\n";
        assert_eq!(
            network_needs(dockerfile, &BTreeMap::new()),
            [
                "the base image ghcr.io/o/builder:1 (from registry ghcr.io)",
                "the base image localhost:5000/x (from registry localhost:5000)",
                "the URLs its ADD instructions download",
            ]
        );
        assert!(network_needs("FROM scratch\nCOPY x /x\n", &BTreeMap::new()).is_empty());
    }

    #[test]
    fn a_from_of_an_arg_names_the_image_it_is() {
        let dockerfile = "ARG BASE=node:22-bookworm-slim\nFROM ${BASE}\nRUN apt-get update\n";
        assert_eq!(
            network_needs(dockerfile, &BTreeMap::new())[0],
            "the base image node:22-bookworm-slim (from Docker Hub)"
        );
        let given = BTreeMap::from([("BASE".to_string(), "ghcr.io/o/rust:1".to_string())]);
        assert_eq!(network_needs(dockerfile, &given)[0], "the base image ghcr.io/o/rust:1 (from registry ghcr.io)");
    }
}
