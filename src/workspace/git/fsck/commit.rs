//! Commit objects: only the headers git and jj write, in the order they
//! write them, each checked as the strictest of its readers would check it.
//!
//! Where each rule comes from:
//! - `tree`, `parent`, `author`, `committer`, their order and counts, the
//!   identity lines, NUL bytes: git's `fsck_commit`, `fsck_ident` and
//!   `verify_headers` (fsck.c). Object ids in lowercase, as git writes them.
//! - the blank line after the headers: gix's commit parser (jj reads commits
//!   through gix), which fails on a commit without one.
//! - `encoding`, `mergetag`, `gpgsig`, `gpgsig-sha256`: what git's
//!   `commit_tree_extended` and its signing write (commit.c): `encoding` right
//!   after `committer`, then the extra headers, the signature last. A
//!   `mergetag` holds a tag object, checked as `fsck_tag_standalone` checks
//!   tags.
//! - `jj:conflict-labels`, `jj:trees`, `change-id`: what jj 0.45's git backend
//!   writes (lib/src/git_backend.rs, `write_commit`), in that order, after
//!   git's own headers and before the signature, and how it reads them back:
//!   labels are UTF-8 (jj panics on any other), one per line, one per tree of
//!   `jj:trees` (jj asserts the counts agree); `jj:trees` holds an odd number,
//!   at least three, of tree ids; a change id is 32 letters `k`–`z`, lowercase
//!   (jj writes it so; it also reads uppercase, which would let a commit pass
//!   for another's change).
//! - continuation lines (a header's value over several lines, each further
//!   line starting with a space): gix's `any_header_field_multi_line`; only the
//!   headers whose writer folds values may have them.

use git2::Oid;

/// What a checked commit refers to and says of itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub tree: Oid,
    pub parents: Vec<Oid>,
    /// jj's trees of a conflicted commit (`jj:trees`), which jj reads as its content.
    pub jj_trees: Vec<Oid>,
    pub change_id: Option<String>,
}

/// One header: its key and the lines of its value (the first, then each
/// continuation line without its leading space).
struct Header<'a> {
    key: &'a [u8],
    lines: Vec<&'a [u8]>,
}

impl Header<'_> {
    fn name(&self) -> String {
        String::from_utf8_lossy(self.key).into_owned()
    }

    fn single(&self) -> Result<&[u8], String> {
        match self.lines[..] {
            [line] => Ok(line),
            _ => Err(format!("a `{}` header over several lines", self.name())),
        }
    }

    fn folded(&self) -> Result<(), String> {
        match self.lines.len() {
            1 => Err(format!("a `{}` header on one line, where git writes several", self.name())),
            _ => Ok(()),
        }
    }

    /// The value as its writer had it: the lines, each ended by a newline.
    fn unfolded(&self) -> Vec<u8> {
        self.lines.iter().flat_map(|l| l.iter().copied().chain([b'\n'])).collect()
    }
}

/// The headers (up to the blank line), each with its continuation lines.
fn headers(data: &[u8]) -> Result<Vec<Header<'_>>, String> {
    if data.contains(&0) {
        return Err("a NUL byte in the commit".into());
    }
    let end = data.windows(2).position(|w| w == b"\n\n").ok_or("no blank line after the headers")?;
    let mut out: Vec<Header<'_>> = Vec::new();
    for line in data[..end].split(|b| *b == b'\n') {
        if let Some(more) = line.strip_prefix(b" ") {
            out.last_mut().ok_or("a continuation line before any header")?.lines.push(more);
            continue;
        }
        let space = line.iter().position(|b| *b == b' ').filter(|p| *p > 0);
        let space =
            space.ok_or_else(|| format!("a header line {:?} without a value", String::from_utf8_lossy(line)))?;
        out.push(Header { key: &line[..space], lines: vec![&line[space + 1..]] });
    }
    Ok(out)
}

/// A 40-digit lowercase hex object id.
pub fn parse_hex(value: &[u8]) -> Option<Oid> {
    let ok = value.len() == 40 && value.iter().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
    ok.then(|| std::str::from_utf8(value).ok().and_then(|s| Oid::from_str(s).ok())).flatten()
}

/// Checks `data` as a commit object; what it refers to.
pub fn check_commit(data: &[u8]) -> Result<Commit, String> {
    let headers = headers(data)?;
    let mut rest = headers.iter().peekable();
    let tree = rest.next().filter(|h| h.key == b"tree").ok_or("a commit must start with its tree")?;
    let tree = parse_hex(tree.single()?).ok_or("a bad tree line")?;
    let mut commit = Commit { tree, parents: Vec::new(), jj_trees: Vec::new(), change_id: None };
    while let Some(parent) = rest.next_if(|h| h.key == b"parent") {
        commit.parents.push(parse_hex(parent.single()?).ok_or("a bad parent line")?);
    }
    for role in [&b"author"[..], b"committer"] {
        let who = rest.next().filter(|h| h.key == role);
        let who = who.ok_or_else(|| format!("no {} line where git puts it", String::from_utf8_lossy(role)))?;
        check_ident(who.single()?).map_err(|why| format!("a bad {} line: {why}", who.name()))?;
    }
    let mut last_rank = 0;
    for header in rest {
        let rank =
            rank_of(header.key).ok_or_else(|| format!("a header `{}` git and jj do not write", header.name()))?;
        let repeats = rank == MERGETAG && last_rank == MERGETAG;
        if rank < last_rank || (rank == last_rank && !repeats) {
            return Err(format!("a `{}` header out of place or repeated", header.name()));
        }
        last_rank = rank;
        check_extra(header, &mut commit)?;
    }
    check_conflict_labels(&headers, &commit)?;
    Ok(commit)
}

const MERGETAG: u8 = 2;

/// Where each header after `committer` goes: git's `encoding`, its
/// `mergetag`s, jj's headers, and the signatures last.
fn rank_of(key: &[u8]) -> Option<u8> {
    Some(match key {
        b"encoding" => 1,
        b"mergetag" => MERGETAG,
        b"jj:conflict-labels" => 3,
        b"jj:trees" => 4,
        b"change-id" => 5,
        b"gpgsig" => 6,
        b"gpgsig-sha256" => 7,
        _ => return None,
    })
}

fn check_extra(header: &Header<'_>, commit: &mut Commit) -> Result<(), String> {
    match header.key {
        b"encoding" => {
            let value = header.single()?;
            let charset = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b':');
            if value.is_empty() || value.len() > 64 || !value.iter().all(charset) {
                return Err(format!("a bad encoding {:?}", String::from_utf8_lossy(value)));
            }
        }
        b"mergetag" => {
            header.folded()?;
            super::tag::check_tag(&header.unfolded()).map_err(|why| format!("a bad mergetag: {why}"))?;
        }
        b"jj:trees" => {
            let trees: Option<Vec<Oid>> = header.single()?.split(|b| *b == b' ').map(parse_hex).collect();
            match trees {
                Some(trees) if trees.len() >= 3 && trees.len() % 2 == 1 => commit.jj_trees = trees,
                _ => return Err("a bad jj:trees line".into()),
            }
        }
        b"change-id" => {
            let value = header.single()?;
            if value.len() != 32 || !value.iter().all(|b| (b'k'..=b'z').contains(b)) {
                return Err(format!(
                    "a change id {:?} jj does not write (32 lowercase letters k to z)",
                    String::from_utf8_lossy(value)
                ));
            }
            commit.change_id = Some(String::from_utf8_lossy(value).into_owned());
        }
        b"gpgsig" | b"gpgsig-sha256" => check_signature(header)?,
        // jj:conflict-labels: with jj:trees, once all headers are read.
        _ => {}
    }
    Ok(())
}

/// An ASCII-armoured signature, as gpg, gpgsm and ssh-keygen write them
/// (git's gpg-interface.c knows no other).
fn check_signature(header: &Header<'_>) -> Result<(), String> {
    header.folded()?;
    let printable = header.lines.iter().all(|l| l.iter().all(|b| (0x20..0x7f).contains(b)));
    let armoured =
        header.lines[0].starts_with(b"-----BEGIN ") && header.lines.last().is_some_and(|l| l.starts_with(b"-----END "));
    match printable && armoured {
        true => Ok(()),
        false => Err(format!("a `{}` header that is not an ASCII-armoured signature", header.name())),
    }
}

/// jj's conflict labels: UTF-8, one a line, as many as `jj:trees` has trees.
fn check_conflict_labels(headers: &[Header<'_>], commit: &Commit) -> Result<(), String> {
    let Some(labels) = headers.iter().find(|h| h.key == b"jj:conflict-labels") else { return Ok(()) };
    labels.folded()?;
    if labels.lines.iter().any(|l| std::str::from_utf8(l).is_err()) {
        return Err("jj:conflict-labels that are not UTF-8".into());
    }
    if labels.lines.len() != commit.jj_trees.len() {
        return Err(format!(
            "{} jj:conflict-labels for {} jj:trees (jj needs one for each)",
            labels.lines.len(),
            commit.jj_trees.len()
        ));
    }
    Ok(())
}

/// The largest timestamp git and jj both hold: git's fits a signed 64-bit
/// `time_t`; jj multiplies it by 1000 into an `i64`.
const MAX_TIMESTAMP: u64 = i64::MAX as u64 / 1000;

/// git's `fsck_ident`: `Name <email> timestamp +hhmm`.
pub fn check_ident(line: &[u8]) -> Result<(), &'static str> {
    let at = |i: usize| line.get(i).copied().unwrap_or(b'\n');
    if at(0) == b'<' {
        return Err("missing space before email");
    }
    let lt = line.iter().position(|b| matches!(b, b'<' | b'>')).ok_or("missing email")?;
    if line[lt] == b'>' {
        return Err("bad name");
    }
    if line[lt - 1] != b' ' {
        return Err("missing space before email");
    }
    let gt = lt + 1 + line[lt + 1..].iter().position(|b| matches!(b, b'<' | b'>')).ok_or("bad email")?;
    if line[gt] == b'<' {
        return Err("bad email");
    }
    let mut p = gt + 1;
    if at(p) != b' ' {
        return Err("missing space before date");
    }
    p += 1;
    while matches!(at(p), b' ' | b'\t') {
        p += 1;
    }
    if !at(p).is_ascii_digit() {
        return Err("bad date");
    }
    if at(p) == b'0' && at(p + 1) != b' ' {
        return Err("zero-padded date");
    }
    let digits = line[p..].iter().take_while(|b| b.is_ascii_digit()).count();
    let stamp = std::str::from_utf8(&line[p..p + digits]).ok().and_then(|s| s.parse::<u64>().ok());
    if stamp.is_none_or(|t| t > MAX_TIMESTAMP) {
        return Err("date out of range");
    }
    p += digits;
    if at(p) != b' ' {
        return Err("bad date");
    }
    p += 1;
    let zone = &line[p..];
    if zone.len() != 5 || !matches!(zone[0], b'+' | b'-') || !zone[1..].iter().all(u8::is_ascii_digit) {
        return Err("bad time zone");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "1111111111111111111111111111111111111111";
    const P: &str = "2222222222222222222222222222222222222222";
    /// An id in uppercase, which git accepts but never writes.
    const U: &str = "ABCDEF0123456789ABCDEF0123456789ABCDEF01";
    const WHO: &str = "A U Thor <author@example.com> 1234567890 +0100";

    fn commit(extra: &str) -> String {
        format!("tree {T}\nparent {P}\nauthor {WHO}\ncommitter {WHO}\n{extra}\nmessage\n")
    }

    #[test]
    fn what_git_writes_passes_and_names_its_parts() {
        let c = check_commit(commit("").as_bytes()).unwrap();
        assert_eq!((c.tree, c.parents), (Oid::from_str(T).unwrap(), vec![Oid::from_str(P).unwrap()]));
        let root = format!("tree {T}\nauthor {WHO}\ncommitter {WHO}\n\n");
        assert!(check_commit(root.as_bytes()).unwrap().parents.is_empty());
        // t1450-fsck.sh: "commit with multiple signatures is okay".
        let sigs = "gpgsig -----BEGIN PGP SIGNATURE-----\n  VGhpcyBpcyBub3QgcmVhbGx5IGEgc2lnbmF0dXJlLg==\n \n -----END PGP SIGNATURE-----\n\
                    gpgsig-sha256 -----BEGIN PGP SIGNATURE-----\n  VGhpcyBpcyBub3QgcmVhbGx5IGEgc2lnbmF0dXJlLg==\n -----END PGP SIGNATURE-----\n";
        assert!(check_commit(commit(sigs).as_bytes()).is_ok());
        let tag = format!("mergetag object {P}\n type commit\n tag v1\n tagger {WHO}\n \n signed tag\n");
        assert!(check_commit(commit(&format!("encoding ISO-8859-1\n{tag}{tag}")).as_bytes()).is_ok());
        // jj's headers, in the order jj writes them, then a signature.
        let jj = format!(
            "jj:conflict-labels left\n base\n right\njj:trees {T} {P} {T}\nchange-id kkkkzzzzkkkkzzzzkkkkzzzzkkkkzzzz\n\
             gpgsig -----BEGIN SSH SIGNATURE-----\n U1NIU0lH\n -----END SSH SIGNATURE-----\n"
        );
        let c = check_commit(commit(&jj).as_bytes()).unwrap();
        assert_eq!(c.jj_trees.len(), 3);
        assert_eq!(c.change_id.as_deref(), Some("kkkkzzzzkkkkzzzzkkkkzzzzkkkkzzzz"));
    }

    #[test]
    fn headers_git_and_jj_do_not_write_or_put_elsewhere_are_refused() {
        let change = "change-id kkkkzzzzkkkkzzzzkkkkzzzzkkkkzzzz\n";
        for (extra, why) in [
            ("x-evil yes\n", "do not write"),
            ("HG:extra x\n", "do not write"),
            (&format!("{change}{change}"), "repeated"),
            (&format!("{change}encoding UTF-8\n"), "out of place"),
            ("gpgsig -----BEGIN PGP SIGNATURE-----\n -----END PGP SIGNATURE-----\nencoding x\n", "out of place"),
            ("encoding a b\n", "bad encoding"),
            ("gpgsig not armoured\n", "one line"),
            ("gpgsig -----BEGIN X-----\n \x1b[31m\n -----END X-----\n", "ASCII-armoured"),
            ("mergetag object x\n type commit\n", "bad mergetag"),
            ("change-id KKKKZZZZKKKKZZZZKKKKZZZZKKKKZZZZ\n", "change id"),
            ("change-id kkkkzzzzkkkkzzzzkkkkzzzzkkkkzzz\n", "change id"),
            ("change-id abcabcabcabcabcabcabcabcabcabcab\n", "change id"),
            ("change-id kkkk\n zzzz\n", "several lines"),
            (&format!("jj:trees {T} {P}\n"), "jj:trees"),
            (&format!("jj:trees {T}\n"), "jj:trees"),
            (&format!("jj:trees {U} {U} {U}\n"), "jj:trees"),
            ("jj:conflict-labels a\n b\n c\n", "for 0 jj:trees"),
            (&format!("jj:conflict-labels a\n b\njj:trees {T} {P} {T}\n"), "2 jj:conflict-labels for 3"),
            ("valueless\n", "without a value"),
            (" continued\n", "several lines"),
        ] {
            let err = check_commit(commit(extra).as_bytes()).unwrap_err();
            assert!(err.contains(why), "{extra:?}: {err} (expected {why:?})");
        }
        let bad_labels = [&b"tree "[..], T.as_bytes(), b"\nauthor ", WHO.as_bytes(), b"\ncommitter ", WHO.as_bytes()];
        let mut data = bad_labels.concat();
        data.extend_from_slice(b"\njj:conflict-labels \xff\n b\n c\njj:trees ");
        data.extend_from_slice(format!("{T} {P} {T}\n\nm").as_bytes());
        assert!(check_commit(&data).unwrap_err().contains("not UTF-8"));
    }

    #[test]
    fn the_fixed_headers_as_git_fsck_checks_them() {
        let who = format!("author {WHO}\ncommitter {WHO}\n");
        for (data, why) in [
            (format!("parent {P}\ntree {T}\n{who}\nm"), "start with its tree"),
            (format!("tree {U}\n{who}\nm"), "bad tree"),
            (format!("tree {T}\nparent {P}x\n{who}\nm"), "bad parent"),
            (format!("tree {T}\ncommitter {WHO}\n\nm"), "no author"),
            (format!("tree {T}\nauthor {WHO}\n{who}\nm"), "no committer"),
            (format!("tree {T}\nauthor {WHO}\n\nm"), "no committer"),
            (format!("tree {T}\n{who}"), "no blank line"),
            (format!("tree {T}\n{who}\nm\0"), "NUL"),
            (format!("tree {T}\nauthor {WHO}\n extra\ncommitter {WHO}\n\nm"), "several lines"),
        ] {
            let err = check_commit(data.as_bytes()).unwrap_err();
            assert!(err.contains(why), "{data:?}: {err} (expected {why:?})");
        }
    }

    // git's t1450-fsck.sh identity cases, and fsck_ident's other branches.
    #[test]
    fn identities_as_fsck_ident_checks_them() {
        for ok in [WHO, "A <a> 0 +0000", "A U Thor <authorATexample.com> 1 -0130", "A <a>  \t 12 +0000", " <> 1 +0000"]
        {
            assert_eq!(check_ident(ok.as_bytes()), Ok(()), "{ok:?}");
        }
        for (bad, why) in [
            ("A U Thor <author@e>xample.com> 1 +0000", "missing space before date"),
            ("A U Thor author@example.com> 1 +0000", "bad name"),
            ("A U Thor 1 +0000", "missing email"),
            ("A U Thor> <a@b> 1 +0000", "bad name"),
            ("<a@b> 1 +0000", "missing space before email"),
            ("A<a@b> 1 +0000", "missing space before email"),
            ("A <a<b> 1 +0000", "bad email"),
            ("A <a@b>1 +0000", "missing space before date"),
            ("A <a@b> x +0000", "bad date"),
            ("A <a@b> 01 +0000", "zero-padded date"),
            ("A <a@b> 18446744073709551617 +0000", "date out of range"),
            ("A <a@b> 9223372036854776 +0000", "date out of range"),
            ("A <a@b> 1+0000", "bad date"),
            ("A <a@b> 1 0000", "bad time zone"),
            ("A <a@b> 1 +000", "bad time zone"),
            ("A <a@b> 1 +00000", "bad time zone"),
            ("A <a@b> 1 +0000 ", "bad time zone"),
        ] {
            assert_eq!(check_ident(bad.as_bytes()), Err(why), "{bad:?}");
        }
    }
}
