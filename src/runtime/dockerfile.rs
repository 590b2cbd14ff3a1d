//! Reading a Dockerfile's text the way the engine's builder does, as far as
//! forage needs it: its instructions (continuations joined, comments
//! dropped), whether it can be layered on another image (`ARG BASE` before
//! its first `FROM`), and `$VAR` / `${VAR}` of those ARGs substituted, so that
//! `FROM ${BASE}` names the image it really starts from.

use std::collections::BTreeMap;

/// The build argument a layerable Dockerfile starts from: `ARG BASE=…` before
/// its first `FROM ${BASE}`.
pub const BASE_ARG: &str = "BASE";

/// The Dockerfile's instructions, continuation lines joined, comments dropped.
pub fn logical_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') && current.is_empty() {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                current.push_str(head);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                out.push(std::mem::take(&mut current));
            }
        }
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// The ARGs declared before the first `FROM` (the only ones a `FROM` can
/// use), with their defaults, then `given` (the build's arguments) on top.
pub fn global_args(text: &str, given: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut args = BTreeMap::new();
    for line in logical_lines(text) {
        let mut words = line.splitn(2, char::is_whitespace);
        let instruction = words.next().unwrap_or("").to_ascii_uppercase();
        let rest = words.next().unwrap_or("").trim();
        match instruction.as_str() {
            "FROM" => break,
            "ARG" => {
                for decl in rest.split_whitespace() {
                    let (name, default) = decl.split_once('=').unwrap_or((decl, ""));
                    args.insert(name.to_owned(), unquote(default).to_owned());
                }
            }
            _ => {}
        }
    }
    for (k, v) in given {
        if args.contains_key(k) {
            args.insert(k.clone(), v.clone());
        }
    }
    args
}

fn unquote(s: &str) -> &str {
    for q in ['"', '\''] {
        if let Some(inner) = s.strip_prefix(q).and_then(|s| s.strip_suffix(q)) {
            return inner;
        }
    }
    s
}

/// Whether the Dockerfile can be layered on an image forage names: it
/// declares `ARG BASE` before its first `FROM`, and that `FROM` uses it.
pub fn takes_base(text: &str) -> bool {
    let mut declared = false;
    for line in logical_lines(text) {
        let mut words = line.split_whitespace();
        match words.next().map(str::to_ascii_uppercase).as_deref() {
            Some("ARG") => {
                declared |= words.any(|d| d.split_once('=').map_or(d, |(n, _)| n) == BASE_ARG);
            }
            Some("FROM") => {
                let image = words.find(|w| !w.starts_with("--")).unwrap_or("");
                return declared && (image == "${BASE}" || image == "$BASE");
            }
            _ => {}
        }
    }
    false
}

/// `word` with `$NAME` and `${NAME}` replaced by `args` (unknown ones by
/// nothing, as the builder does).
pub fn substitute(word: &str, args: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = word;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, tail) = match after.strip_prefix('{') {
            Some(inner) => match inner.find('}') {
                Some(end) => (&inner[..end], &inner[end + 1..]),
                None => (inner, ""),
            },
            None => {
                let end = after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
                (&after[..end], &after[end..])
            }
        };
        if name.is_empty() {
            out.push('$');
        } else {
            // `${NAME:-default}`: the default when unset or empty.
            let (name, default) = name.split_once(":-").unwrap_or((name, ""));
            out.push_str(args.get(name).filter(|v| !v.is_empty()).map_or(default, String::as_str));
        }
        rest = tail;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layerable_dockerfile_declares_base_before_its_from() {
        assert!(takes_base("# c\nARG BASE=node:22\nFROM ${BASE}\nRUN x\n"));
        assert!(takes_base("ARG X=1 BASE\nFROM --platform=linux/amd64 $BASE AS a\n"));
        assert!(!takes_base("FROM node:22\nARG BASE\n"), "ARG after FROM");
        assert!(!takes_base("ARG BASE=node:22\nFROM node:22\n"), "FROM not using it");
        assert!(!takes_base("ARG BASEX=1\nFROM ${BASEX}\n"));
        assert!(!takes_base(""));
    }

    #[test]
    fn args_before_from_are_substituted_with_the_builds_on_top() {
        let text = "ARG BASE=\"node:22\" TAG=1\nFROM ${BASE}\nARG LATE=x\n";
        let defaults = global_args(text, &BTreeMap::new());
        assert_eq!(substitute("${BASE}", &defaults), "node:22");
        let given = BTreeMap::from([("BASE".to_string(), "mine:1".to_string()), ("LATE".into(), "y".into())]);
        let args = global_args(text, &given);
        assert_eq!(substitute("$BASE", &args), "mine:1");
        assert!(!args.contains_key("LATE"), "only ARGs before FROM");
        assert_eq!(substitute("a/${NOPE:-d}:$TAG-x$", &args), "a/d:1-x$");
    }
}
