//! Tree objects as git's fsck checks them (`fsck_tree` and `verify_ordered`
//! in git's `fsck.c`), with strict mode's verdicts: every message fsck gives
//! at error or warning severity refuses the tree.

use git2::Oid;

use super::names::{check_name, EntryKind, Special};

/// One entry of a checked tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    pub kind: EntryKind,
    pub name: &'a [u8],
    pub id: Oid,
    pub special: Special,
}

/// The modes git writes (fsck refuses any other: badFilemode in strict
/// mode, zeroPaddedFilemode, and git cannot parse a non-octal one).
fn kind_of(mode: &[u8]) -> Result<EntryKind, String> {
    match mode {
        b"100644" | b"100755" => Ok(EntryKind::File),
        b"120000" => Ok(EntryKind::Symlink),
        b"40000" => Ok(EntryKind::Dir),
        b"160000" => Ok(EntryKind::Submodule),
        m if m.first() == Some(&b'0') => Err(format!("a zero-padded mode {}", String::from_utf8_lossy(m))),
        m => Err(format!("a mode git does not write ({})", String::from_utf8_lossy(m))),
    }
}

/// Parses `data` as a tree and checks it as `git fsck --strict` does: modes,
/// names (see `names`), no null ids, git's order, no two entries of one name
/// (a file and a directory included, however far apart they sort).
pub fn check_tree(mut data: &[u8]) -> Result<Vec<Entry<'_>>, String> {
    let mut entries: Vec<Entry<'_>> = Vec::new();
    let mut candidates: Vec<&[u8]> = Vec::new();
    while !data.is_empty() {
        let space = data.iter().position(|b| *b == b' ').ok_or("truncated tree entry")?;
        let mode = &data[..space];
        if mode.is_empty() || !mode.iter().all(|b| (b'0'..=b'7').contains(b)) {
            return Err("a tree entry with a malformed mode".into());
        }
        let rest = &data[space + 1..];
        let nul = rest.iter().position(|b| *b == 0).ok_or("truncated tree entry")?;
        let name = &rest[..nul];
        let id = rest.get(nul + 1..nul + 21).ok_or("truncated tree entry")?;
        let id = Oid::from_bytes(id).map_err(|e| e.to_string())?;
        data = &rest[nul + 21..];
        let kind = kind_of(mode)?;
        let special = check_name(name, kind)?;
        if id.is_zero() {
            return Err(format!("an entry {:?} pointing at the null id", String::from_utf8_lossy(name)));
        }
        if let Some(previous) = entries.last() {
            verify_ordered(previous, kind, name, &mut candidates)?;
        }
        entries.push(Entry { kind, name, id, special });
    }
    Ok(entries)
}

/// A byte that sorts before `/` (and is not the end of a name).
fn is_less_than_slash(c: u8) -> bool {
    c != 0 && c < b'/'
}

/// git's `verify_ordered`: `name` (of `kind`) must sort after the entry
/// before it, a directory's name as if it ended in `/`. Names that are a
/// prefix of later ones are remembered in `candidates`, so that a file `x`
/// and a directory `x` are caught even with `x.1` between them.
fn verify_ordered<'a>(
    previous: &Entry<'a>,
    kind: EntryKind,
    name: &'a [u8],
    candidates: &mut Vec<&'a [u8]>,
) -> Result<(), String> {
    let shown = || String::from_utf8_lossy(name).into_owned();
    let duplicate = || Err(format!("two entries named {:?} (a file and a directory, or twice)", shown()));
    let (name1, name2) = (previous.name, name);
    let len = name1.len().min(name2.len());
    match name1[..len].cmp(&name2[..len]) {
        std::cmp::Ordering::Less => return Ok(()),
        std::cmp::Ordering::Greater => return Err(format!("its entries are out of order at {:?}", shown())),
        std::cmp::Ordering::Equal => {}
    }
    let (mut c1, mut c2) = (name1.get(len).copied().unwrap_or(0), name2.get(len).copied().unwrap_or(0));
    if c1 == 0 && c2 == 0 {
        return duplicate();
    }
    if c1 == 0 && previous.kind == EntryKind::Dir {
        c1 = b'/';
    }
    if c2 == 0 && kind == EntryKind::Dir {
        c2 = b'/';
    }
    if c1 == 0 && is_less_than_slash(c2) {
        candidates.push(name1);
    } else if c2 == b'/' && is_less_than_slash(c1) {
        while let Some(file) = candidates.pop() {
            let Some(after) = name2.strip_prefix(file) else { continue };
            match after.first() {
                None => return duplicate(),
                Some(c) if is_less_than_slash(*c) => {
                    candidates.push(file);
                    break;
                }
                Some(_) => {}
            }
        }
    }
    if c1 < c2 {
        Ok(())
    } else {
        Err(format!("its entries are out of order at {:?}", shown()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(entries: &[(&str, &[u8], Oid)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (mode, name, id) in entries {
            out.extend_from_slice(mode.as_bytes());
            out.push(b' ');
            out.extend_from_slice(name);
            out.push(0);
            out.extend_from_slice(id.as_bytes());
        }
        out
    }

    fn id() -> Oid {
        Oid::from_str("1111111111111111111111111111111111111111").unwrap()
    }

    /// A tree of `names`, a trailing `/` making one a directory (git's
    /// t1450-fsck.sh `check_duplicate_names`).
    fn named(names: &[&str]) -> Vec<u8> {
        let entries: Vec<(&str, &[u8], Oid)> = names
            .iter()
            .map(|n| match n.strip_suffix('/') {
                Some(dir) => ("40000", dir.as_bytes(), id()),
                None => ("100644", n.as_bytes(), id()),
            })
            .collect();
        tree(&entries)
    }

    #[test]
    fn duplicates_git_fsck_finds_however_far_apart() {
        // t1450-fsck.sh: "tree object with duplicate names".
        for names in [&["x", "x.1", "x/"][..], &["x", "x.1.2", "x.1/", "x/"], &["x", "x.1", "x.1.2", "x/"]] {
            let why = check_tree(&named(names)).unwrap_err();
            assert!(why.contains("two entries named"), "{names:?}: {why}");
        }
        // A symlink and a directory of one name, next to each other.
        let both = tree(&[("120000", b"a", id()), ("40000", b"a", id())]);
        assert!(check_tree(&both).unwrap_err().contains("two entries"));
        assert!(check_tree(&named(&["a", "a"])).is_err());
        // `a` as a directory sorts as `a/`, after `a.txt`; not before it.
        assert!(check_tree(&named(&["a.txt", "a/"])).is_ok());
        assert!(check_tree(&named(&["a/", "a.txt"])).unwrap_err().contains("out of order"));
        assert!(check_tree(&named(&["b", "a"])).unwrap_err().contains("out of order"));
        assert!(check_tree(&named(&["x", "x.1", "y/", "z"])).is_ok());
    }

    #[test]
    fn modes_ids_and_truncation() {
        for mode in ["100664", "100600", "040000", "0100644", "12345", "644"] {
            assert!(check_tree(&tree(&[(mode, b"a", id())])).is_err(), "mode {mode}");
        }
        assert!(check_tree(&tree(&[("10064x", b"a", id())])).unwrap_err().contains("malformed mode"));
        assert!(check_tree(&tree(&[("100644", b"a", Oid::ZERO_SHA1)])).unwrap_err().contains("null id"));
        let ok =
            tree(&[("100644", b"a", id()), ("100755", b"b", id()), ("120000", b"c", id()), ("160000", b"d", id())]);
        let entries = check_tree(&ok).unwrap();
        let kinds: Vec<EntryKind> = entries.iter().map(|e| e.kind).collect();
        assert_eq!(kinds, [EntryKind::File, EntryKind::File, EntryKind::Symlink, EntryKind::Submodule]);
        assert!(check_tree(&ok[..ok.len() - 3]).is_err(), "truncated");
        assert!(check_tree(b"100644 a").is_err());
        let gitmodules = tree(&[("100644", b".gitmodules", id())]);
        assert_eq!(check_tree(&gitmodules).unwrap()[0].special, Special::Gitmodules);
        assert!(check_tree(&tree(&[("40000", b".g\xe2\x80\x8cit", id())])).unwrap_err().contains("git directory"));
    }
}
