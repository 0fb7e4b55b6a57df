//! Chat templates: the Jinja template a model ships (GGUF `tokenizer.chat_template`, or
//! tokenizer_config.json's `chat_template`) that turns a conversation into the prompt text.
//!
//! Rendered with minijinja, set up like transformers' `apply_chat_template` so the output matches
//! it byte for byte: `trim_blocks` and `lstrip_blocks`, Python string methods (`.strip()`,
//! `.startswith()`, ... via minijinja-contrib's pycompat), `raise_exception`, `strftime_now`, and a
//! `tojson` that writes what Python's `json.dumps` writes (minijinja's own escapes `<`, `>`, `&` and
//! `'` for HTML, which would change tool-calling prompts).
//!
//! Templates come from model files, so they are untrusted. Limits: the template source size;
//! fuel, which minijinja charges per VM instruction and per byte or slot of every value made, so
//! it bounds time and memory together (every hostile case in tests/chat_template.rs stops in under
//! 2 s on two cores, below ~250 MB); minijinja's recursion limit; widths and growth of `indent`,
//! `format`, `replace`, `join`, `split` and `tojson` (chat_limits.rs), which allocate before fuel
//! is charged; and the rendered output size. The vendored minijinja (vendor/README.md) also caps
//! sequence concatenation and the printing of containers. Each breach is an `Error::Template`.
//! A wall-clock budget (`TIME_BUDGET_MS`, via the vendored minijinja's interrupt hook) keeps slow
//! devices bounded too. Rendering is synchronous, so an abort request is honoured when it returns.

use std::io;

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, ErrorKind};

use crate::error::{Error, Result};
use crate::weights::gguf::GgufFile;

/// Largest template source accepted. Real templates are a few KB; tool-heavy ones reach ~100 KB.
pub const MAX_TEMPLATE_BYTES: usize = 1 << 20;
/// Largest rendered prompt; far beyond any context window.
pub const MAX_OUTPUT_BYTES: usize = 8 << 20;
/// minijinja's fuel for one render: one unit per VM instruction, and one per 64 bytes of strings
/// or 2 list slots the template creates, so it bounds both time and memory (~128 MB of values
/// made in total). A 7 MB conversation through the real templates needs 0.5–1 M.
pub const FUEL: u64 = 2_000_000;

/// Wall-clock time one render may take. Fuel already bounds the work (every hostile case in the
/// tests stops in under 2 s on two cores); this keeps slow devices within a few seconds too.
pub const TIME_BUDGET_MS: f64 = 3000.0;

thread_local! {
    static DEADLINE_MS: std::cell::Cell<f64> = const { std::cell::Cell::new(f64::INFINITY) };
}

fn past_deadline() -> bool {
    crate::engine::now_ms() > DEADLINE_MS.with(|d| d.get())
}

/// The template used for a model that ships none: ChatML (`<|im_start|>role\n...<|im_end|>\n`),
/// the most widespread format. A model trained on another format will still follow it poorly, so
/// callers should prefer the model's own template and say when this one is used.
pub const CHATML: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// The fallback for Gemma models without a template (GGUF files converted without one): Gemma's
/// turns, as its tokenizer_config.json template writes them (a system message opens the first
/// user turn; the assistant is "model").
pub const GEMMA: &str = "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set first = messages[0]['content'] + '\n\n' %}{% set loop_messages = messages[1:] %}{% else %}{% set first = '' %}{% set loop_messages = messages %}{% endif %}{% for message in loop_messages %}{{ '<start_of_turn>' + ('model' if message['role'] == 'assistant' else message['role']) + '\n' + (first if loop.first else '') + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}";

#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage { role: role.into(), content: content.into() }
    }
}

pub struct ChatTemplate {
    env: Environment<'static>,
    /// The template's text (what it supports, e.g. tools, is read from it).
    source: String,
    bos_token: String,
    eos_token: String,
    time_budget_ms: f64,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").field("bos_token", &self.bos_token).field("eos_token", &self.eos_token).finish()
    }
}

fn template_err(e: minijinja::Error) -> Error {
    let msg = match e.kind() {
        ErrorKind::OutOfFuel => {
            format!("the template ran past its step and memory limit ({FUEL} fuel); is it looping or growing a value? ({e})")
        }
        _ => {
            // Include the cause chain and location: minijinja puts details there.
            let mut s = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(c) = src {
                s += &format!(": {c}");
                src = c.source();
            }
            s
        }
    };
    Error::Template(msg)
}

impl ChatTemplate {
    /// Compile `source`; `bos_token`/`eos_token` are the texts the template sees under those names.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self> {
        if source.len() > MAX_TEMPLATE_BYTES {
            return Err(Error::Template(format!(
                "the template is {} bytes; at most {MAX_TEMPLATE_BYTES} are accepted",
                source.len()
            )));
        }
        let mut env = Environment::new();
        env.set_syntax(
            minijinja::syntax::SyntaxConfig::builder()
                .trim_blocks(true)
                .lstrip_blocks(true)
                .build()
                .map_err(template_err)?,
        );
        env.set_fuel(Some(FUEL));
        env.set_unknown_method_callback(crate::chat_limits::unknown_method);
        env.add_filter("indent", crate::chat_limits::indent);
        env.add_filter("format", crate::chat_limits::format);
        env.add_filter("replace", crate::chat_limits::replace);
        env.add_filter("join", crate::chat_limits::join);
        env.add_function("raise_exception", |msg: String| -> std::result::Result<Value, minijinja::Error> {
            Err(minijinja::Error::new(ErrorKind::InvalidOperation, format!("raise_exception: {msg}")))
        });
        env.add_function("strftime_now", |fmt: String| strftime(&fmt, now_unix_seconds()));
        env.add_filter("tojson", tojson);
        env.add_template_owned("chat_template", source.to_string()).map_err(template_err)?;
        Ok(ChatTemplate {
            env,
            source: source.to_string(),
            bos_token: bos_token.to_string(),
            eos_token: eos_token.to_string(),
            time_budget_ms: TIME_BUDGET_MS,
        })
    }

    /// Another wall-clock budget per render than [`TIME_BUDGET_MS`].
    pub fn with_time_budget(mut self, ms: f64) -> Self {
        self.time_budget_ms = ms;
        self
    }

    /// The template in `tokenizer.chat_template`, with BOS/EOS texts from the vocabulary; `None`
    /// when the file has no template (see [`CHATML`] for a fallback).
    pub fn from_gguf(g: &GgufFile) -> Result<Option<Self>> {
        let bad = |e: crate::weights::gguf::GgufError| Error::Template(e.to_string());
        let Some(source) = g.get_str("tokenizer.chat_template").map_err(bad)? else { return Ok(None) };
        let tokens = g.get_str_array("tokenizer.ggml.tokens").map_err(bad)?.unwrap_or_default();
        let text = |key: &str| -> Result<String> {
            match g.get_u64(key).ok().flatten() {
                Some(id) => tokens.get(id as usize).map(|t| t.to_string()).ok_or_else(|| {
                    Error::Template(format!("{key} = {id} is outside the vocabulary ({} tokens)", tokens.len()))
                }),
                None => Ok(String::new()),
            }
        };
        Ok(Some(Self::new(source, &text("tokenizer.ggml.bos_token_id")?, &text("tokenizer.ggml.eos_token_id")?)?))
    }

    /// The ChatML fallback for models without a template.
    pub fn chatml(bos_token: &str, eos_token: &str) -> Self {
        Self::new(CHATML, bos_token, eos_token).expect("the built-in template compiles")
    }

    /// The fallback for a model of architecture `arch` without a template: Gemma's turns for the
    /// Gemma families (their tokens are in every Gemma vocabulary), ChatML otherwise.
    pub fn fallback(arch: &str, bos_token: &str, eos_token: &str) -> Self {
        let src = if crate::model::family::of(arch).is_some_and(|f| f.gemma) { GEMMA } else { CHATML };
        Self::new(src, bos_token, eos_token).expect("the built-in templates compile")
    }

    /// The prompt for `messages`; with `add_generation_prompt` it ends with the opening of an
    /// assistant turn.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String> {
        let messages = serde_json::to_value(messages).map_err(|e| Error::Template(e.to_string()))?;
        self.render_json(&messages, None, add_generation_prompt)
    }

    /// The template's text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// `render` for messages as JSON (OpenAI's shape: `tool_calls`, `tool_call_id`, `name`, ...)
    /// and with `tools` (JSON schemas of functions) when given, as transformers'
    /// `apply_chat_template(messages, tools=...)` passes them.
    pub fn render_json(
        &self,
        messages: &serde_json::Value,
        tools: Option<&serde_json::Value>,
        add_generation_prompt: bool,
    ) -> Result<String> {
        let tmpl = self.env.get_template("chat_template").map_err(template_err)?;
        let ctx = minijinja::context! {
            messages => Value::from(minijinja::value::Serde(messages)),
            tools => tools.map(|t| Value::from(minijinja::value::Serde(t))),
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token.as_str(),
            eos_token => self.eos_token.as_str(),
        };
        let mut out = LimitedWriter { buf: Vec::new(), overflow: false };
        minijinja::value::take_render_overflow();
        DEADLINE_MS.with(|d| d.set(crate::engine::now_ms() + self.time_budget_ms));
        minijinja::set_interrupt_check(Some(past_deadline));
        let rendered = tmpl.render_captured_to(ctx, &mut out);
        minijinja::set_interrupt_check(None);
        if minijinja::value::take_render_overflow() {
            return Err(Error::Template(
                "the template printed a value larger than its memory limit or nested over 64 deep".into(),
            ));
        }
        match rendered {
            Ok(_) => {}
            Err(_) if out.overflow => {
                return Err(Error::Template(format!("the rendered prompt exceeds {MAX_OUTPUT_BYTES} bytes")));
            }
            Err(e) => return Err(template_err(e)),
        }
        String::from_utf8(out.buf).map_err(|_| Error::Template("the template produced invalid UTF-8".into()))
    }
}

/// Collects output, failing once it passes `MAX_OUTPUT_BYTES`.
struct LimitedWriter {
    buf: Vec<u8>,
    overflow: bool,
}

impl io::Write for LimitedWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        if self.buf.len() + data.len() > MAX_OUTPUT_BYTES {
            self.overflow = true;
            return Err(io::Error::other("output limit"));
        }
        self.buf.extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=indent, sort_keys=sort_keys)`,
/// Python's separators (`", "`, `": "`; `","` between lines when indenting).
fn tojson(value: &Value, kwargs: Kwargs) -> std::result::Result<Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    if indent.is_some_and(|n| n > crate::chat_limits::MAX_WIDTH) {
        return Err(minijinja::Error::new(
            ErrorKind::InvalidOperation,
            "tojson: indent is wider than the template's limit",
        ));
    }
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    kwargs.assert_all_used()?;
    let opts = JsonOpts { indent, sort_keys: sort_keys.unwrap_or(false), ensure_ascii: ensure_ascii.unwrap_or(false) };
    let mut out = String::new();
    write_json(value, &opts, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

struct JsonOpts {
    indent: Option<usize>,
    sort_keys: bool,
    ensure_ascii: bool,
}

fn write_json(v: &Value, o: &JsonOpts, depth: usize, out: &mut String) -> std::result::Result<(), minijinja::Error> {
    if out.len() > MAX_OUTPUT_BYTES || depth > 64 {
        return Err(minijinja::Error::new(ErrorKind::InvalidOperation, "tojson: value too large or too deeply nested"));
    }
    let newline = |out: &mut String, d: usize| {
        if let Some(n) = o.indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * d));
        }
    };
    let sep = if o.indent.is_some() { "," } else { ", " };
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => match (i64::try_from(v.clone()), f64::try_from(v.clone())) {
            (Ok(i), _) if !v.to_string().contains('.') => out.push_str(&i.to_string()),
            (_, Ok(f)) if f.is_finite() => out.push_str(&format!("{f:?}")),
            (_, Ok(f)) => out.push_str(if f.is_nan() {
                "NaN"
            } else if f > 0.0 {
                "Infinity"
            } else {
                "-Infinity"
            }),
            _ => out.push_str(&v.to_string()),
        },
        ValueKind::Map => {
            let mut keys = Vec::new();
            for k in v.try_iter()? {
                if keys.len() > MAX_OUTPUT_BYTES / 4 {
                    return Err(minijinja::Error::new(ErrorKind::InvalidOperation, "tojson: value too large"));
                }
                keys.push(k);
            }
            if o.sort_keys {
                keys.sort();
            }
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(sep);
                }
                newline(out, depth + 1);
                write_str(&k.to_string(), o.ensure_ascii, out);
                out.push_str(": ");
                write_json(&v.get_item(k)?, o, depth + 1, out)?;
            }
            newline(out, depth);
            out.push('}');
        }
        ValueKind::Seq | ValueKind::Iterable => {
            // Streamed, not collected: a lazy `l + l` chain reports a length of billions.
            let mut empty = true;
            for item in v.try_iter()? {
                out.push_str(if empty { "[" } else { sep });
                empty = false;
                newline(out, depth + 1);
                write_json(&item, o, depth + 1, out)?;
            }
            if empty {
                out.push_str("[]");
                return Ok(());
            }
            newline(out, depth);
            out.push(']');
        }
        _ => write_str(v.as_str().unwrap_or(&v.to_string()), o.ensure_ascii, out),
    }
    Ok(())
}

fn write_str(s: &str, ensure_ascii: bool, out: &mut String) {
    // serde_json escapes exactly what Python does without ensure_ascii: `"`, `\` and controls.
    let quoted = serde_json::to_string(s).expect("strings serialize");
    if !ensure_ascii {
        out.push_str(&quoted);
        return;
    }
    for c in quoted.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            let mut units = [0u16; 2];
            for u in c.encode_utf16(&mut units) {
                out.push_str(&format!("\\u{u:04x}"));
            }
        }
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn now_unix_seconds() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

#[cfg(target_arch = "wasm32")]
fn now_unix_seconds() -> i64 {
    // std's clock panics on wasm32-unknown-unknown; ask JavaScript.
    (js_sys::Date::now() / 1000.0) as i64
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"];

/// Python's `datetime.now().strftime(fmt)` for the common directives, in UTC (a browser and a
/// server disagree on local time; templates use this for "Today is ..." lines).
pub(crate) fn strftime(fmt: &str, unix: i64) -> std::result::Result<String, minijinja::Error> {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy_mar = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy_mar + 2) / 153;
    let day = doy_mar - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let cum = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let yday = cum[(month - 1) as usize] + day + i64::from(leap && month > 2);
    let wday = (days + 3).rem_euclid(7) as usize; // 1970-01-01 was a Thursday (index 3).
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mon = MONTHS[(month - 1) as usize];
        match chars.next() {
            Some('Y') => out += &year.to_string(),
            Some('y') => out += &format!("{:02}", year % 100),
            Some('m') => out += &format!("{month:02}"),
            Some('d') => out += &format!("{day:02}"),
            Some('e') => out += &format!("{day:>2}"),
            Some('-') => match chars.next() {
                // glibc's no-padding flag, used by some templates ("%-d %B %Y").
                Some('d') => out += &day.to_string(),
                Some('m') => out += &month.to_string(),
                Some('H') => out += &h.to_string(),
                other => return Err(bad_directive(other)),
            },
            Some('j') => out += &format!("{yday:03}"),
            Some('B') => out += mon,
            Some('b') | Some('h') => out += &mon[..3],
            Some('A') => out += DAYS[wday],
            Some('a') => out += &DAYS[wday][..3],
            Some('H') => out += &format!("{h:02}"),
            Some('I') => out += &format!("{:02}", if h % 12 == 0 { 12 } else { h % 12 }),
            Some('p') => out += if h < 12 { "AM" } else { "PM" },
            Some('M') => out += &format!("{m:02}"),
            Some('S') => out += &format!("{s:02}"),
            Some('Z') => out += "UTC",
            Some('z') => out += "+0000",
            Some('%') => out.push('%'),
            other => return Err(bad_directive(other)),
        }
    }
    Ok(out)
}

fn bad_directive(c: Option<char>) -> minijinja::Error {
    minijinja::Error::new(
        ErrorKind::InvalidOperation,
        format!("strftime_now: unsupported directive %{}", c.map(String::from).unwrap_or_default()),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn strftime_known_dates() {
        // 2024-02-29 13:05:09 UTC, a Thursday.
        let t = 1_709_211_909;
        assert_eq!(
            super::strftime("%Y-%m-%d %H:%M:%S %A %a %B %b %j %-d %I%p %%", t).unwrap(),
            "2024-02-29 13:05:09 Thursday Thu February Feb 060 29 01PM %"
        );
        assert_eq!(super::strftime("%d %B %Y", 0).unwrap(), "01 January 1970");
        assert!(super::strftime("%Q", 0).is_err());
    }
}
