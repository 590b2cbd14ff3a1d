//! Writing the imported objects into the host as one pack. As the check pass
//! reads and checks each new object (once: a loose object is the agent's
//! file, which it may change at any time, so what is written is exactly what
//! was checked), its pack entry, whole and undeltified, is appended to a spool
//! file in forage's staging directory. Once every object has passed, the pack
//! stream (header, the spool, checksum) is fed to libgit2's indexer
//! (`Odb::packwriter`), which writes the pack and its index and makes them
//! part of the host's object store only when the stream is complete: an
//! import refused half-way leaves nothing. One object is in memory at a time.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Seek, Write};
use std::path::Path;

use flate2::{Compress, Compression, FlushCompress, Status};
use git2::{ObjectType, Odb};
use sha1::{Digest, Sha1};

/// Objects smaller than this are stored in their zlib streams, not
/// compressed: setting up a compressor costs more than it saves on a commit
/// or a small tree (whose ids do not compress), and the user's next `git gc`
/// compresses (and deltifies) everything anyway.
const COMPRESS_FROM: usize = 1024;

/// The pack entries of the objects checked so far.
pub struct Spool {
    out: BufWriter<File>,
    count: u32,
    deflate: Compress,
    buf: Vec<u8>,
}

impl Spool {
    /// A spool at `path` (a new file in forage's staging directory).
    pub fn create(path: &Path) -> io::Result<Spool> {
        let file = File::options().read(true).write(true).create_new(true).open(path)?;
        let deflate = Compress::new(Compression::fast(), true);
        Ok(Spool { out: BufWriter::with_capacity(1 << 16, file), count: 0, deflate, buf: Vec::new() })
    }

    /// Appends the entry of one object: type and size, then its zlib stream.
    pub fn add(&mut self, kind: ObjectType, data: &[u8]) -> io::Result<()> {
        let code: u8 = match kind {
            ObjectType::Commit => 1,
            ObjectType::Tree => 2,
            ObjectType::Blob => 3,
            ObjectType::Tag => 4,
            _ => return Err(io::Error::other(format!("a {kind} cannot be packed"))),
        };
        self.out.write_all(&entry_header(code, data.len() as u64))?;
        match data.len() < COMPRESS_FROM {
            true => write_stored(&mut self.out, data)?,
            false => {
                deflate(&mut self.deflate, data, &mut self.buf)?;
                self.out.write_all(&self.buf)?;
            }
        }
        self.count = self.count.checked_add(1).ok_or_else(|| io::Error::other("too many objects"))?;
        Ok(())
    }

    /// Writes the pack into `host`: the header, the spooled entries, the
    /// checksum of it all; then has libgit2 index it and move it in.
    pub fn write_into(self, host: &Odb<'_>) -> Result<(), String> {
        let io_err = |e: io::Error| format!("writing the pack: {e}");
        let mut file = self.out.into_inner().map_err(|e| io_err(e.into_error()))?;
        file.rewind().map_err(io_err)?;
        let mut writer = host.packwriter().map_err(|e| e.to_string())?;
        {
            let mut out = Hashing { out: BufWriter::with_capacity(1 << 16, &mut writer), hash: Sha1::new() };
            out.write_all(b"PACK").map_err(io_err)?;
            out.write_all(&2u32.to_be_bytes())
                .and_then(|_| out.write_all(&self.count.to_be_bytes()))
                .map_err(io_err)?;
            io::copy(&mut BufReader::with_capacity(1 << 16, file), &mut out).map_err(io_err)?;
            let trailer = out.hash.finalize();
            let mut tail = out.out;
            tail.write_all(&trailer).and_then(|_| tail.flush()).map_err(io_err)?;
        }
        writer.commit().map_err(|e| format!("indexing the pack: {}", e.message()))?;
        Ok(())
    }
}

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

/// `data` compressed into `out` (a zlib stream), with one compressor reused.
fn deflate(z: &mut Compress, data: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    z.reset();
    out.clear();
    out.reserve(data.len() / 2 + 64);
    let start = z.total_in();
    loop {
        let consumed = (z.total_in() - start) as usize;
        match z.compress_vec(&data[consumed..], out, FlushCompress::Finish).map_err(io::Error::other)? {
            Status::StreamEnd => return Ok(()),
            _ => out.reserve(out.capacity().max(4096)),
        }
    }
}

/// `data` as a zlib stream of stored (uncompressed) deflate blocks.
fn write_stored(out: &mut impl Write, data: &[u8]) -> io::Result<()> {
    // CMF: deflate with a 32 KiB window; FLG: fastest, and the header a multiple of 31.
    out.write_all(&[0x78, 0x01])?;
    let mut chunks = data.chunks(0xffff).peekable();
    if chunks.peek().is_none() {
        out.write_all(&[0x01, 0x00, 0x00, 0xff, 0xff])?;
    }
    while let Some(chunk) = chunks.next() {
        let last = u8::from(chunks.peek().is_none());
        let len = chunk.len() as u16;
        out.write_all(&[last])?;
        out.write_all(&len.to_le_bytes())?;
        out.write_all(&(!len).to_le_bytes())?;
        out.write_all(chunk)?;
    }
    out.write_all(&adler32(data).to_be_bytes())
}

/// zlib's checksum.
fn adler32(data: &[u8]) -> u32 {
    const MOD: u32 = 65521;
    let (mut a, mut b) = (1u32, 0u32);
    // 5552 bytes is the most that can be summed before `b` could overflow.
    for chunk in data.chunks(5552) {
        for byte in chunk {
            a += u32::from(*byte);
            b += a;
        }
        a %= MOD;
        b %= MOD;
    }
    (b << 16) | a
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn entry_headers_are_gits() {
        assert_eq!(entry_header(3, 5), [0x35]);
        assert_eq!(entry_header(1, 16), [0x90, 0x01]);
        assert_eq!(entry_header(2, 0x1234), [0xa4, 0xa3, 0x02]);
    }

    #[test]
    fn stored_and_compressed_streams_inflate_to_what_went_in() {
        let inflate = |stream: &[u8]| {
            let mut out = Vec::new();
            flate2::read::ZlibDecoder::new(stream).read_to_end(&mut out).unwrap();
            out
        };
        let mut z = Compress::new(Compression::fast(), true);
        for data in [Vec::new(), b"tree 1234".to_vec(), (0..200_000u32).map(|i| (i % 251) as u8).collect()] {
            let mut stored = Vec::new();
            write_stored(&mut stored, &data).unwrap();
            assert_eq!(inflate(&stored), data);
            let mut compressed = Vec::new();
            deflate(&mut z, &data, &mut compressed).unwrap();
            assert_eq!(inflate(&compressed), data);
        }
    }
}
