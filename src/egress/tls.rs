//! Reads the server name (SNI) out of a TLS ClientHello: the proxy refuses a
//! CONNECT tunnel whose TLS names another host than the one it was allowed for.

/// What the first bytes of a tunnel are.
#[derive(Debug, PartialEq, Eq)]
pub enum Hello {
    /// Not a TLS handshake record: the tunnel carries something else.
    NotTls,
    /// A ClientHello, with the server name it asks for (if any), lowercase.
    Tls(Option<String>),
    /// A handshake record forage cannot read whole (split, truncated, or
    /// malformed): refused, so a name cannot hide past what was read.
    Unreadable,
}

/// The bytes of a record header plus its largest payload: as much as the proxy
/// reads before it decides.
pub const MAX_RECORD: usize = 5 + (1 << 14);

/// How many bytes of `first` make up its first record (header included), once
/// the header is in: the proxy reads until it has them.
pub fn record_len(first: &[u8]) -> Option<usize> {
    if first.len() < 5 {
        return None;
    }
    Some(5 + usize::from(u16::from_be_bytes([first[3], first[4]])))
}

/// Parses the first record of a tunnel (`record` holds all of it).
pub fn parse(record: &[u8]) -> Hello {
    if record.first() != Some(&0x16) {
        return Hello::NotTls;
    }
    client_hello(record).map_or(Hello::Unreadable, Hello::Tls)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(head)
    }
    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| usize::from(b[0]))
    }
    fn u16(&mut self) -> Option<usize> {
        self.take(2).map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }
    fn u24(&mut self) -> Option<usize> {
        self.take(3).map(|b| (usize::from(b[0]) << 16) | (usize::from(b[1]) << 8) | usize::from(b[2]))
    }
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(n)
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(n)
    }
}

/// `Some(server name)` of a whole ClientHello in one record; `None` if it is not one.
fn client_hello(record: &[u8]) -> Option<Option<String>> {
    let mut r = Reader(record);
    r.take(3)?; // content type, legacy version
    let payload = r.vec16()?;
    let mut r = Reader(payload);
    if r.u8()? != 1 {
        return None; // not a ClientHello
    }
    let len = r.u24()?;
    let mut r = Reader(r.take(len)?);
    r.take(2 + 32)?; // version, random
    r.vec8()?; // session id
    r.vec16()?; // cipher suites
    r.vec8()?; // compression methods
    if r.0.is_empty() {
        return Some(None);
    }
    let mut exts = Reader(r.vec16()?);
    let mut name = None;
    while !exts.0.is_empty() {
        let kind = exts.u16()?;
        let body = exts.vec16()?;
        if kind != 0 {
            continue;
        }
        if name.is_some() {
            return None; // two server_name extensions: ambiguous
        }
        let mut list = Reader(Reader(body).vec16()?);
        while !list.0.is_empty() {
            let name_type = list.u8()?;
            let host = list.vec16()?;
            if name_type == 0 {
                if name.is_some() {
                    return None;
                }
                name = Some(String::from_utf8(host.to_vec()).ok()?.to_ascii_lowercase());
            }
        }
    }
    Some(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal ClientHello for `name` (or none), as one record.
    pub fn hello(name: Option<&str>) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend([7u8; 32]);
        body.push(0); // session id
        body.extend([0, 2, 0x13, 0x01]); // one cipher suite
        body.extend([1, 0]); // null compression
        let mut exts = Vec::new();
        if let Some(n) = name {
            let mut sni = vec![0u8];
            sni.extend((n.len() as u16).to_be_bytes());
            sni.extend(n.as_bytes());
            let mut list = (sni.len() as u16).to_be_bytes().to_vec();
            list.extend(sni);
            exts.extend([0, 0]);
            exts.extend((list.len() as u16).to_be_bytes());
            exts.extend(list);
        }
        body.extend((exts.len() as u16).to_be_bytes());
        body.extend(exts);
        let mut hs = vec![1u8];
        hs.extend(&(body.len() as u32).to_be_bytes()[1..]);
        hs.extend(body);
        let mut rec = vec![0x16, 3, 1];
        rec.extend((hs.len() as u16).to_be_bytes());
        rec.extend(hs);
        rec
    }

    #[test]
    fn the_server_name_is_read_from_a_client_hello() {
        let rec = hello(Some("API.example.com"));
        assert_eq!(record_len(&rec), Some(rec.len()));
        assert_eq!(parse(&rec), Hello::Tls(Some("api.example.com".into())));
        assert_eq!(parse(&hello(None)), Hello::Tls(None));
        assert_eq!(parse(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
    }

    #[test]
    fn a_truncated_or_split_hello_is_unreadable() {
        let rec = hello(Some("a.example.com"));
        for cut in [6, 20, rec.len() - 1] {
            assert_eq!(parse(&rec[..cut]), Hello::Unreadable, "cut at {cut}");
        }
    }
}
