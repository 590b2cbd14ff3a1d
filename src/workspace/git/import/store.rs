//! Reading the agent's objects without trusting them. Loose objects are read
//! by forage itself from the agent's `objects/` directory (held open, never
//! following a symlink), each file bounded in size and refused when sparse
//! before a byte of it is inflated. Packs are copied, each checked the same
//! way first and their total bounded, into a staging directory forage owns,
//! and only those copies are read by libgit2 (which maps them: a pack the
//! agent truncated under the mapping would crash forage). Every object read
//! is checked against its id; the import reads each once, and writes what it
//! read (see `pack`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use git2::{ErrorCode, ObjectType, Odb, Oid};

use super::super::super::untrusted::{Dir, Kind};

/// The largest object an import reads: each is read whole into memory, and a
/// few kilobytes of compressed zeros can claim gigabytes.
pub const MAX_OBJECT_BYTES: usize = 256 << 20;
/// The largest loose object file holding an object of at most `max_object`
/// bytes: its compressed size (zlib adds at most a few bytes per 16 KiB
/// stored, and a header).
fn loose_file_bytes(max_object: usize) -> u64 {
    (max_object + (max_object >> 8) + 64) as u64
}
/// The most the agent's packs (and their indexes) may add up to: each is
/// copied at every import.
const MAX_PACK_BYTES: u64 = 4 << 30;
/// The most packs an import copies (git itself repacks at 50).
const MAX_PACKS: usize = 256;

/// An object's type and content, checked against its id.
pub type Object = (ObjectType, Vec<u8>);

/// The agent's objects, as forage reads them.
pub struct AgentObjects {
    loose: Option<Dir>,
    /// The fan-out directories of `loose` opened so far (`None`: absent).
    fans: RefCell<HashMap<String, Option<Dir>>>,
    packs: Option<Odb<'static>>,
    /// The largest object read (`MAX_OBJECT_BYTES` for an import).
    max_object: usize,
}

impl AgentObjects {
    /// The agent's `objects/` (if it has one), its packs copied into
    /// `staging`, an empty directory forage owns.
    pub fn new(objects: Option<Dir>, staging: &Path) -> Result<AgentObjects, String> {
        let packs = match &objects {
            Some(objects) => stage_packs(objects, staging)?,
            None => None,
        };
        Ok(AgentObjects { loose: objects, fans: RefCell::default(), packs, max_object: MAX_OBJECT_BYTES })
    }

    /// The agent's loose objects alone, none larger than `max_object` bytes:
    /// for a look that copies nothing (`list`, see `peek`). An object that is
    /// only in the agent's packs reads as absent.
    pub fn loose_only(objects: Option<Dir>, max_object: usize) -> AgentObjects {
        AgentObjects { loose: objects, fans: RefCell::default(), packs: None, max_object }
    }

    /// Object `id`, checked against its id; `None` when the agent has no such
    /// object. `Err` says why it cannot be read, naming it.
    pub fn read(&self, id: Oid) -> Result<Option<Object>, String> {
        let object = match self.read_loose(id)? {
            Some(object) => Some(object),
            None => self.read_packed(id)?,
        };
        let Some((kind, data)) = object else { return Ok(None) };
        if Oid::hash_object(kind, &data).map_err(|e| e.to_string())? != id {
            return Err(format!("object {id} in the agent's repository does not match its id (forged or corrupt)"));
        }
        Ok(Some((kind, data)))
    }

    fn read_loose(&self, id: Oid) -> Result<Option<Object>, String> {
        let Some(loose) = &self.loose else { return Ok(None) };
        let hex = id.to_string();
        let mut fans = self.fans.borrow_mut();
        let fan = match fans.get(&hex[..2]) {
            Some(fan) => fan,
            None => {
                let fan = loose.dir(&hex[..2]).map_err(|e| format!("reading the agent's objects: {e}"))?;
                fans.entry(hex[..2].to_owned()).or_insert(fan)
            }
        };
        let Some(fan) = fan else { return Ok(None) };
        let opened = fan.open_bounded(&hex[2..], loose_file_bytes(self.max_object));
        let Some((file, size)) = opened.map_err(|e| format!("the loose object {e}"))? else { return Ok(None) };
        inflate_loose(BufReader::new(file.take(size)), self.max_object)
            .map(Some)
            .map_err(|why| format!("object {id} in the agent's repository is unreadable ({why})"))
    }

    fn read_packed(&self, id: Oid) -> Result<Option<Object>, String> {
        let Some(packs) = &self.packs else { return Ok(None) };
        let size = match packs.read_header(id) {
            Ok((size, _)) => size,
            Err(e) if e.code() == ErrorCode::NotFound => return Ok(None),
            Err(e) => return Err(format!("object {id} in the agent's packs is unreadable ({})", e.message())),
        };
        check_object_size(id, size, self.max_object)?;
        let object = packs.read(id).map_err(|e| {
            format!("object {id} in the agent's repository does not match its id (forged or corrupt: {})", e.message())
        })?;
        Ok(Some((object.kind(), object.data().to_vec())))
    }
}

fn check_object_size(id: Oid, size: usize, max: usize) -> Result<(), String> {
    match size > max {
        true => Err(format!(
            "object {id} in the agent's repository is {} MiB, more than the {} MiB forage reads",
            size >> 20,
            max >> 20
        )),
        false => Ok(()),
    }
}

/// A loose object file's content: zlib around `type size\0data`, declaring
/// at most `max` bytes, ending where the stream ends (git refuses
/// "garbage at end of loose object").
fn inflate_loose(input: impl BufRead, max: usize) -> Result<Object, String> {
    let mut z = flate2::bufread::ZlibDecoder::new(input);
    let mut header = Vec::new();
    let mut byte = [0u8];
    loop {
        let n = z.read(&mut byte).map_err(|e| e.to_string())?;
        match (n, byte[0]) {
            (0, _) => return Err("truncated".into()),
            (_, 0) => break,
            _ if header.len() >= 32 => return Err("a malformed header".into()),
            _ => header.push(byte[0]),
        }
    }
    let header = String::from_utf8_lossy(&header);
    let (kind, size) = header.split_once(' ').ok_or("a malformed header")?;
    let kind = match kind {
        "blob" => ObjectType::Blob,
        "tree" => ObjectType::Tree,
        "commit" => ObjectType::Commit,
        "tag" => ObjectType::Tag,
        _ => return Err(format!("an unknown type {kind:?}")),
    };
    let size: usize = size.parse().map_err(|_| "a malformed header")?;
    if size > max {
        return Err(format!("{} MiB, more than the {} MiB forage reads", size >> 20, max >> 20));
    }
    let mut data = Vec::new();
    (&mut z).take(size as u64 + 1).read_to_end(&mut data).map_err(|e| e.to_string())?;
    if data.len() != size {
        return Err(format!("{} bytes where its header says {size}", data.len()));
    }
    let mut rest = z.into_inner();
    if !rest.fill_buf().map_err(|e| e.to_string())?.is_empty() {
        return Err("garbage after its end".into());
    }
    Ok((kind, data))
}

/// Copies the agent's packs and their indexes into `staging`, each bounded
/// and not sparse, their total bounded; an object database of the copies,
/// if there were any.
fn stage_packs(objects: &Dir, staging: &Path) -> Result<Option<Odb<'static>>, String> {
    let fail = |e: std::io::Error| format!("reading the agent's packs: {e}");
    let Some(src) = objects.dir("pack").map_err(fail)? else { return Ok(None) };
    let dst = Dir::open(staging).and_then(|d| d.make_dir("pack")).map_err(fail)?;
    let (mut copied, mut total) = (0, 0u64);
    for (file, kind) in src.entries().map_err(fail)? {
        let Some(stem) = file.to_str().and_then(|f| f.strip_suffix(".pack")) else { continue };
        let idx = format!("{stem}.idx");
        if kind != Kind::File || src.kind(&idx).map_err(fail)? != Some(Kind::File) {
            continue;
        }
        if copied == MAX_PACKS {
            return Err(format!("the agent's repository has more than {MAX_PACKS} packs (`git gc` inside joins them)"));
        }
        // The index first: a pack without its index is ignored by libgit2.
        for name in [OsStr::new(&idx), &file] {
            let left = MAX_PACK_BYTES - total;
            let bytes = src.copy_bounded_into(name, &dst, name, left).map_err(|e| {
                format!("the agent's pack {e} (its packs may come to {} GiB in all)", MAX_PACK_BYTES >> 30)
            })?;
            total += bytes.unwrap_or(0);
        }
        copied += 1;
    }
    if copied == 0 {
        return Ok(None);
    }
    let odb = Odb::new().map_err(|e| e.to_string())?;
    let path = staging.to_str().ok_or("FORAGE_HOME is not UTF-8")?;
    odb.add_disk_alternate(path).map_err(|e| e.to_string())?;
    Ok(Some(odb))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn loose(content: &[u8]) -> Vec<u8> {
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(content).unwrap();
        z.finish().unwrap()
    }

    #[test]
    fn packs_are_refused_sparse_or_too_many_before_anything_is_copied() {
        let t = tempfile::tempdir().unwrap();
        let (objects, staging) = (t.path().join("objects"), t.path().join("staging"));
        std::fs::create_dir_all(objects.join("pack")).unwrap();
        std::fs::create_dir(&staging).unwrap();
        let pack = |i: usize| objects.join(format!("pack/pack-{i:040}"));
        std::fs::write(pack(0).with_extension("idx"), b"idx").unwrap();
        std::fs::File::create(pack(0).with_extension("pack")).unwrap().set_len(1 << 40).unwrap();
        let e = stage_packs(&Dir::open(&objects).unwrap(), &staging).err().unwrap();
        assert!(e.contains("sparse") && e.contains("pack-0"), "{e}");
        std::fs::remove_dir_all(staging.join("pack")).unwrap();
        for i in 0..=MAX_PACKS {
            std::fs::write(pack(i).with_extension("idx"), b"idx").unwrap();
            std::fs::write(pack(i).with_extension("pack"), b"pack").unwrap();
        }
        let e = stage_packs(&Dir::open(&objects).unwrap(), &staging).err().unwrap();
        assert!(e.contains("more than 256 packs"), "{e}");
    }

    #[test]
    fn loose_objects_are_read_only_as_far_as_they_are_well_formed() {
        let (kind, data) = inflate_loose(&loose(b"blob 3\0abc")[..], MAX_OBJECT_BYTES).unwrap();
        assert_eq!((kind, data), (ObjectType::Blob, b"abc".to_vec()));
        let mut padded = loose(b"blob 3\0abc");
        padded.extend_from_slice(&[0; 100]);
        assert!(inflate_loose(&padded[..], MAX_OBJECT_BYTES).unwrap_err().contains("garbage"));
        assert!(inflate_loose(&loose(b"blob 4\0abc")[..], MAX_OBJECT_BYTES).unwrap_err().contains("3 bytes"));
        assert!(inflate_loose(&loose(b"blob 2\0abc")[..], MAX_OBJECT_BYTES).is_err());
        assert!(inflate_loose(&loose(b"blob 999999999999\0")[..], MAX_OBJECT_BYTES).unwrap_err().contains("MiB"));
        assert!(inflate_loose(&loose(b"evil 1\0a")[..], MAX_OBJECT_BYTES).unwrap_err().contains("unknown type"));
        assert!(inflate_loose(&loose(&[b'x'; 100])[..], MAX_OBJECT_BYTES).unwrap_err().contains("malformed"));
    }
}
