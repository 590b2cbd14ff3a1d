//! The project's toolchain: the image (and environment, and set-up commands)
//! the user's repository says its work needs, read from the user's checkout
//! on the host — `.forage/template.yaml` if there is one, else
//! `.devcontainer/devcontainer.json` (or `.devcontainer.json`) — and never
//! from the sandbox's own copy, which the agent writes.
//!
//! Nothing in these files reaches the host beyond an image build in the
//! engine: no host path, no host command, no privilege. Whatever would
//! (mounts, run arguments, `initializeCommand`…) is refused
//! (`.forage/template.yaml`) or named in a warning and left out
//! (devcontainer.json, written for tools that trust it more).

mod devcontainer;
mod forage_file;
mod jsonc;
mod read;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::Result;
use read::{Checkout, Found};

/// A project's toolchain, as read; the sandbox record keeps it with its
/// image built (`image` then a reference), so `reset` makes the same.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Toolchain {
    /// The file it came from, relative to the checkout.
    pub source: String,
    /// How its image is made, in words: `build .devcontainer/Dockerfile`.
    pub summary: String,
    pub image: ProjectImage,
    /// For the agent's environment (under the template's own `agent.env`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Shell commands run in /workspace before the agent (before the template's `init`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub init: Vec<String>,
    /// devcontainer.json's `forwardPorts`, kept for the network policy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub forward_ports: Vec<ForwardPort>,
}

impl std::fmt::Display for Toolchain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.source, self.summary)
    }
}

/// The project's image.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProjectImage {
    /// An image in the engine (or pulled by the agent's build).
    Reference(String),
    /// Built from a Dockerfile in the checkout.
    Build {
        /// The image's repository under `forage-build/`: `project-<directory>`.
        name: String,
        /// The build context: a directory of the checkout (canonical).
        context: PathBuf,
        /// The Dockerfile, relative to the context.
        dockerfile: String,
        #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
        args: BTreeMap<String, String>,
    },
}

/// A port the project forwards: a number, or `host:port` of another service.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ForwardPort {
    Port(u16),
    Named(String),
}

/// What reading the checkout found: the toolchain, if any, and what the
/// user should know (fields not used, files not followed).
#[derive(Debug, Clone, Default)]
pub struct Reading {
    pub toolchain: Option<Toolchain>,
    pub warnings: Vec<String>,
}

const FORAGE_FILE: &str = ".forage/template.yaml";
const DEVCONTAINER_FILES: [&str; 2] = [".devcontainer/devcontainer.json", ".devcontainer.json"];

/// Reads the project's toolchain from the checkout at `root` (the
/// repository's working tree, or the directory of `--workspace`).
pub fn read(root: &Path) -> Result<Reading> {
    let checkout = Checkout::open(root)?;
    let mut warnings = Vec::new();
    let not_followed = |rel: &str, why: String| {
        format!("not reading {rel}: {why}, which forage never follows in a repository; make it a regular file")
    };
    match checkout.read(FORAGE_FILE)? {
        Found::Text(text) => {
            let toolchain = forage_file::parse(&checkout, FORAGE_FILE, &text)?;
            return Ok(Reading { toolchain: Some(toolchain), warnings });
        }
        Found::Refused(why) => warnings.push(not_followed(FORAGE_FILE, why)),
        Found::Absent => {}
    }
    for rel in DEVCONTAINER_FILES {
        match checkout.read(rel)? {
            Found::Text(text) => {
                let (toolchain, mut notes) = devcontainer::parse(&checkout, rel, &text)?;
                warnings.append(&mut notes);
                return Ok(Reading { toolchain, warnings });
            }
            Found::Refused(why) => warnings.push(not_followed(rel, why)),
            Found::Absent => {}
        }
    }
    Ok(Reading { toolchain: None, warnings })
}

/// `name` is an environment variable a project may set: not forage's own
/// (`HOME`, where forage made the agent's home; `FORAGE_*`).
fn env_allowed(name: &str) -> bool {
    crate::template::env_name_ok(name) && name != "HOME" && !name.starts_with("FORAGE_")
}

/// The repository component of the project image's name: its directory's.
pub fn image_name(root: &Path) -> String {
    let dir = root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    format!("project-{dir}")
}

#[cfg(test)]
mod tests;
