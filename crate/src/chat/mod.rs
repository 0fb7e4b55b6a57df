//! OpenAI's chat completions on the engine, for the CLI (`ferrolm chat-completion`) and the
//! browser (`engine.chat.completions.create`) alike: the request checked field by field (an
//! unknown or unsupported field is an error naming it), the prompt (chat template, tools, the
//! context policy), the generation options (the model's sampling defaults, structured output,
//! forced tool calls), and the response object or the stream of chunks.

pub mod tools;

use std::collections::{BTreeMap, VecDeque};

use serde_json::{json, Value};

use crate::constrain::ConstraintSpec;
use crate::engine::{Engine, GenerateOptions, Generation, StopReason, TokenLogprob, DEFAULT_MAX_TOKENS};
use crate::error::{Error, Result};
use tools::{ToolFormat, ToolStyle};

/// Most completions one request may ask for (`n`).
pub const MAX_N: usize = 16;

#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatRequest {
    pub messages: Vec<Value>,
    pub model: Option<String>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub max_tokens: Option<usize>,
    pub max_completion_tokens: Option<usize>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<usize>,
    pub min_p: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub logit_bias: Option<BTreeMap<String, f32>>,
    pub logprobs: Option<bool>,
    pub top_logprobs: Option<usize>,
    pub seed: Option<u64>,
    pub stop: Option<Stop>,
    pub n: Option<usize>,
    pub response_format: Option<Value>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub user: Option<String>,
    /// ferrolm: a Lark grammar the output must follow (llguidance's dialect).
    pub grammar: Option<String>,
    /// ferrolm: what to do when the conversation does not fit the context: "error" (default)
    /// or "drop_oldest" (drop the oldest turns after the system message until it fits).
    pub context_overflow: Option<String>,
    /// ferrolm: reuse the KV cache of the previous request's common prefix (default true).
    pub prefix_cache: Option<bool>,
}

#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamOptions {
    pub include_usage: Option<bool>,
}

#[derive(Clone, Debug)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

// By hand: an untagged enum's error ("did not match any variant") does not say what `stop` takes.
impl<'de> serde::Deserialize<'de> for Stop {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Stop, D::Error> {
        let bad =
            |v: &Value| serde::de::Error::custom(format!("stop must be a string or an array of strings, got {v}"));
        match Value::deserialize(d)? {
            Value::String(s) => Ok(Stop::One(s)),
            Value::Array(a) => a
                .iter()
                .map(|v| v.as_str().map(str::to_owned).ok_or_else(|| bad(v)))
                .collect::<std::result::Result<_, _>>()
                .map(Stop::Many),
            v => Err(bad(&v)),
        }
    }
}

impl ChatRequest {
    /// Parse a request; an unknown field or a wrong type is an `InvalidOption` naming it.
    pub fn from_json(text: &str) -> Result<ChatRequest> {
        // serde would read a JSON array as the struct's fields in order ("expected struct
        // ChatRequest with 27 elements").
        if text.trim_start().starts_with('[') {
            return Err(Error::InvalidOption(
                "chat.completions.create: the request must be a JSON object {messages, ...}, not an array".into(),
            ));
        }
        let req: ChatRequest =
            serde_json::from_str(text).map_err(|e| Error::InvalidOption(format!("chat.completions.create: {e}")))?;
        // A number past f32's range parses as infinity: say so, not "got inf" later.
        let floats = [
            ("temperature", req.temperature),
            ("top_p", req.top_p),
            ("min_p", req.min_p),
            ("repetition_penalty", req.repetition_penalty),
            ("frequency_penalty", req.frequency_penalty),
            ("presence_penalty", req.presence_penalty),
        ];
        let biases = req.logit_bias.iter().flatten().map(|(_, v)| ("logit_bias", Some(*v)));
        if let Some((name, _)) = floats.into_iter().chain(biases).find(|(_, v)| v.is_some_and(f32::is_infinite)) {
            return Err(Error::InvalidOption(format!(
                "chat.completions.create: {name} is out of range (a number of at most 3.4e38 in size)"
            )));
        }
        Ok(req)
    }
}

const MESSAGE_FIELDS: &[&str] = &["role", "content", "name", "tool_calls", "tool_call_id", "refusal"];

/// The first key of `o` that is not one of `known`.
fn unknown_key<'a>(o: &'a serde_json::Map<String, Value>, known: &[&str]) -> Option<&'a String> {
    o.keys().find(|k| !known.contains(&k.as_str()))
}

/// Messages with their content as text (OpenAI's content parts joined) and roles checked.
fn normalize_messages(messages: &[Value]) -> Result<Vec<Value>> {
    let bad = |i: usize, m: String| Err(Error::InvalidOption(format!("messages[{i}]: {m}")));
    if messages.is_empty() {
        return Err(Error::InvalidOption("messages must hold at least one message".into()));
    }
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        let Some(o) = m.as_object() else { return bad(i, "must be an object".into()) };
        if let Some(k) = unknown_key(o, MESSAGE_FIELDS) {
            return bad(i, format!("unknown field {k}"));
        }
        let role = match o.get("role") {
            Some(Value::String(r)) if r == "developer" => "system",
            Some(Value::String(r)) if ["system", "user", "assistant", "tool"].contains(&r.as_str()) => r.as_str(),
            Some(Value::String(r)) => {
                return bad(i, format!("unknown role {r:?} (system, developer, user, assistant or tool)"))
            }
            None | Some(Value::Null) => return bad(i, "role is missing".into()),
            Some(v) => return bad(i, format!("role must be a string, got {v}")),
        };
        let content = match o.get("content") {
            None | Some(Value::Null) => {
                if role != "assistant" {
                    return bad(i, "content is missing".into());
                }
                Value::Null
            }
            Some(Value::String(s)) => Value::String(s.clone()),
            // OpenAI refuses an empty list of parts too.
            Some(Value::Array(parts)) if parts.is_empty() => return bad(i, "content is an empty list of parts".into()),
            Some(Value::Array(parts)) => {
                let mut text = String::new();
                for (j, p) in parts.iter().enumerate() {
                    match (p.get("type").and_then(Value::as_str), p.get("text").and_then(Value::as_str)) {
                        (Some("text") | None, Some(t)) => text += t,
                        (Some(t), _) if t != "text" => {
                            return bad(i, format!("content[{j}] is of type {t:?}; only text parts are supported"))
                        }
                        _ => {
                            return bad(
                                i,
                                format!("content[{j}] must be a text part {{\"type\": \"text\", \"text\": ...}}"),
                            )
                        }
                    }
                }
                Value::String(text)
            }
            Some(_) => return bad(i, "content must be a string or an array of text parts".into()),
        };
        check_tool_fields(o, role).map_err(|m| Error::InvalidOption(format!("messages[{i}]: {m}")))?;
        let mut n = o.clone();
        n.insert("role".into(), Value::String(role.into()));
        n.insert("content".into(), content);
        n.remove("refusal");
        out.push(Value::Object(n));
    }
    Ok(out)
}

/// OpenAI's shapes of an assistant's `tool_calls` ([{id, type: "function", function: {name,
/// arguments}}], arguments a JSON text) and of a tool message's `tool_call_id`: templates render
/// whatever they get, so a malformed call would go into the prompt as it is.
fn check_tool_fields(o: &serde_json::Map<String, Value>, role: &str) -> std::result::Result<(), String> {
    if let Some(calls) = o.get("tool_calls").filter(|v| !v.is_null()) {
        if role != "assistant" {
            return Err("tool_calls belong to assistant messages".into());
        }
        let shape = "an array of {id, type: \"function\", function: {name, arguments}}";
        let Some(calls) = calls.as_array() else { return Err(format!("tool_calls must be {shape}")) };
        for (j, c) in calls.iter().enumerate() {
            let f = c.get("function");
            let name = f.and_then(|f| f.get("name")).and_then(Value::as_str);
            let args = f.and_then(|f| f.get("arguments"));
            if !c.is_object() || name.is_none_or(str::is_empty) {
                return Err(format!("tool_calls[{j}] needs function.name (tool_calls must be {shape})"));
            }
            if c.get("type").is_some_and(|t| t != "function") {
                return Err(format!("tool_calls[{j}].type must be \"function\""));
            }
            if c.get("id").is_some_and(|v| !v.is_string()) {
                return Err(format!("tool_calls[{j}].id must be a string"));
            }
            match args {
                None | Some(Value::Object(_)) => {}
                Some(Value::String(t)) if serde_json::from_str::<Value>(t).is_ok_and(|v| v.is_object()) => {}
                Some(_) => return Err(format!("tool_calls[{j}].function.arguments must be a JSON object (as text)")),
            }
        }
    }
    match o.get("tool_call_id") {
        Some(Value::String(_)) if role == "tool" => Ok(()),
        Some(v) if !v.is_null() && role == "tool" => Err(format!("tool_call_id must be a string, got {v}")),
        Some(v) if !v.is_null() => Err("tool_call_id belongs to tool messages".into()),
        _ => Ok(()),
    }
}

/// Everything a request resolves to before generating.
struct Plan {
    prompt: Vec<u32>,
    opts: GenerateOptions,
    n: usize,
    stream: bool,
    include_usage: bool,
    logprobs: bool,
    /// The tool format to parse calls in, when tools are in play.
    tool_format: Option<ToolFormat>,
    dropped_messages: usize,
}

fn plan(engine: &mut Engine, req: &ChatRequest, fallback_seed: u64) -> Result<Plan> {
    let bad = |m: String| Err(Error::InvalidOption(format!("chat.completions.create: {m}")));
    let n = req.n.unwrap_or(1);
    let stream = req.stream.unwrap_or(false);
    if n == 0 || n > MAX_N {
        return bad(format!("n must be in 1..={MAX_N}, got {n}"));
    }
    if n > 1 && stream {
        return bad("n > 1 is supported only without stream".into());
    }
    if req.stream_options.is_some() && !stream {
        return bad("stream_options needs stream: true".into());
    }
    let mut sampling = engine.sampling_defaults.params();
    let set = |dst: &mut f32, v: Option<f32>| {
        if let Some(v) = v {
            *dst = v;
        }
    };
    // OpenAI's range: a chat client sending more is mistaken, not asking for noise.
    if let Some(t) = req.temperature.filter(|t| !(0.0..=2.0).contains(t)) {
        return bad(format!("temperature must be in [0, 2], got {t}"));
    }
    set(&mut sampling.temperature, req.temperature);
    set(&mut sampling.top_p, req.top_p);
    set(&mut sampling.min_p, req.min_p);
    set(&mut sampling.repetition_penalty, req.repetition_penalty);
    set(&mut sampling.frequency_penalty, req.frequency_penalty);
    set(&mut sampling.presence_penalty, req.presence_penalty);
    if let Some(k) = req.top_k {
        sampling.top_k = k;
    }
    sampling.seed = req.seed.unwrap_or(fallback_seed);
    for (k, v) in req.logit_bias.iter().flatten() {
        let Some(id) = crate::sampler::bias_key(k) else {
            return bad(format!("logit_bias key {k:?} is not a token id"));
        };
        sampling.logit_bias.push((id, *v));
    }
    sampling.validate()?;
    let logprobs = req.logprobs.unwrap_or(false);
    if req.top_logprobs.is_some_and(|k| k > 0) && !logprobs {
        return bad("top_logprobs needs logprobs: true".into());
    }
    let stop = match &req.stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s.clone()],
        Some(Stop::Many(v)) if v.len() > 4 => return bad(format!("stop holds {} strings; at most 4", v.len())),
        Some(Stop::Many(v)) => v.clone(),
    };

    // Tools.
    let tools: &[Value] = req.tools.as_deref().unwrap_or(&[]);
    tools::validate(tools)?;
    if req.parallel_tool_calls.is_some() && tools.is_empty() {
        return bad("parallel_tool_calls needs tools".into());
    }
    let choice = match &req.tool_choice {
        None => if tools.is_empty() { "none" } else { "auto" }.to_string(),
        Some(Value::String(s)) if ["none", "auto", "required"].contains(&s.as_str()) => s.clone(),
        Some(v) => match (v.get("type").and_then(Value::as_str), v.pointer("/function/name").and_then(Value::as_str)) {
            (Some("function"), Some(name)) => format!("function:{name}"),
            _ => {
                return bad(format!(
                "tool_choice must be 'none', 'auto', 'required' or {{type: 'function', function: {{name}}}}, got {v}"
            ))
            }
        },
    };
    if choice != "none" && tools.is_empty() {
        return bad(format!("tool_choice {choice:?} needs tools"));
    }
    let template_src = match &engine.template {
        Some(t) => t.source().to_string(),
        None => String::new(),
    };
    let style = ToolStyle::of_template(&template_src);
    let use_tools = choice != "none";
    let tool_format = use_tools.then_some(style.format);

    // Output constraint: a forced call, response_format, or a grammar (one of them).
    let mut constraint = None;
    if choice == "required" || choice.starts_with("function:") {
        let only = choice.strip_prefix("function:");
        let tc_id = engine.tokenizer.as_ref().and_then(|t| t.token_id("[TOOL_CALLS]"));
        constraint = Some(ConstraintSpec::ToolCall(tools::forced_call_grammar(tools, only, style.format, tc_id)?));
    }
    // OpenAI's fields of each kind; another (a typo, or a schema under `json_object`) would be
    // dropped unseen.
    if let Some(Value::Object(f)) = &req.response_format {
        let (kind, fields): (&str, &[&str]) = match f.get("type").and_then(Value::as_str) {
            Some("json_schema") => ("json_schema", &["type", "json_schema"]),
            Some(other) => (other, &["type"]),
            None => ("", &["type"]),
        };
        if let Some(k) = unknown_key(f, fields) {
            return bad(format!("response_format of type {kind:?} has no field {k:?} (it has {fields:?})"));
        }
        let schema_fields = ["name", "schema", "strict", "description"];
        if let Some(Value::Object(j)) = f.get("json_schema") {
            if let Some(k) = unknown_key(j, &schema_fields) {
                return bad(format!("response_format.json_schema has no field {k:?} (it has {schema_fields:?})"));
            }
        }
    }
    let format = match &req.response_format {
        None => None,
        Some(f) => match f.get("type").and_then(Value::as_str) {
            Some("text") => None,
            Some("json_object") => Some(ConstraintSpec::JsonObject),
            Some("json_schema") => match f.pointer("/json_schema/schema") {
                Some(s) if s.is_object() || s.is_boolean() => Some(ConstraintSpec::JsonSchema(s.clone())),
                _ => return bad("response_format json_schema needs json_schema.schema (an object)".into()),
            },
            _ => return bad(format!("response_format type must be 'text', 'json_object' or 'json_schema', got {f}")),
        },
    };
    for c in [format, req.grammar.as_deref().map(ConstraintSpec::grammar)].into_iter().flatten() {
        if constraint.is_some() {
            return bad("only one of response_format, grammar and a forced tool call may constrain the output".into());
        }
        constraint = Some(c);
    }

    if let (Some(a), Some(b)) = (req.max_completion_tokens, req.max_tokens) {
        if a != b {
            return bad(format!("max_completion_tokens {a} and max_tokens {b} disagree (give one)"));
        }
    }
    let max_tokens = req.max_completion_tokens.or(req.max_tokens).unwrap_or(DEFAULT_MAX_TOKENS);
    if max_tokens == 0 {
        return bad("max_tokens must be at least 1".into());
    }
    let drop_oldest = match req.context_overflow.as_deref() {
        None | Some("error") => false,
        Some("drop_oldest") => true,
        Some(o) => return bad(format!("context_overflow must be 'error' or 'drop_oldest', got {o:?}")),
    };

    // The prompt, dropping the oldest turns while it does not fit (when asked).
    let mut messages = normalize_messages(&req.messages)?;
    let limit = engine.context_limit();
    let mut dropped = 0;
    let prompt = loop {
        let msgs = tools::template_messages(&messages, use_tools.then_some(tools), style);
        let native_tools = (use_tools && style.native).then(|| Value::Array(tools.to_vec()));
        let ids = engine.chat_ids_json(&msgs, native_tools.as_ref())?;
        if !drop_oldest || ids.len() + max_tokens.min(limit / 2) <= limit {
            break ids;
        }
        // The first message after a system message goes, keeping at least the last one.
        let first = usize::from(messages.first().is_some_and(|m| m["role"] == "system"));
        if messages.len() <= first + 1 {
            return Err(Error::ContextOverflow { tokens: ids.len(), max_new: max_tokens, context: limit });
        }
        messages.remove(first);
        dropped += 1;
    };
    let opts = GenerateOptions {
        max_tokens,
        sampling,
        stop,
        logprobs: logprobs.then(|| req.top_logprobs.unwrap_or(0)),
        constraint,
        prefix_cache: req.prefix_cache.unwrap_or(true),
        ..GenerateOptions::default()
    };
    opts.validate()?;
    Ok(Plan {
        prompt,
        opts,
        n,
        stream,
        include_usage: req.stream_options.as_ref().and_then(|o| o.include_usage).unwrap_or(false),
        logprobs,
        tool_format,
        dropped_messages: dropped,
    })
}

/// One choice's outcome.
struct Choice {
    content: String,
    tool_calls: Vec<tools::ToolCall>,
    finish: &'static str,
    /// OpenAI's `logprobs.content` array.
    logprobs: Value,
}

/// A chat completion in progress: `next_chunk` for a stream, `complete` for the whole response.
pub struct ChatRun {
    plan: Plan,
    id: String,
    created: u64,
    model: String,
    gen: Option<Generation>,
    /// Index of the choice being generated.
    index: usize,
    choices: Vec<Choice>,
    /// Bytes of the current choice's text already streamed as content.
    streamed: usize,
    role_sent: bool,
    queue: VecDeque<Value>,
    done: bool,
    prompt_tokens: usize,
    cached_tokens: usize,
    completion_tokens: usize,
    stats: Option<Value>,
}

impl ChatRun {
    /// Check the request and build the prompt; generation starts with the first chunk or
    /// `complete`. `fallback_seed` seeds sampling when the request gives no seed; `created` is
    /// the Unix time, `id` the response id.
    pub fn new(
        engine: &mut Engine,
        req: &ChatRequest,
        fallback_seed: u64,
        created: u64,
        id: String,
    ) -> Result<ChatRun> {
        let plan = plan(engine, req, fallback_seed)?;
        let model = req.model.clone().unwrap_or_else(|| engine.source_name.clone());
        Ok(ChatRun {
            plan,
            id,
            created,
            model,
            gen: None,
            index: 0,
            choices: Vec::new(),
            streamed: 0,
            role_sent: false,
            queue: VecDeque::new(),
            done: false,
            prompt_tokens: 0,
            cached_tokens: 0,
            completion_tokens: 0,
            stats: None,
        })
    }

    pub fn is_stream(&self) -> bool {
        self.plan.stream
    }

    /// Messages dropped to fit the context (`context_overflow: 'drop_oldest'`).
    pub fn dropped_messages(&self) -> usize {
        self.plan.dropped_messages
    }

    /// Stop the generation in progress (the caller stopped reading).
    pub fn cancel(&mut self, engine: &mut Engine) {
        if let Some(g) = self.gen.as_mut() {
            engine.cancel(g);
        }
        self.done = true;
    }

    /// The next stream chunk (OpenAI's `chat.completion.chunk`), or `None` at the end.
    pub async fn next_chunk(&mut self, engine: &mut Engine) -> Result<Option<Value>> {
        if !self.role_sent {
            self.role_sent = true;
            return Ok(Some(self.chunk(json!({ "role": "assistant", "content": "" }), None, None)));
        }
        loop {
            if let Some(c) = self.queue.pop_front() {
                return Ok(Some(c));
            }
            if self.done {
                return Ok(None);
            }
            self.advance(engine).await?;
        }
    }

    /// After `next_chunk`: the chunks that follow without waiting for the GPU (see
    /// `Engine::step_ready`), appended to `out` until it holds `max`. An error on the way waits
    /// in the generation (`Generation::defer`) for the next `next_chunk`.
    pub async fn ready_chunks(&mut self, engine: &mut Engine, out: &mut Vec<Value>, max: usize) {
        while out.len() < max {
            if let Some(c) = self.queue.pop_front() {
                out.push(c);
                continue;
            }
            match &self.gen {
                Some(g) if !self.done && engine.step_ready(g) => {
                    if let Err(e) = self.advance(engine).await {
                        if let Some(g) = self.gen.as_mut() {
                            g.defer(e);
                        }
                        break;
                    }
                }
                _ => break,
            }
        }
    }

    /// Advance by one token (for a caller that checks for cancellation between tokens); false
    /// once the run is done (then `response` is complete).
    pub async fn step(&mut self, engine: &mut Engine) -> Result<bool> {
        if !self.done {
            self.advance(engine).await?;
            if !self.plan.stream {
                self.queue.clear();
            }
        }
        Ok(!self.done)
    }

    /// Run to the end and return the `chat.completion` object.
    pub async fn complete(&mut self, engine: &mut Engine) -> Result<Value> {
        while !self.done {
            self.advance(engine).await?;
            self.queue.clear();
        }
        Ok(self.response())
    }

    /// One engine step (starting or finishing a choice as needed), queueing stream chunks.
    async fn advance(&mut self, engine: &mut Engine) -> Result<()> {
        if self.gen.is_none() {
            let mut opts = self.plan.opts.clone();
            opts.sampling.seed = opts.sampling.seed.wrapping_add(self.index as u64);
            self.gen = Some(engine.start(&self.plan.prompt, &opts).await?);
            self.streamed = 0;
        }
        let g = self.gen.as_mut().expect("started above");
        let ev = engine.step(g).await?;
        let ended = g.stop_reason.is_some();
        if let Some(ev) = &ev {
            if self.plan.stream {
                // Only what the events handed out: a stop string's first tokens are held back.
                let text = g.text_handed_out();
                let upto = match self.plan.tool_format {
                    Some(f) => tools::call_start(text, f).unwrap_or(text.len()),
                    None => text.len(),
                };
                let delta = if upto > self.streamed { text[self.streamed..upto].to_string() } else { String::new() };
                self.streamed = self.streamed.max(upto);
                let lp = ev
                    .logprob
                    .as_ref()
                    .filter(|_| self.plan.logprobs)
                    .map(|l| logprob_json(engine, std::slice::from_ref(l)));
                if !delta.is_empty() || lp.is_some() {
                    let c = self.chunk(json!({ "content": delta }), None, lp);
                    self.queue.push_back(c);
                }
            }
            if !ended {
                return Ok(());
            }
        }
        // This choice ended.
        let g = self.gen.take().expect("in progress");
        let r = g.result(engine.dispatches_of(&g));
        let (content, calls) = match self.plan.tool_format {
            Some(_) => tools::parse(&r.text, self.plan.opts.sampling.seed.wrapping_add(self.index as u64)),
            None => (r.text.clone(), Vec::new()),
        };
        let finish = if !calls.is_empty() {
            "tool_calls"
        } else {
            match r.stats.stop_reason {
                StopReason::Stop | StopReason::Cancelled => "stop",
                StopReason::Length | StopReason::Context => "length",
            }
        };
        if self.plan.stream {
            if content.len() > self.streamed && calls.is_empty() {
                let c = self.chunk(json!({ "content": &content[self.streamed..] }), None, None);
                self.queue.push_back(c);
            }
            if !calls.is_empty() {
                let deltas: Vec<Value> = calls
                    .iter()
                    .enumerate()
                    .map(|(i, c)| json!({ "index": i, "id": c.id, "type": "function", "function": c.function }))
                    .collect();
                let c = self.chunk(json!({ "tool_calls": deltas }), None, None);
                self.queue.push_back(c);
            }
            let c = self.chunk(json!({}), Some(finish), None);
            self.queue.push_back(c);
        }
        if self.index == 0 {
            self.prompt_tokens = r.stats.prompt_tokens;
            self.cached_tokens = r.stats.cached_tokens;
        }
        self.completion_tokens += r.tokens.len();
        self.stats = serde_json::to_value(&r.stats).ok();
        let logprobs = logprob_json(engine, &r.logprobs)["content"].take();
        self.choices.push(Choice { content, tool_calls: calls, finish, logprobs });
        self.index += 1;
        if self.index >= self.plan.n {
            self.done = true;
            if self.plan.stream && self.plan.include_usage {
                let mut c = self.chunk(json!({}), None, None);
                c["choices"] = json!([]);
                c["usage"] = self.usage();
                self.queue.push_back(c);
            }
        }
        Ok(())
    }

    fn chunk(&self, delta: Value, finish: Option<&str>, logprobs: Option<Value>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{ "index": self.index, "delta": delta, "logprobs": logprobs, "finish_reason": finish }],
        })
    }

    pub fn usage(&self) -> Value {
        json!({
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": { "cached_tokens": self.cached_tokens },
        })
    }

    /// The `chat.completion` object of what was generated (complete once the run is done).
    pub fn response(&self) -> Value {
        let choices: Vec<Value> = self
            .choices
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut message = json!({
                    "role": "assistant",
                    "content": if c.content.is_empty() && !c.tool_calls.is_empty() { Value::Null } else { Value::String(c.content.clone()) },
                });
                if !c.tool_calls.is_empty() {
                    message["tool_calls"] = json!(c.tool_calls);
                }
                let logprobs = if self.plan.logprobs { json!({ "content": c.logprobs }) } else { Value::Null };
                json!({ "index": i, "message": message, "logprobs": logprobs, "finish_reason": c.finish })
            })
            .collect();
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": choices,
            "usage": self.usage(),
            "stats": self.stats,
        })
    }
}

/// OpenAI's `logprobs.content` entries for `lps`.
fn logprob_json(engine: &Engine, lps: &[TokenLogprob]) -> Value {
    let entry = |id: u32, logprob: f32| {
        let bytes = engine.tokenizer.as_ref().map(|t| t.piece_bytes(id)).unwrap_or_default();
        json!({ "token": String::from_utf8_lossy(&bytes), "logprob": logprob, "bytes": bytes })
    };
    let content: Vec<Value> = lps
        .iter()
        .map(|l| {
            let mut e = entry(l.token, l.logprob);
            e["top_logprobs"] = l.top.iter().map(|&(id, lp)| entry(id, lp)).collect();
            e
        })
        .collect();
    json!({ "content": content })
}

#[cfg(test)]
mod tests {
    use super::ChatRequest;

    #[test]
    fn a_request_is_an_object() {
        let e = ChatRequest::from_json(" [] ").expect_err("an array is refused").to_string();
        assert!(e.contains("must be a JSON object"), "{e}");
        assert!(ChatRequest::from_json(r#"{"messages": [{"role": "user", "content": "hi"}]}"#).is_ok());
    }
}
