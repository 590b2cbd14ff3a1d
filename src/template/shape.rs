//! The shape check every template passes before it is parsed: the YAML parser
//! takes minutes on deep nesting, so a template too big or nested too deep is
//! refused first, naming file:line.

use crate::error::{Error, Result};

/// Templates are short files: anything bigger, or nested deeper, than this is a
/// mistake or an attack (the YAML parser takes minutes on deep nesting), refused
/// before it is parsed.
pub(super) const MAX_TEMPLATE_BYTES: usize = 64 << 10;
const MAX_NESTING: usize = 32;
const MAX_INDENT: usize = 128;

/// Refuses a template too big or too deeply nested, naming file:line.
pub(super) fn check_shape(text: &str, source: &str) -> Result<()> {
    if text.len() > MAX_TEMPLATE_BYTES {
        return Err(Error::usage(format!(
            "{source}: the template is larger than {} KiB, the most a template may be",
            MAX_TEMPLATE_BYTES >> 10
        )));
    }
    let too_deep = |line: usize| {
        Error::usage(format!("{source}:{line}: nested more than {MAX_NESTING} levels deep; templates are flat"))
    };
    let mut depth: usize = 0;
    for (i, line) in text.lines().enumerate() {
        if line.len() - line.trim_start().len() > MAX_INDENT {
            return Err(too_deep(i + 1));
        }
        // Block sequences nested on one line: `- - - - x`.
        let dashes = line.split_whitespace().take_while(|w| *w == "-" || *w == "?").count();
        if dashes > MAX_NESTING {
            return Err(too_deep(i + 1));
        }
        let mut quote: Option<char> = None;
        let mut chars = line.chars().peekable();
        let mut previous = ' ';
        // The last character that was not blank: a quote opens a quoted scalar
        // only where a scalar may start (`a'` inside a plain scalar is just `'`).
        let mut last_solid: Option<char> = None;
        while let Some(c) = chars.next() {
            match (quote, c) {
                (Some('"'), '\\') => {
                    chars.next();
                }
                (Some(q), c) if c == q => quote = None,
                (Some(_), _) => {}
                (None, '"' | '\'') if matches!(last_solid, None | Some('[' | '{' | ',' | ':' | '-' | '?')) => {
                    quote = Some(c)
                }
                (None, '#') if previous.is_whitespace() => break,
                (None, '[' | '{') => {
                    depth += 1;
                    if depth > MAX_NESTING {
                        return Err(too_deep(i + 1));
                    }
                }
                (None, ']' | '}') => depth = depth.saturating_sub(1),
                _ => {}
            }
            if !c.is_whitespace() {
                last_solid = Some(c);
            }
            previous = c;
        }
    }
    Ok(())
}
