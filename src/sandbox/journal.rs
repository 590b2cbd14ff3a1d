//! The steps of `up`, each with its undo written next to it. A step is recorded in
//! the sandbox's record *before* its effect happens, so after a crash at any point
//! the record names everything that might exist. Every undo is idempotent: it
//! succeeds whether or not the effect happened.

use crate::error::Result;
use crate::runtime::Runtime;
use crate::store::Record;
use crate::workspace::Scope;

pub use crate::record::Step;

impl Step {
    /// Undoes the step, whether or not its effect happened; the workspace's on
    /// the blocking pool (git2, jj, deletes).
    pub async fn undo<R: Runtime>(&self, record: &Record, runtime: &R, scope: &Scope) -> Result<()> {
        match self.part() {
            None => match self {
                Step::Container { name } => runtime.remove(name).await,
                // The engine's `remove_egress` also drops it from the proxy's map first.
                Step::Network { name } => runtime.remove_network(name).await,
                Step::Forwarder { name } => runtime.remove_forwarder(name, name).await,
                Step::Secrets => {
                    let (dir, owner) = (scope.secrets_dir.join(record.name.as_str()), scope.secrets_dir.clone());
                    super::blocking(move || {
                        crate::workspace::untrusted::remove_created_dir(&dir, &owner)
                            .map_err(crate::error::Error::other)
                    })
                    .await
                }
                Step::AgentState => {
                    let file = scope.agent_state_dir.join("sandboxes").join(format!("{}.json", record.name.as_str()));
                    match std::fs::remove_file(&file) {
                        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                            Err(crate::error::Error::other(format!("removing {}: {e}", file.display())))
                        }
                        _ => Ok(()),
                    }
                }
                Step::LoginDir => {
                    let (dir, owner) = (scope.workspaces_dir.join(record.name.as_str()), scope.workspaces_dir.clone());
                    super::blocking(move || {
                        crate::workspace::untrusted::remove_created_dir(&dir, &owner)
                            .map_err(crate::error::Error::other)
                    })
                    .await
                }
                _ => Ok(()),
            },
            Some(part) => {
                let (record, scope) = (record.clone(), scope.clone());
                super::blocking(move || record.workspace.get().unmake(part, &scope)).await
            }
        }
    }
}
