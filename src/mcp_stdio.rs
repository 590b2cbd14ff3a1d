//! The MCP server's stdin and stdout, with every line answered. rmcp drops a
//! line that is no JSON, or no message it can read, without a word: a client
//! that sent a request it cannot read would wait on that request's id for
//! ever. JSON-RPC 2.0 answers such a line with a Parse error (-32700) or an
//! Invalid Request (-32600); this module reads each line first, answers those
//! itself, and passes the rest on to rmcp through a pipe. Answers and rmcp's
//! own output reach stdout as whole lines, never interleaved.

use rmcp::model::ClientJsonRpcMessage;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// How much either pipe holds before its writer waits.
const PIPE: usize = 1 << 16;

/// What to give rmcp in place of stdin and stdout, and the task that writes
/// stdout (awaited at the end, so the last answers are written).
pub struct CheckedStdio {
    pub input: DuplexStream,
    pub output: DuplexStream,
    pub writer: JoinHandle<()>,
}

pub fn checked_stdio() -> CheckedStdio {
    checked(tokio::io::stdin(), tokio::io::stdout())
}

fn checked(
    stdin: impl AsyncRead + Unpin + Send + 'static,
    stdout: impl AsyncWrite + Unpin + Send + 'static,
) -> CheckedStdio {
    let (to_rmcp, input) = tokio::io::duplex(PIPE);
    let (output, from_rmcp) = tokio::io::duplex(PIPE);
    let (answers, answered) = mpsc::unbounded_channel();
    tokio::spawn(pass_on(stdin, to_rmcp, answers));
    let writer = tokio::spawn(write_out(from_rmcp, answered, stdout));
    CheckedStdio { input, output, writer }
}

/// Reads the client's lines: those rmcp can read go on to it, the others are
/// answered. The end of stdin closes rmcp's input, which ends the session.
async fn pass_on(stdin: impl AsyncRead + Unpin, mut to_rmcp: DuplexStream, answers: mpsc::UnboundedSender<Vec<u8>>) {
    let mut lines = BufReader::new(stdin);
    let mut line = Vec::new();
    loop {
        line.clear();
        match lines.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match unreadable(text) {
            None => {
                if to_rmcp.write_all(text).await.is_err() || to_rmcp.write_all(b"\n").await.is_err() {
                    return;
                }
            }
            Some(Some(answer)) => {
                let _ = answers.send(answer);
            }
            Some(None) => {}
        }
    }
}

/// `None` for a line rmcp reads; else the answer it needs (`None` for a
/// notification, which JSON-RPC never answers).
fn unreadable(line: &[u8]) -> Option<Option<Vec<u8>>> {
    // Read from the bytes, as rmcp reads them (serde reads some messages
    // from a `Value` differently).
    let e = serde_json::from_slice::<ClientJsonRpcMessage>(line).err()?;
    let value: Value = match serde_json::from_slice(line) {
        Ok(value) => value,
        Err(e) => return Some(Some(error(&Value::Null, -32700, &format!("Parse error: the line is no JSON ({e})")))),
    };
    let id = value.get("id").filter(|id| id.is_string() || id.is_number());
    match id {
        Some(id) => Some(Some(error(id, -32600, &format!("Invalid Request: {e}")))),
        // A notification (a method, no id) is dropped unanswered, as rmcp
        // drops one it does not know.
        None if value.get("method").is_some_and(Value::is_string) => Some(None),
        None => Some(Some(error(&Value::Null, -32600, &format!("Invalid Request: {e}")))),
    }
}

fn error(id: &Value, code: i64, message: &str) -> Vec<u8> {
    let mut line = json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } }).to_string();
    line.push('\n');
    line.into_bytes()
}

/// Writes rmcp's lines and the answers to stdout, each line whole, until
/// rmcp closes its output.
async fn write_out(
    from_rmcp: DuplexStream,
    mut answered: mpsc::UnboundedReceiver<Vec<u8>>,
    mut stdout: impl AsyncWrite + Unpin,
) {
    let mut lines = BufReader::new(from_rmcp);
    // rmcp's line being read. An answer may come in the middle of it:
    // `read_until` keeps what it read here and the next call goes on.
    let mut partial = Vec::new();
    let mut answering = true;
    loop {
        tokio::select! {
            read = lines.read_until(b'\n', &mut partial) => {
                if !matches!(read, Ok(n) if n > 0) {
                    break;
                }
                if write_line(&mut stdout, &partial).await.is_err() {
                    return;
                }
                partial.clear();
            }
            answer = answered.recv(), if answering => match answer {
                Some(answer) => {
                    if write_line(&mut stdout, &answer).await.is_err() {
                        return;
                    }
                }
                None => answering = false,
            },
        }
    }
    // What rmcp wrote last without a newline, and answers made before it closed.
    let _ = write_line(&mut stdout, &partial).await;
    while let Ok(answer) = answered.try_recv() {
        let _ = write_line(&mut stdout, &answer).await;
    }
}

async fn write_line(stdout: &mut (impl AsyncWrite + Unpin), line: &[u8]) -> std::io::Result<()> {
    stdout.write_all(line).await?;
    stdout.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(line: &str) -> Option<Option<Value>> {
        unreadable(line.as_bytes()).map(|a| a.map(|bytes| serde_json::from_slice(&bytes).unwrap()))
    }

    #[test]
    fn each_line_rmcp_cannot_read_gets_the_json_rpc_error_it_asks_for() {
        assert_eq!(answer(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#), None);
        assert_eq!(answer(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#), None);
        let parse = answer("this is not json").unwrap().unwrap();
        assert_eq!((parse["id"].clone(), parse["error"]["code"].clone()), (Value::Null, json!(-32700)));
        let invalid = answer(r#"{"jsonrpc":"2.0","id":"x","method":"tools/call","params":5}"#).unwrap().unwrap();
        assert_eq!((invalid["id"].clone(), invalid["error"]["code"].clone()), (json!("x"), json!(-32600)));
        let shapeless = answer("[1,2]").unwrap().unwrap();
        assert_eq!((shapeless["id"].clone(), shapeless["error"]["code"].clone()), (Value::Null, json!(-32600)));
        assert_eq!(answer(r#"{"jsonrpc":"2.0","method":"tools/call","params":5}"#), Some(None), "a notification");
    }

    #[tokio::test]
    async fn lines_pass_on_whole_and_answers_join_them() {
        let (client, stdin) = tokio::io::duplex(PIPE);
        let (stdout, mut read_back) = tokio::io::duplex(PIPE);
        let mut io = checked(stdin, stdout);
        let mut client = client;
        client.write_all(b"nonsense\r\n{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n\n").await.unwrap();
        drop(client);
        let mut passed = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut io.input, &mut passed).await.unwrap();
        assert_eq!(passed, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}\n");
        io.output.write_all(b"{\"from\":\"rmcp\"}\n").await.unwrap();
        drop(io.output);
        io.writer.await.unwrap();
        let mut out = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut read_back, &mut out).await.unwrap();
        let lines: Vec<Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(lines.contains(&json!({ "from": "rmcp" })), "{out}");
        assert!(lines.iter().any(|l| l["error"]["code"] == -32700), "{out}");
    }
}
