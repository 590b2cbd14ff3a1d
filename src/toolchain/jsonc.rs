//! JSON with comments and trailing commas, as devcontainer.json is written:
//! turned into plain JSON (comments blanked, a comma before `}` or `]`
//! dropped), so that serde_json reads it and its errors keep their line and
//! column.

/// `text` as plain JSON, every line where it was.
pub fn to_json(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(bytes.len());
    // Where in `out` a comma waits to see whether a `}` or `]` follows it.
    let mut pending_comma: Option<usize> = None;
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        match c {
            b'"' => {
                pending_comma = None;
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(bytes.len());
                out.extend_from_slice(&bytes[start..i]);
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    out.push(b' ');
                    i += 1;
                }
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                out.extend_from_slice(b"  ");
                i += 2;
                while i < bytes.len() && !(bytes[i] == b'*' && bytes.get(i + 1) == Some(&b'/')) {
                    out.push(if bytes[i] == b'\n' { b'\n' } else { b' ' });
                    i += 1;
                }
                if i < bytes.len() {
                    out.extend_from_slice(b"  ");
                    i += 2;
                }
                continue;
            }
            b',' => pending_comma = Some(out.len()),
            b'}' | b']' => {
                if let Some(at) = pending_comma.take() {
                    out[at] = b' ';
                }
            }
            c if c.is_ascii_whitespace() => {}
            _ => pending_comma = None,
        }
        out.push(c);
        i += 1;
    }
    // Only ASCII bytes were replaced, each by an ASCII byte: still UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_trailing_commas_go_strings_stay() {
        let text = "{\n  // a comment\n  \"a\": \"x // not a comment, /* nor this */\",\n  /* block\n  */ \"b\": [1, 2,],\n  \"c\": {\"d\": \"\\\",\",},\n}\n";
        let v: serde_json::Value = serde_json::from_str(&to_json(text)).unwrap();
        assert_eq!(v["a"], "x // not a comment, /* nor this */");
        assert_eq!(v["b"], serde_json::json!([1, 2]));
        assert_eq!(v["c"]["d"], "\",");
        assert_eq!(to_json(text).lines().count(), text.lines().count(), "lines stay where they were");
    }
}
