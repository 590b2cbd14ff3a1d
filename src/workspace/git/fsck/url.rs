//! git's `check_submodule_url` (submodule-config.c), with what it needs of
//! `url_decode` (url.c) and `url_normalize` (urlmatch.c): which `.gitmodules`
//! urls git's fsck refuses (gitmodulesUrl).

/// False for a url git's fsck refuses: a command-line option, a relative or
/// `git://` url that decodes to a newline or climbs out of its root, an
/// http(s)/ftp(s) url git cannot normalize or that decodes to a newline.
pub fn check_submodule_url(url: &[u8]) -> bool {
    if url.starts_with(b"-") {
        return false;
    }
    if is_relative(url) || url.starts_with(b"git://") {
        if url_decode(url).contains(&b'\n') {
            return false;
        }
        let (dotdots, next) = leading_dotdots(url);
        return !(dotdots > 0 && matches!(next.first(), Some(b':' | b'/')));
    }
    match curl_url(url) {
        // A newline decoded from what normalizing keeps: checked on the whole
        // url, which refuses a little more than git (a `%0a` in a segment a
        // later `..` drops).
        Some(curl) => normalizes(curl) && !url_decode(url).contains(&b'\n'),
        None => true,
    }
}

fn is_sep(c: u8) -> bool {
    c == b'/' || c == b'\\'
}

fn starts_with_dot_slash(s: &[u8]) -> bool {
    s.first() == Some(&b'.') && s.get(1).is_some_and(|c| is_sep(*c))
}

fn starts_with_dot_dot_slash(s: &[u8]) -> bool {
    s.starts_with(b"..") && s.get(2).is_some_and(|c| is_sep(*c))
}

fn is_relative(url: &[u8]) -> bool {
    starts_with_dot_slash(url) || starts_with_dot_dot_slash(url)
}

/// git's `count_leading_dotdots`: the `../` at the start, and what follows
/// them and any `./`.
fn leading_dotdots(mut url: &[u8]) -> (usize, &[u8]) {
    let mut count = 0;
    loop {
        if starts_with_dot_dot_slash(url) {
            count += 1;
            url = &url[3..];
        } else if starts_with_dot_slash(url) {
            url = &url[2..];
        } else {
            return (count, url);
        }
    }
}

/// git's `url_to_curl_url`: the url git-remote-curl would get, if any.
fn curl_url(url: &[u8]) -> Option<&[u8]> {
    for helper in [&b"http::"[..], b"https::", b"ftp::", b"ftps::"] {
        if let Some(rest) = url.strip_prefix(helper) {
            return Some(rest);
        }
    }
    let schemes = [&b"http://"[..], b"https://", b"ftp://", b"ftps://"];
    schemes.iter().any(|s| url.starts_with(s)).then_some(url)
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// `%XX` at the start of `s`, as git's `hex2chr` reads it.
fn escape(s: &[u8]) -> Option<u8> {
    Some(hex(*s.get(1)?)? << 4 | hex(*s.get(2)?)?)
}

/// git's `url_decode`: the scheme (up to a colon) kept, `%XX` decoded where
/// it is a valid, non-zero escape.
fn url_decode(url: &[u8]) -> Vec<u8> {
    let colon = url.iter().position(|b| *b == b':').filter(|p| *p > 0).unwrap_or(0);
    let mut out = url[..colon].to_vec();
    let mut s = &url[colon..];
    while let Some(&c) = s.first() {
        match escape(s).filter(|v| *v > 0).filter(|_| c == b'%') {
            Some(v) => {
                out.push(v);
                s = &s[3..];
            }
            None => {
                out.push(c);
                s = &s[1..];
            }
        }
    }
    out
}

/// Every `%` in `s` starts a valid escape (git's `append_normalized_escapes`).
fn escapes_ok(s: &[u8]) -> bool {
    s.iter().enumerate().all(|(i, c)| *c != b'%' || escape(&s[i..]).is_some())
}

/// Whether git's `url_normalize` accepts `url`: a scheme and `://`, valid
/// escapes in the user part, a host of host characters, a port in 1..65535,
/// valid escapes in the path and no `..` above its root.
fn normalizes(url: &[u8]) -> bool {
    const SCHEME: &[u8] = b"+.-";
    let scheme_len = url.iter().take_while(|c| c.is_ascii_alphanumeric() || SCHEME.contains(c)).count();
    if scheme_len == 0 || !url[0].is_ascii_alphabetic() || !url[scheme_len..].starts_with(b"://") {
        return false;
    }
    let mut rest = &url[scheme_len + 3..];
    let slash = rest.iter().position(|c| b"/?#".contains(c)).unwrap_or(rest.len());
    if let Some(at) = rest.iter().position(|c| *c == b'@').filter(|at| *at < slash) {
        if !escapes_ok(&rest[..at]) {
            return false;
        }
        rest = &rest[at + 1..];
    }
    let slash = rest.iter().position(|c| b"/?#".contains(c)).unwrap_or(rest.len());
    if slash == 0 || rest[0] == b':' {
        return false; // no host
    }
    let (host_port, path) = rest.split_at(slash);
    // The port starts at the last colon not inside an IPv6 literal's brackets.
    let colon = host_port.iter().rposition(|c| matches!(c, b':' | b']')).filter(|i| host_port[*i] == b':');
    let (host, port) = match colon {
        Some(i) => (&host_port[..i], Some(&host_port[i + 1..])),
        None => (host_port, None),
    };
    let host_char = |c: &u8| c.is_ascii_alphanumeric() || b".-_[:]".contains(c);
    host.iter().all(host_char) && port.is_none_or(port_ok) && path_ok(path)
}

/// A port git's normalizing keeps: none (`:` alone means the default), or
/// digits making 1..65535 (zeros only mean port 0, which it refuses).
fn port_ok(port: &[u8]) -> bool {
    let digits = port.iter().skip_while(|c| **c == b'0').collect::<Vec<_>>();
    if port.is_empty() {
        return true;
    }
    !digits.is_empty()
        && port.iter().all(u8::is_ascii_digit)
        && digits.len() <= 5
        && digits.iter().fold(0u32, |n, c| n * 10 + u32::from(**c - b'0')) <= 65535
}

/// The path (and what follows it): valid escapes, and `..` never above the root.
fn path_ok(path: &[u8]) -> bool {
    let end = path.iter().position(|c| b"?#".contains(c)).unwrap_or(path.len());
    let (segments, query) = path.split_at(end);
    let segments = segments.strip_prefix(b"/").unwrap_or(segments);
    let mut depth = 0usize;
    for segment in segments.split(|c| *c == b'/') {
        if !escapes_ok(segment) {
            return false;
        }
        match unescape_dots(segment).as_slice() {
            b"." => {}
            b".." if depth == 0 => return false,
            b".." => depth -= 1,
            _ => depth += 1,
        }
    }
    escapes_ok(query)
}

/// A segment with its escaped unreserved characters decoded (so that `%2e`
/// counts as `.`, as git's normalizing makes it).
fn unescape_dots(segment: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < segment.len() {
        match escape(&segment[i..]).filter(|_| segment[i] == b'%') {
            Some(v) => {
                out.push(if v == b'.' { v } else { 0 });
                i += 3;
            }
            None => {
                out.push(segment[i]);
                i += 1;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    // git's t7450-bad-git-dotfiles.sh, "check urls".
    #[test]
    fn urls_as_git_checks_them() {
        for ok in [
            "./bar/baz/foo.git",
            "https://example.com/foo.git",
            "http://example.com:80/deeper/foo.git",
            "git@example.com:foo.git",
            "https://user@example.com:8443/a/./b/../c?x=%2F",
            "http://[::1]:8080/x",
            "../sibling.git",
        ] {
            assert!(check_submodule_url(ok.as_bytes()), "{ok} is refused");
        }
        for bad in [
            "-a./foo",
            "../../..//test/foo.git",
            "../../../../../:localhost:8080/foo.git",
            "..\\../.\\../:example.com/foo.git",
            "./%0ahost=example.com/foo.git",
            "https://one.example.com/evil?%0ahost=two.example.com",
            "https:///example.com/foo.git",
            "http://example.com:test/foo.git",
            "https::example.com/foo.git",
            "http:::example.com/foo.git",
            "https://example.com:0/x",
            "https://example.com:65536/x",
            "https://example.com/%zz",
            "https://example.com/..",
            "https://example.com/a/%2e%2e/..",
            "https://exa mple.com/",
            "git://example.com/%0a",
        ] {
            assert!(!check_submodule_url(bad.as_bytes()), "{bad} is accepted");
        }
    }
}
