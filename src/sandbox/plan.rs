//! Planning an `up`: the validated request, and everything about it that can be
//! checked without Docker (image source, secrets, mounts).

use std::path::PathBuf;

use super::launcher;
use crate::error::{Error, Result};
use crate::names::SandboxName;
use crate::runtime::image::BuildContext;
use crate::runtime::{ImageSource, Mount};
use crate::template::{self, Network};
use crate::workspace::WorkspaceRequest;

/// A fully validated `up`.
#[derive(Debug, Clone)]
pub struct UpRequest {
    pub name: SandboxName,
    pub template: template::Resolved,
    pub workspace: WorkspaceRequest,
    pub image: Option<String>,
    pub env: Vec<(String, String)>,
    pub network: Option<Network>,
    pub memory: Option<String>,
    pub cpus: Option<f64>,
    pub read_only: bool,
    pub start: bool,
    pub agent_args: Vec<String>,
    /// `--secret NAME=FILE`, each file checked readable.
    pub secrets: Vec<SecretFile>,
}

impl UpRequest {
    /// The template as it is: no overrides, started, no secrets.
    pub fn new(name: SandboxName, template: template::Resolved, workspace: WorkspaceRequest) -> Self {
        UpRequest {
            name,
            template,
            workspace,
            image: None,
            env: Vec::new(),
            network: None,
            memory: None,
            cpus: None,
            read_only: false,
            start: true,
            agent_args: Vec::new(),
            secrets: Vec::new(),
        }
    }
}

/// A secret given on the command line: a name and the file holding its value.
/// forage never reads the value; it mounts the file.
#[derive(Debug, Clone, PartialEq)]
pub struct SecretFile {
    pub name: String,
    pub path: PathBuf,
}

/// Where the image comes from: `--image`, else the template's image, build or host tools.
pub(crate) fn image_source(req: &UpRequest) -> Result<ImageSource> {
    let t = &req.template.template;
    let name = req.template.name.clone();
    if let Some(image) = req.image.clone().or_else(|| t.image.clone()) {
        return Ok(ImageSource::Reference(image));
    }
    if let Some(spec) = &t.host_image {
        return Ok(ImageSource::Host { template: name, spec: spec.clone() });
    }
    let build = t.build.as_ref().expect("templates are validated to name an image source");
    let context = match (req.template.dir(), req.template.builtin_dockerfile) {
        (_, Some(dockerfile)) => BuildContext::Embedded { dockerfile },
        (Some(dir), None) => BuildContext::Dir { dir: dir.join(&build.context), dockerfile: build.dockerfile.clone() },
        (None, None) => return Err(Error::other(format!("template {name} has `build` but no directory to build in"))),
    };
    Ok(ImageSource::Build { template: name, context })
}

/// The agent's secret environment: (VAR, secret name) for each secret the template
/// asks for, all of which must have been given.
pub(crate) fn secret_env(req: &UpRequest) -> Result<Vec<(String, String)>> {
    let t = &req.template;
    let mut out = Vec::new();
    for (var, secret) in &t.template.agent.secrets {
        if !req.secrets.iter().any(|s| &s.name == secret) {
            return Err(Error::Usage(format!(
                "template {} needs the secret {secret:?} (for {var}): pass --secret {secret}=FILE, a file holding the value",
                t.name
            )));
        }
        out.push((var.clone(), secret.clone()));
    }
    Ok(out)
}

/// True for a Unix socket, or a directory holding the engine's socket (DOCKER_HOST's
/// or the default one): mounting either would let the agent drive Docker.
fn exposes_engine_socket(source: &std::path::Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    if std::fs::metadata(source).is_ok_and(|m| m.file_type().is_socket()) {
        return true;
    }
    let configured = std::env::var("DOCKER_HOST").ok().and_then(|h| h.strip_prefix("unix://").map(PathBuf::from));
    [configured, Some(PathBuf::from("/var/run/docker.sock")), Some(PathBuf::from("/run/docker.sock"))]
        .into_iter()
        .flatten()
        .filter_map(|s| s.canonicalize().ok())
        .any(|socket| socket.starts_with(source))
}

/// Everything about an `up` that can be checked without Docker: the image source,
/// the secrets the template needs, the mounts. `up` runs it again itself.
pub fn preflight(req: &UpRequest) -> Result<()> {
    image_source(req)?;
    secret_env(req)?;
    extra_mounts(req)?;
    Ok(())
}

/// The template's extra mounts (sources resolved and checked) and one read-only
/// mount per secret file at /run/secrets/<name>.
pub(crate) fn extra_mounts(req: &UpRequest) -> Result<Vec<Mount>> {
    let mut mounts = Vec::new();
    for m in &req.template.template.mounts {
        let source = if let Some(rest) = m.source.strip_prefix("~/") {
            let home = std::env::var_os("HOME")
                .ok_or_else(|| Error::Usage("HOME is not set, so `~/` in a mount cannot be resolved".into()))?;
            PathBuf::from(home).join(rest)
        } else if m.source.starts_with('/') {
            PathBuf::from(&m.source)
        } else {
            match req.template.dir() {
                Some(dir) => dir.join(&m.source),
                None => PathBuf::from(&m.source),
            }
        };
        let source = source.canonicalize().map_err(|e| {
            Error::Usage(format!(
                "template {} mounts {} ({e}); create it or remove the mount from the template",
                req.template.name,
                source.display()
            ))
        })?;
        if exposes_engine_socket(&source) {
            return Err(Error::Usage(format!(
                "template {} mounts {}, which is or contains the Docker engine's socket; forage never hands an agent the engine",
                req.template.name,
                source.display()
            )));
        }
        mounts.push(Mount { source, target: m.target.clone(), read_only: m.read_only });
    }
    for s in &req.secrets {
        mounts.push(Mount {
            source: s.path.clone(),
            target: format!("{}/{}", launcher::SECRETS_DIR, s.name),
            read_only: true,
        });
    }
    Ok(mounts)
}
