//! Every environment variable forage reads, read in this one place (as uv's
//! `EnvVars`), into `Settings`: the CLI reads them once per process, and a server
//! can build `Settings` per request. Nothing else in the crate reads the
//! environment (clippy's `disallowed-methods` keeps it so), and only
//! `start_libgit2_without_tls_roots` changes it, at the start of `main`.
//!
//! | variable | what it sets |
//! |---|---|
//! | `FORAGE_HOME` | where forage keeps its state (default `$XDG_DATA_HOME/forage`) |
//! | `XDG_DATA_HOME`, `HOME` | the default FORAGE_HOME (`~/.local/share/forage`) |
//! | `FORAGE_TEMPLATES_PATH` | template directories searched first (colon-separated) |
//! | `XDG_CONFIG_HOME` | the user's templates, in `$XDG_CONFIG_HOME/forage/templates` |
//! | `HOME` | `~` in template mounts and `--secret` files; the user's home, which a workspace may not expose without `--allow-home` |
//! | `DOCKER_HOST`, `CONTAINER_HOST`, `XDG_RUNTIME_DIR` | the engine to use, and the sockets no sandbox may see |
//! | `FORAGE_ENGINE` | `docker` or `podman`: which engine's sockets to try when DOCKER_HOST is unset (as `--engine`) |
//! | `PATH` | where the offline image's host tools are found |
//! | `NO_COLOR` | no colour on the terminal |
//! | `FORAGE_PAGER`, `PAGER` | the pager `diff` and `log` use on a terminal (default `less`, with `LESS=FRX` unless `LESS` is set; `cat` or empty: none) |
//! | `FORAGE_COW_THRESHOLD` | the number of files from which a git sandbox's checkout is copy-on-write by default (20000) |
//! | `FORAGE_DEBUG_KILL_AFTER`, `FORAGE_DEBUG_PAUSE_AFTER` | fault-injection hooks for the crash tests |
//! | `SSL_CERT_FILE` | the roots the egress proxy and a job's https fetch trust (default the system's bundle); forage-ctl hides it from libgit2's start only (`start_libgit2_without_tls_roots`) and puts it back |
//! | `RUST_LOG` | tracing filters (read by tracing-subscriber) |

#![allow(clippy::disallowed_methods)]

/// The system's bundle of roots on the host (Debian's), when `SSL_CERT_FILE` names none.
const HOST_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

use std::ffi::OsString;
use std::path::PathBuf;

pub const FORAGE_HOME: &str = "FORAGE_HOME";
pub const FORAGE_TEMPLATES_PATH: &str = "FORAGE_TEMPLATES_PATH";
pub const FORAGE_ENGINE: &str = "FORAGE_ENGINE";
pub const FORAGE_COW_THRESHOLD: &str = "FORAGE_COW_THRESHOLD";
pub const FORAGE_DEBUG_KILL_AFTER: &str = "FORAGE_DEBUG_KILL_AFTER";
pub const FORAGE_DEBUG_PAUSE_AFTER: &str = "FORAGE_DEBUG_PAUSE_AFTER";

/// What the environment says, for one command (or one request of a server).
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub forage_home: Option<PathBuf>,
    pub xdg_data_home: Option<PathBuf>,
    pub xdg_config_home: Option<PathBuf>,
    /// The user's home directory.
    pub home: Option<PathBuf>,
    /// `FORAGE_TEMPLATES_PATH`, split.
    pub templates_path: Vec<PathBuf>,
    pub docker_host: Option<String>,
    /// `FORAGE_ENGINE` as given (checked when an engine is needed), or
    /// `--engine`'s value, which replaces it.
    pub engine: Option<String>,
    pub container_host: Option<String>,
    pub xdg_runtime_dir: Option<PathBuf>,
    /// The absolute directories of `PATH` (a relative one would make the
    /// offline image depend on the current directory).
    pub path: Vec<PathBuf>,
    pub debug_kill_after: Option<String>,
    pub debug_pause_after: Option<String>,
    /// `FORAGE_COW_THRESHOLD` as given (checked when `up` needs it).
    pub cow_threshold: Option<String>,
    /// `FORAGE_PAGER`, else `PAGER` (a shell command).
    pub pager: Option<String>,
    /// `LESS` is set: the user's own options for less, kept.
    pub less_set: bool,
    /// `SSL_CERT_FILE`: the roots the user's TLS trusts, when not the system's.
    pub ssl_cert_file: Option<PathBuf>,
}

/// A variable's value, unless unset or empty (which programs take for unset).
fn var_os(name: &str) -> Option<OsString> {
    std::env::var_os(name).filter(|v| !v.is_empty())
}

fn var(name: &str) -> Option<String> {
    var_os(name).and_then(|v| v.into_string().ok())
}

impl Settings {
    /// This process's environment.
    pub fn from_process() -> Settings {
        let split = |name: &str| -> Vec<PathBuf> {
            var_os(name)
                .map(|v| std::env::split_paths(&v).filter(|d| !d.as_os_str().is_empty()).collect())
                .unwrap_or_default()
        };
        Settings {
            forage_home: var_os(FORAGE_HOME).map(PathBuf::from),
            xdg_data_home: var_os("XDG_DATA_HOME").map(PathBuf::from),
            xdg_config_home: var_os("XDG_CONFIG_HOME").map(PathBuf::from),
            home: var_os("HOME").map(PathBuf::from),
            templates_path: split(FORAGE_TEMPLATES_PATH),
            docker_host: var("DOCKER_HOST"),
            engine: var(FORAGE_ENGINE),
            container_host: var("CONTAINER_HOST"),
            xdg_runtime_dir: var_os("XDG_RUNTIME_DIR").map(PathBuf::from),
            path: split("PATH").into_iter().filter(|d| d.is_absolute()).collect(),
            debug_kill_after: var(FORAGE_DEBUG_KILL_AFTER),
            debug_pause_after: var(FORAGE_DEBUG_PAUSE_AFTER),
            cow_threshold: var(FORAGE_COW_THRESHOLD),
            pager: var("FORAGE_PAGER").or_else(|| var("PAGER")),
            less_set: var_os("LESS").is_some(),
            ssl_cert_file: var_os("SSL_CERT_FILE").map(PathBuf::from),
        }
    }

    /// The roots the host trusts: `SSL_CERT_FILE` (as OpenSSL reads it), else
    /// the system's bundle. The egress proxy checks injected hosts against them.
    pub fn trusted_roots(&self) -> PathBuf {
        self.ssl_cert_file.clone().unwrap_or_else(|| PathBuf::from(HOST_ROOTS))
    }

    /// `~/rest` with `~` the user's home; other paths as they are.
    pub fn expand_tilde(&self, path: &str) -> Option<PathBuf> {
        match path.strip_prefix("~/") {
            Some(rest) => self.home.as_ref().map(|h| h.join(rest)),
            None => Some(PathBuf::from(path)),
        }
    }
}

/// `NO_COLOR`, which the terminal renderer alone asks about.
pub fn no_color() -> Option<OsString> {
    var_os("NO_COLOR")
}

/// The value of `--secret NAME=env:VAR`'s variable (empty when unset), which
/// `up` copies once and never keeps elsewhere.
pub fn secret_value(var: &str) -> Vec<u8> {
    use std::os::unix::ffi::OsStringExt;
    var_os(var).map(OsString::into_vec).unwrap_or_default()
}

/// The roots libgit2's TLS is given when a job first fetches over https
/// (`tls_roots_for_libgit2`), kept by `start_libgit2_without_tls_roots`.
static LIBGIT2_TLS_ROOTS: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// Starts libgit2 with OpenSSL's default file of roots pointed at /dev/null,
/// then puts `SSL_CERT_FILE` back as it was. libgit2 makes its TLS context when
/// it starts, and OpenSSL 3 then parses the whole system CA bundle: about 20 ms
/// of every forage command that touches git (measured on `down`: 42 ms against
/// 22), though only a job's fetch over https needs them. That fetch hands
/// libgit2 the roots itself (`tls_roots_for_libgit2`: `SSL_CERT_FILE`, else the
/// system's bundle); OpenSSL's directory of roots stays, read only on demand.
/// Called first thing in `main`, while the process has one thread: the
/// environment is changed only then.
pub fn start_libgit2_without_tls_roots() {
    let user = var_os("SSL_CERT_FILE");
    let roots = user.clone().map_or_else(|| PathBuf::from(HOST_ROOTS), PathBuf::from);
    let _ = LIBGIT2_TLS_ROOTS.set(roots);
    std::env::set_var("SSL_CERT_FILE", "/dev/null");
    // Any git2 call starts libgit2; this one touches nothing on disk.
    let _ = git2::Config::new();
    match user {
        Some(value) => std::env::set_var("SSL_CERT_FILE", value),
        None => std::env::remove_var("SSL_CERT_FILE"),
    }
}

/// The roots for libgit2's TLS, when `start_libgit2_without_tls_roots` left
/// its context without them (in forage-ctl, not in tests of the library).
pub fn tls_roots_for_libgit2() -> Option<&'static PathBuf> {
    LIBGIT2_TLS_ROOTS.get()
}
