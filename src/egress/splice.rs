//! A tunnel's bytes moved between its two sockets by the kernel: splice(2)
//! from one socket into a pipe, and from the pipe into the other, each way.
//! The proxy copied them through a buffer of its own before (8 KiB a read,
//! two copies of every byte through user space), which cost a download
//! through it about half its speed; a pipe moves references to the socket's
//! pages instead, and holds at most `CHUNK` bytes a direction, in the kernel,
//! while they are on their way.
//!
//! A pipe is charged to the user who runs the proxy (you) for its whole size
//! while it exists, full or empty, and past that user's soft limit
//! (`/proc/sys/fs/pipe-user-pages-soft`, 16384 pages by default) every new
//! pipe of theirs, outside the proxy too, gets the smallest size. So at most
//! `MAX_SPLICED` tunnels are spliced at once (2 pipes of 16 pages each: a
//! quarter of the default limit); more, which an agent can open, are copied
//! through the proxy's memory as before.

use std::io::{Error, ErrorKind, Result};
use std::os::fd::{AsFd, OwnedFd};

use nix::fcntl::{splice, OFlag, SpliceFFlags};
use tokio::io::{AsyncWriteExt, Interest};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

/// The most a direction moves in one splice: a pipe's default capacity.
const CHUNK: usize = 64 << 10;
/// Tunnels spliced at once at most (see the module's comment).
const MAX_SPLICED: usize = 128;
static SPLICED: Semaphore = Semaphore::const_new(MAX_SPLICED);

/// Moves bytes both ways between `a` and `b` until each side has ended what
/// it sends (passing each end on as a shutdown of writing), or one fails:
/// what `tokio::io::copy_bidirectional` does, without the copies while fewer
/// than `MAX_SPLICED` other tunnels are spliced.
pub async fn both_ways(a: &mut TcpStream, b: &mut TcpStream) -> Result<()> {
    match SPLICED.try_acquire() {
        Ok(_slot) => spliced(a, b).await,
        Err(_) => tokio::io::copy_bidirectional(a, b).await.map(|_| ()),
    }
}

async fn spliced(a: &mut TcpStream, b: &mut TcpStream) -> Result<()> {
    let (a_in, mut a_out) = a.split();
    let (b_in, mut b_out) = b.split();
    tokio::try_join!(one_way(&a_in, &mut b_out), one_way(&b_in, &mut a_out))?;
    Ok(())
}

/// `from`'s bytes into `to` through a pipe of its own, until `from` ends.
async fn one_way(from: &ReadHalf<'_>, to: &mut WriteHalf<'_>) -> Result<()> {
    let (pipe_out, pipe_in) = nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).map_err(Error::from)?;
    let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
    let from: &TcpStream = from.as_ref();
    loop {
        // The pipe is empty here: fill it from `from`.
        let n = from.async_io(Interest::READABLE, || splice_into(from, &pipe_in, CHUNK, flags)).await?;
        if n == 0 {
            return to.shutdown().await;
        }
        let mut held = n;
        while held > 0 {
            let sink = to.as_ref();
            held -= sink.async_io(Interest::WRITABLE, || splice_out(&pipe_out, sink, held, flags)).await?;
        }
    }
}

/// One splice from a socket into the pipe; `WouldBlock` when it has nothing.
fn splice_into(socket: &TcpStream, pipe: &OwnedFd, len: usize, flags: SpliceFFlags) -> Result<usize> {
    splice(socket.as_fd(), None, pipe.as_fd(), None, len, flags).map_err(Error::from)
}

/// One splice from the pipe into a socket; `WouldBlock` when it is full.
fn splice_out(pipe: &OwnedFd, socket: &TcpStream, len: usize, flags: SpliceFFlags) -> Result<usize> {
    match splice(pipe.as_fd(), None, socket.as_fd(), None, len, flags).map_err(Error::from) {
        Ok(0) => Err(Error::new(ErrorKind::WriteZero, "the socket took nothing")),
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    /// A connected pair of sockets on loopback.
    async fn pair(listener: &TcpListener) -> (TcpStream, TcpStream) {
        let (a, b) = tokio::join!(TcpStream::connect(listener.local_addr().unwrap()), listener.accept());
        (a.unwrap(), b.unwrap().0)
    }

    /// A client and a server through `both_ways`: each sends more than a pipe
    /// holds while the other sends too; the server ends its own stream only
    /// once the client's has ended (so an end not passed on hangs, and fails).
    async fn exchange() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (mut client, mut proxy_in) = pair(&listener).await;
        let (mut proxy_out, mut server) = pair(&listener).await;
        let tunnel = tokio::spawn(async move { both_ways(&mut proxy_in, &mut proxy_out).await });
        let up: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
        let down: Vec<u8> = (0..5_000_000u32).map(|i| (i % 241) as u8).collect();
        let client_side = async {
            let (mut r, mut w) = client.split();
            let mut got = Vec::new();
            let sent = async {
                w.write_all(&up).await.unwrap();
                w.shutdown().await.unwrap();
            };
            tokio::join!(sent, async { r.read_to_end(&mut got).await.unwrap() });
            got
        };
        let server_side = async {
            let (mut r, mut w) = server.split();
            let mut got = Vec::new();
            tokio::join!(async { r.read_to_end(&mut got).await.unwrap() }, w.write_all(&down[..1_000_000])).1.unwrap();
            w.write_all(&down[1_000_000..]).await.unwrap();
            w.shutdown().await.unwrap();
            got
        };
        let both = async { tokio::join!(client_side, server_side) };
        let (c, s) = tokio::time::timeout(std::time::Duration::from_secs(120), both).await.expect("the tunnel hung");
        assert!(c == down, "the client got {} bytes of {}", c.len(), down.len());
        assert!(s == up, "the server got {} bytes of {}", s.len(), up.len());
        tunnel.await.unwrap().unwrap();
    }

    #[test]
    fn bytes_pass_both_ways_whole_and_in_order_and_each_end_is_passed_on() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(exchange());
        // With every splice slot taken, the tunnel is copied, to the same effect.
        let all = rt.block_on(SPLICED.acquire_many(MAX_SPLICED as u32)).unwrap();
        rt.block_on(exchange());
        drop(all);
    }
}
