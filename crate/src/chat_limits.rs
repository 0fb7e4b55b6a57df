//! Memory bounds for chat templates, which come from model files and are untrusted. minijinja's
//! fuel counts steps, not bytes: one `indent`, `format` or `replace` step can ask for gigabytes
//! (`x|indent(10**11)`, `"%9999999999s"|format(x)`, `s.replace("a", s)` a few times over). These
//! wrappers refuse such a step with a template error before it allocates, and otherwise call
//! minijinja's own implementation, so the output stays byte for byte what Jinja2 gives.

use minijinja::value::{Kwargs, Rest, StringInput, Value, ValueOrKwargs};
use minijinja::{Error, ErrorKind, State};

use crate::chat_template::MAX_OUTPUT_BYTES;

/// The widest field, indent or padding a template may ask for; real templates use 2 or 4.
pub const MAX_WIDTH: usize = 256;

fn too_big(what: &str) -> Error {
    Error::new(ErrorKind::InvalidOperation, format!("{what}: the result would exceed the template's memory limit"))
}

/// `indent`, with its width bounded.
pub fn indent(
    value: StringInput<'_>,
    width: Option<usize>,
    first: Option<bool>,
    blank: Option<bool>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let w = width.or(kwargs.peek::<Option<usize>>("width")?).unwrap_or(4);
    let lines = value.as_str().lines().count() + 1;
    if w > MAX_WIDTH || value.as_str().len() + lines * w > MAX_OUTPUT_BYTES {
        return Err(too_big("indent"));
    }
    minijinja::filters::indent(value, width, first, blank, kwargs)
}

/// Most pieces a `split`, `splitlines` or `join` may make or take: each is a value of 24 bytes
/// plus its string, made before fuel is charged for the result.
pub const MAX_PIECES: usize = 1 << 20;

/// printf-style `format`, with field widths and precisions bounded.
pub fn format(state: &mut State, fmt: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    if let Some(s) = fmt.as_str() {
        check_widths(s, '%')?;
        let values: Vec<Value> = args.iter().map(|a| Value::clone(a)).collect();
        check_fields(s, '%', &values)?;
    }
    minijinja::filters::format(state, fmt, args)
}

/// A format string may name one argument in many fields (`{0}{0}{0}...`): its result can be the
/// largest argument times the number of fields.
fn check_fields(fmt: &str, open: char, args: &[Value]) -> Result<(), Error> {
    let fields = fmt.matches(open).count();
    let widest = args.iter().map(printed_len_estimate).max().unwrap_or(0);
    if fmt.len().saturating_add(fields.saturating_mul(widest)) > MAX_OUTPUT_BYTES {
        return Err(too_big("format"));
    }
    Ok(())
}

/// A value's printed length: exact for strings, a generous guess for containers (whose printing
/// has its own budget in the vendored minijinja).
fn printed_len_estimate(v: &Value) -> usize {
    v.as_str().map_or_else(|| v.len().unwrap_or(1).saturating_mul(16).max(32), str::len)
}

/// `join`, refused before it runs when its result would outgrow the output limit (minijinja
/// charges the joiner but not the items, so a million long strings joined ask for gigabytes).
pub fn join(
    state: &mut State,
    value: &Value,
    joiner: Option<StringInput<'_>>,
    attribute: Option<&str>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    if value.len().is_some_and(|n| n > MAX_PIECES) {
        return Err(too_big("join"));
    }
    let sep = joiner.as_ref().map_or(0, |j| j.as_str().len());
    let mut total = 0usize;
    if let Ok(items) = value.try_iter() {
        for (i, item) in items.enumerate() {
            let item = match attribute {
                Some(path) => path.split('.').fold(item, |v, key| v.get_attr(key).unwrap_or_default()),
                None => item,
            };
            let len = match item.as_str() {
                Some(s) => s.len(),
                // Printed once here to measure it; stops as soon as the total is too big.
                None => item.to_string().len(),
            };
            total = total.saturating_add(len).saturating_add(sep);
            if total > MAX_OUTPUT_BYTES || i > MAX_PIECES {
                return Err(too_big("join"));
            }
        }
    }
    minijinja::filters::join(state, value, joiner, attribute, kwargs)
}

/// Python's `split`/`splitlines`, refused when they would make more than MAX_PIECES pieces.
fn check_split(s: &str, method: &str, args: &[Value]) -> Result<(), Error> {
    let pieces = match (method, args.first().and_then(|a| a.as_str())) {
        ("splitlines", _) => s.lines().count(),
        (_, Some("")) => {
            return Err(Error::new(ErrorKind::InvalidOperation, "split: empty separator"));
        }
        (_, Some(sep)) => s.matches(sep).count() + 1,
        (_, None) => s.split_whitespace().count(),
    };
    if pieces > MAX_PIECES {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("{method}: more than {MAX_PIECES} pieces; the result would exceed the template's memory limit"),
        ));
    }
    Ok(())
}

/// `replace`, refused when the result could outgrow the output limit.
pub fn replace(
    state: &mut State,
    value: StringInput<'_>,
    from: StringInput<'_>,
    to: StringInput<'_>,
) -> Result<Value, Error> {
    check_replace(value.as_str(), from.as_str(), to.as_str())?;
    minijinja::filters::replace(state, value, from, to)
}

fn check_replace(s: &str, from: &str, to: &str) -> Result<(), Error> {
    let hits = if from.is_empty() { s.chars().count() + 1 } else { s.matches(from).count() };
    if s.len().saturating_add(hits.saturating_mul(to.len())) > MAX_OUTPUT_BYTES {
        return Err(too_big("replace"));
    }
    Ok(())
}

/// Python string methods (minijinja-contrib's pycompat), with `format` and `replace` bounded
/// like the filters.
pub fn unknown_method(state: &mut State, value: &Value, method: &str, args: &[Value]) -> Result<Value, Error> {
    if let Some(s) = value.as_str() {
        match (method, args) {
            ("format", _) => {
                check_widths(s, '{')?;
                check_fields(s, '{', args)?;
            }
            ("split" | "rsplit" | "splitlines", _) => check_split(s, method, args)?,
            ("replace", [from, to, ..]) => {
                check_replace(s, from.as_str().unwrap_or(""), to.as_str().unwrap_or(""))?;
            }
            _ => {}
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// Every number in a conversion spec (after `%` for printf style, between `:` and `}` of a
/// replacement field for str.format) must be at most MAX_WIDTH.
fn check_widths(fmt: &str, style: char) -> Result<(), Error> {
    // 0 literal text, 1 inside a field before its spec (str.format), 2 inside a spec.
    let mut at = 0;
    let mut value = 0usize;
    let mut chars = fmt.chars().peekable();
    while let Some(c) = chars.next() {
        if at == 2 && c.is_ascii_digit() {
            value = value.saturating_mul(10).saturating_add(c as usize - '0' as usize);
            if value > MAX_WIDTH {
                return Err(too_big("format"));
            }
            continue;
        }
        value = 0;
        at = match (style, at, c) {
            ('%', 0, '%') if chars.peek() == Some(&'%') => {
                chars.next();
                0
            }
            ('%', 0, '%') => 2,
            ('%', 2, c) if "-+ #.".contains(c) => 2,
            ('%', _, _) => 0,
            ('{', 0, '{') if chars.peek() == Some(&'{') => {
                chars.next();
                0
            }
            ('{', 0, '{') => 1,
            ('{', 1, ':') => 2,
            ('{', 2, '.') => 2,
            ('{', _, '}') => 0,
            (_, at, _) => at,
        };
    }
    Ok(())
}
