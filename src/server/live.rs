//! `POST /v1/exec/stream` and `POST /v1/wait/stream`: `exec` and `wait` as
//! server-sent events, for a client that wants output and signs of life as
//! they come rather than one answer at the end (`/v1/exec` and `/v1/wait`).
//!
//! Everything that refuses the request (bad arguments, no such sandbox, one
//! not running) is refused before the stream, with the status and error body
//! of the answering endpoints; once the stream has begun (200), a failure is
//! its last event, `error`, whose data is forage's error.
//!
//! The work runs in a task of its own that sends its events through a short
//! queue: a client that reads slowly slows the command's output down (as a
//! terminal would) instead of growing the server's memory. A client that goes
//! away drops the stream, which cancels the task: `wait` stops, and `exec`
//! stops reading the command, which, as with `/v1/exec`, may go on running in
//! the sandbox. The task holds the server's in-flight lock, so a stopping
//! server cancels it and waits for it.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use hyper::body::Frame;
use hyper::Response;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::stream::{event, sse};
use super::{Body, CancelOnDrop, InFlight};
use crate::error::{Error, Result};
use crate::runtime::docker::Docker;
use crate::runtime::{Output, Session};
use crate::sandbox::{Cancel, Engine};
use crate::service::{self, error_json, exec, ExecRequest, WaitRequest, WAIT_PROGRESS_EVERY};

/// How many events wait for the client before the work waits for it.
const QUEUED_EVENTS: usize = 16;

type Event = std::result::Result<Frame<Bytes>, std::convert::Infallible>;

/// The work's side of a stream: events into the queue, until the request is
/// cancelled (the client went away, or the server is stopping).
struct Events {
    tx: mpsc::Sender<Event>,
    cancel: Cancel,
}

impl Events {
    /// Queues an event: false once the client is gone, when the work should stop.
    async fn send(&self, name: &str, data: &Value) -> bool {
        let frame = event(name, data);
        if self.cancel.is_triggered() {
            // The last word of cancelled work, if there is room for it.
            return self.tx.try_send(frame).is_ok();
        }
        tokio::select! {
            sent = self.tx.send(frame) => sent.is_ok(),
            () = self.cancel.triggered() => false,
        }
    }
}

/// The response: the queue's events, as they come. The stream holds the
/// request's `CancelOnDrop`, so dropping it (the client went away) cancels the work.
fn respond(rx: mpsc::Receiver<Event>, cancel_if_dropped: CancelOnDrop) -> Response<Body> {
    let events = futures_util::stream::unfold((rx, cancel_if_dropped), |(mut rx, held)| async move {
        rx.recv().await.map(|frame| (frame, (rx, held)))
    });
    sse(events)
}

/// `POST /v1/exec/stream`: `stdout` and `stderr` events (data: the chunk, a
/// JSON string) as the command writes them, then `exit` (data: `exit_code`,
/// `timed_out`, and how many bytes each stream had) or `error`.
pub async fn exec(
    engine: Engine<Docker>,
    request: ExecRequest,
    (cancel_if_dropped, in_flight): (CancelOnDrop, InFlight),
) -> Result<Response<Body>> {
    let (session, timeout) = exec::start(&engine, request).await?;
    let (tx, rx) = mpsc::channel(QUEUED_EVENTS);
    let events = Events { tx, cancel: engine.cancel.clone() };
    tokio::spawn(async move {
        let _in_flight = in_flight;
        if let Some((name, data)) = forward_output(&engine, session, timeout, &events).await {
            events.send(name, &data).await;
        }
    });
    Ok(respond(rx, cancel_if_dropped))
}

/// Sends the command's output as it comes; returns the last event to send,
/// or None once the client is gone.
async fn forward_output(
    engine: &Engine<Docker>,
    session: Session,
    timeout: Duration,
    events: &Events,
) -> Option<(&'static str, Value)> {
    let mut output = session.output;
    let (mut stdout, mut stderr) = (Text::default(), Text::default());
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    loop {
        let (name, text) = tokio::select! {
            chunk = output.next() => match chunk {
                Some(Ok(Output::Stdout(bytes))) => ("stdout", stdout.decode(&bytes)),
                Some(Ok(Output::Stderr(bytes))) => ("stderr", stderr.decode(&bytes)),
                Some(Err(e)) => return Some(("error", error_json(&e))),
                None => break,
            },
            () = &mut deadline => {
                let timed_out = json!({"exit_code": null, "timed_out": true, "stdout_bytes": stdout.bytes, "stderr_bytes": stderr.bytes});
                return Some(("exit", timed_out));
            }
            () = engine.cancel.triggered() => {
                let e = Error::other("interrupted: the request was cancelled");
                return Some(("error", error_json(&e)));
            }
        };
        if !text.is_empty() && !events.send(name, &json!(text)).await {
            return None;
        }
    }
    for (name, rest) in [("stdout", stdout.rest()), ("stderr", stderr.rest())] {
        if !rest.is_empty() && !events.send(name, &json!(rest)).await {
            return None;
        }
    }
    Some(match engine.exit_code(&session.id).await {
        Ok(code) => (
            "exit",
            json!({"exit_code": code, "timed_out": false, "stdout_bytes": stdout.bytes, "stderr_bytes": stderr.bytes}),
        ),
        Err(e) => ("error", error_json(&e)),
    })
}

/// One stream's bytes as text, chunk by chunk: a character split between
/// two chunks is held back until its end comes, so that it is not replaced
/// as invalid; bytes that are invalid are replaced. Holds at most 3 bytes.
#[derive(Default)]
struct Text {
    held: Vec<u8>,
    bytes: usize,
}

impl Text {
    fn decode(&mut self, chunk: &[u8]) -> String {
        self.bytes += chunk.len();
        self.held.extend_from_slice(chunk);
        let keep = incomplete_tail(&self.held);
        let tail = self.held.split_off(self.held.len() - keep);
        let text = String::from_utf8_lossy(&self.held).into_owned();
        self.held = tail;
        text
    }

    /// What was held back when the stream ended (an incomplete character).
    fn rest(&mut self) -> String {
        String::from_utf8_lossy(&std::mem::take(&mut self.held)).into_owned()
    }
}

/// How many bytes at the end of `bytes` begin a character whose end is missing.
fn incomplete_tail(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(3) {
        let byte = bytes[bytes.len() - back];
        if byte & 0xC0 == 0x80 {
            continue; // a continuation byte: look for its lead
        }
        let needs = match byte {
            0xF0.. => 4,
            0xE0.. => 3,
            0xC0.. => 2,
            _ => 1,
        };
        return if needs > back { back } else { 0 };
    }
    0
}

/// `POST /v1/wait/stream`: a `progress` event every 10 s (data: `waited_secs`
/// and the message MCP's progress carries), then `result` (data: what
/// `/v1/wait` answers) or `error`.
pub fn wait(
    engine: Engine<Docker>,
    request: WaitRequest,
    (cancel_if_dropped, in_flight): (CancelOnDrop, InFlight),
) -> Result<Response<Body>> {
    let names = service::wait_names(&request)?;
    for name in &names {
        engine.record(name)?;
    }
    let (tx, rx) = mpsc::channel(QUEUED_EVENTS);
    let events = Events { tx, cancel: engine.cancel.clone() };
    tokio::spawn(async move {
        let _in_flight = in_flight;
        let began = Instant::now();
        let work = service::wait(&engine, request);
        tokio::pin!(work);
        let first = tokio::time::Instant::now() + WAIT_PROGRESS_EVERY;
        let mut ticks = tokio::time::interval_at(first, WAIT_PROGRESS_EVERY);
        loop {
            tokio::select! {
                done = &mut work => {
                    match done {
                        Ok(result) => events.send("result", &result).await,
                        Err(e) => events.send("error", &error_json(&e)).await,
                    };
                    return;
                }
                _ = ticks.tick() => {
                    let secs = began.elapsed().as_secs();
                    let progress = json!({"waited_secs": secs, "message": service::waiting_message(&names, secs)});
                    if !events.send("progress", &progress).await {
                        return;
                    }
                }
            }
        }
    });
    Ok(respond(rx, cancel_if_dropped))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_character_split_between_chunks_arrives_whole() {
        let mut text = Text::default();
        let euro = "€".as_bytes(); // three bytes
        assert_eq!(text.decode(&[b'a', euro[0]]), "a");
        assert_eq!(text.decode(&euro[1..2]), "");
        assert_eq!(text.decode(&[euro[2], b'b']), "€b");
        assert_eq!(text.decode(&[0xFF, b'c']), "\u{FFFD}c");
        assert_eq!(text.decode(&[0xE2]), "");
        assert_eq!(text.rest(), "\u{FFFD}");
        assert_eq!(text.bytes, 8);
    }
}
