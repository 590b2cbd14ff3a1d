//! The proxy's DNS answer: NXDOMAIN to every query. A restricted sandbox's
//! resolver forwards to the proxy's address (the container's `dns`), so a
//! lookup from inside fails at once instead of timing out, and names never
//! leave through DNS. The proxy resolves what it allows itself.

use std::net::SocketAddr;

use tokio::net::UdpSocket;

/// Answers every query on `listen` with NXDOMAIN, until the process ends.
pub async fn serve(listen: SocketAddr) -> std::io::Result<()> {
    let socket = UdpSocket::bind(listen).await?;
    let mut buf = [0u8; 512];
    loop {
        let Ok((n, peer)) = socket.recv_from(&mut buf).await else { continue };
        if let Some(answer) = nxdomain(&buf[..n]) {
            let _ = socket.send_to(&answer, peer).await;
        }
    }
}

/// The NXDOMAIN answer to `query` (its question echoed); FORMERR to one that
/// is not a single plain question; nothing to what is not a query at all.
pub fn nxdomain(query: &[u8]) -> Option<Vec<u8>> {
    if query.len() < 12 || query[2] & 0x80 != 0 {
        return None;
    }
    let opcode_rd = u16::from_be_bytes([query[2], query[3]]) & 0x7900;
    let header = |rcode: u16, questions: u16| {
        let mut h = query[..2].to_vec();
        h.extend((0x8000 | opcode_rd | rcode).to_be_bytes());
        h.extend(questions.to_be_bytes());
        h.extend([0; 6]);
        h
    };
    let question = (u16::from_be_bytes([query[4], query[5]]) == 1).then(|| question_end(query)).flatten();
    Some(match question {
        Some(end) => {
            let mut answer = header(3, 1);
            answer.extend_from_slice(&query[12..end]);
            answer
        }
        None => header(1, 0),
    })
}

/// Where the first question (a name of labels, then type and class) ends.
fn question_end(query: &[u8]) -> Option<usize> {
    let mut at = 12;
    loop {
        let len = usize::from(*query.get(at)?);
        if len == 0 {
            break;
        }
        if len & 0xc0 != 0 {
            return None;
        }
        at += 1 + len;
    }
    let end = at + 1 + 4;
    (end <= query.len()).then_some(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_query_gets_nxdomain_with_its_question() {
        // id 0xabcd, RD, one question: example.com A IN
        let mut q = vec![0xab, 0xcd, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        q.extend(b"\x07example\x03com\x00\x00\x01\x00\x01");
        let a = nxdomain(&q).unwrap();
        assert_eq!(&a[..2], &[0xab, 0xcd]);
        assert_eq!(u16::from_be_bytes([a[2], a[3]]), 0x8103, "QR, RD, NXDOMAIN");
        assert_eq!(&a[4..12], &[0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&a[12..], &q[12..]);
        assert_eq!(nxdomain(&a), None, "an answer is not answered");
        assert_eq!(nxdomain(&q[..20]).unwrap()[3] & 0x0f, 1, "a cut question is a format error");
        assert_eq!(nxdomain(&[1, 2]), None);
    }
}
