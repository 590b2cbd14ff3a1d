//! Image references, checked as the engine parses them.

/// Checks an image reference as the engine parses one
/// (`[host[:port]/]path[:tag][@sha256:hex]`), so that a bad one is refused with
/// a clear word before Docker is asked.
pub fn check_image_reference(reference: &str) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "{reference:?} is not an image reference ({why}); write it as name[:tag][@sha256:digest], e.g. ubuntu:24.04 or ghcr.io/org/agent:1"
        ))
    };
    let (rest, digest) = match reference.split_once('@') {
        Some((rest, digest)) => (rest, Some(digest)),
        None => (reference, None),
    };
    if let Some(digest) = digest {
        let ok = digest.strip_prefix("sha256:").is_some_and(|hex| {
            hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        });
        if !ok {
            return bad("a digest is sha256: and 64 lowercase hex digits");
        }
    }
    // A tag follows the last ':' after the last '/' (a ':' before it is a port).
    let (name, tag) = match rest.rfind(':').filter(|i| !rest[*i..].contains('/')) {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    if let Some(tag) = tag {
        let mut chars = tag.chars();
        let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if !first_ok || tag.len() > 128 || !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')) {
            return bad("a tag is up to 128 letters, digits, '_', '.' or '-', not starting with '.' or '-'");
        }
    }
    if name.is_empty() || name.len() > 255 {
        return bad("the name is empty or longer than 255 characters");
    }
    let mut parts: Vec<&str> = name.split('/').collect();
    // The first part is a registry host if it looks like one.
    if parts.len() > 1 && (parts[0].contains(['.', ':']) || parts[0] == "localhost") {
        let host = parts.remove(0);
        let (host, port) = host.split_once(':').unwrap_or((host, ""));
        let host_ok = !host.is_empty()
            && host.split('.').all(|l| {
                !l.is_empty()
                    && !l.starts_with('-')
                    && !l.ends_with('-')
                    && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            });
        if !host_ok || !(port.is_empty() || port.parse::<u16>().is_ok()) {
            return bad("the registry host or port is invalid");
        }
    }
    for part in parts {
        let separators_ok = !part.is_empty()
            && part.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
            && part.starts_with(|c: char| c.is_ascii_alphanumeric())
            && part.ends_with(|c: char| c.is_ascii_alphanumeric())
            && !part.contains("..")
            && !part.contains("___");
        if !separators_ok {
            return bad("each part of the name is lowercase letters and digits, separated by '.', '_', '__' or dashes");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_references_are_checked_as_the_engine_parses_them() {
        for ok in [
            "ubuntu",
            "ubuntu:24.04",
            "forage-host/shell:984693ae91412137",
            "ghcr.io/org/agent:1",
            "localhost:5000/a/b_c__d-e:v1.2",
            "registry.example.com:443/x",
            "node@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        ] {
            assert!(check_image_reference(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "Ubuntu",
            "ubuntu:",
            "ubuntu:-x",
            "a//b",
            "a/b/",
            "-a",
            "a b",
            "a@sha256:xyz",
            "ex ample.com/a",
            "a:b:c",
            "a..b",
        ] {
            let err = check_image_reference(bad).unwrap_err();
            assert!(err.contains(&format!("{bad:?}")), "{bad}: {err}");
        }
    }
}
