//! Dynamic shell completion: the script `completions SHELL` prints calls
//! `forage-ctl` back (with `COMPLETE=SHELL`, see `main`), which answers with
//! the sandbox and template names of this moment. The names come from
//! forage's own records and template directories, never from the engine: a
//! Tab must be quick and must work with Docker down.

use clap_complete::engine::{ArgValueCandidates, CompletionCandidate};

use crate::env::Settings;
use crate::store::Home;
use crate::template::Templates;

/// The environment variable that turns a run of `forage-ctl` into a
/// completion request (clap_complete's `CompleteEnv` default).
pub const VAR: &str = "COMPLETE";

/// Completes a sandbox that has a record.
pub fn sandboxes() -> ArgValueCandidates {
    ArgValueCandidates::new(|| candidates(home().map(|h| h.sandbox_names()).unwrap_or_default()))
}

/// Completes a sandbox with archived work (`restore`, `archives`).
pub fn archived() -> ArgValueCandidates {
    ArgValueCandidates::new(|| candidates(home().map(|h| h.archived_names()).unwrap_or_default()))
}

/// Completes a template name.
pub fn templates() -> ArgValueCandidates {
    ArgValueCandidates::new(|| candidates(Templates::new(&Settings::from_process()).names()))
}

fn home() -> Option<Home> {
    Home::from_settings(&Settings::from_process()).ok()
}

fn candidates<T: ToString>(names: Vec<T>) -> Vec<CompletionCandidate> {
    names.iter().map(|n| CompletionCandidate::new(n.to_string())).collect()
}
