//! Paths inside every sandbox's container: a leaf module that the runtime, the
//! templates and the workspaces all name, and that depends on nothing.

/// Where the workspace appears.
pub const WORKSPACE: &str = "/workspace";
/// The agent's home, writable by the agent.
pub const AGENT_HOME: &str = "/home/agent";
/// Where each secret file is mounted, read-only.
pub const SECRETS_DIR: &str = "/run/secrets";
/// What forage itself puts in the container (no template mounts there).
pub const FORAGE_RUN_DIR: &str = "/run/forage";
/// Where `up --task`'s text is mounted, read-only.
pub const TASK_FILE: &str = "/run/forage/task.md";
/// Written (by `init`, through exec) once the init commands have all succeeded.
pub const INIT_DONE_MARKER: &str = "/tmp/.forage-init-done";
/// Where a git sandbox's private git directory appears.
pub const PRIVATE_GIT: &str = "/forage/git";
