//! `forage-ctl egress-proxy` (hidden): the proxy `network: restricted`
//! sandboxes reach out through, as forage runs it in its own container.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use crate::error::{Error, Result};

#[derive(Debug, Args)]
pub struct EgressProxyArgs {
    /// The address to listen on.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: SocketAddr,
    /// Where to answer every DNS query with NXDOMAIN (UDP).
    #[arg(long, value_name = "ADDR:PORT")]
    pub dns: Option<SocketAddr>,
    /// The directory of the map of sandboxes (read, and re-read when it changes).
    #[arg(long, value_name = "DIR")]
    pub policy: PathBuf,
    /// The directory to log decisions in.
    #[arg(long, value_name = "DIR")]
    pub log: PathBuf,
}

pub async fn run(args: EgressProxyArgs) -> Result<i32> {
    // A tunnel's bytes go into a socket by splice(2), which raises SIGPIPE
    // when its peer is gone; forage-ctl keeps that signal's default (to end
    // quietly when a pipe it prints to closes), which would end the proxy.
    // Handled, it leaves the splice an EPIPE error, which ends one tunnel.
    let _sigpipe = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::pipe())
        .map_err(|e| Error::other(format!("egress proxy: handling SIGPIPE: {e}")))?;
    let config = crate::egress::proxy::Config { listen: args.listen, policy_dir: args.policy, log_dir: args.log };
    let dns = async {
        match args.dns {
            Some(at) => crate::egress::dns::serve(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = crate::egress::proxy::serve(config, stopped()) => r,
        r = dns => r,
    }
    .map_err(|e| Error::other(format!("egress proxy: {e}")))?;
    Ok(0)
}

/// Completes on SIGTERM (`docker stop`) or SIGINT: the proxy then writes the
/// decisions still queued for its log and exits.
async fn stopped() {
    use tokio::signal::unix::{signal, SignalKind};
    match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        // Without the handlers the signals end the process as before.
        _ => std::future::pending().await,
    }
}
