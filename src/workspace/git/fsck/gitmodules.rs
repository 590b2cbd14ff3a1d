//! The content checks git's fsck makes of `.gitmodules` and `.gitattributes`
//! blobs (`fsck_blob` and `fsck_gitmodules_fn` in fsck.c), with git's config
//! parser (`git_parse_source` in config.c) ported to read the former.

use super::url::check_submodule_url;

/// git's attr.h: `.gitattributes` larger than this, or with a line this
/// long, are refused by fsck (gitattributesLarge, gitattributesLineLength).
const ATTR_MAX_FILE_SIZE: usize = 100 << 20;
const ATTR_MAX_LINE_LENGTH: usize = 2048;

/// Checks a blob found under a `.gitattributes` name.
pub fn check_gitattributes(blob: &[u8]) -> Result<(), String> {
    if blob.len() > ATTR_MAX_FILE_SIZE {
        return Err(format!(".gitattributes of {} bytes, more than git reads", blob.len()));
    }
    // git reads up to the first NUL.
    let text = blob.split(|b| *b == 0).next().unwrap_or_default();
    if text.split(|b| *b == b'\n').any(|line| line.len() >= ATTR_MAX_LINE_LENGTH) {
        return Err(format!(
            ".gitattributes with a line of {ATTR_MAX_LINE_LENGTH} bytes or more, which git does not read"
        ));
    }
    Ok(())
}

/// Checks a blob found under a `.gitmodules` name as git's fsck does: every
/// `submodule.<name>.*` setting with an allowed name, its `url` one git would
/// fetch from, its `path` and `url` no command-line option, and no `update`
/// command. A blob git cannot parse as config (fsck only notes it, and git then
/// reads none of it) is refused too, as is a NUL, which git's parser would cut
/// names and values at.
pub fn check_gitmodules(blob: &[u8]) -> Result<(), String> {
    if blob.contains(&0) {
        return Err("a .gitmodules holding a NUL byte".into());
    }
    let mut problem: Option<String> = None;
    parse_config(blob, &mut |var, value| {
        if problem.is_none() {
            problem = check_setting(var, value).err();
        }
    })
    .map_err(|line| format!("a .gitmodules git cannot parse (line {line})"))?;
    problem.map_or(Ok(()), Err)
}

fn check_setting(var: &[u8], value: Option<&[u8]>) -> Result<(), String> {
    // parse_config_key(var, "submodule", &subsection, ..., &key).
    let Some(rest) = var.strip_prefix(b"submodule.") else { return Ok(()) };
    let Some(dot) = rest.iter().rposition(|b| *b == b'.') else { return Ok(()) };
    let (name, key) = (&rest[..dot], &rest[dot + 1..]);
    let shown = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    if !submodule_name_ok(name) {
        return Err(format!("a .gitmodules with the disallowed submodule name {:?}", shown(name)));
    }
    let Some(value) = value else { return Ok(()) };
    match key {
        b"url" if !check_submodule_url(value) => {
            Err(format!("a .gitmodules with the disallowed url {:?}", shown(value)))
        }
        b"path" if value.starts_with(b"-") => Err(format!("a .gitmodules with the disallowed path {:?}", shown(value))),
        b"update" if value.starts_with(b"!") => {
            Err(format!("a .gitmodules with the disallowed update command {:?}", shown(value)))
        }
        _ => Ok(()),
    }
}

/// git's `check_submodule_name`: not empty, and no `..` component (with `/`
/// or `\` as separators).
fn submodule_name_ok(name: &[u8]) -> bool {
    !name.is_empty() && !name.split(|b| matches!(b, b'/' | b'\\')).any(|part| part == b"..")
}

/// git's `isspace` (sane_ctype: space, tab, newline, carriage return).
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r')
}

fn is_key_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'-'
}

/// Reads a config blob as git's `get_next_char` does: CRLF as LF, and a
/// final newline at the end.
struct Source<'a> {
    data: &'a [u8],
    pos: usize,
    eof: bool,
    line: usize,
}

impl Source<'_> {
    fn next(&mut self) -> u8 {
        let Some(&c) = self.data.get(self.pos) else {
            self.eof = true;
            return b'\n';
        };
        self.pos += 1;
        if c == b'\r' && self.data.get(self.pos) == Some(&b'\n') {
            self.pos += 1;
            self.line += 1;
            return b'\n';
        }
        if c == b'\n' {
            self.line += 1;
        }
        c
    }
}

/// git's `git_parse_source`: calls `setting` with each variable (section,
/// subsection and key, lowercased but for the subsection) and its value
/// (`None` for a bare key); `Err` holds the line git would report.
/// What `parse_config` calls with each variable and its value.
type Setting<'a> = dyn FnMut(&[u8], Option<&[u8]>) + 'a;

fn parse_config(data: &[u8], setting: &mut Setting<'_>) -> Result<(), usize> {
    const BOM: &[u8] = b"\xef\xbb\xbf";
    let data = data.strip_prefix(BOM).unwrap_or(data);
    let mut src = Source { data, pos: 0, eof: false, line: 1 };
    let mut var: Vec<u8> = Vec::new();
    let mut base_len = 0;
    let mut comment = false;
    loop {
        let c = src.next();
        if c == b'\n' {
            if src.eof {
                return Ok(());
            }
            comment = false;
        } else if comment || is_space(c) {
            continue;
        } else if c == b'#' || c == b';' {
            comment = true;
        } else if c == b'[' {
            var.clear();
            if !section(&mut src, &mut var) || var.is_empty() {
                return Err(src.line);
            }
            var.push(b'.');
            base_len = var.len();
        } else if c.is_ascii_alphabetic() {
            var.truncate(base_len);
            var.push(c.to_ascii_lowercase());
            let value = key_and_value(&mut src, &mut var).ok_or(src.line)?;
            setting(&var, value.as_deref());
        } else {
            return Err(src.line);
        }
    }
}

/// git's `get_base_var` and `get_extended_base_var`: `[section]`,
/// `[section.sub]` or `[section "subsection"]`.
fn section(src: &mut Source<'_>, name: &mut Vec<u8>) -> bool {
    loop {
        let c = src.next();
        if src.eof {
            return false;
        }
        if c == b']' {
            return true;
        }
        if is_space(c) {
            return subsection(src, name, c);
        }
        if !is_key_char(c) && c != b'.' {
            return false;
        }
        name.push(c.to_ascii_lowercase());
    }
}

fn subsection(src: &mut Source<'_>, name: &mut Vec<u8>, mut c: u8) -> bool {
    loop {
        if c == b'\n' {
            return false;
        }
        c = src.next();
        if !is_space(c) {
            break;
        }
    }
    if c != b'"' {
        return false;
    }
    name.push(b'.');
    loop {
        let mut c = src.next();
        if c == b'\n' {
            return false;
        }
        if c == b'"' {
            break;
        }
        if c == b'\\' {
            c = src.next();
            if c == b'\n' {
                return false;
            }
        }
        name.push(c);
    }
    src.next() == b']'
}

/// git's `get_value`: the rest of the key, then `= value` or nothing.
fn key_and_value(src: &mut Source<'_>, name: &mut Vec<u8>) -> Option<Option<Vec<u8>>> {
    let mut c;
    loop {
        c = src.next();
        if src.eof || !is_key_char(c) {
            break;
        }
        name.push(c.to_ascii_lowercase());
    }
    while c == b' ' || c == b'\t' {
        c = src.next();
    }
    if c == b'\n' {
        return Some(None);
    }
    if c != b'=' {
        return None;
    }
    value(src).map(Some)
}

/// git's `parse_value`: quotes, escapes, comments, trailing blanks trimmed.
fn value(src: &mut Source<'_>) -> Option<Vec<u8>> {
    let (mut quote, mut comment) = (false, false);
    let mut out = Vec::new();
    let mut trim_len = 0;
    loop {
        let mut c = src.next();
        if c == b'\n' {
            if quote {
                return None;
            }
            if trim_len > 0 {
                out.truncate(trim_len);
            }
            return Some(out);
        }
        if comment {
            continue;
        }
        if is_space(c) && !quote {
            if trim_len == 0 {
                trim_len = out.len();
            }
            if !out.is_empty() {
                out.push(c);
            }
            continue;
        }
        if !quote && (c == b';' || c == b'#') {
            comment = true;
            continue;
        }
        trim_len = 0;
        if c == b'\\' {
            c = match src.next() {
                b'\n' => continue,
                b't' => b'\t',
                b'b' => 0x08,
                b'n' => b'\n',
                b'\\' => b'\\',
                b'"' => b'"',
                _ => return None,
            };
            out.push(c);
            continue;
        }
        if c == b'"' {
            quote = !quote;
            continue;
        }
        out.push(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(text: &str) -> Result<Vec<(String, Option<String>)>, usize> {
        let mut out = Vec::new();
        parse_config(text.as_bytes(), &mut |var, value| {
            let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            out.push((s(var), value.map(s)));
        })?;
        Ok(out)
    }

    #[test]
    fn config_as_git_parses_it() {
        let text = "\u{feff}# comment\n[Submodule \"Sub\\\"x\"]\n\tPath = a b  ; comment\n\turl=\"-q\" # c\n\tbare\n[core.x]\nk = \"a\\tb\"\\\n c\r\n";
        assert_eq!(
            settings(text).unwrap(),
            [
                ("submodule.Sub\"x.path".into(), Some("a b".into())),
                ("submodule.Sub\"x.url".into(), Some("-q".into())),
                ("submodule.Sub\"x.bare".into(), None),
                ("core.x.k".into(), Some("a\tb c".into())),
            ]
        );
        for bad in ["[sub", "[a \"b]", "[a b]", "x = \"open", "x = \\q", "[s]\n1x = y", "= y", "[a\n\"b\"]", "[]"] {
            assert!(settings(bad).is_err(), "{bad:?} parses");
        }
    }

    // git's t7450-bad-git-dotfiles.sh ("check names") and t7416 / fsck's rules.
    #[test]
    fn submodule_names_paths_urls_and_updates_as_fsck_checks_them() {
        for name in ["valid", "valid/with/paths"] {
            assert!(submodule_name_ok(name.as_bytes()), "{name}");
        }
        for name in
            ["", "../foo", "/../foo", "..\\foo", "\\..\\foo", "foo/..", "foo/../", "foo\\..", "foo\\..\\", "foo/../bar"]
        {
            assert!(!submodule_name_ok(name.as_bytes()), "{name:?}");
        }
        let ok = "[submodule \"lib\"]\n\tpath = lib\n\turl = https://example.com/lib.git\n\tupdate = rebase\n";
        assert_eq!(check_gitmodules(ok.as_bytes()), Ok(()));
        for (bad, why) in [
            ("[submodule \"x\"]\nurl = -oProxyCommand=sh\n", "url"),
            ("[submodule \"x\"]\nurl = ./%0ahost=example.com/foo.git\n", "url"),
            ("[submodule \"x\"]\npath = --upload-pack=x\n", "path"),
            ("[submodule \"x\"]\nupdate = !rm -rf ~\n", "update command"),
            ("[submodule \"../../modules/evil\"]\npath = x\n", "name"),
            ("[submodule.x]\nurl = -x\n", "url"),
            ("[submodule \"x\"]\nurl = \"unterminated\n", "cannot parse"),
            ("[submodule \"x\"]\npath = a\0b\n", "NUL"),
        ] {
            let err = check_gitmodules(bad.as_bytes()).unwrap_err();
            assert!(err.contains(why), "{bad:?}: {err}");
        }
        // Settings outside `submodule.<name>` are git's business, not fsck's.
        assert_eq!(check_gitmodules(b"[core]\nurl = -x\n[submodule]\nurl = -x\n"), Ok(()));
    }

    #[test]
    fn gitattributes_within_what_git_reads() {
        assert_eq!(check_gitattributes(b"*.txt text\n"), Ok(()));
        let long = vec![b'a'; ATTR_MAX_LINE_LENGTH];
        assert!(check_gitattributes(&long).unwrap_err().contains("line"));
        let mut after_nul = b"ok\n\0".to_vec();
        after_nul.extend_from_slice(&long);
        assert_eq!(check_gitattributes(&after_nul), Ok(()), "git stops reading at a NUL");
        assert!(check_gitattributes(&vec![b'\n'; ATTR_MAX_FILE_SIZE + 1]).unwrap_err().contains("more than"));
    }
}
