//! `forage-ctl port-forward` (hidden): the forwarder of a sandbox's published
//! ports, as forage runs it in its own container (`crate::ports::forward`).

use clap::Args;

use crate::error::{Error, Result};
use crate::ports::forward::{Forward, Host};

#[derive(Debug, Args)]
pub struct PortForwardArgs {
    /// A listener and where its connections go.
    #[arg(long = "forward", value_name = "LISTEN_PORT=ADDR:PORT", required = true)]
    pub forwards: Vec<Forward>,
    /// Serve connections from the forwarder's own addresses only, not from
    /// the gateways of its default routes (rootless Podman's published ports).
    #[arg(long)]
    pub only_own_addresses: bool,
}

pub async fn run(args: PortForwardArgs) -> Result<i32> {
    let from = if args.only_own_addresses { Host::OwnAddresses } else { Host::GatewaysAndOwnAddresses };
    crate::ports::forward::serve(args.forwards, from)
        .await
        .map_err(|e| Error::other(format!("port forwarder: {e}")))?;
    Ok(0)
}
