//! Constrained decoding: output that must be JSON, match a JSON schema, a Lark grammar or a
//! regular expression. Each step the constraint masks the logits of tokens that cannot continue
//! a valid output, then learns the token chosen.
//!
//! Grammars are Lark (llguidance's dialect) or GBNF (llama.cpp's), converted to Lark.
//! The engine is `llguidance` (the one llama.cpp and vLLM use): an Earley parser over a lexer of
//! derivatives of regular expressions, with a token trie, so a mask over a 150k vocabulary costs
//! tens of microseconds. We give it our own vocabulary's bytes (`Tokenizer::token_bytes`).
//! JSON schemas follow llguidance's coverage (most of draft 2020-12; `uniqueItems`, `not` and
//! remote `$ref`s are refused with a message naming them; a `format` it does not know is dropped,
//! as JSON Schema's annotation semantics allow).

use std::sync::Arc;

use serde_json::{Map, Value};

use llguidance::api::TopLevelGrammar;
use llguidance::{Matcher, ParserFactory};
use toktrie::{ApproximateTokEnv, TokRxInfo, TokTrie};

use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;

/// What the output must be.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ConstraintSpec {
    /// Any JSON object (OpenAI's `response_format: {type: 'json_object'}`).
    JsonObject,
    /// A value valid under this JSON schema.
    JsonSchema(serde_json::Value),
    /// Text of this Lark grammar (llguidance's dialect: `start` rule, `%json {schema}` inline).
    Lark(String),
    /// Text of this GBNF grammar (llama.cpp's format; converted to Lark, `gbnf.rs`).
    Gbnf(String),
    /// Text matching this regular expression.
    Regex(String),
    /// A forced tool call: a Lark grammar that inlines the tools' parameter schemas
    /// (`chat::tools::forced_call_grammar`); errors speak of the tools, not of a grammar.
    ToolCall(String),
}

impl ConstraintSpec {
    /// A grammar's text as GBNF when it has GBNF's `::=` (Lark never does), else as Lark.
    pub fn grammar(text: &str) -> ConstraintSpec {
        if text.contains("::=") {
            ConstraintSpec::Gbnf(text.to_string())
        } else {
            ConstraintSpec::Lark(text.to_string())
        }
    }

    fn top_level(&self) -> Result<TopLevelGrammar> {
        Ok(match self {
            ConstraintSpec::JsonObject => {
                TopLevelGrammar::from_json_schema(compact(serde_json::json!({ "type": "object" })))
            }
            ConstraintSpec::JsonSchema(s) => TopLevelGrammar::from_json_schema(compact(prepare_schema(s.clone())?)),
            ConstraintSpec::Lark(g) | ConstraintSpec::ToolCall(g) => TopLevelGrammar::from_lark(prepare_lark(g)?),
            ConstraintSpec::Gbnf(g) => TopLevelGrammar::from_lark(crate::gbnf::to_lark(g)?),
            ConstraintSpec::Regex(r) => TopLevelGrammar::from_regex(r),
        })
    }

    fn what(&self) -> &'static str {
        match self {
            ConstraintSpec::JsonObject | ConstraintSpec::JsonSchema(_) => "JSON schema",
            ConstraintSpec::Lark(_) | ConstraintSpec::Gbnf(_) => "grammar",
            ConstraintSpec::Regex(_) => "regular expression",
            ConstraintSpec::ToolCall(_) => "tools",
        }
    }
}

/// JSON written without free whitespace (`{"a": 1, "b": [2]}`), unless the schema sets
/// llguidance's options itself: with free whitespace a small model can pad the output with
/// newlines until it runs out of tokens, the known failure of JSON modes.
fn compact(mut schema: Value) -> Value {
    if let Some(o) = schema.as_object_mut() {
        o.entry("x-guidance").or_insert_with(|| serde_json::json!({ "whitespace_flexible": false }));
    }
    schema
}

/// The largest magnitude of a number bound (`minimum`, `maximum`, exclusive ones) a schema may
/// set: JavaScript's safe integers. llguidance overflowed its stack building the digits of an
/// integer range at -2^63, and gives up past 2^63 or on floats near 1e308.
pub const MAX_NUMBER_BOUND: f64 = 9_007_199_254_740_991.0;

/// The largest string length bound llguidance compiles (into a regular expression's repetition,
/// whose counts are 32-bit).
const MAX_LENGTH_BOUND: u64 = u32::MAX as u64;

/// A schema as llguidance can compile it, the same for `response_format` and for schemas a Lark
/// grammar inlines (tool calls): every nested schema's number bounds (and its `const`s' and
/// `enum`s' numbers, which compile to ranges of one) within +-`MAX_NUMBER_BOUND`; a `maxLength`
/// no output could reach dropped, a `minLength` none could reach refused; unknown `format`s
/// dropped.
fn prepare_schema(mut schema: Value) -> Result<Value> {
    each_schema(&mut schema, &mut |o| {
        for k in ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "const", "enum"] {
            if let Some(x) = o.get(k).and_then(far_number) {
                return Err(Error::InvalidOption(format!(
                    "JSON schema: {k} {x} is outside the bounds numbers can have here (magnitude at most \
                     {MAX_NUMBER_BOUND})"
                )));
            }
        }
        let length = |k: &str| o.get(k).and_then(Value::as_u64).filter(|&n| n > MAX_LENGTH_BOUND);
        if let Some(n) = length("minLength") {
            return Err(Error::InvalidOption(format!(
                "JSON schema: minLength {n} is more than any output can hold (at most {MAX_LENGTH_BOUND})"
            )));
        }
        // No output is 4 GiB long: such a bound is no bound.
        if length("maxLength").is_some() {
            o.remove("maxLength");
        }
        // `format` is an annotation unless a validator knows it (llguidance would refuse the
        // schema instead).
        if o.get("format").and_then(Value::as_str).is_some_and(|f| !KNOWN_FORMATS.contains(&f)) {
            o.remove("format");
        }
        Ok(())
    })?;
    Ok(schema)
}

/// The first number in a value past `MAX_NUMBER_BOUND`, however nested (a const's or an enum's).
fn far_number(v: &Value) -> Option<&Value> {
    match v {
        Value::Number(n) => n.as_f64().is_some_and(|x| x.abs() > MAX_NUMBER_BOUND).then_some(v),
        Value::Array(a) => a.iter().find_map(far_number),
        Value::Object(o) => o.values().find_map(far_number),
        _ => None,
    }
}

/// Calls `f` on `v` and on every schema it nests, outermost first. Values (`const`, `enum`,
/// `default`, `examples`) are not entered, and the names in maps from names to schemas
/// (`properties`, `$defs`, ...) are names, not keywords.
pub(crate) fn each_schema(v: &mut Value, f: &mut dyn FnMut(&mut Map<String, Value>) -> Result<()>) -> Result<()> {
    match v {
        Value::Object(o) => {
            f(o)?;
            for (k, child) in o.iter_mut() {
                match k.as_str() {
                    "const" | "enum" | "default" | "examples" => {}
                    "properties" | "patternProperties" | "$defs" | "definitions" | "dependentSchemas" => {
                        if let Value::Object(m) = child {
                            m.values_mut().try_for_each(|s| each_schema(s, f))?;
                        }
                    }
                    _ => each_schema(child, f)?,
                }
            }
            Ok(())
        }
        // A list of schemas (anyOf, prefixItems, ...); booleans and the rest hold none.
        Value::Array(a) => a.iter_mut().try_for_each(|s| each_schema(s, f)),
        _ => Ok(()),
    }
}

/// A Lark grammar with every schema it inlines (`%json {...}`, as tool calls do) prepared as
/// `prepare_schema` prepares `response_format`'s.
fn prepare_lark(grammar: &str) -> Result<String> {
    let mut out = String::with_capacity(grammar.len());
    let mut done = 0;
    for (at, _) in grammar.match_indices("%json") {
        let from = at + "%json".len();
        if from < done {
            continue;
        }
        let mut values = serde_json::Deserializer::from_str(&grammar[from..]).into_iter::<Value>();
        // A schema that does not parse is llguidance's to report; one that needs no change keeps
        // its text (this scan does not know Lark's strings and comments).
        if let Some(Ok(schema)) = values.next() {
            let prepared = prepare_schema(schema.clone())?;
            if prepared != schema {
                out.push_str(&grammar[done..from]);
                out.push(' ');
                out.push_str(&prepared.to_string());
                done = from + values.byte_offset();
            }
        }
    }
    out.push_str(&grammar[done..]);
    Ok(out)
}

/// The `format`s llguidance enforces.
const KNOWN_FORMATS: &[&str] =
    &["date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid", "uri"];

/// A model's vocabulary prepared for constraints (its trie and the parser factory); built once
/// per engine, in tens of milliseconds.
pub struct VocabEnv {
    factory: ParserFactory,
    vocab: usize,
}

impl VocabEnv {
    /// `eos_ids[0]` is the token a finished output may end with.
    pub fn new(tok: &Tokenizer, eos_ids: &[u32]) -> Result<VocabEnv> {
        let words = tok.token_bytes();
        let eos = *eos_ids.first().ok_or_else(|| {
            Error::InvalidOption("constrained output needs an end-of-sequence token; the model names none".into())
        })?;
        if eos as usize >= words.len() {
            return Err(Error::Tokenizer(format!("EOS id {eos} is outside the vocabulary ({} tokens)", words.len())));
        }
        let info = TokRxInfo::new(words.len() as u32, eos);
        let trie = TokTrie::from(&info, &words);
        let env: toktrie::TokEnv = Arc::new(ApproximateTokEnv::new(trie));
        let mut factory =
            ParserFactory::new_simple(&env).map_err(|e| Error::InvalidOption(format!("constrained output: {e}")))?;
        factory.quiet();
        Ok(VocabEnv { factory, vocab: words.len() })
    }
}

/// One output's constraint, stepping with the generation.
pub struct Constraint {
    m: Matcher,
    vocab: usize,
    what: &'static str,
}

impl Constraint {
    /// Compile `spec`; an unsupported or unsatisfiable schema or a bad grammar is an
    /// `InvalidOption` error with llguidance's message.
    pub fn new(spec: &ConstraintSpec, env: &VocabEnv) -> Result<Constraint> {
        let what = spec.what();
        let m = Matcher::new(env.factory.create_parser(spec.top_level()?));
        if let Some(e) = m.get_error() {
            let msg = plain(&e);
            // A position in the grammar we wrote around the tools' schemas means nothing to
            // the caller ("at 2(7): failed to compile JSON schema: ...").
            let msg = match spec {
                ConstraintSpec::ToolCall(_) => msg
                    .split_once("): ")
                    .filter(|(at, _)| at.starts_with("at "))
                    .map_or(msg.clone(), |(_, m)| m.to_string()),
                _ => msg,
            };
            return Err(Error::InvalidOption(format!("{what}: {msg}")));
        }
        Ok(Constraint { m, vocab: env.vocab, what })
    }

    /// Set the logits of tokens the constraint forbids to -infinity.
    pub fn mask(&mut self, logits: &mut [f32]) -> Result<()> {
        let bits = self.allowed_bits(logits.len())?;
        for (i, x) in logits.iter_mut().enumerate() {
            if bits[i / 32] >> (i % 32) & 1 == 0 {
                *x = f32::NEG_INFINITY;
            }
        }
        Ok(())
    }

    /// The allowed tokens as `vocab` bits (one u32 per 32 ids), for the GPU sampler's mask.
    pub fn allowed_bits(&mut self, vocab: usize) -> Result<Vec<u32>> {
        let allowed = self.m.compute_mask().map_err(|e| self.error(e))?;
        let mut bits = vec![0u32; vocab.div_ceil(32)];
        let words = allowed.as_slice();
        let n = bits.len().min(words.len());
        bits[..n].copy_from_slice(&words[..n]);
        let full_words = self.vocab.min(vocab) / 32;
        let tail = self.vocab.min(vocab) % 32;
        // Ids past the vocabulary (an embedding padded beyond it) are never allowed.
        if full_words < bits.len() {
            bits[full_words] &= if tail == 0 { 0 } else { (1u32 << tail) - 1 };
            bits[full_words + 1..].fill(0);
        }
        if bits.iter().all(|&w| w == 0) {
            return Err(Error::InvalidOption(format!("the {} allows no token here", self.what)));
        }
        Ok(bits)
    }

    /// The chosen token.
    pub fn commit(&mut self, id: u32) -> Result<()> {
        self.m.consume_token(id).map(|_| ()).map_err(|e| self.error(e))
    }

    /// The output is complete: the constraint allows nothing more (or the EOS token came).
    pub fn is_done(&self) -> bool {
        self.m.is_stopped()
    }

    fn error(&self, e: impl std::fmt::Display) -> Error {
        Error::InvalidOption(format!("{}: {}", self.what, plain(&e.to_string())))
    }
}

/// llguidance's message without the parser state it appends (a multi-line dump), and its stop
/// reason for an empty language in words.
fn plain(msg: &str) -> String {
    let first = msg.lines().next().unwrap_or("").trim();
    if first.contains("NoExtensionBias") {
        "no text can match it (its language is empty: a rule that only refers back to itself, or a character class that excludes every character)".into()
    } else if first.ends_with("regex parse error:") {
        // The regex crate puts the pattern, a caret and then the reason on lines of their own.
        let why = msg.lines().rev().find_map(|l| l.trim().strip_prefix("error: ")).unwrap_or("invalid pattern");
        format!("{first} {why}")
    } else {
        first.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::{plain, ConstraintSpec};
    use serde_json::json;

    fn refused(spec: ConstraintSpec) -> String {
        match spec.top_level() {
            Err(e) => e.to_string(),
            Ok(_) => panic!("accepted: {spec:?}"),
        }
    }

    #[test]
    fn number_bounds_past_safe_integers_are_refused() {
        // -2^63 as both bounds overflowed llguidance's stack (the process aborted).
        let min = i64::MIN;
        let nested =
            json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": min, "maximum": min}}});
        assert!(refused(ConstraintSpec::JsonSchema(nested.clone())).contains("minimum -9223372036854775808"));
        let far = json!({"anyOf": [{"type": "number", "exclusiveMaximum": 1e300}]});
        assert!(refused(ConstraintSpec::JsonSchema(far)).contains("exclusiveMaximum"));
        // Inlined in a Lark grammar, as tool calls are.
        assert!(refused(ConstraintSpec::Lark(format!("start: \"x\" call\ncall: %json {nested}\n"))).contains("minimum"));
        // Safe integers, and large numbers that are annotations rather than bounds, are kept.
        let ok = json!({"type": "integer", "minimum": -9007199254740991i64, "maximum": 9007199254740991i64});
        assert!(ConstraintSpec::JsonSchema(ok).top_level().is_ok());
        let values = json!({"default": -9223372036854775808i64, "properties": {"minimum": {"type": "string"}}});
        assert!(ConstraintSpec::JsonSchema(values).top_level().is_ok());
        // const and enum compile to ranges of one; a property named like an annotation is a schema.
        assert!(refused(ConstraintSpec::JsonSchema(json!({"const": min}))).contains("const"));
        assert!(refused(ConstraintSpec::JsonSchema(json!({"enum": [1, [{"a": -1e19}]]}))).contains("enum"));
        let named = json!({"properties": {"default": {"type": "integer", "minimum": min, "maximum": min}}});
        assert!(refused(ConstraintSpec::JsonSchema(named)).contains("minimum"));
    }

    #[test]
    fn string_lengths_past_32_bits() {
        // maxLength 2^32 failed as "regex parse error: decimal literal invalid".
        let long = json!({"type": "string", "maxLength": 4294967296u64});
        assert!(ConstraintSpec::JsonSchema(long.clone()).top_level().is_ok());
        let mut dropped = super::prepare_schema(json!({"properties": {"s": long}})).unwrap();
        assert_eq!(dropped["properties"]["s"].as_object_mut().unwrap().remove("maxLength"), None);
        let at_most = json!({"type": "string", "maxLength": 4294967295u64});
        assert_eq!(super::prepare_schema(at_most.clone()).unwrap(), at_most);
        let never = json!({"items": {"type": "string", "minLength": 1u64 << 40}});
        assert!(refused(ConstraintSpec::JsonSchema(never)).contains("minLength 1099511627776 is more than"));
    }

    #[test]
    fn inlined_schemas_are_prepared_like_response_formats() {
        // A tool's parameters with an unknown format were refused in tool calls only.
        let tool = json!({"type": "object", "properties": {"u": {"type": "string", "format": "uri-reference",
            "maxLength": 1u64 << 33}, "n": {"type": "integer", "format": "int64"}}});
        let g = format!("start: \"<call>\" call \"</call>\"\ncall: %json {tool}\n");
        let prepared = super::prepare_lark(&g).unwrap();
        assert!(!prepared.contains("format") && !prepared.contains("maxLength"), "{prepared}");
        assert!(prepared.starts_with("start: \"<call>\" call \"</call>\"\ncall: %json {") && prepared.ends_with("}\n"));
        assert!(ConstraintSpec::Lark(g).top_level().is_ok());
        // Grammars without schemas, and schemas that do not parse, pass through as they are.
        assert_eq!(super::prepare_lark("start: \"a\" | %json").unwrap(), "start: \"a\" | %json");
        assert_eq!(super::prepare_lark("start: %json {oops\n").unwrap(), "start: %json {oops\n");
        // "%json" inside a Lark string is not a schema: text that needs no change is kept as is.
        let literal = "start: \"%json [\" a \" , \" b \"]\"\na: \"x\"\nb: \"y\"\n";
        assert_eq!(super::prepare_lark(literal).unwrap(), literal);
    }

    #[test]
    fn regex_errors_keep_their_reason() {
        let msg = "JSON schema: regex parse error:\n    ((((\n        ^\nerror: unclosed group";
        assert_eq!(plain(msg), "JSON schema: regex parse error: unclosed group");
    }

    #[test]
    fn llguidance_messages_lose_their_state_dump() {
        let dump = "NoExtensionBias\n<state>\nTokens: ⟦⟧\nParser: {\n  \"rows\": 1\n}\n</state><grammar>\n</grammar>";
        assert_eq!(plain(dump), "no text can match it (its language is empty: a rule that only refers back to itself, or a character class that excludes every character)");
        assert_eq!(plain("unknown rule 'x'\n<state>..."), "unknown rule 'x'");
        assert_eq!(plain(""), "");
    }
}
