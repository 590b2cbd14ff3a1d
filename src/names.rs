//! `SandboxName`, validated once at the edge, and every name derived from it:
//! the container, the branch, the labels, the paths under FORAGE_HOME.

use std::fmt;
use std::str::FromStr;

/// The label every forage container carries; its value is the sandbox name.
pub const LABEL_SANDBOX: &str = "forage.sandbox";
/// The FORAGE_HOME that owns the container, so two homes never see each other's sandboxes.
pub const LABEL_HOME: &str = "forage.home";
pub const LABEL_MODE: &str = "forage.mode";
pub const LABEL_TEMPLATE: &str = "forage.template";
pub const LABEL_WORKSPACE: &str = "forage.workspace";

pub const NAME_RULE: &str =
    "1-63 characters: lowercase letters, digits, '_', '.', '-', starting with a letter or digit";

#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct SandboxName(String);

/// As the name itself, quoted: `{name:?}` reads `"agent-a"` in a message.
impl fmt::Debug for SandboxName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl SandboxName {
    pub fn parse(raw: &str) -> Result<Self, String> {
        let bytes = raw.as_bytes();
        let first_ok = bytes.first().is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
        let rest_ok =
            bytes.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'_' | b'.' | b'-'));
        if raw.is_empty() || raw.len() > 63 || !first_ok || !rest_ok {
            return Err(format!("invalid sandbox name {raw:?}: use {NAME_RULE}"));
        }
        Ok(SandboxName(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The Docker container name: `forage-<name>`.
    pub fn container(&self) -> String {
        format!("forage-{}", self.0)
    }

    /// The default git branch (and jj workspace) name: `forage-<name>`.
    pub fn branch(&self) -> String {
        format!("forage-{}", self.0)
    }

    /// The branch `checkout` makes for the user to switch to: `review/<name>`
    /// (not `forage-…`, which a sandbox named `<name>-review` could own).
    pub fn review_branch(&self) -> String {
        format!("review/{}", self.0)
    }

    /// A jj sandbox's bookmark: `forage/<name>`.
    pub fn bookmark(&self) -> String {
        format!("forage/{}", self.0)
    }
}

impl FromStr for SandboxName {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        SandboxName::parse(s)
    }
}

impl fmt::Display for SandboxName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for SandboxName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        SandboxName::parse(&raw).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_alphabet() {
        for ok in ["a", "agent-a", "0", "a.b_c-d", &"x".repeat(63)] {
            assert!(SandboxName::parse(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn rejects_everything_else() {
        for bad in ["", "A", "-a", ".a", "_a", "../x", "a b", "é", "a/b", &"x".repeat(64)] {
            let err = SandboxName::parse(bad).unwrap_err();
            assert!(err.contains(NAME_RULE), "{err}");
        }
    }

    #[test]
    fn derives_container_and_branch() {
        let n = SandboxName::parse("agent-a").unwrap();
        assert_eq!(n.container(), "forage-agent-a");
        assert_eq!(n.branch(), "forage-agent-a");
    }
}
