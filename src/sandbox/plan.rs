//! Planning a sandbox's container from its template and what `up` was asked on
//! top: everything checked once, here, into a `ContainerPlan` that `up` and
//! `reset` build their container spec from without checking again.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use super::launcher;
use crate::env::Settings;
use crate::error::{Error, Result};
use crate::host_paths::{Exposure, Guard};
use crate::inside;
use crate::names::{SandboxName, LABEL_HOME, LABEL_MODE, LABEL_SANDBOX, LABEL_TEMPLATE, LABEL_WORKSPACE};
use crate::runtime::image::{self, BuildContext};
use crate::runtime::{dockerfile, BaseImage, ContainerSpec, Identity, ImageSource, Mount, Network, ReadyImage};
use crate::store::Home;
use crate::template::{self, ImageSpec};
use crate::toolchain::{ProjectImage, Toolchain};
use crate::workspace::{git, WorkspaceRecord};

pub use crate::record::{SecretFile, UpOptions};

/// Everything about a sandbox's container that the template and the options
/// decide, each checked: made once per `up` (and per `reset`, from the template
/// as it is then).
#[derive(Debug, Clone)]
pub struct ContainerPlan {
    pub(crate) image: ImageSource,
    pub(crate) memory_bytes: i64,
    pub(crate) nano_cpus: i64,
    /// (VAR, secret name) for each secret the template exports to the agent.
    pub(crate) secret_env: Vec<(String, String)>,
    /// The template's mounts and the secret files, sources resolved and checked.
    pub(crate) mounts: Vec<Mount>,
    pub(crate) network: Network,
    /// `network: restricted`: what it may reach (empty for other networks).
    pub(crate) allow: crate::egress::policy::Allowlist,
    /// `network: restricted`: the keys the proxy sets (for the secrets given).
    pub(crate) inject: Vec<crate::egress::inject::InjectRule>,
    pub(crate) read_only: bool,
    /// The project's toolchain the agent is layered on, when it is.
    pub(crate) toolchain: Option<Toolchain>,
    /// The toolchain's variables, under the template's own.
    pub(crate) project_env: BTreeMap<String, String>,
    /// The toolchain's set-up commands, then the template's `init`.
    pub(crate) init: Vec<String>,
    /// What the user should know: a toolchain the template cannot layer on.
    pub(crate) warnings: Vec<String>,
}

impl ContainerPlan {
    /// Checks the template and options against the host; `guard` knows which
    /// host paths no sandbox may see.
    /// `secrets_dir` is where forage keeps this sandbox's copies of its secret
    /// files (FORAGE_HOME/secrets/<name>): the container mounts those.
    pub fn new(
        template: &template::Resolved,
        options: &UpOptions,
        guard: &Guard,
        settings: &Settings,
        identity: Identity,
        secrets_dir: &Path,
        toolchain: Option<&Toolchain>,
    ) -> Result<ContainerPlan> {
        let t = &template.template;
        let cpus = options.cpus.unwrap_or(t.resources.cpus);
        if cpus.is_nan() || cpus <= 0.0 {
            return Err(Error::usage(format!("--cpus must be above 0, not {cpus}")));
        }
        let memory = options.memory.unwrap_or(t.resources.memory);
        let mut mounts = template_mounts(template, options, guard, settings)?;
        for s in &options.secrets {
            mounts.push(Mount {
                source: super::secrets::copy_path(secrets_dir, &s.name),
                target: format!("{}/{}", inside::SECRETS_DIR, s.name),
                read_only: true,
                overlay: None,
            });
        }
        if options.task {
            mounts.push(Mount {
                source: super::secrets::task_copy_path(secrets_dir),
                target: inside::TASK_FILE.to_owned(),
                read_only: true,
                overlay: None,
            });
        }
        let network = options.network.unwrap_or(t.network);
        let allow = super::egress::allowlist(template, options, network, settings)?;
        crate::ports::check_publish(&options.publish, network)?;
        let (image, toolchain, mut warnings) = image_source(template, options, settings, identity, toolchain)?;
        let inject = super::egress::inject_rules(template, options, network, &mut warnings);
        let project_env = toolchain.as_ref().map(|tc| tc.env.clone()).unwrap_or_default();
        let mut init = toolchain.as_ref().map(|tc| tc.init.clone()).unwrap_or_default();
        init.extend(t.init.iter().cloned());
        Ok(ContainerPlan {
            image,
            toolchain,
            project_env,
            init,
            warnings,
            memory_bytes: memory.bytes(),
            nano_cpus: (cpus.min(host_cpus()) * 1e9) as i64,
            secret_env: secret_env(template, options)?,
            mounts,
            network,
            allow,
            inject,
            read_only: options.read_only || t.workspace.read_only,
        })
    }
}

/// Where the image comes from: `--image`, else the template's image, build
/// or host tools; a template's build layered on the project's toolchain
/// when it can be (else a warning, and the template as it is), or on its
/// own `build.base`. Returns the toolchain used, and the warnings.
fn image_source(
    template: &template::Resolved,
    options: &UpOptions,
    settings: &Settings,
    identity: Identity,
    toolchain: Option<&Toolchain>,
) -> Result<(ImageSource, Option<Toolchain>, Vec<String>)> {
    let name = template.name.clone();
    if let Some(reference) = &options.image {
        template::check_image_reference(reference).map_err(|why| Error::usage(format!("--image: {why}")))?;
        return Ok((ImageSource::Reference { reference: reference.clone(), identity }, None, Vec::new()));
    }
    let cannot_layer = |why: &str| {
        toolchain.map(|tc| {
            format!(
                "template {name} cannot be layered on the project's toolchain {tc} ({why}), so the agent runs without the project's image, environment and set-up commands; use a template whose Dockerfile starts with `ARG BASE=…` and `FROM ${{BASE}}` (docs/templates.md), or pass --no-project-toolchain"
            )
        })
    };
    let source = match &template.template.image {
        ImageSpec::Reference(reference) => {
            let warning = cannot_layer("it runs the image it names");
            return Ok((
                ImageSource::Reference { reference: reference.clone(), identity },
                None,
                Vec::from_iter(warning),
            ));
        }
        ImageSpec::Host(spec) => {
            let warning = cannot_layer("its image is made of host tools");
            let source =
                ImageSource::Host { template: name, spec: spec.clone(), tool_dirs: settings.path.clone(), identity };
            return Ok((source, None, Vec::from_iter(warning)));
        }
        ImageSpec::Build(build) => {
            let context = match (template.dir(), template.builtin_dockerfile) {
                (_, Some(dockerfile)) => BuildContext::Embedded { dockerfile },
                (Some(dir), None) => {
                    BuildContext::Dir { dir: dir.join(&build.context), dockerfile: build.dockerfile.clone() }
                }
                (None, None) => {
                    return Err(Error::other(format!("template {name} has `build` but no directory to build in")))
                }
            };
            let layerable = dockerfile::takes_base(&image::dockerfile_text(&context));
            if build.base.is_some() && !layerable {
                return Err(Error::usage(format!(
                    "template {name} names `build.base` but its Dockerfile does not take it: start the Dockerfile with `ARG BASE=<default image>` and `FROM ${{BASE}}`, or remove `build.base`"
                )));
            }
            (build, context, layerable)
        }
    };
    let (build, context, layerable) = source;
    let (base, used, warnings) = match toolchain {
        Some(tc) if layerable => (Some(project_base(tc)), Some(tc.clone()), Vec::new()),
        Some(_) => {
            let warning = cannot_layer("its Dockerfile has no `ARG BASE` before its first `FROM ${BASE}`");
            (build.base.clone().map(BaseImage::Reference), None, Vec::from_iter(warning))
        }
        None => (build.base.clone().map(BaseImage::Reference), None, Vec::new()),
    };
    Ok((ImageSource::Build { template: name, context, identity, base }, used, warnings))
}

/// The project's image as the base of the agent's build.
fn project_base(tc: &Toolchain) -> BaseImage {
    match &tc.image {
        ProjectImage::Reference(reference) => BaseImage::Reference(reference.clone()),
        ProjectImage::Build { name, context, dockerfile, args } => BaseImage::Build {
            name: name.clone(),
            what: format!("the project's image ({tc})"),
            context: BuildContext::Dir { dir: context.clone(), dockerfile: dockerfile.clone() },
            args: args.clone(),
        },
    }
}

/// The agent's secret environment: (VAR, secret name) for each secret the template
/// asks for, all of which must have been given.
fn secret_env(template: &template::Resolved, options: &UpOptions) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (var, secret) in &template.template.agent.secrets {
        if !options.secrets.iter().any(|s| &s.name == secret) {
            // A template with a login takes that instead (waive_secrets_for_login).
            let login = match (&options.profile, template.template.agent.login.is_empty()) {
                (_, true) => String::new(),
                (Some(p), false) if p != crate::agent_state::DEFAULT_PROFILE => {
                    format!(", or log in once with `forage-ctl login {} --profile {p}`", template.name)
                }
                _ => format!(", or log in once with `forage-ctl login {}`", template.name),
            };
            return Err(Error::usage(format!(
                "template {} needs the secret {secret:?} (for {var}): pass --secret {secret}=FILE, a file holding the value, or --secret {secret}=env:{var}, a variable of your environment{login}",
                template.name
            )));
        }
        out.push((var.clone(), secret.clone()));
    }
    Ok(out)
}

/// The template's extra mounts, sources resolved and checked against `guard`.
fn template_mounts(
    template: &template::Resolved,
    options: &UpOptions,
    guard: &Guard,
    settings: &Settings,
) -> Result<Vec<Mount>> {
    let mut mounts = Vec::new();
    for m in &template.template.mounts {
        let source = if m.source.starts_with("~/") {
            settings
                .expand_tilde(&m.source)
                .ok_or_else(|| Error::usage("HOME is not set, so `~/` in a mount cannot be resolved"))?
        } else if m.source.starts_with('/') {
            PathBuf::from(&m.source)
        } else {
            match template.dir() {
                Some(dir) => dir.join(&m.source),
                None => PathBuf::from(&m.source),
            }
        };
        let source = source.canonicalize().map_err(|e| {
            Error::usage(format!(
                "template {} mounts {} ({e}); create it or remove the mount from the template",
                template.name,
                source.display()
            ))
        })?;
        let exposure = if m.read_only { Exposure::ReadOnly } else { Exposure::Writable };
        if let Some(why) = guard.refusal(&source, exposure) {
            let (what, fix) = if guard.refused_only_writable(&source) {
                // A system directory may be mounted read-only (CA certificates, say).
                (
                    format!("{} writable", source.display()),
                    "add `read_only: true` to the mount if the agent only reads it, or remove the mount from the template",
                )
            } else {
                (source.display().to_string(), "remove the mount from the template")
            };
            return Err(Error::usage(format!(
                "template {} mounts {what}, which forage never hands an agent: {why}; {fix}",
                template.name
            )));
        }
        if guard.exposes_user_home(&source) && !options.allow_home {
            return Err(Error::usage(format!(
                "template {} mounts {}, which is (or holds) your home directory; mount only what the agent needs, or pass --allow-home if you mean it",
                template.name,
                source.display()
            )));
        }
        mounts.push(Mount { source, target: m.target.clone(), read_only: m.read_only, overlay: None });
    }
    Ok(mounts)
}

/// Everything the sandbox's container is made from: the plan, and the
/// workspace. The workspace's own mounts are not in it: they can only be worked
/// out once the workspace exists, and come first (`with_workspace_mounts`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn container_spec(
    name: &SandboxName,
    template: &template::Resolved,
    options: &UpOptions,
    plan: &ContainerPlan,
    workspace: &WorkspaceRecord,
    image: ReadyImage,
    home: &Home,
    identity: Identity,
) -> ContainerSpec {
    let t = &template.template;
    let mut command = t.agent.command.clone();
    command.extend(options.agent_args.iter().cloned());
    let task_args: &[String] = if options.task { &t.agent.task } else { &[] };
    let command = launcher::wrap(command, &plan.secret_env, !plan.init.is_empty(), task_args);
    let mut env: BTreeMap<String, String> = BTreeMap::new();
    match workspace {
        WorkspaceRecord::GitWorktree(g) => env.extend(git::identity_env(&g.repo)),
        WorkspaceRecord::Jj(j) => env.extend(git::identity_env(&j.repo)),
        WorkspaceRecord::Direct { .. } => {}
    }
    env.extend(plan.project_env.clone());
    env.extend(t.agent.env.clone());
    env.extend(options.env.iter().cloned());
    env.entry("HOME".into()).or_insert_with(|| inside::AGENT_HOME.into());
    env.entry("TERM".into()).or_insert_with(|| "xterm-256color".into());
    env.insert("FORAGE_SANDBOX".into(), name.to_string());
    let labels = HashMap::from([
        (LABEL_SANDBOX.to_string(), name.to_string()),
        (LABEL_HOME.to_string(), home.label()),
        (LABEL_MODE.to_string(), workspace.mode().to_string()),
        (LABEL_TEMPLATE.to_string(), template.name.clone()),
        (LABEL_WORKSPACE.to_string(), workspace.host_path().display().to_string()),
    ]);
    ContainerSpec {
        name: name.container(),
        program: t.agent.command.first().cloned().unwrap_or_default(),
        image,
        labels,
        command,
        env: env.iter().map(|(k, v)| format!("{k}={v}")).collect(),
        identity,
        mounts: plan.mounts.clone(),
        memory_bytes: plan.memory_bytes,
        nano_cpus: plan.nano_cpus,
        pids: t.resources.pids,
        network: plan.network,
        egress: None,
        publishes: !options.publish.is_empty(),
        stop_signal: t.stop_signal.as_str().to_owned(),
        stop_timeout: t.stop_timeout,
    }
}

/// `spec` with the workspace's mounts before the plan's.
pub(crate) fn with_workspace_mounts(
    mut spec: ContainerSpec,
    workspace: &WorkspaceRecord,
    read_only: bool,
    guard: &Guard,
) -> ContainerSpec {
    let mut mounts = workspace.mounts(read_only, guard);
    mounts.append(&mut spec.mounts);
    spec.mounts = mounts;
    spec
}

fn host_cpus() -> f64 {
    std::thread::available_parallelism().map(|n| n.get() as f64).unwrap_or(1.0)
}

/// FORAGE_HOME, as the guard needs it.
pub(crate) fn guard(home: &Home, settings: &Settings) -> Guard {
    Guard::new(settings, Some(home.root()))
}
