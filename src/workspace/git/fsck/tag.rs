//! Tag objects as git's `fsck_tag_standalone` (fsck.c) checks them, at the
//! severities `git fsck --strict` fails on: a bad tag name, a missing
//! `tagger` and extra headers are only notices there, and pass here too.
//! forage imports no tag objects (the agent's refs must name commits); this
//! checks the tags a commit embeds in its `mergetag` headers.

use super::commit::{check_ident, parse_hex};

/// Checks `data` as a tag object.
pub fn check_tag(data: &[u8]) -> Result<(), String> {
    // verify_headers: the headers end in a blank line or a final newline,
    // and hold no NUL.
    let end = match data.windows(2).position(|w| w == b"\n\n") {
        Some(end) => end + 1,
        None if data.ends_with(b"\n") => data.len(),
        None => return Err("an unterminated tag header".into()),
    };
    let header = &data[..end];
    if header.contains(&0) {
        return Err("a NUL in the tag's header".into());
    }
    let mut lines = header.split(|b| *b == b'\n').peekable();
    let mut field = |name: &str| -> Result<&[u8], String> {
        let line = lines.next().unwrap_or_default();
        line.strip_prefix(name.as_bytes()).ok_or_else(|| format!("no `{}` line where git puts it", name.trim_end()))
    };
    parse_hex(field("object ")?).ok_or("a bad object line")?;
    if !matches!(field("type ")?, b"commit" | b"tree" | b"blob" | b"tag") {
        return Err("a bad type line".into());
    }
    field("tag ")?;
    if let Some(tagger) = lines.next_if(|l| l.starts_with(b"tagger ")) {
        check_ident(&tagger[b"tagger ".len()..]).map_err(|why| format!("a bad tagger line: {why}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const O: &str = "2222222222222222222222222222222222222222";

    #[test]
    fn tags_as_fsck_tag_standalone_checks_them() {
        let good =
            format!("object {O}\ntype commit\ntag v1\ntagger T A Gger <tagger@example.com> 1234567890 -0000\n\nmsg\n");
        assert_eq!(check_tag(good.as_bytes()), Ok(()));
        // t1450-fsck.sh: a bad tag name and a missing tagger are only notices.
        assert_eq!(check_tag(format!("object {O}\ntype commit\ntag wrong name format\n\nm").as_bytes()), Ok(()));
        for (bad, why) in [
            ("type commit\ntag v1\n\nm".to_owned(), "object"),
            (format!("object {O}x\ntype commit\ntag v1\n\nm"), "bad object"),
            (format!("object {O}\ntype bogus\ntag v1\n\nm"), "bad type"),
            (format!("object {O}\ntag v1\n\nm"), "type"),
            (format!("object {O}\ntype commit\n\nm"), "`tag` line"),
            (format!("object {O}\ntype commit\ntag v1\ntagger Bad Tagger Name\n\nm"), "bad tagger"),
            (format!("object {O}\ntype commit\ntag v1"), "unterminated"),
            (format!("object {O}\ntype commit\0\ntag v1\n\nm"), "NUL"),
        ] {
            let err = check_tag(bad.as_bytes()).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
    }
}
