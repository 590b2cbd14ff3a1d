//! The proxy's decisions, one JSON line each, in FORAGE_HOME/egress/log (the
//! one directory the proxy may write): appended by the proxy's log thread
//! (`Writer`), kept to two files of `ROTATE_AT` bytes, summed up per
//! destination by `logs --network`.

use std::collections::BTreeMap;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

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
    let mut line = serde_json::to_vec(d)?;
    line.push(b'\n');
    append_lines(dir, &line)
}

/// Appends whole `lines` to the log in `dir` in one write, rotating first
/// when the file is full (so a file ends at most one batch past `ROTATE_AT`).
fn append_lines(dir: &Path, lines: &[u8]) -> std::io::Result<()> {
    let path = dir.join(FILE);
    if std::fs::metadata(&path).is_ok_and(|m| m.len() >= ROTATE_AT) {
        std::fs::rename(&path, dir.join(OLD_FILE))?;
    }
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(&path)?;
    f.write_all(lines)
}

/// Decisions waiting for the log thread at most: a connection that would
/// queue one more waits for room (the log stays bounded, and loses nothing).
const QUEUE: usize = 4096;
/// Decisions written at most in one write.
const BATCH: usize = 256;

enum Message {
    /// A decision, and who waits until it is written.
    Line(Decision, Option<oneshot::Sender<()>>),
    /// Write what is queued, then end.
    Stop,
}

/// The proxy's log: a thread of its own appends the decisions, so that a
/// connection does not wait for the file (open, write, close) before its
/// bytes flow; what queues up meanwhile goes in one write.
pub struct Writer {
    queue: mpsc::Sender<Message>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Writer {
    /// Starts the log thread, appending to the log in `dir`.
    pub fn start(dir: PathBuf) -> std::io::Result<Writer> {
        let (queue, lines) = mpsc::channel(QUEUE);
        let thread =
            std::thread::Builder::new().name("egress-log".into()).spawn(move || write_until_stopped(&dir, lines))?;
        Ok(Writer { queue, thread: Mutex::new(Some(thread)) })
    }

    /// Queues `d`; it is written soon after.
    pub async fn record(&self, d: Decision) {
        let _ = self.queue.send(Message::Line(d, None)).await;
    }

    /// Queues `d` and waits until it is written: for a refusal, so that the
    /// client that reads it can find it in the log at once.
    pub async fn record_now(&self, d: Decision) {
        let (done, written) = oneshot::channel();
        if self.queue.send(Message::Line(d, Some(done))).await.is_ok() {
            let _ = written.await;
        }
    }

    /// Writes what is queued and ends the thread (the proxy's normal exit).
    pub async fn finish(&self) {
        let _ = self.queue.send(Message::Stop).await;
        let thread = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(thread) = thread {
            let _ = thread.join();
        }
    }
}

/// The log thread: each batch of queued decisions in one write, until `Stop`
/// (or every sender is gone), then what was still queued.
fn write_until_stopped(dir: &Path, mut queue: mpsc::Receiver<Message>) {
    while let Some(first) = queue.blocking_recv() {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match queue.try_recv() {
                Ok(m) => batch.push(m),
                Err(_) => break,
            }
        }
        let (mut lines, mut waiting) = (Vec::new(), Vec::new());
        for m in batch {
            match m {
                Message::Line(d, done) => {
                    if serde_json::to_writer(&mut lines, &d).is_ok() {
                        lines.push(b'\n');
                    }
                    waiting.extend(done);
                }
                // Nothing more is accepted; what is queued is still written.
                Message::Stop => queue.close(),
            }
        }
        if !lines.is_empty() {
            if let Err(e) = append_lines(dir, &lines) {
                tracing::error!("logging decisions: {e}");
            }
        }
        for done in waiting {
            let _ = done.send(());
        }
    }
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

    fn decision(i: u64) -> Decision {
        Decision { time: i, sandbox: "a".into(), host: format!("h{i}.test"), port: 443, allowed: true, reason: None }
    }

    #[test]
    fn the_log_thread_writes_every_decision_by_the_time_it_finishes() {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let w = Writer::start(dir.path().to_owned()).unwrap();
            // More than the queue holds: the senders wait, nothing is dropped.
            for i in 0..(QUEUE + BATCH) as u64 + 7 {
                w.record(decision(i)).await;
            }
            w.finish().await;
            w.record(decision(0)).await; // after the end: dropped, not a hang
        });
        let s = summary(dir.path(), "a", 0).unwrap();
        assert_eq!(s.len(), QUEUE + BATCH + 7);
        assert!(s.iter().all(|d| d.count == 1));
    }

    #[test]
    fn a_decision_recorded_now_is_in_the_file_when_the_call_returns() {
        let dir = tempfile::tempdir().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let w = Writer::start(dir.path().to_owned()).unwrap();
            w.record(decision(1)).await;
            w.record_now(decision(2)).await;
            assert_eq!(summary(dir.path(), "a", 0).unwrap().len(), 2);
            w.finish().await;
        });
    }
}
