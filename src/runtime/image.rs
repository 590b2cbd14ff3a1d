//! The offline default image: built through the Engine API from programs installed
//! on the host plus their shared libraries, so forage works with no registry.
//!
//! The image is cached under a tag derived from a key over what goes into it: each
//! tool's path, size and modification time, and the dynamic linker's cache (which
//! ldconfig rewrites whenever libraries change). Computing the key costs a few dozen
//! stat calls, so an `up` that finds the image pays almost nothing; reading and
//! hashing every byte (tens of MiB) on each `up` would not be.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use bollard::query_parameters::{BuildImageOptions, CreateImageOptions, ImportImageOptions};
use futures_util::{StreamExt, TryStreamExt};
use sha2::{Digest, Sha256};

use super::build_needs;
use super::docker::merge_identity;
use super::HostImage;
use super::{Identity, AGENT_HOME};
use crate::error::{is_docker_not_found, Error, Result};
use crate::progress::Progress;

/// A template name as Docker allows in a repository path: lowercase alphanumerics
/// separated by single dashes.
fn repository_component(template: &str) -> String {
    let mapped: String =
        template.to_ascii_lowercase().chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '-' }).collect();
    let joined = mapped.split('-').filter(|p| !p.is_empty()).collect::<Vec<_>>().join("-");
    if joined.is_empty() {
        "template".into()
    } else {
        joined
    }
}

/// What a template's `build` builds from.
#[derive(Debug, Clone, PartialEq)]
pub enum BuildContext {
    /// A directory on the host (a template file's `build.context`).
    Dir { dir: PathBuf, dockerfile: String },
    /// A built-in template's embedded Dockerfile, which is its whole context.
    Embedded { dockerfile: &'static str },
}

/// Bump when the image layout below changes, so old caches are not reused.
const RECIPE_VERSION: &str = "forage-host-image-v1";
const LD_CACHE: &str = "/etc/ld.so.cache";
/// The label recording the cache key on the image.
pub const LABEL_IMAGE_KEY: &str = "forage.image.key";
/// On images that already hold the passwd/group entries and HOME of `uid:gid`,
/// so creating a container needs no copying into it.
pub const LABEL_IMAGE_IDENTITY: &str = "forage.image.identity";

/// The tools that exist on this host, resolved in `dirs` (the user's PATH):
/// (name, host path).
fn resolve_tools(spec: &HostImage, dirs: &[PathBuf]) -> Result<Vec<(String, PathBuf)>> {
    let mut found = Vec::new();
    for tool in &spec.tools {
        let hit = dirs.iter().map(|d| d.join(tool)).find(|p| is_executable(p));
        match hit {
            Some(p) => found.push((tool.clone(), p)),
            None if spec.require.contains(tool) => {
                return Err(Error::not_found(format!(
                    "the host has no {tool:?} on PATH, which the offline image needs; install it or use a template with `image`"
                )))
            }
            None => {}
        }
    }
    Ok(found)
}

fn is_executable(p: &Path) -> bool {
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
}

/// The cache key: changes whenever a tool or the host's libraries change.
fn cache_key(tools: &[(String, PathBuf)], who: Identity) -> String {
    fn stamp(h: &mut Sha256, p: &Path) {
        h.update(p.as_os_str().as_encoded_bytes());
        if let Ok(m) = std::fs::metadata(p) {
            h.update(m.len().to_le_bytes());
            h.update(m.mtime().to_le_bytes());
            h.update(m.mtime_nsec().to_le_bytes());
            h.update(m.ino().to_le_bytes());
        }
    }
    let mut h = Sha256::new();
    h.update(RECIPE_VERSION);
    h.update(who.uid.to_le_bytes());
    h.update(who.gid.to_le_bytes());
    for (name, path) in tools {
        // The tool's name is where it goes in the image; the path is what goes there.
        h.update(name.as_bytes());
        stamp(&mut h, path);
    }
    stamp(&mut h, Path::new(LD_CACHE));
    h.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Returns the image reference for `spec`, building it first if the engine lacks
/// it, and the names of the tools in it (each at /usr/bin/<name>).
pub async fn ensure_host_image(
    api: &bollard::Docker,
    template: &str,
    spec: &HostImage,
    tool_dirs: &[PathBuf],
    who: Identity,
    podman: bool,
    progress: &dyn Progress,
) -> Result<(String, Vec<String>)> {
    let tools = resolve_tools(spec, tool_dirs)?;
    let names: Vec<String> = tools.iter().map(|(name, _)| name.clone()).collect();
    let key = cache_key(&tools, who);
    let repo = format!("forage-host/{}", repository_component(template));
    let reference = format!("{repo}:{key}");
    match api.inspect_image(&reference).await {
        Ok(_) => return Ok((reference, names)),
        Err(e) if is_docker_not_found(&e) => {}
        Err(e) => return Err(Error::docker(format!("inspecting image {reference}"), e)),
    }

    progress.step(&format!("building image {reference} from {} host tools", tools.len()));
    let rootfs = tokio::task::spawn_blocking(move || build_rootfs(&tools, who)).await.map_err(Error::other)??;
    progress.step(&format!(
        "importing image {reference} ({:.1} MiB) into the Docker engine",
        rootfs.len() as f64 / (1 << 20) as f64
    ));
    if podman {
        // Podman's import cannot set the config (image_archive.rs says why).
        let config = super::image_archive::ImageConfig {
            env: &["PATH=/usr/local/bin:/usr/bin:/bin".into()],
            cmd: &["sh".into()],
            labels: &[
                (LABEL_IMAGE_KEY.into(), key.clone()),
                (LABEL_IMAGE_IDENTITY.into(), format!("{}:{}", who.uid, who.gid)),
            ],
        };
        let archive = super::image_archive::archive(&reference, &rootfs, &config)?;
        api.import_image(ImportImageOptions::default(), bollard::body_full(archive.into()), None)
            .try_for_each(|_| async { Ok(()) })
            .await
            .map_err(|e| Error::docker(format!("loading image {reference}"), e))?;
        progress.finish();
        return Ok((reference, names));
    }
    let label = format!("LABEL {LABEL_IMAGE_KEY}={key} {LABEL_IMAGE_IDENTITY}={}:{}", who.uid, who.gid);
    let options = CreateImageOptions {
        from_src: Some("-".into()),
        repo: Some(repo.clone()),
        tag: Some(key.clone()),
        changes: vec!["ENV PATH=/usr/local/bin:/usr/bin:/bin".into(), label, "CMD [\"sh\"]".into()],
        ..Default::default()
    };
    api.create_image(Some(options), Some(bollard::body_full(rootfs.into())), None)
        .try_for_each(|_| async { Ok(()) })
        .await
        .map_err(|e| Error::docker(format!("importing image {reference}"), e))?;
    progress.finish();
    Ok((reference, names))
}

/// One Dockerfile build: what is built, from what, on what.
#[derive(Debug, Clone, Copy)]
pub struct Build<'a> {
    /// The image's repository under `forage-build/`: the template's name, or
    /// `project-<directory>` for a project's own image.
    pub name: &'a str,
    /// What is built, for messages: `template "claude"`, `the project's image (…)`.
    pub what: &'a str,
    /// The template whose Dockerfile `templates export` writes out; `None`
    /// for a project's image.
    pub template: Option<&'a str>,
    pub context: &'a BuildContext,
    /// The image passed as the build argument `BASE` (the Dockerfile's `ARG BASE`).
    pub base: Option<&'a str>,
    /// Further build arguments (a devcontainer's `build.args`).
    pub args: &'a BTreeMap<String, String>,
}

/// Builds an image from its Dockerfile unless the engine already has it.
/// The tag carries a hash of the whole build context, the build arguments,
/// and the base image's reference and id, so an edited Dockerfile or context
/// file, or a rebuilt base image, builds anew and an unchanged one costs an
/// inspect call or two.
pub async fn ensure_built_image(api: &bollard::Docker, build: &Build<'_>, progress: &dyn Progress) -> Result<String> {
    let (args, base_id) = build_args(api, build).await?;
    let mut needs = build_needs::network_needs(&dockerfile_text(build.context), &args);
    if base_id.is_some() {
        // A base image in the engine is not fetched.
        needs.retain(|n| !n.starts_with(&format!("the base image {} ", build.base.unwrap_or_default())));
    }
    let context = build.context.clone();
    let (tar, dockerfile) =
        tokio::task::spawn_blocking(move || context_tar(&context)).await.map_err(Error::other)??;
    let key = build_key(&tar, &args, base_id.as_deref());
    let reference = format!("forage-build/{}:{key}", repository_component(build.name));
    match api.inspect_image(&reference).await {
        Ok(_) => return Ok(reference),
        Err(e) if is_docker_not_found(&e) => {}
        Err(e) => return Err(Error::docker(format!("inspecting image {reference}"), e)),
    }
    progress.step(&format!("building image {reference} from {dockerfile}"));
    let options = BuildImageOptions {
        dockerfile: dockerfile.clone(),
        t: Some(reference.clone()),
        rm: true,
        forcerm: true,
        buildargs: (!args.is_empty()).then(|| args.clone().into_iter().collect()),
        labels: Some(std::collections::HashMap::from([(LABEL_IMAGE_KEY.to_string(), key.clone())])),
        ..Default::default()
    };
    let failed = |detail: &str, last: &[String]| build_failed(build, &reference, &needs, detail, last);
    let mut stream = api.build_image(options, None, Some(bollard::body_full(tar.into())));
    let mut last_lines: Vec<String> = Vec::new();
    while let Some(item) = stream.next().await {
        let info = item.map_err(|e| {
            let detail = match e {
                bollard::errors::Error::DockerStreamError { error } => error,
                other => other.to_string(),
            };
            failed(&detail, &last_lines)
        })?;
        if let Some(err) = info.error_detail.and_then(|d| d.message) {
            return Err(failed(&err, &last_lines));
        }
        if let Some(line) = info.stream.as_deref().map(str::trim).filter(|l| !l.is_empty()) {
            progress.step(&format!("building {reference}: {line}"));
            last_lines.push(line.to_owned());
            if last_lines.len() > 10 {
                last_lines.remove(0);
            }
        }
    }
    progress.finish();
    Ok(reference)
}

/// The cache key of a build: its context, its arguments, its base image's id.
fn build_key(tar: &[u8], args: &BTreeMap<String, String>, base_id: Option<&str>) -> String {
    let mut hasher = Sha256::new();
    hasher.update(tar);
    for (k, v) in args {
        hasher.update(format!("\0arg {k}={v}"));
    }
    if let Some(id) = base_id {
        hasher.update(format!("\0base-id {id}"));
    }
    hasher.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The build's arguments (`BASE` among them when it is layered) and the
/// base image's id, when the engine has it.
async fn build_args(api: &bollard::Docker, build: &Build<'_>) -> Result<(BTreeMap<String, String>, Option<String>)> {
    let mut args = build.args.clone();
    let Some(base) = build.base else { return Ok((args, None)) };
    args.insert(super::dockerfile::BASE_ARG.to_owned(), base.to_owned());
    match api.inspect_image(base).await {
        Ok(image) => Ok((args, image.id)),
        // One forage built, since removed: no registry has it.
        Err(e) if is_docker_not_found(&e) && (base.starts_with("forage-build/") || base.starts_with("forage-host/")) => {
            Err(Error::not_found(format!(
                "the image {base}, which {} is built on, is no longer in the Docker engine (forage built it, and it was removed since); `up` builds it again: `down` the sandbox and `up` it anew",
                build.what
            )))
        }
        // Not in the engine: the build pulls it (or says it cannot).
        Err(e) if is_docker_not_found(&e) => Ok((args, None)),
        Err(e) => Err(Error::docker(format!("inspecting image {base}"), e)),
    }
}

/// A failed build, with every network source its Dockerfile needs and the
/// ways to do without them (a build offline fails at the first it reaches).
fn build_failed(build: &Build<'_>, reference: &str, needs: &[String], error: &str, last_lines: &[String]) -> Error {
    let tail = if last_lines.is_empty() { String::new() } else { format!("\n{}", last_lines.join("\n")) };
    let needed = if needs.is_empty() {
        "if it failed pulling its base image, that image must be in the engine or reachable in a registry".to_owned()
    } else {
        format!("its Dockerfile needs, from the network: {}", needs.join(", "))
    };
    let edit = match build.template {
        Some(template) => {
            format!("`forage-ctl templates export {template}` and a Dockerfile that needs only what you have")
        }
        None => "a project Dockerfile that needs only what you have, or `up --no-project-toolchain`".to_owned(),
    };
    Error::other(format!(
        "building {} failed: {}; {needed}. Without them: `up --image IMAGE` with an image already in the engine that holds the agent; or build where they are reachable and bring the image here (`docker save {reference}` there, `docker load` here: forage uses an image of that exact tag as it is); or {edit}{tail}",
        build.what,
        error.trim()
    ))
}

/// The text of the Dockerfile a build uses (empty when it cannot be read:
/// the build itself will say why).
pub fn dockerfile_text(context: &BuildContext) -> String {
    match context {
        BuildContext::Embedded { dockerfile } => (*dockerfile).to_owned(),
        BuildContext::Dir { dir, dockerfile } => {
            use std::io::Read;
            use std::os::unix::fs::OpenOptionsExt;
            // Never blocking on a FIFO, never more than a Dockerfile's worth.
            let mut text = String::new();
            let file = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
                .open(dir.join(dockerfile));
            if let Ok(file) = file.and_then(|f| f.metadata().map(|m| (f, m.is_file()))) {
                if file.1 {
                    let _ = file.0.take(1 << 20).read_to_string(&mut text);
                }
            }
            text
        }
    }
}

/// One tar entry, deterministic (no times, root's unless said).
pub(super) struct Entry<'a> {
    pub(super) kind: tar::EntryType,
    pub(super) mode: u32,
    pub(super) owner: (u32, u32),
    /// A symlink's target.
    pub(super) link: Option<&'a Path>,
}

impl Entry<'_> {
    pub(super) fn file(mode: u32) -> Self {
        Entry { kind: tar::EntryType::Regular, mode, owner: (0, 0), link: None }
    }

    pub(super) fn dir(mode: u32) -> Self {
        Entry { kind: tar::EntryType::Directory, mode, owner: (0, 0), link: None }
    }

    fn header(&self, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(self.kind);
        h.set_size(size);
        h.set_mode(self.mode);
        h.set_uid(self.owner.0.into());
        h.set_gid(self.owner.1.into());
        h.set_mtime(0);
        h
    }

    /// Appends this entry at `path` with `body`.
    pub(super) fn append<W: std::io::Write>(
        &self,
        tar: &mut tar::Builder<W>,
        path: impl AsRef<Path>,
        body: &[u8],
    ) -> std::io::Result<()> {
        let mut h = self.header(body.len() as u64);
        match self.link {
            Some(target) => tar.append_link(&mut h, path, target),
            None => tar.append_data(&mut h, path, body),
        }
    }
}

/// The build context as a tar (deterministic: sorted, zero mtimes, no .git,
/// what `.dockerignore` leaves out left out, symlinks kept as symlinks) and the
/// Dockerfile's path inside it.
fn context_tar(context: &BuildContext) -> Result<(Vec<u8>, String)> {
    let io = |e: std::io::Error| Error::other(format!("packing the build context: {e}"));
    let mut tar = tar::Builder::new(Vec::new());
    let dockerfile = match context {
        BuildContext::Embedded { dockerfile } => {
            Entry::file(0o644).append(&mut tar, "Dockerfile", dockerfile.as_bytes()).map_err(io)?;
            "Dockerfile".to_owned()
        }
        BuildContext::Dir { dir, dockerfile } => {
            if !dir.join(dockerfile).is_file() {
                return Err(Error::usage(format!(
                    "the build context {} has no {dockerfile}; fix `build` in the template",
                    dir.display()
                )));
            }
            let ignore = dockerignore(dir);
            let mut files = collect_files(dir, &ignore, dockerfile).map_err(|e| match e.kind() {
                std::io::ErrorKind::FileTooLarge => Error::usage(format!(
                    "the build context {} {e}; leave out what the image does not need in its .dockerignore, or choose a smaller build context",
                    dir.display()
                )),
                _ => io(e),
            })?;
            files.sort();
            for rel in files {
                let path = dir.join(&rel);
                let meta = std::fs::symlink_metadata(&path).map_err(io)?;
                if meta.file_type().is_symlink() {
                    let target = std::fs::read_link(&path).map_err(io)?;
                    let entry =
                        Entry { kind: tar::EntryType::Symlink, mode: 0o777, owner: (0, 0), link: Some(&target) };
                    entry.append(&mut tar, &rel, &[]).map_err(io)?;
                } else {
                    let body = read_regular(&path, MAX_CONTEXT_BYTES).map_err(io)?;
                    Entry::file(meta.mode() & 0o7777).append(&mut tar, &rel, &body).map_err(io)?;
                }
            }
            dockerfile.clone()
        }
    };
    Ok((tar.into_inner().map_err(io)?, dockerfile))
}

/// The context's `.dockerignore`, as the engine's builder reads it.
fn dockerignore(dir: &Path) -> ignore::gitignore::Gitignore {
    let mut builder = ignore::gitignore::GitignoreBuilder::new(dir);
    let text = read_regular(&dir.join(".dockerignore"), 1 << 20).map(|b| String::from_utf8_lossy(&b).into_owned());
    if let Ok(text) = text {
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            // Docker's patterns are relative to the context's root.
            let line = line.trim_start_matches("./");
            let rooted =
                if line.starts_with('!') || line.starts_with('/') { line.to_owned() } else { format!("/{line}") };
            let _ = builder.add_line(None, &rooted);
        }
    }
    builder.build().unwrap_or_else(|_| ignore::gitignore::Gitignore::empty())
}

/// The most a build context may hold (its files' bytes, its entries, its
/// depth): it is packed in memory, and may be a repository an agent wrote.
const MAX_CONTEXT_BYTES: u64 = 1 << 30;
const MAX_CONTEXT_ENTRIES: usize = 200_000;
const MAX_CONTEXT_DEPTH: usize = 64;

/// The regular file at `path`, at most `limit` bytes: never following a
/// symlink put there since the walk saw a file, never blocking on a FIFO.
fn read_regular(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other(format!("{} is not a regular file", path.display())));
    }
    let mut body = Vec::new();
    file.take(limit + 1).read_to_end(&mut body)?;
    if body.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("{} is larger than {limit} bytes", path.display()),
        ));
    }
    Ok(body)
}

/// Every file and symlink of the context that `.dockerignore` keeps (never
/// `.git`), relative to `root`; the Dockerfile always. Bounded in bytes,
/// entries and depth before anything is read (`FileTooLarge` past them).
fn collect_files(
    root: &Path,
    ignore: &ignore::gitignore::Gitignore,
    dockerfile: &str,
) -> std::io::Result<Vec<PathBuf>> {
    let too_large = |what: String| std::io::Error::new(std::io::ErrorKind::FileTooLarge, what);
    let (mut out, mut bytes, mut entries) = (Vec::new(), 0u64, 0usize);
    let mut stack = vec![(root.to_path_buf(), 0usize)];
    while let Some((dir, depth)) = stack.pop() {
        if depth > MAX_CONTEXT_DEPTH {
            return Err(too_large(format!("is deeper than {MAX_CONTEXT_DEPTH} directories")));
        }
        for entry in std::fs::read_dir(&dir)? {
            let entry = entry?;
            let path = entry.path();
            let rel = path.strip_prefix(root).expect("under root").to_path_buf();
            let kind = entry.file_type()?;
            let kept =
                rel == Path::new(dockerfile) || !ignore.matched_path_or_any_parents(&path, kind.is_dir()).is_ignore();
            if !kept || entry.file_name() == ".git" {
                continue;
            }
            entries += 1;
            if entries > MAX_CONTEXT_ENTRIES {
                return Err(too_large(format!("holds more than {MAX_CONTEXT_ENTRIES} files and directories")));
            }
            if kind.is_dir() {
                stack.push((path, depth + 1));
            } else if kind.is_file() || kind.is_symlink() {
                if kind.is_file() {
                    bytes += entry.metadata()?.len();
                    if bytes > MAX_CONTEXT_BYTES {
                        return Err(too_large(format!("holds more than {} MiB", MAX_CONTEXT_BYTES >> 20)));
                    }
                }
                out.push(rel);
            }
        }
    }
    Ok(out)
}

/// The shared libraries `binary` loads, as the dynamic linker resolves them on this
/// host. `ldd` is the linker's own answer (RPATHs, /nix/store, multiarch dirs).
fn shared_libraries(binary: &Path) -> Result<Vec<PathBuf>> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .map_err(|e| Error::other(format!("running ldd to find the libraries of {}: {e}", binary.display())))?;
    // Static binaries and scripts: ldd exits non-zero, and they need no libraries.
    if !out.status.success() {
        return Ok(Vec::new());
    }
    let mut libs = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let line = line.trim();
        let path = match line.split_once("=>") {
            Some((lib, rest)) => {
                let target = rest.trim().split(" (").next().unwrap_or("").trim();
                if target == "not found" {
                    return Err(Error::other(format!(
                        "{} needs {}, which the host's dynamic linker cannot find",
                        binary.display(),
                        lib.trim()
                    )));
                }
                target
            }
            None => line.split(" (").next().unwrap_or(""),
        };
        if path.starts_with('/') {
            libs.push(PathBuf::from(path));
        }
    }
    Ok(libs)
}

/// A root filesystem as a tar: tools in /usr/bin, libraries where the linker expects
/// them, and the bare directories and files a container needs.
fn build_rootfs(tools: &[(String, PathBuf)], who: Identity) -> Result<Vec<u8>> {
    // image path -> host file whose content goes there
    let mut files: BTreeMap<PathBuf, PathBuf> = BTreeMap::new();
    for (name, host_path) in tools {
        files.insert(PathBuf::from("usr/bin").join(name), host_path.clone());
        for lib in shared_libraries(host_path)? {
            let in_image = lib.strip_prefix("/").unwrap_or(&lib).to_path_buf();
            files.insert(in_image, lib);
        }
    }
    let io = |e: std::io::Error| Error::other(format!("assembling the image: {e}"));
    let mut tar = tar::Builder::new(Vec::new());
    skeleton(&mut tar, who).map_err(io)?;
    let mut made_dirs = std::collections::BTreeSet::new();
    for (in_image, host) in &files {
        for ancestor in in_image.ancestors().skip(1).collect::<Vec<_>>().into_iter().rev() {
            let s = ancestor.to_string_lossy().into_owned();
            if !s.is_empty() && made_dirs.insert(s.clone()) && !matches!(s.as_str(), "usr" | "usr/bin") {
                Entry::dir(0o755).append(&mut tar, &s, &[]).map_err(io)?;
            }
        }
        let body = std::fs::read(host).map_err(io)?;
        let mode = std::fs::metadata(host).map_err(io)?.mode() & 0o7755;
        Entry::file(mode).append(&mut tar, in_image, &body).map_err(io)?;
    }
    tar.into_inner().map_err(io)
}

/// What every image built from host tools has besides the tools: the usual
/// directories, `/bin`, the invoking user's passwd and group entries and HOME
/// (as `Docker::install_identity` would add them to any other image, baked in
/// so that `up` need not copy them in), and name resolution from files.
fn skeleton(tar: &mut tar::Builder<Vec<u8>>, who: Identity) -> std::io::Result<()> {
    for (d, mode) in [
        ("etc", 0o755),
        ("home", 0o755),
        ("root", 0o700),
        ("tmp", 0o1777),
        ("usr", 0o755),
        ("usr/bin", 0o755),
        ("workspace", 0o755),
    ] {
        Entry::dir(mode).append(tar, d, &[])?;
    }
    let bin = Entry { kind: tar::EntryType::Symlink, mode: 0o777, owner: (0, 0), link: Some(Path::new("usr/bin")) };
    bin.append(tar, "bin", &[])?;
    let (passwd, group) = merge_identity("root:x:0:0:root:/root:/bin/sh\n", "root:x:0:\n", who);
    Entry::file(0o644).append(tar, "etc/passwd", passwd.as_bytes())?;
    Entry::file(0o644).append(tar, "etc/group", group.as_bytes())?;
    let home = Entry { owner: (who.uid, who.gid), ..Entry::dir(0o755) };
    home.append(tar, &AGENT_HOME[1..], &[])?;
    Entry::file(0o644).append(tar, "etc/nsswitch.conf", b"passwd: files\ngroup: files\nhosts: files dns\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_names_become_valid_repository_names() {
        assert_eq!(repository_component("Claude"), "claude");
        assert_eq!(repository_component("_a..b-"), "a-b");
        assert_eq!(repository_component("..."), "template");
    }

    #[test]
    fn key_is_stable_and_tracks_the_tool_set() {
        let spec = HostImage { tools: vec!["sh".into(), "ls".into()], require: vec!["sh".into()] };
        let tools = resolve_tools(&spec, &crate::env::Settings::from_process().path).unwrap();
        let me = Identity { uid: 1000, gid: 1000 };
        assert_eq!(cache_key(&tools, me), cache_key(&tools, me));
        assert_ne!(cache_key(&tools, me), cache_key(&tools[..1], me));
        assert_ne!(cache_key(&tools, me), cache_key(&tools, Identity { uid: 1001, gid: 1000 }));
    }

    #[test]
    fn a_missing_required_tool_is_named() {
        let spec = HostImage { tools: vec!["no-such-tool-xyz".into()], require: vec!["no-such-tool-xyz".into()] };
        let err = resolve_tools(&spec, &crate::env::Settings::from_process().path).unwrap_err().to_string();
        assert!(err.contains("no-such-tool-xyz"), "{err}");
    }

    #[test]
    fn a_build_context_leaves_out_what_dockerignore_says_and_keeps_symlinks() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        std::fs::write(dir.join("Dockerfile"), "FROM scratch\n").unwrap();
        std::fs::write(dir.join(".dockerignore"), "# comment\n*.log\nsecret\n!keep.log\nDockerfile\n").unwrap();
        std::fs::create_dir_all(dir.join("secret")).unwrap();
        std::fs::create_dir_all(dir.join("src/.git")).unwrap();
        for f in ["a.log", "keep.log", "secret/key", "src/main.c", "src/.git/config"] {
            std::fs::write(dir.join(f), "x").unwrap();
        }
        std::os::unix::fs::symlink("src/main.c", dir.join("link")).unwrap();
        let context = BuildContext::Dir { dir: dir.to_path_buf(), dockerfile: "Dockerfile".into() };
        let (tar, dockerfile) = context_tar(&context).unwrap();
        assert_eq!(dockerfile, "Dockerfile");
        let mut archive = tar::Archive::new(tar.as_slice());
        let entries: Vec<(String, tar::EntryType)> = archive
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.path().unwrap().display().to_string(), e.header().entry_type())
            })
            .collect();
        let names: Vec<&str> = entries.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, [".dockerignore", "Dockerfile", "keep.log", "link", "src/main.c"]);
        assert_eq!(entries[3].1, tar::EntryType::Symlink);
    }

    #[test]
    fn finds_the_libraries_of_a_dynamic_binary() {
        let sh = resolve_tools(
            &HostImage { tools: vec!["ls".into()], require: vec!["ls".into()] },
            &crate::env::Settings::from_process().path,
        )
        .unwrap();
        let libs = shared_libraries(&sh[0].1).unwrap();
        assert!(libs.iter().any(|l| l.to_string_lossy().contains("libc.so")), "{libs:?}");
    }
}
