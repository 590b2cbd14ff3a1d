//! How the library reports long steps without printing: the CLI passes a
//! `Progress` and decides how (or whether) to draw it.

pub trait Progress: Send + Sync {
    /// A new step has started ("building image …", "starting container …").
    fn step(&self, message: &str);
    /// The current step has finished; the renderer may clear its line.
    fn finish(&self) {}
    /// Something the user should read even without a terminal (a wait on
    /// another command, say); not with `--quiet`.
    fn note(&self, _message: &str) {}
    /// Something the user must read even with `--quiet`: work about to be
    /// thrown away, say.
    fn warn(&self, _message: &str) {}
    /// The terminal is about to belong to someone else (a container session):
    /// the renderer clears what it drew and draws nothing more.
    fn hand_over(&self) {}
}

/// For scripts, tests and `--quiet`.
pub struct Silent;

impl Progress for Silent {
    fn step(&self, _message: &str) {}
}
