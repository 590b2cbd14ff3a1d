//! `POST /v1/logs`: the agent's output as server-sent events, as it comes
//! (with `follow`, until the agent exits or the client goes away). Each chunk
//! is an event named after its stream, `stdout` or `stderr`, whose data is the
//! chunk as a JSON string (bytes that are not UTF-8 replaced); the last event
//! is `end`, or `error` with forage's error as JSON.

use bytes::Bytes;
use futures_util::StreamExt;
use http_body_util::StreamBody;
use hyper::body::Frame;
use hyper::{Response, StatusCode};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::Body;
use crate::runtime::docker::Docker;
use crate::runtime::Output;
use crate::sandbox::Engine;
use crate::service::sandbox_name;

/// The agent's output, as `forage-ctl logs` prints it.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogsRequest {
    /// The sandbox.
    pub name: String,
    /// Keep the stream open and send output as it comes, until the agent exits.
    #[serde(default)]
    pub follow: bool,
    /// Only the last N lines written so far.
    #[serde(default)]
    pub tail: Option<u64>,
}

/// One server-sent event: its name, and its data as one line of JSON.
pub fn event(name: &str, data: &serde_json::Value) -> Result<Frame<Bytes>, std::convert::Infallible> {
    Ok(Frame::data(Bytes::from(format!("event: {name}\ndata: {data}\n\n"))))
}

/// A 200 response whose body is `events`, sent as they come.
pub fn sse<S>(events: S) -> Response<Body>
where
    S: futures_util::Stream<Item = Result<Frame<Bytes>, std::convert::Infallible>> + Send + 'static,
{
    let mut response = Response::new(http_body_util::BodyExt::boxed_unsync(StreamBody::new(events)));
    *response.status_mut() = StatusCode::OK;
    let headers = response.headers_mut();
    headers.insert(hyper::header::CONTENT_TYPE, hyper::header::HeaderValue::from_static("text/event-stream"));
    headers.insert(hyper::header::CACHE_CONTROL, hyper::header::HeaderValue::from_static("no-cache"));
    response
}

/// The response: 200 and the events, or forage's error when the sandbox
/// cannot be found.
pub fn logs(engine: &Engine<Docker>, request: LogsRequest) -> crate::error::Result<Response<Body>> {
    let name = sandbox_name(&request.name)?;
    let record = engine.record(&name)?;
    let output = engine.logs(&record, request.follow, request.tail);
    let events = output
        .map(|chunk| match chunk {
            Ok(Output::Stdout(b)) => event("stdout", &json!(String::from_utf8_lossy(&b))),
            Ok(Output::Stderr(b)) => event("stderr", &json!(String::from_utf8_lossy(&b))),
            Err(e) => event("error", &crate::service::error_json(&e)),
        })
        .chain(futures_util::stream::once(async { event("end", &json!({})) }));
    Ok(sse(events))
}
