//! The steps of `up`, each with its undo written next to it. A step is recorded in
//! the sandbox's record *before* its effect happens, so after a crash at any point
//! the record names everything that might exist. Every undo is idempotent: it
//! succeeds whether or not the effect happened.

use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::runtime::Runtime;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
pub enum Step {
    /// A container named `name` (created, maybe started).
    Container { name: String },
}

impl Step {
    pub async fn undo<R: Runtime>(&self, runtime: &R) -> Result<()> {
        match self {
            Step::Container { name } => runtime.remove(name).await,
        }
    }
}
