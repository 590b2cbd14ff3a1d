//! A job's repository: forage's own bare mirror of the source, one per
//! source URL under FORAGE_HOME/mirrors/<hash>, cloned once and fetched on
//! each use (git2). Agents never write it: a job's sandbox is a git-worktree
//! sandbox made from the mirror, so the agent gets its private repository
//! and the mirror only gains the job's branch, as a user's repository would.

use std::path::{Path, PathBuf};

use git2::{Direction, Repository};
use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use crate::store::Home;

/// What a fetch copies: the source's branches and tags, as they are there.
/// No pruning: a job's branch (forage-NAME) lives only in the mirror.
const REFSPECS: [&str; 2] = ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"];

/// The URL schemes forage fetches a job's repository over (libgit2's own
/// transports; TLS through the system's OpenSSL and its trusted roots, or
/// `SSL_CERT_FILE`). No ssh: this build has no ssh transport.
const NETWORK_SCHEMES: [&str; 3] = ["https://", "http://", "git://"];

/// The source as forage keys its mirror. A repository on this machine (a
/// path or a `file://` URL) becomes `file://` and its absolute, resolved
/// path, so that a path and its URL share one mirror; a network URL is kept
/// as given (less a trailing `/`). A URL may not carry credentials: the
/// source is written in the job's context, where no secret may go.
pub fn source_url(raw: &str) -> Result<String> {
    if let Some(scheme) = network_scheme(raw) {
        return network_url(raw, scheme);
    }
    let path = match raw.strip_prefix("file://") {
        Some(path) => PathBuf::from(path),
        None if raw.contains("://") || looks_like_scp(raw) => {
            return Err(Error::usage(format!(
                "repository {}: forage's jobs fetch https://, http:// and git:// URLs and repositories on this machine (a path or a file:// URL); this build has no ssh transport",
                redacted(raw)
            ))
            .hint("clone it yourself, then pass the clone's path"))
        }
        None => PathBuf::from(raw),
    };
    let resolved = path.canonicalize().map_err(|e| {
        Error::workspace(format!("repository {raw:?} cannot be read ({e}); pass the path of a git repository"))
    })?;
    Ok(format!("file://{}", resolved.display()))
}

/// Whether `raw` names a repository to fetch over the network.
pub fn is_network_url(raw: &str) -> bool {
    network_scheme(raw).is_some()
}

fn network_scheme(raw: &str) -> Option<&'static str> {
    NETWORK_SCHEMES.into_iter().find(|s| raw.get(..s.len()).is_some_and(|p| p.eq_ignore_ascii_case(s)))
}

/// A network URL checked: a host, no credentials, nothing that is not
/// printable ASCII (it is printed and stored as it is).
fn network_url(raw: &str, scheme: &str) -> Result<String> {
    let rest = &raw[scheme.len()..];
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return Err(Error::usage(format!(
            "repository {}: a URL with credentials in it would be written into the job's context; forage fetches public repositories over the network",
            redacted(raw)
        ))
        .hint("for a private repository, clone it yourself (with your credential helper) and pass the clone's path"));
    }
    if authority.is_empty() || !raw.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Error::usage(format!(
            "repository {raw:?} is not a URL forage can fetch: it needs a host, and only printable characters (percent-encode the others)"
        )));
    }
    let scheme = scheme.to_ascii_lowercase();
    Ok(format!("{scheme}{}", rest.trim_end_matches('/')))
}

/// `raw`, quoted, with any `user:password@` (or `token@`) replaced, for messages.
pub fn redacted(raw: &str) -> String {
    let Some((scheme, rest)) = raw.split_once("://") else { return format!("{raw:?}") };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rsplit_once('@') {
        // The whole user part: a token is often given as the user name alone.
        Some((_, host)) => format!("{:?}", format!("{scheme}://***@{host}{}", &rest[authority_end..])),
        None => format!("{raw:?}"),
    }
}

/// `host:path` or `user@host:path`, as ssh URLs are written without a scheme.
fn looks_like_scp(raw: &str) -> bool {
    match raw.split_once(':') {
        Some((host, _)) => !host.is_empty() && !host.contains('/'),
        None => false,
    }
}

/// Where the mirror of `url` lives.
pub fn dir(home: &Home, url: &str) -> PathBuf {
    let digest = Sha256::digest(url.as_bytes());
    let key: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    home.root().join("mirrors").join(key)
}

/// What `update` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Updated {
    Cloned,
    Fetched,
}

/// How long a network fetch waits for the server: to connect, and for each
/// read or write after that (libgit2's timeouts; a stalled server fails the
/// job instead of holding the mirror's lock for ever).
const CONNECT_TIMEOUT_MS: i32 = 30_000;
const SERVER_TIMEOUT_MS: i32 = 120_000;

/// Clones `url` into `dir` (first use) or fetches it there. The caller holds
/// the mirror's lock. A failed clone leaves no directory; a failed fetch
/// leaves the mirror as it was (git writes the fetched refs only once the
/// objects are in). A fetch stops, as failed, once `cancelled` says so.
pub fn update(dir: &Path, url: &str, cancelled: &(dyn Fn() -> bool + Sync)) -> Result<Updated> {
    let failed = |e: git2::Error| {
        let error =
            Error::workspace(format!("fetching {url} into forage's mirror {} failed: {}", dir.display(), e.message()));
        if e.class() == git2::ErrorClass::Ssl || e.code() == git2::ErrorCode::Certificate {
            return error.hint("if the server's certificate comes from a CA of your own, point SSL_CERT_FILE at a bundle that holds it");
        }
        error
    };
    set_timeouts();
    if dir.exists() {
        let repo = Repository::open_bare(dir).map_err(failed)?;
        fetch(&repo, url, cancelled).map_err(failed)?;
        return Ok(Updated::Fetched);
    }
    let parent = dir.parent().expect("a mirror lives in FORAGE_HOME/mirrors");
    std::fs::create_dir_all(parent).map_err(|e| Error::other(format!("creating {}: {e}", parent.display())))?;
    let tmp =
        parent.join(format!(".{}.{}.tmp", dir.file_name().and_then(|f| f.to_str()).unwrap_or("m"), std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    let made = Repository::init_bare(&tmp).and_then(|repo| fetch(&repo, url, cancelled));
    if let Err(e) = made {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(failed(e));
    }
    std::fs::rename(&tmp, dir).map_err(|e| Error::other(format!("moving the new mirror to {}: {e}", dir.display())))?;
    Ok(Updated::Cloned)
}

/// libgit2's timeouts, and its TLS roots when forage-ctl started it without
/// them (`env::start_libgit2_without_tls_roots`).
#[allow(unsafe_code)] // git2's setters of libgit2's global options are `unsafe fn`s.
fn set_timeouts() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: libgit2's global options, set once, before any fetch of ours
        // runs (`call_once` makes every other caller wait for it).
        unsafe {
            let _ = git2::opts::set_server_connect_timeout_in_milliseconds(CONNECT_TIMEOUT_MS);
            let _ = git2::opts::set_server_timeout_in_milliseconds(SERVER_TIMEOUT_MS);
            if let Some(roots) = crate::env::tls_roots_for_libgit2() {
                let _ = git2::opts::set_ssl_cert_file(roots);
            }
        }
    });
}

/// Fetches the source's branches and tags, and points HEAD where the
/// source's does (its default branch, the jobs' default base). Proxies as
/// git would find them for a repository with no config of its own (the
/// `https_proxy`, `http_proxy` and `no_proxy` variables).
fn fetch(repo: &Repository, url: &str, cancelled: &(dyn Fn() -> bool + Sync)) -> Result<(), git2::Error> {
    let mut remote = repo.remote_anonymous(url)?;
    let callbacks = || {
        let mut callbacks = git2::RemoteCallbacks::new();
        callbacks.transfer_progress(|_| !cancelled());
        callbacks
    };
    let proxy = || {
        let mut proxy = git2::ProxyOptions::new();
        proxy.auto();
        proxy
    };
    let head = {
        let connection = remote.connect_auth(Direction::Fetch, Some(callbacks()), Some(proxy()))?;
        connection.default_branch().ok().and_then(|b| b.as_str().ok().map(str::to_owned))
    };
    let mut options = git2::FetchOptions::new();
    options.remote_callbacks(callbacks()).proxy_options(proxy());
    remote.fetch(&REFSPECS, Some(&mut options), None)?;
    if let Some(head) = head.filter(|h| repo.find_reference(h).is_ok()) {
        repo.set_head(&head)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_urls_are_kept_as_given_less_a_trailing_slash_and_a_scheme_in_capitals() {
        assert_eq!(source_url("https://example.com/app.git/").unwrap(), "https://example.com/app.git");
        assert_eq!(source_url("HTTPS://example.com/app.git").unwrap(), "https://example.com/app.git");
        assert_eq!(source_url("git://127.0.0.1:9418/app.git").unwrap(), "git://127.0.0.1:9418/app.git");
        assert!(is_network_url("http://example.com/a") && !is_network_url("/srv/app.git"));
        assert!(!is_network_url("file:///srv/app.git") && !is_network_url("https:"));
    }

    #[test]
    fn credentials_control_characters_and_hostless_urls_are_refused_without_printing_a_secret() {
        for (raw, secret) in
            [("https://u:pw123@h/x", "pw123"), ("https://tok456@h/x", "tok456"), ("http://a:b@h", "b@")]
        {
            let e = source_url(raw).unwrap_err().to_string();
            assert!(e.contains("credentials") && e.contains("***@h"), "{e}");
            assert!(!e.contains(secret), "{e}");
        }
        // The '@' of a path is no credential.
        assert_eq!(source_url("https://h/x@y").unwrap(), "https://h/x@y");
        assert!(source_url("https:///x").unwrap_err().to_string().contains("needs a host"));
        assert!(source_url("https://h/a b").is_err() && source_url("https://h/a\u{1b}[2J").is_err());
        for raw in ["ssh://h/x", "git@h:x.git", "ftp://h/x"] {
            assert!(source_url(raw).unwrap_err().to_string().contains("no ssh transport"), "{raw}");
        }
    }
}
