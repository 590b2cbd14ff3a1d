//! The host places a sandbox may never write (or, for some, see at all), by
//! name: what each holds and why it matters. Kept apart from the rules that
//! apply them (`mod.rs`) so that the lists can be read, and extended, on their own.

use std::path::{Path, PathBuf};

/// The kernel's views of every process and device: a mount of one of these
/// reaches other sandboxes' files and secrets (`/proc/PID/root`, `environ`).
pub const KERNEL_TREES: &[&str] = &["/proc", "/sys", "/dev"];

/// Where container engines keep containers and images: whoever can write there
/// changes what other containers run.
pub const ENGINE_DATA: &[&str] = &["/var/lib/docker", "/var/lib/containerd", "/var/lib/containers"];

/// Directories whose sockets belong to other programs and other users: a tmux
/// server, an X display, an ssh or gpg agent, the session bus. Refused when a
/// path is one or holds one (a project under `/tmp` is fine).
pub const SHARED_SCRATCH: &[&str] = &["/tmp", "/var/tmp"];

/// The system's programs, configuration and services' state: never writable
/// from a sandbox (forage may run as root), though a read-only mount of
/// something inside one (CA certificates, say) is fine. `/var/spool` holds cron
/// tables and mail and print queues; `/opt`, `/nix` and `/snap` programs others
/// run.
pub const SYSTEM_DIRS: &[&str] = &[
    "/bin",
    "/boot",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/sbin",
    "/usr",
    "/opt",
    "/nix",
    "/snap",
    "/var/spool",
    "/var/lib",
    "/var/log",
    "/var/cache",
    "/var/mail",
];

/// What a home directory holds that no agent may write: credentials (read by
/// the user's tools, or handed to servers), and files and directories whose
/// contents the user's shell, desktop, editor or git runs or obeys on their own.
/// Relative to the home.
pub const PRIVATE_IN_HOME: &[(&str, &str)] = &[
    (".ssh", "ssh keys and authorized_keys"),
    (".gnupg", "gpg keys"),
    (".aws", "AWS credentials"),
    (".azure", "Azure credentials"),
    (".kube", "Kubernetes credentials"),
    (".docker", "the container engine's credentials and configuration"),
    (".config", "programs' configuration, the systemd user units and desktop autostart among it"),
    (".local/bin", "programs on the user's PATH"),
    (".local/share/keyrings", "the desktop's keyrings"),
    (".local/share/systemd", "systemd user timers"),
    ("bin", "programs on the user's PATH"),
    (".cargo", "programs on the user's PATH and the crates.io token"),
    (".password-store", "passwords"),
    (".pki", "certificates and keys"),
    (".mozilla", "browser profiles: saved passwords and sessions"),
    (".netrc", "passwords for remote hosts"),
    (".git-credentials", "git's stored passwords"),
    (".gitconfig", "git's configuration, which names programs git runs"),
    (".pgpass", "database passwords"),
    (".npmrc", "the npm registry token"),
    (".pypirc", "the PyPI token"),
    (".Xauthority", "the X display's key"),
    (".ICEauthority", "the desktop session's key"),
    (".forward", "mail forwarding, which can run a program"),
    (".rhosts", "remote login trust"),
    (".shosts", "remote login trust"),
    (".k5login", "Kerberos login trust"),
    (".bashrc", "a shell startup file"),
    (".bash_profile", "a shell startup file"),
    (".bash_login", "a shell startup file"),
    (".bash_logout", "a shell startup file"),
    (".profile", "a shell startup file"),
    (".zshrc", "a shell startup file"),
    (".zshenv", "a shell startup file"),
    (".zprofile", "a shell startup file"),
    (".zlogin", "a shell startup file"),
    (".zlogout", "a shell startup file"),
    (".cshrc", "a shell startup file"),
    (".tcshrc", "a shell startup file"),
    (".login", "a shell startup file"),
    (".inputrc", "the shell's key bindings"),
    (".xinitrc", "the X session's startup file"),
    (".xprofile", "the X session's startup file"),
    (".xsession", "the X session's startup file"),
    (".xsessionrc", "the X session's startup file"),
    (".pam_environment", "the login environment"),
    (".vimrc", "vim's startup file"),
    (".emacs", "emacs's startup file"),
    (".emacs.d", "emacs's startup files"),
    (".tmux.conf", "tmux's startup file"),
];

/// The home directories of root and of the people (uid 1000 and up) that
/// `/etc/passwd` names, and that exist, but `/` (which the rules refuse anyway).
/// System accounts' homes are system directories, covered by other rules, and
/// looking at each could wake an automounter. Users from other databases
/// (LDAP) are not listed: their homes are still covered where they are the
/// invoking user's.
pub fn homes_from_passwd() -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let person = |uid: u32| uid == 0 || (1000..65534).contains(&uid);
    let mut homes: Vec<PathBuf> = text
        .lines()
        .map(|line| line.split(':').collect::<Vec<&str>>())
        .filter(|fields| fields.get(2).and_then(|uid| uid.parse().ok()).is_some_and(person))
        .filter_map(|fields| fields.get(5).map(PathBuf::from))
        .filter(|home| home.is_absolute() && home.as_path() != Path::new("/") && home.is_dir())
        .filter_map(|home| home.canonicalize().ok())
        .collect();
    homes.sort();
    homes.dedup();
    homes
}
