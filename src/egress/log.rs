//! The proxy's decisions, one JSON line each, in FORAGE_HOME/egress/log (the
//! one directory the proxy may write): appended by the proxy, kept to two
//! files of `ROTATE_AT` bytes, summed up per destination by `logs --network`.

use std::collections::BTreeMap;
use std::io::{Read, Seek, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

pub const FILE: &str = "decisions.jsonl";
pub const OLD_FILE: &str = "decisions.jsonl.1";
/// The current file is renamed to `OLD_FILE` when it reaches this size: an
/// agent that floods the proxy cannot fill the disk.
pub const ROTATE_AT: u64 = 4 << 20;

/// One decision of the proxy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// Seconds since the Unix epoch.
    pub time: u64,
    pub sandbox: String,
    pub host: String,
    pub port: u16,
    pub allowed: bool,
    /// Why a request was denied (or failed after it was allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Appends `d` to the log in `dir`, rotating first when the file is full.
pub fn append(dir: &Path, d: &Decision) -> std::io::Result<()> {
    let path = dir.join(FILE);
    if std::fs::metadata(&path).is_ok_and(|m| m.len() >= ROTATE_AT) {
        std::fs::rename(&path, dir.join(OLD_FILE))?;
    }
    let mut line = serde_json::to_vec(d)?;
    line.push(b'\n');
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
    f.write_all(&line)
}

/// What `logs --network` shows of one destination.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Destination {
    pub host: String,
    pub port: u16,
    pub allowed: bool,
    pub count: u64,
    pub first: u64,
    pub last: u64,
    /// The last reason it was denied (or failed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The destinations `sandbox` tried since `since`, from the log in `dir`: the
/// older file first, each read to at most `ROTATE_AT` plus a margin (the proxy
/// may have written past it) and every unreadable line skipped.
pub fn summary(dir: &Path, sandbox: &str, since: u64) -> std::io::Result<Vec<Destination>> {
    let mut by_key: BTreeMap<(String, u16, bool), Destination> = BTreeMap::new();
    for file in [OLD_FILE, FILE] {
        let mut f = match std::fs::File::open(dir.join(file)) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let limit = 2 * ROTATE_AT;
        let len = f.metadata()?.len();
        if len > limit {
            f.seek(std::io::SeekFrom::Start(len - limit))?;
        }
        let mut bytes = Vec::new();
        f.take(limit).read_to_end(&mut bytes)?;
        for line in bytes.split(|b| *b == b'\n') {
            let Ok(d) = serde_json::from_slice::<Decision>(line) else { continue };
            if d.sandbox != sandbox || d.time < since {
                continue;
            }
            let entry = by_key.entry((d.host.clone(), d.port, d.allowed)).or_insert_with(|| Destination {
                host: d.host.clone(),
                port: d.port,
                allowed: d.allowed,
                count: 0,
                first: d.time,
                last: d.time,
                reason: None,
            });
            entry.count += 1;
            entry.first = entry.first.min(d.time);
            entry.last = entry.last.max(d.time);
            if d.reason.is_some() {
                entry.reason = d.reason;
            }
        }
    }
    Ok(by_key.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_are_summed_per_destination_for_one_sandbox() {
        let dir = tempfile::tempdir().unwrap();
        let d = |time, sandbox: &str, host: &str, allowed| Decision {
            time,
            sandbox: sandbox.into(),
            host: host.into(),
            port: 443,
            allowed,
            reason: (!allowed).then(|| "not in the allowlist".into()),
        };
        for x in [
            d(5, "a", "x.test", true),
            d(9, "a", "x.test", true),
            d(7, "a", "y.test", false),
            d(8, "b", "x.test", true),
            d(1, "a", "old.test", true),
        ] {
            append(dir.path(), &x).unwrap();
        }
        std::fs::OpenOptions::new().append(true).open(dir.path().join(FILE)).unwrap().write_all(b"garbage\n").unwrap();
        let s = summary(dir.path(), "a", 2).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].host.as_str(), s[0].count, s[0].first, s[0].last), ("x.test", 2, 5, 9));
        assert_eq!(
            (s[1].host.as_str(), s[1].allowed, s[1].reason.as_deref()),
            ("y.test", false, Some("not in the allowlist"))
        );
    }
}
