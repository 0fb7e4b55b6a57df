//! Tool calls: how a model family writes them, how its chat template is given the tools and the
//! calls/results of earlier turns, how calls are parsed back out of the generated text, and the
//! grammar that forces a call (`tool_choice: 'required'` or a named function).
//!
//! Formats: Hermes (`<tool_call>{json}</tool_call>`: Qwen 2.5/3, Hermes, SmolLM3, and our
//! fallback), Llama 3.1+ (a bare JSON object `{"name", "parameters"}`, maybe after
//! `<|python_tag|>`) and Mistral (`[TOOL_CALLS]` then a JSON array). A template that never
//! mentions `tools` gets them the Hermes way in the system message (Qwen 2.5's wording), with
//! earlier calls and results rewritten into plain text turns.

use serde_json::{json, Value};

use crate::error::{Error, Result};

/// How a model writes a tool call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolFormat {
    Hermes,
    Llama3,
    Mistral,
}

/// The tool support of a chat template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToolStyle {
    pub format: ToolFormat,
    /// The template renders `tools` itself; else ferrolm writes them into the system message.
    pub native: bool,
}

impl ToolStyle {
    pub fn of_template(source: &str) -> ToolStyle {
        let native = source.contains("tools");
        let format = if source.contains("<tool_call>") {
            ToolFormat::Hermes
        } else if source.contains("[TOOL_CALLS]") {
            ToolFormat::Mistral
        } else if native && (source.contains("<|python_tag|>") || source.contains("\"parameters\"")) {
            ToolFormat::Llama3
        } else {
            ToolFormat::Hermes
        };
        ToolStyle { format, native }
    }
}

/// A call parsed from the output, in OpenAI's shape (arguments as a JSON string).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ToolCall {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub function: FunctionCall,
}

#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct FunctionCall {
    pub name: String,
    pub arguments: String,
}

/// A call id: 9 letters and digits (Mistral's templates refuse any other shape), from `seed`.
pub fn call_id(seed: u64) -> String {
    const ABC: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    let mut rng = crate::sampler::Rng::new(seed);
    (0..9).map(|_| ABC[(rng.next_u64() % ABC.len() as u64) as usize] as char).collect()
}

/// Check `tools` (OpenAI's `[{type: 'function', function: {name, description?, parameters?}}]`).
pub fn validate(tools: &[Value]) -> Result<()> {
    let bad = |m: String| Err(Error::InvalidOption(format!("tools: {m}")));
    let mut names = std::collections::HashSet::new();
    for (i, t) in tools.iter().enumerate() {
        if t.get("type").and_then(Value::as_str) != Some("function") {
            return bad(format!("tools[{i}].type must be 'function'"));
        }
        let Some(name) = t.pointer("/function/name").and_then(Value::as_str) else {
            return bad(format!("tools[{i}].function.name is missing"));
        };
        if name.is_empty()
            || name.len() > 64
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        {
            return bad(format!("tools[{i}].function.name {name:?} must be 1-64 letters, digits, '_' or '-'"));
        }
        if !names.insert(name) {
            return bad(format!("two tools are named {name:?}"));
        }
        if let Some(p) = t.pointer("/function/parameters") {
            if !p.is_object() {
                return bad(format!("tools[{i}].function.parameters must be a JSON schema object"));
            }
            // A call's arguments are a JSON object (read back as one in the next turn).
            let ty = p.get("type");
            if ty.is_some_and(|ty| ty != "object" && !ty.as_array().is_some_and(|a| a.iter().any(|t| t == "object"))) {
                return bad(format!(
                    "tools[{i}].function.parameters has type {}: a call's arguments are an object (type 'object')",
                    ty.map(Value::to_string).unwrap_or_default()
                ));
            }
        }
    }
    Ok(())
}

fn tool_name(t: &Value) -> &str {
    t.pointer("/function/name").and_then(Value::as_str).unwrap_or_default()
}

/// A tool's parameter schema for a forced call: no properties beyond those declared unless the
/// schema allows them (OpenAI's strict mode does the same), so a call ends when its fields do.
/// The schema moves to the grammar's `$defs` as `at` (`#/$defs/tool<i>`), and its own `$ref`s
/// (`#`, `#/$defs/x`, ...: pointers into the tool's schema) are rewritten to point there.
fn parameters(t: &Value, at: &str) -> Result<Value> {
    let mut p =
        t.pointer("/function/parameters").cloned().unwrap_or_else(|| json!({ "type": "object", "properties": {} }));
    if let Some(o) = p.as_object_mut() {
        if o.get("type").is_none_or(|t| t == "object") {
            o.entry("additionalProperties").or_insert(Value::Bool(false));
        }
    }
    crate::constrain::each_schema(&mut p, &mut |o| {
        if let Some(Value::String(r)) = o.get_mut("$ref") {
            // JSON pointers into the tool's schema ("#", "#/", "#/$defs/x"); anchors ("#x") and
            // other documents' refs are left as they are.
            if r == "#" || r == "#/" {
                *r = at.to_string();
            } else if let Some(rest) = r.strip_prefix("#/") {
                *r = format!("{at}/{rest}");
            }
        }
        Ok(())
    })?;
    Ok(p)
}

/// The messages as the template should see them: each call's `arguments` as an object (the
/// templates write it with `tojson`); for a template without tool support, calls and results
/// become text turns in the Hermes format and the tools go into the system message.
pub fn template_messages(messages: &[Value], tools: Option<&[Value]>, style: ToolStyle) -> Value {
    let mut out: Vec<Value> = messages.iter().map(parse_arguments).collect();
    if style.native {
        return Value::Array(out);
    }
    out = out.into_iter().map(hermes_text_turn).collect();
    // Consecutive tool results go into one user turn, as Qwen's template does.
    let mut merged: Vec<Value> = Vec::new();
    for m in out {
        let both_results = |a: &Value, b: &Value| {
            a["role"] == "user" && b["role"] == "user" && a["tool_result"] == true && b["tool_result"] == true
        };
        match merged.last_mut() {
            Some(last) if both_results(last, &m) => {
                let text =
                    format!("{}\n{}", last["content"].as_str().unwrap_or(""), m["content"].as_str().unwrap_or(""));
                last["content"] = Value::String(text);
            }
            _ => merged.push(m),
        }
    }
    for m in &mut merged {
        if let Some(o) = m.as_object_mut() {
            o.remove("tool_result");
        }
    }
    if let Some(tools) = tools.filter(|t| !t.is_empty()) {
        let block = hermes_system_block(tools);
        match merged.first_mut() {
            Some(first) if first["role"] == "system" => {
                let text = format!("{}\n\n{block}", first["content"].as_str().unwrap_or(""));
                first["content"] = Value::String(text);
            }
            _ => merged.insert(0, json!({ "role": "system", "content": block })),
        }
    }
    Value::Array(merged)
}

/// A message as templates expect it: each call's arguments as an object, and an empty string for
/// the null content of a turn that only calls tools (Qwen 3's template tests `'</think>' in
/// message.content`, which fails on null in Jinja as in Python).
fn parse_arguments(m: &Value) -> Value {
    let mut m = m.clone();
    if m.get("content").is_some_and(Value::is_null) {
        m["content"] = Value::String(String::new());
    }
    if let Some(calls) = m.get_mut("tool_calls").and_then(Value::as_array_mut) {
        for c in calls {
            if let Some(a) = c.pointer_mut("/function/arguments") {
                if let Some(parsed) = a.as_str().and_then(|s| serde_json::from_str::<Value>(s).ok()) {
                    *a = parsed;
                }
            }
        }
    }
    m
}

/// An assistant turn with calls, or a tool result, as a plain text turn (Hermes format).
fn hermes_text_turn(m: Value) -> Value {
    match m["role"].as_str() {
        Some("assistant") if m.get("tool_calls").is_some_and(|c| c.is_array()) => {
            let mut text = m["content"].as_str().unwrap_or("").to_string();
            for c in m["tool_calls"].as_array().into_iter().flatten() {
                let call =
                    json!({ "name": c.pointer("/function/name"), "arguments": c.pointer("/function/arguments") });
                if !text.is_empty() {
                    text.push('\n');
                }
                text += &format!("<tool_call>\n{call}\n</tool_call>");
            }
            json!({ "role": "assistant", "content": text })
        }
        Some("tool") => {
            let content = m["content"].as_str().unwrap_or("");
            json!({ "role": "user", "content": format!("<tool_response>\n{content}\n</tool_response>"), "tool_result": true })
        }
        _ => m,
    }
}

/// Qwen 2.5's tool instructions.
fn hermes_system_block(tools: &[Value]) -> String {
    let mut s = String::from(
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>",
    );
    for t in tools {
        s += &format!("\n{t}");
    }
    s += "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call>";
    s
}

/// Split generated text into content and tool calls (any of the three formats; text that does
/// not parse as a call stays content). `seed` makes the call ids.
pub fn parse(text: &str, seed: u64) -> (String, Vec<ToolCall>) {
    let mut calls = Vec::new();
    let mut content = String::new();
    let mut rest = text;
    let mut n = 0u64;
    let mut push = |v: &Value, calls: &mut Vec<ToolCall>| -> bool {
        let Some(name) = v.get("name").and_then(Value::as_str) else { return false };
        let args = v.get("arguments").or_else(|| v.get("parameters")).cloned().unwrap_or_else(|| json!({}));
        let arguments = match args {
            Value::String(s) => s,
            other => other.to_string(),
        };
        calls.push(ToolCall {
            id: call_id(seed.wrapping_add(n)),
            kind: "function",
            function: FunctionCall { name: name.to_string(), arguments },
        });
        n += 1;
        true
    };
    // Hermes: any number of tagged calls between text.
    while let Some(i) = rest.find("<tool_call>") {
        content += &rest[..i];
        let after = &rest[i + "<tool_call>".len()..];
        let (body, next) = match after.find("</tool_call>") {
            Some(j) => (&after[..j], &after[j + "</tool_call>".len()..]),
            None => (after, ""),
        };
        match serde_json::from_str::<Value>(body.trim()) {
            Ok(v) if push(&v, &mut calls) => {}
            _ => content += &rest[i..rest.len() - next.len()],
        }
        rest = next;
    }
    content += rest;
    if !calls.is_empty() {
        return (content.trim().to_string(), calls);
    }
    // Mistral: [TOOL_CALLS] then a JSON array (or one object).
    if let Some(i) = text.find("[TOOL_CALLS]") {
        let body = text[i + "[TOOL_CALLS]".len()..].trim();
        let parsed = first_json(body);
        let items = match &parsed {
            Some(Value::Array(a)) => a.clone(),
            Some(v @ Value::Object(_)) => vec![v.clone()],
            _ => Vec::new(),
        };
        if !items.is_empty() && items.iter().all(|v| push(v, &mut calls)) {
            return (text[..i].trim().to_string(), calls);
        }
        calls.clear();
    }
    // Llama 3.x: the whole reply is a JSON object (or several, separated by ';').
    let body = text.trim().trim_start_matches("<|python_tag|>").trim();
    if body.starts_with('{') {
        let ok = body.split(';').map(str::trim).filter(|p| !p.is_empty()).all(|p| {
            serde_json::from_str::<Value>(p)
                .is_ok_and(|v| v.get("parameters").or(v.get("arguments")).is_some() && push(&v, &mut calls))
        });
        if ok && !calls.is_empty() {
            return (String::new(), calls);
        }
    }
    (text.to_string(), Vec::new())
}

/// The first JSON value at the start of `s` (text may follow it).
fn first_json(s: &str) -> Option<Value> {
    serde_json::Deserializer::from_str(s).into_iter::<Value>().next()?.ok()
}

/// Where a tool call may begin in streamed text: content before it can be handed out, the rest is
/// held until the end. Returns the byte index of the start, or of a partial marker at the end.
pub fn call_start(text: &str, format: ToolFormat) -> Option<usize> {
    let markers: &[&str] = match format {
        ToolFormat::Hermes => &["<tool_call>"],
        ToolFormat::Mistral => &["[TOOL_CALLS]"],
        ToolFormat::Llama3 => &["<|python_tag|>", "{"],
    };
    if format == ToolFormat::Llama3 && text.trim_start().starts_with('{') {
        return Some(0);
    }
    for m in markers.iter().filter(|m| m.len() > 1) {
        if let Some(i) = text.find(m) {
            return Some(i);
        }
    }
    // A marker that may be starting at the very end.
    markers
        .iter()
        .filter(|m| m.len() > 1)
        .flat_map(|m| (1..m.len()).rev().filter(move |&k| text.ends_with(&m[..k])).map(|k| text.len() - k))
        .min()
}

/// A Lark grammar that makes the output exactly one call of one of `tools` (or of the one named)
/// in the model's format. `tool_calls_id`: Mistral's `[TOOL_CALLS]` token id.
pub fn forced_call_grammar(
    tools: &[Value],
    only: Option<&str>,
    format: ToolFormat,
    tool_calls_id: Option<u32>,
) -> Result<String> {
    let args_key = if format == ToolFormat::Llama3 { "parameters" } else { "arguments" };
    let (mut choices, mut defs) = (Vec::new(), serde_json::Map::new());
    for (i, t) in tools.iter().enumerate().filter(|(_, t)| only.is_none_or(|n| tool_name(t) == n)) {
        let at = format!("#/$defs/tool{i}");
        defs.insert(format!("tool{i}"), parameters(t, &at)?);
        choices.push(json!({
            "type": "object",
            "properties": { "name": { "const": tool_name(t) }, args_key: { "$ref": at } },
            "required": ["name", args_key],
            "additionalProperties": false,
        }));
    }
    if choices.is_empty() {
        return Err(Error::InvalidOption(format!("tool_choice names {:?}, which is not in tools", only.unwrap_or(""))));
    }
    let schema = json!({ "anyOf": choices, "$defs": defs, "x-guidance": { "whitespace_flexible": false } }).to_string();
    Ok(match format {
        ToolFormat::Hermes => format!("start: \"<tool_call>\\n\" call \"\\n</tool_call>\"\ncall: %json {schema}\n"),
        ToolFormat::Llama3 => format!("start: call\ncall: %json {schema}\n"),
        ToolFormat::Mistral => {
            let head = match tool_calls_id {
                Some(id) => format!("<[{id}]>"),
                None => "\"[TOOL_CALLS]\"".into(),
            };
            format!("start: {head} \"[\" call \"]\"\ncall: %json {schema}\n")
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forced_calls_point_the_tools_refs_at_their_schemas() {
        let tool = json!({ "type": "function", "function": { "name": "f", "parameters": {
            "type": "object", "$defs": { "s": { "type": "string" } },
            "properties": { "a": { "$ref": "#/$defs/s" }, "b": { "$ref": "#/" }, "c": { "$ref": "#" },
                "d": { "$ref": "#anchor" }, "e": { "$ref": "other.json#/x" }, "f": { "const": { "$ref": "#/x" } } } } } });
        let g = forced_call_grammar(&[tool], None, ToolFormat::Hermes, None).unwrap();
        let schema: Value = serde_json::from_str(g.split_once("%json ").unwrap().1.trim()).unwrap();
        let p = &schema["$defs"]["tool0"]["properties"];
        assert_eq!(schema["anyOf"][0]["properties"]["arguments"]["$ref"], "#/$defs/tool0");
        assert_eq!(p["a"]["$ref"], "#/$defs/tool0/$defs/s");
        assert_eq!((&p["b"]["$ref"], &p["c"]["$ref"]), (&json!("#/$defs/tool0"), &json!("#/$defs/tool0")));
        assert_eq!((&p["d"]["$ref"], &p["e"]["$ref"]), (&json!("#anchor"), &json!("other.json#/x")));
        assert_eq!(p["f"]["const"]["$ref"], "#/x", "values are not schemas");
    }

    #[test]
    fn parses_each_format() {
        let (c, calls) = parse("Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", 1);
        assert_eq!(c, "Let me check.");
        assert_eq!(calls[0].function.name, "get_weather");
        assert_eq!(calls[0].function.arguments, r#"{"city":"Paris"}"#);
        assert_eq!(calls[0].id.len(), 9);
        let (c, calls) = parse(
            "[TOOL_CALLS][{\"name\": \"f\", \"arguments\": {\"x\": 1}}, {\"name\": \"g\", \"arguments\": {}}]",
            1,
        );
        assert_eq!((c.as_str(), calls.len()), ("", 2));
        let (c, calls) = parse("<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": 1}}", 1);
        assert_eq!((c.as_str(), calls[0].function.arguments.as_str()), ("", r#"{"x":1}"#));
        let (c, calls) = parse("{\"answer\": 42}", 1);
        assert_eq!((c.as_str(), calls.len()), ("{\"answer\": 42}", 0));
        let (c, calls) = parse("<tool_call>not json</tool_call> ok", 1);
        assert_eq!((c.as_str(), calls.len()), ("<tool_call>not json</tool_call> ok", 0));
    }

    #[test]
    fn call_start_holds_partial_markers() {
        assert_eq!(call_start("Sure <tool", ToolFormat::Hermes), Some(5));
        assert_eq!(call_start("Sure <tool_call>{", ToolFormat::Hermes), Some(5));
        assert_eq!(call_start("Sure.", ToolFormat::Hermes), None);
        assert_eq!(call_start("  {\"name\"", ToolFormat::Llama3), Some(0));
    }

    #[test]
    fn fallback_rewrites_calls_and_results() {
        let msgs = vec![
            json!({"role": "user", "content": "weather?"}),
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "abc123XYZ", "type": "function", "function": {"name": "w", "arguments": "{\"c\":\"P\"}"}}]}),
            json!({"role": "tool", "tool_call_id": "abc123XYZ", "content": "sunny"}),
        ];
        let tools = vec![json!({"type": "function", "function": {"name": "w", "parameters": {"type": "object"}}})];
        let out = template_messages(&msgs, Some(&tools), ToolStyle { format: ToolFormat::Hermes, native: false });
        assert_eq!(out[0]["role"], "system");
        assert!(out[0]["content"].as_str().unwrap().contains("<tools>"));
        assert_eq!(out[2]["content"], "<tool_call>\n{\"name\":\"w\",\"arguments\":{\"c\":\"P\"}}\n</tool_call>");
        assert_eq!(out[3], json!({"role": "user", "content": "<tool_response>\nsunny\n</tool_response>"}));
    }
}
