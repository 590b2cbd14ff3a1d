//! `forage-ctl port-forward` (hidden): the forwarder of a sandbox's published
//! ports, as forage runs it in its own container. Each `--forward
//! LISTEN_PORT=ADDR:PORT` listens on every address of the forwarder's
//! container (the engine publishes it on the host's 127.0.0.1 only) and
//! copies each connection both ways to the sandbox. It reads nothing of what
//! it copies.

use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};

/// One listener: the forwarder's port, and where its connections go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forward {
    pub listen: u16,
    pub to: SocketAddr,
}

impl std::str::FromStr for Forward {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not LISTEN_PORT=ADDR:PORT");
        let (listen, to) = s.split_once('=').ok_or_else(bad)?;
        Ok(Forward { listen: listen.parse().map_err(|_| bad())?, to: to.parse().map_err(|_| bad())? })
    }
}

impl std::fmt::Display for Forward {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}={}", self.listen, self.to)
    }
}

/// Serves every forward until one listener fails.
pub async fn serve(forwards: Vec<Forward>) -> std::io::Result<()> {
    let mut tasks = tokio::task::JoinSet::new();
    for f in forwards {
        let listener = TcpListener::bind(("0.0.0.0", f.listen)).await?;
        tasks.spawn(accept(listener, f.to));
    }
    match tasks.join_next().await {
        Some(Ok(r)) => r,
        Some(Err(e)) => Err(std::io::Error::other(e)),
        None => std::future::pending().await,
    }
}

async fn accept(listener: TcpListener, to: SocketAddr) -> std::io::Result<()> {
    loop {
        let (mut inbound, _) = listener.accept().await?;
        tokio::spawn(async move {
            // The sandbox not listening (yet) closes the connection: the
            // client sees a reset, as it would talking to the port directly.
            let Ok(mut outbound) = TcpStream::connect(to).await else { return };
            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn forwards_parse_and_print_the_same() {
        let f: Forward = "3000=10.1.2.3:3000".parse().unwrap();
        assert_eq!(f.to_string(), "3000=10.1.2.3:3000");
        assert!("3000".parse::<Forward>().is_err());
    }

    #[tokio::test]
    async fn a_connection_is_copied_both_ways() {
        let backend = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let to = backend.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = backend.accept().await.unwrap();
            let mut buf = [0u8; 4];
            s.read_exact(&mut buf).await.unwrap();
            s.write_all(&buf.map(|b| b.to_ascii_uppercase())).await.unwrap();
        });
        // A free port for the forwarder's listener.
        let listen = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
        tokio::spawn(serve(vec![Forward { listen, to }]));
        let mut client = loop {
            match TcpStream::connect(("127.0.0.1", listen)).await {
                Ok(c) => break c,
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(20)).await,
            }
        };
        client.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"PING");
    }
}
