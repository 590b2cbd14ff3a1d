//! `mcp`: the MCP server on stdin and stdout (`crate::mcp`), until the client
//! disconnects or a signal asks it to stop; either way, calls in flight are
//! cancelled and roll back before the process exits.

use rmcp::ServiceExt;

use super::Ctx;
use crate::error::{Error, Result};
use crate::mcp::Server;
use crate::service::call::Defaults;

#[derive(clap::Args, Debug)]
pub struct McpArgs {
    /// Tear a job's sandbox down once its agent exits, for `job` calls that
    /// do not say (`cleanup`); its context, branch and archives stay
    #[arg(long)]
    cleanup_on_complete: bool,
}

pub async fn run(ctx: &Ctx, args: McpArgs) -> Result<i32> {
    // stdout carries the protocol: nothing else may write there.
    ctx.no_json("mcp", "speaks MCP on stdout")?;
    let defaults = Defaults { cleanup_on_complete: args.cleanup_on_complete };
    let server = Server::new(ctx.engine().await?, defaults);
    ctx.cancel_on_signals();
    let stdio = crate::mcp_stdio::checked_stdio();
    let running = server
        .clone()
        .serve((stdio.input, stdio.output))
        .await
        .map_err(|e| Error::other(format!("the MCP client did not start a session: {e}")))?;
    tokio::select! {
        quit = running.waiting() => {
            if let Err(e) = quit {
                tracing::warn!("the MCP session ended: {e}");
            }
        }
        () = ctx.cancel.triggered() => {}
    }
    server.shutdown().await;
    // rmcp's output is closed now; what it wrote last reaches stdout first.
    let _ = tokio::time::timeout(std::time::Duration::from_secs(1), stdio.writer).await;
    Ok(0)
}
