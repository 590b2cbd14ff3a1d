//! Where `serve` listens, and its accept loop: a unix socket the user alone
//! may use, and a loopback TCP port whose requests need the token.

use std::net::SocketAddr;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};

use super::Server;
use crate::error::{Error, Result};
use crate::sandbox::Cancel;

/// How long a client has to send a request's head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

/// A unix socket `serve` made, removed when it stops if it is still the same file.
pub struct Socket {
    pub listener: UnixListener,
    pub path: PathBuf,
    identity: (u64, u64),
}

impl Drop for Socket {
    fn drop(&mut self) {
        let ours = std::fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.identity);
        if ours {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Listens on `path`, mode 0600. Its directory is made (0700) when missing; a
/// socket left there by a server that is gone is replaced; anything else
/// there, or a server still answering, is refused.
pub fn bind_socket(path: &Path) -> Result<Socket> {
    let shown = path.display();
    if let Some(dir) = path.parent().filter(|d| !d.exists()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| Error::other(format!("making {}: {e}", dir.display())))?;
    }
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(Error::conflict(format!(
                "{shown} exists and is not a socket; remove it or pass --socket PATH"
            )));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(Error::conflict(format!(
                "a server already listens on {shown}; stop it, or pass --socket PATH"
            )));
        }
        std::fs::remove_file(path).map_err(|e| Error::other(format!("removing the stale socket {shown}: {e}")))?;
    }
    let listener = UnixListener::bind(path).map_err(|e| Error::other(format!("listening on {shown}: {e}")))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::other(format!("making {shown} yours alone: {e}")))?;
    let meta = std::fs::symlink_metadata(path).map_err(|e| Error::other(format!("{shown}: {e}")))?;
    Ok(Socket { listener, path: path.to_owned(), identity: (meta.dev(), meta.ino()) })
}

/// Refuses an address other machines could reach.
pub fn check_loopback(addr: SocketAddr) -> Result<()> {
    if addr.ip().is_loopback() {
        return Ok(());
    }
    Err(Error::usage(format!(
        "--tcp {addr} is not a loopback address; serve on 127.0.0.1 (and reach it from elsewhere through an SSH tunnel or a proxy of your own)"
    )))
}

/// Listens on `addr`, which must be a loopback address.
pub async fn bind_tcp(addr: SocketAddr) -> Result<TcpListener> {
    check_loopback(addr)?;
    TcpListener::bind(addr).await.map_err(|e| Error::conflict(format!("listening on {addr}: {e}")))
}

/// Serves connections until `stop` is triggered, then stops the server
/// (cancelling requests in flight and waiting for them).
pub async fn serve(server: Arc<Server>, socket: Option<&Socket>, tcp: Option<TcpListener>, stop: Cancel) {
    loop {
        tokio::select! {
            accepted = async { socket.expect("guarded").listener.accept().await }, if socket.is_some() => {
                match accepted {
                    Ok((stream, _)) => connection(server.clone(), stream, false),
                    Err(e) => pause(&e).await,
                }
            }
            accepted = async { tcp.as_ref().expect("guarded").accept().await }, if tcp.is_some() => {
                match accepted {
                    Ok((stream, _)) => connection(server.clone(), stream, true),
                    Err(e) => pause(&e).await,
                }
            }
            () = stop.triggered() => break,
        }
    }
    server.stop().await;
}

async fn pause(e: &std::io::Error) {
    tracing::warn!("accepting a connection: {e}");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

fn connection<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(server: Arc<Server>, stream: S, over_tcp: bool) {
    tokio::spawn(async move {
        let service = hyper::service::service_fn(move |request| {
            let server = server.clone();
            async move { Ok::<_, std::convert::Infallible>(server.handle(request, over_tcp).await) }
        });
        let served = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(HEAD_TIMEOUT)
            .serve_connection(TokioIo::new(stream), service)
            .await;
        if let Err(e) = served {
            tracing::debug!("a connection ended: {e}");
        }
    });
}
