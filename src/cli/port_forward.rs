//! `forage-ctl port-forward` (hidden): the forwarder of a sandbox's published
//! ports, as forage runs it in its own container (`crate::ports::forward`).

use clap::Args;

use crate::error::{Error, Result};
use crate::ports::forward::Forward;

#[derive(Debug, Args)]
pub struct PortForwardArgs {
    /// A listener and where its connections go.
    #[arg(long = "forward", value_name = "LISTEN_PORT=ADDR:PORT", required = true)]
    pub forwards: Vec<Forward>,
}

pub async fn run(args: PortForwardArgs) -> Result<i32> {
    crate::ports::forward::serve(args.forwards).await.map_err(|e| Error::other(format!("port forwarder: {e}")))?;
    Ok(0)
}
