//! What a generation is asked for (`GenerateOptions`), what it reports per token (`TokenEvent`)
//! and at the end (`GenerationResult`), and the text side of it: stop strings, held-back text.

use crate::sampler::SamplingParams;

/// Most alternatives `logprobs` reports per token (OpenAI's `top_logprobs` limit).
pub const MAX_TOP_LOGPROBS: usize = 20;
/// Tokens generated when the caller does not say.
pub const DEFAULT_MAX_TOKENS: usize = 256;

#[derive(Clone, Debug)]
pub struct GenerateOptions {
    pub max_tokens: usize,
    pub sampling: SamplingParams,
    /// Token ids that end generation; default: the model's EOS/EOT tokens.
    pub stop_ids: Option<Vec<u32>>,
    /// Strings that end generation: the text stops before the first one (which is not returned).
    pub stop: Vec<String>,
    /// Report this many of the largest raw logits of the first generated position.
    pub top_logits: usize,
    /// Report each token's log-probability with this many alternatives (0..=20); `None`: none.
    pub logprobs: Option<usize>,
    /// Output the constraint accepts (JSON, a JSON schema, a grammar); `None`: free text.
    pub constraint: Option<crate::constrain::ConstraintSpec>,
    /// Reuse the KV cache of the longest common prefix with the previous sequence.
    pub prefix_cache: bool,
    /// Choose every token on the CPU from read-back logits (`sampler::Sampler`) instead of on
    /// the GPU (slower: a readback a token and no pipelining; for checking the GPU sampler).
    pub cpu_sampling: bool,
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
    /// does not do (log-probabilities, OpenAI's penalties, logit bias). A constraint alone
    /// stays on the GPU: its mask of allowed tokens goes up each step instead.
    pub fn needs_cpu(&self) -> bool {
        let s = &self.sampling;
        self.cpu_sampling
            || self.logprobs.is_some()
            || s.frequency_penalty != 0.0
            || s.presence_penalty != 0.0
            || !s.logit_bias.is_empty()
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
    pub decode_ms: f64,
    /// Prompt tokens prefilled (not reused) per second.
    pub prefill_tok_s: f64,
    pub decode_tok_s: f64,
    pub stop_reason: StopReason,
    pub seed: u64,
    pub dispatches_per_token: usize,
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
    use super::TextOut;

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
