//! The next step, named: what `up` and `status` suggest the user runs next,
//! as hints on stderr for a person and as `hints` data in `--json`.

use crate::error::{Hint, Invocation};
use crate::names::SandboxName;
use crate::workspace::Mode;

fn run<const N: usize>(text: &str, args: [&str; N]) -> Hint {
    Hint { text: text.into(), command: Some(Invocation::new(args)) }
}

/// After `up`: how to reach the agent, review and land its work (git and jj
/// sandboxes: a direct workspace is the user's own directory), and remove it.
pub fn after_up(name: &SandboxName, mode: Mode) -> Vec<Hint> {
    let n = name.as_str();
    let mut hints = vec![run("{command} to reach the agent", ["attach", n])];
    if mode != Mode::Direct {
        hints.extend(review(name));
    }
    hints.push(run("{command} to remove it, keeping its work", ["down", n]));
    hints
}

/// The review commands for a sandbox whose agent has made something.
pub fn review(name: &SandboxName) -> Vec<Hint> {
    let n = name.as_str();
    vec![run("{command} shows the agent's work", ["diff", n]), run("{command} lands it in your checkout", ["merge", n])]
}

/// After `status`: the review commands once the agent made something, else
/// how to wait for it.
pub fn after_status(name: &SandboxName, mode: Mode, has_work: bool) -> Vec<Hint> {
    match (mode, has_work) {
        (Mode::Direct, _) => Vec::new(),
        (_, true) => review(name),
        (_, false) => vec![run("{command} waits until the agent exits or goes idle", ["wait", name.as_str()])],
    }
}
