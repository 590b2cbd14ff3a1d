//! Writing the imported objects into the host as one pack: a pack stream of
//! whole (undeltified) objects fed to libgit2's indexer (`Odb::packwriter`),
//! which writes the pack and its index and makes them part of the host's
//! object store only when the stream is complete; an import that fails
//! half-way leaves nothing. One object is in memory at a time.

use std::io::{self, BufWriter, Write};

use flate2::write::ZlibEncoder;
use flate2::Compression;
use git2::{ObjectType, Odb, Oid};
use sha1::{Digest, Sha1};

use super::store::AgentObjects;

/// Everything written, also into the pack's trailing checksum.
struct Hashing<W: Write> {
    out: W,
    hash: Sha1,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.hash.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

/// Writes the agent's objects `ids` into `host` as one pack, reading each
/// again (and so checking it against its id again: a loose object is the
/// agent's file, which it may have changed since the check).
pub fn write_pack(host: &Odb<'_>, agent: &AgentObjects, ids: &[Oid]) -> Result<(), String> {
    let io_err = |e: io::Error| format!("writing the pack: {e}");
    let mut writer = host.packwriter().map_err(|e| e.to_string())?;
    {
        let mut out = Hashing { out: BufWriter::with_capacity(1 << 16, &mut writer), hash: Sha1::new() };
        let count = u32::try_from(ids.len()).map_err(|_| "too many objects")?;
        out.write_all(b"PACK").and_then(|_| out.write_all(&2u32.to_be_bytes())).map_err(io_err)?;
        out.write_all(&count.to_be_bytes()).map_err(io_err)?;
        for id in ids {
            let (kind, data) = agent.read(*id)?.ok_or(format!("object {id} vanished from the agent's repository"))?;
            write_entry(&mut out, kind, &data).map_err(io_err)?;
        }
        let trailer = out.hash.finalize();
        let mut file = out.out;
        file.write_all(&trailer).and_then(|_| file.flush()).map_err(io_err)?;
    }
    writer.commit().map_err(|e| format!("indexing the pack: {}", e.message()))?;
    Ok(())
}

/// One pack entry: the type and size header, then the zlib stream.
fn write_entry(out: &mut impl Write, kind: ObjectType, data: &[u8]) -> io::Result<()> {
    let code: u8 = match kind {
        ObjectType::Commit => 1,
        ObjectType::Tree => 2,
        ObjectType::Blob => 3,
        ObjectType::Tag => 4,
        _ => return Err(io::Error::other(format!("a {kind} cannot be packed"))),
    };
    out.write_all(&entry_header(code, data.len() as u64))?;
    // Fast compression: the user's next `git gc` repacks it anyway.
    let mut z = ZlibEncoder::new(out, Compression::fast());
    z.write_all(data)?;
    z.finish()?;
    Ok(())
}

/// The pack entry header: type in bits 4-6 of the first byte, the size in
/// its low 4 bits and 7 bits of each further byte, high bit for "more".
fn entry_header(code: u8, mut size: u64) -> Vec<u8> {
    let mut first = (code << 4) | (size & 0x0f) as u8;
    size >>= 4;
    let mut out = Vec::new();
    while size > 0 {
        out.push(first | 0x80);
        first = (size & 0x7f) as u8;
        size >>= 7;
    }
    out.push(first);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_headers_are_gits() {
        assert_eq!(entry_header(3, 5), [0x35]);
        assert_eq!(entry_header(1, 16), [0x90, 0x01]);
        assert_eq!(entry_header(2, 0x1234), [0xa4, 0xa3, 0x02]);
    }
}
