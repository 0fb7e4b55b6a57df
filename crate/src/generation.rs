//! What a generation is asked for (`GenerateOptions`), what it reports per token (`TokenEvent`)
//! and at the end (`GenerationResult`), and the text side of it: stop strings, held-back text.

use crate::sampler::SamplingParams;

/// Most alternatives `logprobs` reports per token (OpenAI's `top_logprobs` limit).
pub const MAX_TOP_LOGPROBS: usize = 20;
/// Tokens generated when the caller does not say.
pub const DEFAULT_MAX_TOKENS: usize = 256;

/// What a generation is asked for. The one definition of `generate()`'s options: the package's
/// JSON deserializes straight into it (`from_json`: camelCase, the sampling fields flattened,
/// unknown fields refused by name), so a new option is a field here (and its check in
/// `validate`), its type in pkg-template/index.d.ts, and its CLI flag.
#[derive(Clone, Debug, serde::Deserialize)]
#[serde(default, rename_all = "camelCase", deny_unknown_fields)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    #[serde(flatten)]
    pub sampling: SamplingParams,
    /// Token ids that end generation; default: the model's EOS/EOT tokens.
    pub stop_ids: Option<Vec<u32>>,
    /// Strings that end generation: the text stops before the first one (which is not returned).
    /// JSON: one string or an array of them.
    #[serde(deserialize_with = "one_or_many")]
    pub stop: Vec<String>,
    /// Report this many of the largest raw logits of the first generated position.
    pub top_logits: usize,
    /// Report each token's log-probability with this many alternatives (0..=20); `None`: none.
    pub logprobs: Option<usize>,
    /// Output the constraint accepts (JSON, a JSON schema, a grammar); `None`: free text.
    /// JSON: at most one of `jsonSchema`, `jsonObject: true` and `grammar`.
    #[serde(flatten, deserialize_with = "constraint_fields")]
    pub constraint: Option<crate::constrain::ConstraintSpec>,
    /// Reuse the KV cache of the longest common prefix with the previous sequence.
    pub prefix_cache: bool,
    /// Choose every token on the CPU from read-back logits (`sampler::Sampler`) instead of on
    /// the GPU (slower: a readback a token and no pipelining; for checking the GPU sampler).
    /// Not a package option.
    #[serde(skip)]
    pub cpu_sampling: bool,
}

/// Options JSON as the package passes it (empty: all defaults), refused as an `InvalidOption`
/// that starts with `what` and names the field at fault.
pub fn from_js<T: serde::de::DeserializeOwned + Default>(json: &str, what: &str) -> crate::Result<T> {
    if json.trim().is_empty() {
        return Ok(T::default());
    }
    let v: T = serde_json::from_str(json).map_err(|e| crate::Error::InvalidOption(format!("{what}: {e}")))?;
    // A number past f32's range would parse as infinity into a float option ("got inf").
    if let Ok(tree) = serde_json::from_str::<serde_json::Value>(json) {
        if let Some(key) = too_large(&tree, "") {
            return Err(crate::Error::InvalidOption(format!(
                "{what}: {key} is out of range (a number of at most 3.4e38 in size)"
            )));
        }
    }
    Ok(v)
}

/// The path of the first number in `v` beyond f32's range.
fn too_large(v: &serde_json::Value, at: &str) -> Option<String> {
    match v {
        serde_json::Value::Number(n) => n.as_f64().filter(|x| x.abs() > f32::MAX as f64).map(|_| at.to_string()),
        serde_json::Value::Array(a) => a.iter().enumerate().find_map(|(i, x)| too_large(x, &format!("{at}[{i}]"))),
        serde_json::Value::Object(m) => {
            m.iter().find_map(|(k, x)| too_large(x, &if at.is_empty() { k.clone() } else { format!("{at}.{k}") }))
        }
        _ => None,
    }
}

/// The fields options JSON (already accepted by `from_js`) gives.
pub(crate) fn js_keys(json: &str) -> Vec<String> {
    serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(json)
        .map(|m| m.into_iter().map(|(k, _)| k).collect())
        .unwrap_or_default()
}

fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    Ok(match <crate::chat::Stop as serde::Deserialize>::deserialize(d)? {
        crate::chat::Stop::One(s) => vec![s],
        crate::chat::Stop::Many(v) => v,
    })
}

fn constraint_fields<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<crate::constrain::ConstraintSpec>, D::Error> {
    use crate::constrain::ConstraintSpec as C;
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Fields {
        json_schema: Option<serde_json::Value>,
        json_object: Option<bool>,
        grammar: Option<String>,
    }
    let f = <Fields as serde::Deserialize>::deserialize(d)?;
    let given = [
        f.json_schema.map(C::JsonSchema),
        f.json_object.filter(|&b| b).map(|_| C::JsonObject),
        f.grammar.as_deref().map(C::grammar),
    ];
    let mut given = given.into_iter().flatten();
    let constraint = given.next();
    if given.next().is_some() {
        return Err(serde::de::Error::custom("only one of jsonSchema, jsonObject and grammar may be given"));
    }
    Ok(constraint)
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_tokens: DEFAULT_MAX_TOKENS,
            sampling: SamplingParams::default(),
            stop_ids: None,
            stop: Vec::new(),
            top_logits: 0,
            logprobs: None,
            constraint: None,
            prefix_cache: true,
            cpu_sampling: false,
        }
    }
}

impl GenerateOptions {
    /// `generate()`'s options as the package passes them; `seed()` gives the seed when they
    /// name none.
    pub fn from_json(json: &str, seed: impl FnOnce() -> u64) -> crate::Result<GenerateOptions> {
        let mut o: GenerateOptions = from_js(json, "generate options")?;
        if !js_keys(json).iter().any(|k| k == "seed") {
            o.sampling.seed = seed();
        }
        Ok(o)
    }

    pub fn validate(&self) -> crate::Result<()> {
        self.sampling.validate()?;
        if let Some(k) = self.logprobs {
            if k > MAX_TOP_LOGPROBS {
                return Err(crate::Error::InvalidOption(format!(
                    "top_logprobs must be at most {MAX_TOP_LOGPROBS}, got {k}"
                )));
            }
        }
        if self.stop.iter().any(String::is_empty) {
            return Err(crate::Error::InvalidOption("a stop string is empty".into()));
        }
        Ok(())
    }

    /// Whether each token must be chosen on the CPU from read-back logits: what the GPU sampler
    /// does not do (log-probabilities need every logit). A constraint stays on the GPU: its
    /// mask of allowed tokens goes up each step instead.
    pub fn needs_cpu(&self) -> bool {
        self.cpu_sampling || self.logprobs.is_some()
    }
}

/// A token's log-probability under the model (log-softmax of its raw logits, before
/// temperature, penalties, bias and constraints), with the most likely alternatives.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TokenLogprob {
    pub token: u32,
    pub logprob: f32,
    /// (id, log-probability), most likely first.
    pub top: Vec<(u32, f32)>,
}

/// One step of a generation: a token and the text it completes (may be empty mid-character or
/// while a stop string might be starting). `token` is `None` only for a last event that flushes
/// held-back text.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TokenEvent {
    pub token: Option<u32>,
    pub text: String,
    /// This token is a stop token (end of generation).
    pub stop: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprob: Option<TokenLogprob>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StopReason {
    /// A stop token or stop string, or the constraint's end.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// The KV cache is full.
    Context,
    /// The caller asked to stop.
    Cancelled,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct GenStats {
    pub prompt_tokens: usize,
    /// Prompt tokens whose KV entries were reused from the previous sequence (not prefilled).
    pub cached_tokens: usize,
    pub generated_tokens: usize,
    pub prefill_ms: f64,
    /// From the start of the generation (the prefill included) to its first token.
    pub first_token_ms: f64,
    /// From the first token to the last: `decode_tok_s` is the tokens after the first over it.
    pub decode_ms: f64,
    /// Prompt tokens prefilled (not reused) per second.
    pub prefill_tok_s: f64,
    pub decode_tok_s: f64,
    pub stop_reason: StopReason,
    pub seed: u64,
    pub dispatches_per_token: usize,
    /// Tokens after the first were chosen on the GPU (one id read back a step, pipelined);
    /// false when each came from read-back logits on the CPU (log-probabilities asked for).
    pub gpu_sampling: bool,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct GenerationResult {
    pub prompt_ids: Vec<u32>,
    pub tokens: Vec<u32>,
    pub text: String,
    pub top_logits: Vec<(u32, f32)>,
    pub logprobs: Vec<TokenLogprob>,
    pub stats: GenStats,
}

/// The generated text and how much of it was handed out: text that might be the start of a stop
/// string is held back until the next token shows it is not.
#[derive(Default)]
pub(crate) struct TextOut {
    stops: Vec<String>,
    /// Generated text (cut before a stop string once one is found).
    pub text: String,
    /// Bytes of `text` already handed out.
    sent: usize,
}

impl TextOut {
    pub fn new(stops: Vec<String>) -> TextOut {
        TextOut { stops, text: String::new(), sent: 0 }
    }

    /// Add a token's text; returns what may be handed out now and whether a stop string ended
    /// the text.
    pub fn push(&mut self, piece: &str) -> (String, bool) {
        let from = self.sent.saturating_sub(self.stops.iter().map(String::len).max().unwrap_or(0));
        self.text.push_str(piece);
        let from = floor_char(&self.text, from);
        let mut cut = None;
        for s in &self.stops {
            if let Some(i) = self.text[from..].find(s.as_str()) {
                cut = Some(cut.map_or(from + i, |c: usize| c.min(from + i)));
            }
        }
        if let Some(at) = cut {
            self.text.truncate(at);
            return (self.flush(), true);
        }
        let hold = self.stops.iter().map(|s| partial_suffix(&self.text, s)).max().unwrap_or(0);
        let upto = floor_char(&self.text, self.text.len() - hold).max(self.sent);
        let out = self.text[self.sent..upto].to_string();
        self.sent = upto;
        (out, false)
    }

    /// The text handed out so far: without what is held back as a possible stop string's start.
    pub fn handed_out(&self) -> &str {
        &self.text[..self.sent.min(self.text.len())]
    }

    /// Everything not handed out yet.
    pub fn flush(&mut self) -> String {
        let out = self.text[self.sent.min(self.text.len())..].to_string();
        self.sent = self.text.len();
        out
    }
}

/// Length of the longest proper prefix of `stop` that `text` ends with.
fn partial_suffix(text: &str, stop: &str) -> usize {
    (1..stop.len()).rev().find(|&k| stop.is_char_boundary(k) && text.ends_with(&stop[..k])).unwrap_or(0)
}

fn floor_char(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::{GenerateOptions, TextOut};

    #[test]
    fn numbers_past_f32_are_out_of_range() {
        let e = GenerateOptions::from_json(r#"{"temperature": 1e39}"#, || 9).unwrap_err().to_string();
        assert!(e.contains("generate options: temperature is out of range"), "{e}");
        let e = GenerateOptions::from_json(r#"{"logitBias": {"5": -1e300}}"#, || 9).unwrap_err().to_string();
        assert!(e.contains("logitBias.5 is out of range"), "{e}");
        assert!(GenerateOptions::from_json(r#"{"seed": 18446744073709551615}"#, || 9).is_ok());
    }

    #[test]
    fn options_from_package_json() {
        let o = GenerateOptions::from_json("", || 9).unwrap();
        assert_eq!((o.max_tokens, o.sampling.seed, o.prefix_cache), (super::DEFAULT_MAX_TOKENS, 9, true));
        let j = r#"{"maxTokens":3,"topK":5,"temperature":0.5,"seed":7,"logitBias":{"5":-1.5},"stop":"x","stopIds":[],"prefixCache":false,"grammar":"start: \"a\""}"#;
        let o = GenerateOptions::from_json(j, || 9).unwrap();
        assert_eq!((o.max_tokens, o.sampling.top_k, o.sampling.temperature, o.sampling.seed), (3, 5, 0.5, 7));
        assert_eq!(o.sampling.logit_bias, vec![(5, -1.5)]);
        assert_eq!((o.stop, o.stop_ids, o.prefix_cache), (vec!["x".to_string()], Some(vec![]), false));
        assert!(matches!(o.constraint, Some(crate::constrain::ConstraintSpec::Lark(_))));
        assert_eq!(GenerateOptions::from_json(r#"{"stop":["a","b"]}"#, || 0).unwrap().stop, ["a", "b"]);
        assert!(GenerateOptions::from_json(r#"{"jsonObject":false}"#, || 0).unwrap().constraint.is_none());
        let err = |j: &str| GenerateOptions::from_json(j, || 0).unwrap_err().to_string();
        assert!(err(r#"{"maxToken":3}"#).contains("generate options: unknown field `maxToken`"));
        assert!(err(r#"{"temprature":3}"#).contains("`temprature`"));
        assert!(err(r#"{"cpuSampling":true}"#).contains("`cpuSampling`"));
        assert!(err(r#"{"topK":"x"}"#).contains("invalid type"));
        assert!(err(r#"{"logitBias":{"a":1}}"#).contains(r#"logitBias key "a" is not a token id"#));
        assert!(err(r#"{"grammar":"a","jsonObject":true}"#).contains("only one of jsonSchema, jsonObject and grammar"));
    }

    #[test]
    fn stop_strings_hold_back_and_cut() {
        let mut t = TextOut::new(vec!["END".into(), "\n\n".into()]);
        assert_eq!(t.push("Hello E"), ("Hello ".into(), false));
        assert_eq!(t.push("N"), ("".into(), false));
        assert_eq!(t.push("X more"), ("ENX more".into(), false));
        assert_eq!(t.push(" then EN"), (" then ".into(), false));
        assert_eq!(t.push("D and on"), ("".into(), true));
        assert_eq!(t.text, "Hello ENX more then ");
    }

    #[test]
    fn stop_string_across_many_pieces_and_unicode() {
        let mut t = TextOut::new(vec!["éé".into()]);
        let mut out = String::new();
        for p in ["a", "é", "b", "é", "é", "c"] {
            let (s, stop) = t.push(p);
            out += &s;
            if stop {
                break;
            }
        }
        assert_eq!(out, "aéb");
        let mut none = TextOut::new(Vec::new());
        assert_eq!(none.push("xyz"), ("xyz".into(), false));
        assert_eq!(none.flush(), "");
    }
}
