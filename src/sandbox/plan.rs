//! Planning a sandbox's container: the validated `up` request, everything about
//! it that can be checked without Docker (image source, secrets, mounts, limits),
//! and the container spec that `up` and `reset` both create.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::launcher;
use crate::error::{Error, Result};
use crate::host_paths::Exposure;
use crate::names::{SandboxName, LABEL_HOME, LABEL_MODE, LABEL_SANDBOX, LABEL_TEMPLATE, LABEL_WORKSPACE};
use crate::runtime::image::BuildContext;
use crate::runtime::{ContainerSpec, Identity, ImageSource, Mount, ReadyImage, AGENT_HOME};
use crate::store::Home;
use crate::template::{self, Network};
use crate::workspace::{git, WorkspaceRecord, WorkspaceRequest};

/// A fully validated `up`.
#[derive(Debug, Clone)]
pub struct UpRequest {
    pub name: SandboxName,
    pub template: template::Resolved,
    pub workspace: WorkspaceRequest,
    pub options: UpOptions,
    pub start: bool,
}

impl UpRequest {
    /// The template as it is: no overrides, started, no secrets.
    pub fn new(name: SandboxName, template: template::Resolved, workspace: WorkspaceRequest) -> Self {
        UpRequest { name, template, workspace, options: UpOptions::default(), start: true }
    }
}

/// What `up` was asked on top of the template. The record keeps it, so that
/// `reset` makes the same container again from the (possibly edited) template.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UpOptions {
    /// `--image`, instead of the template's.
    #[serde(default)]
    pub image: Option<String>,
    /// `--env KEY=VALUE`: plain settings, visible to `docker inspect` like the
    /// template's own `agent.env` (secrets go through `--secret`).
    #[serde(default)]
    pub env: Vec<(String, String)>,
    #[serde(default)]
    pub network: Option<Network>,
    #[serde(default)]
    pub memory: Option<String>,
    #[serde(default)]
    pub cpus: Option<f64>,
    #[serde(default)]
    pub read_only: bool,
    /// `--allow-home`: a workspace or mount may be (or hold) the user's home.
    #[serde(default)]
    pub allow_home: bool,
    /// Arguments after `--`, appended to the template's agent command.
    #[serde(default)]
    pub agent_args: Vec<String>,
    /// `--secret NAME=FILE`, each file checked readable. Only the paths are kept.
    #[serde(default)]
    pub secrets: Vec<SecretFile>,
}

/// A secret given on the command line: a name and the file holding its value.
/// forage never reads the value; it mounts the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SecretFile {
    pub name: String,
    pub path: PathBuf,
}

/// Where the image comes from: `--image`, else the template's image, build or host tools.
pub(crate) fn image_source(template: &template::Resolved, options: &UpOptions) -> Result<ImageSource> {
    let t = &template.template;
    let name = template.name.clone();
    if let Some(image) = options.image.clone().or_else(|| t.image.clone()) {
        return Ok(ImageSource::Reference(image));
    }
    if let Some(spec) = &t.host_image {
        return Ok(ImageSource::Host { template: name, spec: spec.clone() });
    }
    let build = t.build.as_ref().expect("templates are validated to name an image source");
    let context = match (template.dir(), template.builtin_dockerfile) {
        (_, Some(dockerfile)) => BuildContext::Embedded { dockerfile },
        (Some(dir), None) => BuildContext::Dir { dir: dir.join(&build.context), dockerfile: build.dockerfile.clone() },
        (None, None) => return Err(Error::other(format!("template {name} has `build` but no directory to build in"))),
    };
    Ok(ImageSource::Build { template: name, context })
}

/// The agent's secret environment: (VAR, secret name) for each secret the template
/// asks for, all of which must have been given.
pub(crate) fn secret_env(template: &template::Resolved, options: &UpOptions) -> Result<Vec<(String, String)>> {
    let t = template;
    let mut out = Vec::new();
    for (var, secret) in &t.template.agent.secrets {
        if !options.secrets.iter().any(|s| &s.name == secret) {
            return Err(Error::Usage(format!(
                "template {} needs the secret {secret:?} (for {var}): pass --secret {secret}=FILE, a file holding the value",
                t.name
            )));
        }
        out.push((var.clone(), secret.clone()));
    }
    Ok(out)
}

/// Everything about an `up` that can be checked without Docker: the image source,
/// the secrets the template needs, the mounts. `up` runs it again itself.
/// `forage_home` is FORAGE_HOME, which no mount may expose.
pub fn preflight(req: &UpRequest, forage_home: &Path) -> Result<()> {
    image_source(&req.template, &req.options)?;
    secret_env(&req.template, &req.options)?;
    extra_mounts(&req.template, &req.options, forage_home)?;
    let workspace = match &req.workspace {
        WorkspaceRequest::Direct(_) => return Ok(()),
        WorkspaceRequest::GitWorktree(g) => WorkspaceRecord::GitWorktree(g.workspace.clone()),
        WorkspaceRequest::Jj(j) => WorkspaceRecord::Jj(j.workspace.clone()),
    };
    workspace.check_host_paths(forage_home)
}

/// The template's extra mounts (sources resolved and checked) and one read-only
/// mount per secret file at /run/secrets/<name>.
pub(crate) fn extra_mounts(
    template: &template::Resolved,
    options: &UpOptions,
    forage_home: &Path,
) -> Result<Vec<Mount>> {
    let mut mounts = Vec::new();
    for m in &template.template.mounts {
        let source = if let Some(rest) = m.source.strip_prefix("~/") {
            let home = std::env::var_os("HOME")
                .ok_or_else(|| Error::Usage("HOME is not set, so `~/` in a mount cannot be resolved".into()))?;
            PathBuf::from(home).join(rest)
        } else if m.source.starts_with('/') {
            PathBuf::from(&m.source)
        } else {
            match template.dir() {
                Some(dir) => dir.join(&m.source),
                None => PathBuf::from(&m.source),
            }
        };
        let source = source.canonicalize().map_err(|e| {
            Error::Usage(format!(
                "template {} mounts {} ({e}); create it or remove the mount from the template",
                template.name,
                source.display()
            ))
        })?;
        let exposure = if m.read_only { Exposure::ReadOnly } else { Exposure::Writable };
        if let Some(why) = crate::host_paths::refusal(&source, Some(forage_home), exposure) {
            return Err(Error::Usage(format!(
                "template {} mounts {}, which forage never hands an agent: {why}; remove the mount from the template",
                template.name,
                source.display()
            )));
        }
        if crate::host_paths::exposes_user_home(&source) && !options.allow_home {
            return Err(Error::Usage(format!(
                "template {} mounts {}, which is (or holds) your home directory; mount only what the agent needs, or pass --allow-home if you mean it",
                template.name,
                source.display()
            )));
        }
        mounts.push(Mount { source, target: m.target.clone(), read_only: m.read_only });
    }
    for s in &options.secrets {
        mounts.push(Mount {
            source: s.path.clone(),
            target: format!("{}/{}", launcher::SECRETS_DIR, s.name),
            read_only: true,
        });
    }
    Ok(mounts)
}

/// The memory limit in bytes and the CPU limit in cores: the options', else the template's.
pub(crate) fn limits(template: &template::Resolved, options: &UpOptions) -> Result<(i64, f64)> {
    let t = &template.template;
    let memory = options.memory.as_deref().unwrap_or(&t.resources.memory);
    let memory_bytes = template::parse_memory(memory).map_err(Error::Usage)?;
    let cpus = options.cpus.unwrap_or(t.resources.cpus);
    if cpus.is_nan() || cpus <= 0.0 {
        return Err(Error::Usage(format!("--cpus must be above 0, not {cpus}")));
    }
    Ok((memory_bytes, cpus))
}

/// The secret files `up` was given, still readable: `reset` mounts them again.
pub(crate) fn check_secret_files(options: &UpOptions) -> Result<()> {
    for s in &options.secrets {
        let readable = std::fs::File::open(&s.path).and_then(|f| f.metadata()).map(|m| m.is_file());
        if !matches!(readable, Ok(true)) {
            let why = readable.err().map(|e| format!(" ({e})")).unwrap_or_default();
            return Err(Error::Usage(format!(
                "secret file {} (for {}), given to `up`, cannot be read any more{why}; put it back, or remove the sandbox and `up` it again with another --secret",
                s.path.display(),
                s.name
            )));
        }
    }
    Ok(())
}

/// Everything the sandbox's container is made from: the template, what `up` was
/// asked on top, and the workspace. The workspace's mounts are not in it: they can
/// only be worked out once the workspace exists, and come first.
pub(crate) fn container_spec(
    name: &SandboxName,
    template: &template::Resolved,
    options: &UpOptions,
    workspace: &WorkspaceRecord,
    image: ReadyImage,
    home: &Home,
) -> Result<ContainerSpec> {
    let t = &template.template;
    let (memory_bytes, cpus) = limits(template, options)?;
    let mut command = t.agent.command.clone();
    command.extend(options.agent_args.iter().cloned());
    let command = launcher::wrap(command, &secret_env(template, options)?, !t.init.is_empty());
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    match workspace {
        WorkspaceRecord::GitWorktree(g) => env.extend(git::identity_env(&g.repo)),
        WorkspaceRecord::Jj(j) => env.extend(git::identity_env(&j.repo)),
        WorkspaceRecord::Direct { .. } => {}
    }
    env.extend(t.agent.env.clone());
    env.extend(options.env.iter().cloned());
    env.entry("HOME".into()).or_insert_with(|| AGENT_HOME.into());
    env.entry("TERM".into()).or_insert_with(|| "xterm-256color".into());
    env.insert("FORAGE_SANDBOX".into(), name.to_string());
    let labels = HashMap::from([
        (LABEL_SANDBOX.to_string(), name.to_string()),
        (LABEL_HOME.to_string(), home.label()),
        (LABEL_MODE.to_string(), workspace.mode().to_string()),
        (LABEL_TEMPLATE.to_string(), template.name.clone()),
        (LABEL_WORKSPACE.to_string(), workspace.host_path().display().to_string()),
    ]);
    Ok(ContainerSpec {
        name: name.container(),
        program: t.agent.command.first().cloned().unwrap_or_default(),
        image,
        labels,
        command,
        env: env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        identity: Identity::current(),
        mounts: extra_mounts(template, options, home.root())?,
        memory_bytes,
        nano_cpus: (cpus.min(host_cpus()) * 1e9) as i64,
        pids: t.resources.pids,
        network: options.network.unwrap_or(t.network),
        stop_signal: t.stop_signal.clone(),
        stop_timeout: t.stop_timeout,
    })
}

fn host_cpus() -> f64 {
    std::thread::available_parallelism().map(|n| n.get() as f64).unwrap_or(1.0)
}
