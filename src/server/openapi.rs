//! The OpenAPI document of `forage-ctl serve`, generated from the request
//! types (their JSON schemas, as the MCP tools list them). A copy is checked
//! in as docs/openapi.json; a test fails when it is stale
//! (`forage-ctl serve --openapi > docs/openapi.json` renews it).

use schemars::generate::SchemaSettings;
use serde_json::{json, Map, Value};

use crate::service::call::OPERATIONS;

/// The document, as JSON.
pub fn document() -> Value {
    let mut generator = SchemaSettings::openapi3().into_generator();
    let mut paths = Map::new();
    for op in OPERATIONS {
        let schema = (op.schema)(&mut generator);
        let operation = json!({
            "operationId": op.name,
            "summary": op.description,
            "tags": [if op.read_only { "read" } else { "change" }],
            "requestBody": {
                "required": false,
                "content": {"application/json": {"schema": schema}},
            },
            "responses": {
                "200": {"description": "The operation's result, as the CLI's `--json` prints it.", "content": {"application/json": {"schema": {"type": "object"}}}},
                "400": error_response("Bad arguments: a missing or unknown field, a bad name or path (exit code 2)."),
                "401": error_response("Over TCP, without the bearer token."),
                "403": error_response("A workspace outside the server's roots (`outside-roots`)."),
                "404": error_response("No such sandbox, template or image (exit code 3), or no such operation."),
                "409": error_response("The name is taken, or the sandbox's state forbids it (exit code 4)."),
                "412": error_response("Going on would lose work (exit code 7)."),
                "413": error_response("A body over 1 MiB."),
                "422": error_response("The workspace or its version control refused (exit code 6)."),
                "500": error_response("Anything else (exit code 1)."),
                "503": error_response("The container engine cannot be reached (exit code 5), or the server is stopping."),
            },
        });
        paths.insert(format!("/v1/{}", op.name), json!({ "post": operation }));
    }
    for (path, streamed) in streamed_paths(&mut generator) {
        paths.insert(path.into(), streamed);
    }
    paths.insert(
        "/v1/openapi.json".into(),
        json!({"get": {"operationId": "openapi", "summary": "This document.", "responses": {"200": {"description": "The OpenAPI document."}}}}),
    );
    let mut schemas: Map<String, Value> = generator.take_definitions(true).into_iter().collect();
    schemas.insert("Error".into(), error_schema());
    json!({
        "openapi": "3.0.3",
        "info": {
            "title": "forage",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "forage's operations over HTTP: POST /v1/OPERATION with the arguments as a JSON object. Served by `forage-ctl serve` on a unix socket (mode 0600), or on a loopback port with a bearer token.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{}, {"bearer": []}],
    })
}

/// The endpoints that answer with server-sent events (`super::stream`,
/// `super::live`): their paths and descriptions.
fn streamed_paths(generator: &mut schemars::SchemaGenerator) -> [(&'static str, Value); 3] {
    use crate::service::{ExecRequest, WaitRequest};
    let logs = generator.subschema_for::<super::stream::LogsRequest>();
    let exec = generator.subschema_for::<ExecRequest>();
    let wait = generator.subschema_for::<WaitRequest>();
    [
        ("/v1/logs", streamed_path("logs", "read", logs, "The agent's output as server-sent events, as it comes: events `stdout` and `stderr` (data: the chunk as a JSON string), then `end` (or `error`, data: an Error).")),
        ("/v1/exec/stream", streamed_path("exec_stream", "change", exec, "`exec` as server-sent events: `stdout` and `stderr` (data: the chunk as a JSON string) as the command writes them, then `exit` (data: `exit_code`, null when `timed_out`, and `stdout_bytes`, `stderr_bytes`) or `error` (data: an Error). A client that disconnects stops the stream; the command may go on running, as with /v1/exec.")),
        ("/v1/wait/stream", streamed_path("wait_stream", "read", wait, "`wait` as server-sent events: `progress` every 10 s (data: `waited_secs`, `message`), then `result` (data: what /v1/wait answers) or `error` (data: an Error). A client that disconnects stops the wait.")),
    ]
}

fn streamed_path(id: &str, tag: &str, schema: schemars::Schema, summary: &str) -> Value {
    json!({"post": {
        "operationId": id,
        "summary": summary,
        "tags": [tag],
        "requestBody": {"required": true, "content": {"application/json": {"schema": schema}}},
        "responses": {
            "200": {"description": "The events; a failure once they have begun is the last event, `error`.", "content": {"text/event-stream": {"schema": {"type": "string"}}}},
            "400": error_response("Bad arguments (exit code 2)."),
            "404": error_response("No such sandbox (exit code 3)."),
            "409": error_response("The sandbox is not running (exit code 4)."),
            "503": error_response("The container engine cannot be reached (exit code 5), or the server is stopping."),
        },
    }})
}

fn error_response(description: &str) -> Value {
    json!({"description": description, "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}})
}

fn error_schema() -> Value {
    json!({
        "type": "object",
        "required": ["code", "exit_code", "message", "hints"],
        "properties": {
            "code": {"type": "string", "description": "Stable: usage, not-found, conflict, engine, workspace, would-lose-data, other; or the server's own: unauthorized, outside-roots, too-large, unknown-operation, method-not-allowed, stopping, internal."},
            "exit_code": {"type": "integer", "description": "The exit code the CLI gives the same failure (docs/exit-codes.md)."},
            "message": {"type": "string"},
            "hints": {"type": "array", "items": {"type": "object", "properties": {"text": {"type": "string"}, "command": {"type": "array", "items": {"type": "string"}}}}},
        },
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_checked_in_document_is_the_generated_one() {
        let checked_in = include_str!("../../docs/openapi.json");
        let generated = serde_json::to_string_pretty(&super::document()).unwrap() + "\n";
        assert!(
            checked_in == generated,
            "docs/openapi.json is stale: run `forage-ctl serve --openapi > docs/openapi.json`"
        );
    }
}
