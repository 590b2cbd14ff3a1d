//! `--secret NAME=FILE` and `--secret NAME=env:VAR`: the value is read once,
//! at `up`, into a copy only the user can read
//! (FORAGE_HOME/secrets/<sandbox>/<secret>, mode 0600), and the container
//! mounts the copy. The file it came from is never read again, so that
//! swapping it for a symlink later (to a private key, to the engine's socket)
//! changes nothing the engine mounts; a variable's value is never in argv, the
//! record or the container's configuration.

use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::host_paths::pin::Pin;
use crate::record::{SecretFile, SecretValue};

/// The largest secret forage copies: keys and tokens are a few kilobytes, and
/// the value ends up in the agent's environment.
pub const MAX_SECRET_BYTES: u64 = 1 << 20;

/// Where the copy of secret `secret` of a sandbox is, in its directory `dir`
/// (FORAGE_HOME/secrets/<sandbox>).
pub fn copy_path(dir: &Path, secret: &str) -> PathBuf {
    dir.join(secret)
}

/// Where the real value of a secret the egress proxy injects is kept (the
/// container's copy holds a placeholder): a name no secret can have, and
/// never mounted.
pub fn injected_path(dir: &Path, secret: &str) -> PathBuf {
    dir.join(format!(".injected.{secret}"))
}

/// Where the copy of `up --task`'s text is, in the sandbox's secrets
/// directory `dir`: a name no secret can have (secret names start with a
/// letter or digit).
pub fn task_copy_path(dir: &Path) -> PathBuf {
    dir.join(".task.md")
}

/// The largest task forage takes: a prompt, not a document.
pub const MAX_TASK_BYTES: u64 = 1 << 20;

/// Writes the task's text into `dir` (made by `copy_all`), mode 0600.
pub fn copy_task(text: &str, dir: &Path) -> Result<()> {
    write_private(&task_copy_path(dir), text.as_bytes())
}

/// Creates `copy` (never over a file, never through a symlink), readable by
/// the user alone, holding `value`.
fn write_private(copy: &Path, value: &[u8]) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(copy)
        .map_err(|e| Error::other(format!("writing {}: {e}", copy.display())))?;
    std::io::Write::write_all(&mut file, value)
        .and_then(|()| file.sync_all())
        .map_err(|e| Error::other(format!("writing {}: {e}", copy.display())))
}

/// `up --task-file FILE`'s text: read once, as a secret file is (no symlink on
/// the way, a regular file, bounded), and UTF-8.
pub fn read_task_file(path: &Path) -> Result<String> {
    let bytes = read_value(&SecretFile::from_file("task", path.to_owned()))?;
    if bytes.len() as u64 > MAX_TASK_BYTES {
        return Err(Error::usage(format!("task file {} is larger than {} KiB", path.display(), MAX_TASK_BYTES >> 10)));
    }
    String::from_utf8(bytes).map_err(|_| Error::usage(format!("task file {} is not UTF-8 text", path.display())))
}

/// Copies each of `secrets` into `dir` (made here, mode 0700; each copy 0600),
/// reading each through no symlink (its path was made canonical when `up`
/// checked it), as a regular file of at most `MAX_SECRET_BYTES`. A secret of
/// `injected` gets a placeholder in its copy, and its value a copy no
/// container mounts, which must be one line of text (a header's value).
pub fn copy_all(secrets: &[SecretFile], dir: &Path, injected: &[String]) -> Result<()> {
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(dir)
        .map_err(|e| Error::other(format!("creating {}: {e}", dir.display())))?;
    for secret in secrets {
        let value = match &secret.value {
            Some(SecretValue(value)) => value.clone(),
            None => read_value(secret)?,
        };
        if injected.contains(&secret.name) {
            crate::egress::inject::header_value(&secret.name, &value).map_err(Error::usage)?;
            write_private(&injected_path(dir, &secret.name), &value)?;
            let placeholder = crate::egress::inject::placeholder(&secret.name);
            write_private(&copy_path(dir, &secret.name), placeholder.as_bytes())?;
        } else {
            write_private(&copy_path(dir, &secret.name), &value)?;
        }
    }
    Ok(())
}

/// The value of `secret`, read from its file: the path as `up` resolved it,
/// still with no symlink on the way, a regular file, never blocking (a FIFO),
/// bounded in size.
fn read_value(secret: &SecretFile) -> Result<Vec<u8>> {
    let shown = secret.path.display();
    let changed = |why: String| {
        Error::usage(format!(
            "secret file {shown} (for {}) changed while `up` read it ({why}); check it and run `up` again",
            secret.name
        ))
    };
    Pin::take(&secret.path, false).map_err(|moved| changed(moved.to_string()))?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(&secret.path)
        .map_err(|e| changed(e.to_string()))?;
    let meta = file.metadata().map_err(|e| changed(e.to_string()))?;
    if !meta.is_file() {
        return Err(changed("it is not a regular file".into()));
    }
    let mut value = Vec::new();
    file.take(MAX_SECRET_BYTES + 1).read_to_end(&mut value).map_err(|e| changed(e.to_string()))?;
    if value.len() as u64 > MAX_SECRET_BYTES {
        return Err(too_large(secret));
    }
    Ok(value)
}

/// `--secret NAME=env:VAR`: the value of `var` in forage's environment, held
/// in memory until `up` copies it: set, not empty, at most `MAX_SECRET_BYTES`.
pub fn from_environment(name: &str, var: &str) -> Result<SecretFile> {
    let valid = !var.is_empty() && !var.starts_with(|c: char| c.is_ascii_digit());
    if !valid || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(Error::usage(format!(
            "invalid --secret {name}=env:{var}: name an environment variable (letters, digits, '_'), e.g. --secret {name}=env:ANTHROPIC_API_KEY"
        )));
    }
    let value = crate::env::secret_value(var);
    if value.is_empty() {
        return Err(Error::usage(format!(
            "environment variable {var} (for --secret {name}) is not set or empty; export it before running forage-ctl, or pass --secret {name}=FILE"
        )));
    }
    if value.len() as u64 > MAX_SECRET_BYTES {
        return Err(Error::usage(format!(
            "environment variable {var} (for --secret {name}) is larger than {} KiB; a secret is a key or a token",
            MAX_SECRET_BYTES >> 10
        )));
    }
    Ok(SecretFile {
        name: name.to_owned(),
        path: PathBuf::new(),
        env: Some(var.to_owned()),
        value: Some(SecretValue(value)),
    })
}

/// A secret file larger than forage copies.
pub fn too_large(secret: &SecretFile) -> Error {
    Error::usage(format!(
        "secret file {} (for {}) is larger than {} KiB; a secret is a key or a token: pass a file holding only its value",
        secret.path.display(),
        secret.name,
        MAX_SECRET_BYTES >> 10
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_private_and_the_origin_is_read_only_through_no_symlink() {
        let t = tempfile::tempdir().unwrap();
        let t = t.path().canonicalize().unwrap();
        std::fs::write(t.join("key"), "s3cret").unwrap();
        let dir = t.join("secrets/box");
        std::fs::create_dir(t.join("secrets")).unwrap();
        copy_all(&[SecretFile::from_file("api", t.join("key"))], &dir, &[]).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::read(dir.join("api")).unwrap(), b"s3cret");
        assert_eq!(std::fs::metadata(dir.join("api")).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);

        // The key swapped for a symlink to something else after `up` checked it.
        std::fs::rename(t.join("key"), t.join("key-real")).unwrap();
        std::os::unix::fs::symlink(t.join("key-real"), t.join("key")).unwrap();
        let err = copy_all(&[SecretFile::from_file("api", t.join("key"))], &t.join("secrets/other"), &[]);
        assert!(err.unwrap_err().to_string().contains("is now a symlink"));
        // Too large, or a FIFO: refused, never blocking.
        std::fs::write(t.join("big"), vec![b'x'; MAX_SECRET_BYTES as usize + 1]).unwrap();
        let err = copy_all(&[SecretFile::from_file("big", t.join("big"))], &t.join("secrets/big"), &[]);
        assert!(err.unwrap_err().to_string().contains("larger than"));
        nix::unistd::mkfifo(&t.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let err = copy_all(&[SecretFile::from_file("f", t.join("fifo"))], &t.join("secrets/fifo"), &[]);
        assert!(err.unwrap_err().to_string().contains("not a regular file"));
    }
}
