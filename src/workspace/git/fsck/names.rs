//! The names a tree entry may not have: git's own rules, ported from git's
//! `utf8.c` (`is_hfs_dotgit` and friends), `path.c` (`is_ntfs_dotgit`,
//! `is_ntfs_dotgitmodules` and friends), `fsck.c` (`fsck_tree`) and
//! `read-cache.c` (`verify_path`, with `core.protectNTFS` and
//! `core.protectHFS` both on), so that a name git refuses on any file system
//! never reaches the host; and jj's (`.jj`, names that are not UTF-8).

/// What a well-named entry is to git beyond a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    None,
    /// `.gitmodules` in some spelling: its blob is checked as git's fsck does.
    Gitmodules,
    /// `.gitattributes` in some spelling: likewise.
    Gitattributes,
}

/// The longest name a file can have on the file systems git checks out to
/// (Linux's NAME_MAX): git's own fsck warns only past 4096 bytes
/// (`largePathname`), but no checkout could write such a name.
pub const MAX_NAME_BYTES: usize = 255;

/// What an entry is, as far as its name's rules go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Symlink,
    Dir,
    Submodule,
}

/// Checks one entry's name; `Err` says why git (or jj) would refuse it.
pub fn check_name(name: &[u8], kind: EntryKind) -> Result<Special, String> {
    let shown = String::from_utf8_lossy(name);
    // fsck: emptyName, fullPathname, hasDot, hasDotdot.
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') || name.contains(&0) {
        return Err(format!("a tree entry named {shown:?}"));
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(format!("a name of {} bytes, longer than the {MAX_NAME_BYTES} a file name can have", name.len()));
    }
    // jj reads tree entry names as UTF-8 and fails on any other.
    if std::str::from_utf8(name).is_err() {
        return Err(format!("a name that is not UTF-8 ({shown:?}), which jj cannot read"));
    }
    if is_dotgit(name) {
        return Err(format!("a tree entry named {shown:?}, which would be a git directory"));
    }
    // A `.jj` in a checkout of a colocated repository is read by the user's jj.
    if is_hfs_dot(name, b"jj")
        || is_ntfs_dot_short(name, b"jj")
        || after_backslashes(name, |n| is_ntfs_dot_short(n, b"jj"))
    {
        return Err(format!("a tree entry named {shown:?}, which would be a jj repository"));
    }
    if is_dotgitmodules(name) {
        return match kind {
            // fsck: gitmodulesSymlink; verify_path refuses it at checkout too.
            EntryKind::Symlink => Err(format!("a .gitmodules that is a symlink ({shown:?})")),
            // fsck: gitmodulesBlob (a tree) and gitmodulesMissing (a gitlink).
            EntryKind::Dir | EntryKind::Submodule => Err(format!("a .gitmodules that is not a file ({shown:?})")),
            EntryKind::File => Ok(Special::Gitmodules),
        };
    }
    if is_hfs_dot(name, b"gitattributes") || is_ntfs_dot_generic(name, b"gitattributes", b"gi7d29") {
        return match kind {
            // fsck: gitattributesSymlink is only a notice; git does not follow it.
            EntryKind::Symlink => Ok(Special::None),
            // fsck: gitattributesBlob, gitattributesMissing.
            EntryKind::Dir | EntryKind::Submodule => Err(format!("a .gitattributes that is not a file ({shown:?})")),
            EntryKind::File => Ok(Special::Gitattributes),
        };
    }
    Ok(Special::None)
}

/// `.git` as any file system git protects sees it (fsck's hasDotgit: HFS+
/// and NTFS spellings, also after a backslash, NTFS's directory separator).
fn is_dotgit(name: &[u8]) -> bool {
    is_hfs_dot(name, b"git")
        || is_ntfs_dot_short(name, b"git")
        || after_backslashes(name, |n| is_ntfs_dot_short(n, b"git"))
}

/// `.gitmodules` as fsck finds it (`fsck_tree`).
fn is_dotgitmodules(name: &[u8]) -> bool {
    let ntfs = |n: &[u8]| is_ntfs_dot_generic(n, b"gitmodules", b"gi7eba");
    is_hfs_dot(name, b"gitmodules") || ntfs(name) || after_backslashes(name, ntfs)
}

/// `check` holds for what follows some backslash in `name`.
fn after_backslashes(name: &[u8], check: impl Fn(&[u8]) -> bool) -> bool {
    name.iter().enumerate().any(|(i, b)| *b == b'\\' && check(&name[i + 1..]))
}

/// The byte at `i`, or 0 past the end (git's names are NUL-terminated).
fn at(name: &[u8], i: usize) -> u8 {
    name.get(i).copied().unwrap_or(0)
}

/// git's `pick_one_utf8_char`: the next code point and its length; `None`
/// for malformed UTF-8 (overlong forms, surrogates, U+FFFE/U+FFFF included);
/// `(0, 0)` at the end.
fn pick_utf8(s: &[u8]) -> Option<(u32, usize)> {
    let cont = |i: usize| s.get(i).is_some_and(|b| b & 0xc0 == 0x80);
    let Some(&b0) = s.first() else { return Some((0, 0)) };
    let b = |i: usize| u32::from(s[i]);
    if b0 < 0x80 {
        Some((u32::from(b0), 1))
    } else if b0 & 0xe0 == 0xc0 {
        (cont(1) && b0 & 0xfe != 0xc0).then(|| (((b(0) & 0x1f) << 6) | (b(1) & 0x3f), 2))
    } else if b0 & 0xf0 == 0xe0 {
        let ok = cont(1)
            && cont(2)
            && !(b0 == 0xe0 && s[1] & 0xe0 == 0x80)
            && !(b0 == 0xed && s[1] & 0xe0 == 0xa0)
            && !(b0 == 0xef && s[1] == 0xbf && s[2] & 0xfe == 0xbe);
        ok.then(|| (((b(0) & 0x0f) << 12) | ((b(1) & 0x3f) << 6) | (b(2) & 0x3f), 3))
    } else if b0 & 0xf8 == 0xf0 {
        let ok = cont(1) && cont(2) && cont(3) && !(b0 == 0xf0 && s[1] & 0xf0 == 0x80) && !(b0 == 0xf4 && s[1] > 0x8f);
        (ok && b0 <= 0xf4)
            .then(|| (((b(0) & 0x07) << 18) | ((b(1) & 0x3f) << 12) | ((b(2) & 0x3f) << 6) | (b(3) & 0x3f), 4))
    } else {
        None
    }
}

/// git's `next_hfs_char`: the next code point HFS+ does not ignore; 0 at the
/// end and for malformed UTF-8 (after which everything reads as the end).
fn next_hfs_char(s: &mut &[u8]) -> u32 {
    loop {
        let Some((c, len)) = pick_utf8(s) else {
            *s = &[];
            return 0;
        };
        *s = &s[len..];
        match c {
            0x200c..=0x200f | 0x202a..=0x202e | 0x206a..=0x206f | 0xfeff => continue,
            _ => return c,
        }
    }
}

/// git's `is_hfs_dot_generic`: `.` and `needle`, ignoring case and the code
/// points HFS+ ignores, then the end or `/`.
fn is_hfs_dot(name: &[u8], needle: &[u8]) -> bool {
    let mut s = name;
    if next_hfs_char(&mut s) != u32::from(b'.') {
        return false;
    }
    for want in needle {
        let c = next_hfs_char(&mut s);
        if c > 127 || (c as u8).to_ascii_lowercase() != *want {
            return false;
        }
    }
    matches!(next_hfs_char(&mut s), 0 | 0x2f)
}

/// git's `is_ntfs_dotgit`, for `needle` (`git`, or `jj`): `.needle` or
/// `needle~1`, any case, then only spaces and periods up to the end, an
/// alternate data stream (`:`) or a directory separator.
fn is_ntfs_dot_short(name: &[u8], needle: &[u8]) -> bool {
    let n = needle.len();
    let rest = if at(name, 0) == b'.' && name.len() > n && name[1..=n].eq_ignore_ascii_case(needle) {
        &name[n + 1..]
    } else if name.len() >= n + 2 && name[..n].eq_ignore_ascii_case(needle) && &name[n..n + 2] == b"~1" {
        &name[n + 2..]
    } else {
        return false;
    };
    for c in rest {
        match c {
            b'/' | b'\\' | b':' => return true,
            b'.' | b' ' => {}
            _ => return false,
        }
    }
    true
}

/// From `i` on, only spaces and periods up to the end or an alternate data
/// stream (git's `only_spaces_and_periods`).
fn only_spaces_and_periods(name: &[u8], i: usize) -> bool {
    for c in name.iter().skip(i) {
        match c {
            b':' => return true,
            b' ' | b'.' => {}
            _ => return false,
        }
    }
    true
}

/// git's `is_ntfs_dot_generic`: `.name` with trailing spaces and periods, its
/// short names `NAME~1`..`NAME~4` of the first six letters, and the fall-back
/// short names made of `prefix` (git's hash-derived one) and a tilde number.
fn is_ntfs_dot_generic(name: &[u8], dotgit_name: &[u8], prefix: &[u8; 6]) -> bool {
    let len = dotgit_name.len();
    if at(name, 0) == b'.' && name.len() > len && name[1..=len].eq_ignore_ascii_case(dotgit_name) {
        return only_spaces_and_periods(name, len + 1);
    }
    let short = name.len() >= 8 && name[..6].eq_ignore_ascii_case(&dotgit_name[..6]) && name[6] == b'~';
    if short && (b'1'..=b'4').contains(&name[7]) {
        return only_spaces_and_periods(name, 8);
    }
    let mut saw_tilde = false;
    let mut i = 0;
    while i < 8 {
        let c = at(name, i);
        if c == 0 {
            return false;
        } else if saw_tilde {
            if !c.is_ascii_digit() {
                return false;
            }
        } else if c == b'~' {
            i += 1;
            if !(b'1'..=b'9').contains(&at(name, i)) {
                return false;
            }
            saw_tilde = true;
        } else if i >= 6 || c & 0x80 != 0 || c.to_ascii_lowercase() != prefix[i] {
            return false;
        }
        i += 1;
    }
    only_spaces_and_periods(name, 8)
}

#[cfg(test)]
mod tests {
    use super::*;

    const U200C: &str = "\u{200c}";

    // git's t/t0060-path-utils.sh, "match .gitmodules".
    #[test]
    fn gitmodules_in_every_spelling_git_knows() {
        let matching =
            [".gitmodules".to_owned(), format!(".git{U200C}modules"), ".Gitmodules".into(), ".gitmoduleS".into()]
                .into_iter()
                .chain(
                    [
                        ".gitmodules ",
                        ".gitmodules.",
                        ".gitmodules  ",
                        ".gitmodules. ",
                        ".gitmodules .",
                        ".gitmodules..",
                        ".gitmodules   ",
                        ".gitmodules.  ",
                        ".gitmodules . ",
                        ".gitmodules  .",
                        ".Gitmodules ",
                        ".Gitmodules.",
                        ".Gitmodules . ",
                        "GITMOD~1",
                        "gitmod~1",
                        "GITMOD~2",
                        "gitmod~3",
                        "GITMOD~4",
                        "GITMOD~1 ",
                        "gitmod~2.",
                        "GITMOD~3  ",
                        "gitmod~4. ",
                        "GITMOD~1 .",
                        "gitmod~2   ",
                        "GITMOD~3.  ",
                        "gitmod~4 . ",
                        "GI7EBA~1",
                        "gi7eba~9",
                        "GI7EB~10",
                        "GI7EB~11",
                        "GI7EB~99",
                        "GI7E~100",
                        "GI7E~101",
                        "GI7E~999",
                        "~1000000",
                        "~9999999",
                        ".gitmodules:$DATA",
                        "gitmod~4 . :$DATA",
                    ]
                    .map(str::to_owned),
                );
        for name in matching {
            assert!(is_dotgitmodules(name.as_bytes()), "{name:?} is .gitmodules");
        }
    }

    // git's t/t0060-path-utils.sh, "match .gitmodules", after `--not`.
    #[test]
    fn names_like_gitmodules_that_are_not() {
        for name in [
            ".gitmodules x",
            ".gitmodules .x",
            " .gitmodules",
            "..gitmodules",
            "gitmodules",
            ".gitmodule",
            ".gitmodules x ",
            "GI7EBA~",
            "GI7EBA~0",
            "GI7EBA~~1",
            "GI7EBA~X",
            "Gx7EBA~1",
            "GI7EBX~1",
            "GI7EB~1",
            "GI7EB~01",
            "GI7EB~1X",
            ".gitmodules,:$DATA",
        ] {
            assert!(!is_dotgitmodules(name.as_bytes()), "{name:?} is not .gitmodules");
        }
    }

    // git's t/t0060-path-utils.sh ("match .gitattributes") and t1450-fsck.sh
    // (the dotgit cases).
    #[test]
    fn git_directories_and_attributes_in_every_spelling() {
        let attributes = [".gitattributes".to_owned(), format!(".git{U200C}attributes"), ".Gitattributes".into()];
        for name in attributes.iter().map(String::as_str).chain([".gitattributeS", "GITATT~1", "GI7D29~1"]) {
            assert_eq!(check_name(name.as_bytes(), EntryKind::File), Ok(Special::Gitattributes), "{name:?}");
        }
        let dotgit = [
            ".git".to_owned(),
            ".GIT".into(),
            format!(".gI{U200C}T"),
            ".Git".into(),
            ".git.".into(),
            ".\\.GIT\\foobar".into(),
            ".git\\foobar".into(),
            "git~1".into(),
            "GIT~1 .".into(),
            ".git::$INDEX_ALLOCATION".into(),
            ".git ::$DATA".into(),
            format!(".g{U200C}it"),
            format!("{}.git", '\u{feff}'),
            "a\\git~1".into(),
            ".git\u{200d}".into(),
        ];
        for name in dotgit {
            let why = check_name(name.as_bytes(), EntryKind::Dir).unwrap_err();
            assert!(why.contains("git directory"), "{name:?}: {why}");
        }
        // Malformed UTF-8 right after `.git` reads as its end to git's HFS+ check.
        assert!(is_hfs_dot(b".git\xff", b"git"));
        for name in [".gitx", ".git x", "git~2", "xgit~1", ".git\u{2000}", "a.git", "git"] {
            assert!(!is_dotgit(name.as_bytes()), "{name:?} is no git directory");
        }
    }

    #[test]
    fn what_each_kind_of_entry_may_be_named() {
        for name in [&b""[..], b".", b"..", b"a/b", b"a\0b"] {
            assert!(check_name(name, EntryKind::File).is_err(), "{name:?}");
        }
        assert!(check_name(&[b'a'; 256], EntryKind::File).unwrap_err().contains("256 bytes"));
        assert_eq!(check_name(&[b'a'; 255], EntryKind::File), Ok(Special::None));
        assert!(check_name(b"caf\xe9", EntryKind::File).unwrap_err().contains("not UTF-8"));
        for name in [".jj", ".JJ ", ".jj.", "jj~1", ".j\u{200c}j", "x\\.jj"] {
            let why = check_name(name.as_bytes(), EntryKind::Dir).unwrap_err();
            assert!(why.contains("jj repository"), "{name:?}: {why}");
        }
        assert!(check_name(b"GITMOD~1", EntryKind::Symlink).unwrap_err().contains("symlink"));
        assert!(check_name(b"x\\.gitmodules", EntryKind::Symlink).unwrap_err().contains("symlink"));
        assert!(check_name(b".gitmodules", EntryKind::Dir).unwrap_err().contains("not a file"));
        assert!(check_name(b".gitmodules", EntryKind::Submodule).unwrap_err().contains("not a file"));
        assert!(check_name(b".gitattributes", EntryKind::Dir).unwrap_err().contains("not a file"));
        assert_eq!(check_name(b".gitattributes", EntryKind::Symlink), Ok(Special::None));
        assert_eq!(check_name(b".gitmodules", EntryKind::File), Ok(Special::Gitmodules));
        for name in ["a.txt", ".github", ".gitignore", "jj", ".jjx", "café", "-rf"] {
            assert_eq!(check_name(name.as_bytes(), EntryKind::File), Ok(Special::None), "{name:?}");
        }
    }
}
