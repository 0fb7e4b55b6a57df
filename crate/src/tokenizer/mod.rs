//! Text ⇄ token ids.
//!
//! The heavy lifting is the `tokenizers` crate (the engine behind Hugging Face's fast tokenizers):
//! from a GGUF we build its pipeline ourselves, the same one transformers builds from that file
//! (see `gguf.rs`), so ids match transformers' `tok(text, add_special_tokens=False)`; a Hugging Face
//! folder's tokenizer.json is loaded as is. What this module adds: the model's special ids (BOS, EOS
//! and the end-of-turn tokens that stop a chat), bounds-checked decoding, and a streaming decoder.

mod gguf;
mod pretok;
mod stream;
pub mod validate;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::weights::gguf::GgufFile;

pub use stream::StreamDecoder;

/// Token texts that end a turn in the chat formats we know. llama.cpp treats control tokens with
/// these names as end-of-generation too; a chat must stop on them even when the metadata's EOS id
/// names another token (SmolLM2: EOS is <|im_end|>, but <|endoftext|> also ends).
const END_OF_TURN: &[&str] = &[
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<end_of_turn>",
    "<|end|>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<|return|>",
    "<|end▁of▁sentence|>",
    "<EOT>",
    // The plain end-of-sequence texts, for a tokenizer whose EOS is an end-of-turn token (Gemma's
    // tokenizer_config.json names <end_of_turn>; generation_config.json also stops on <eos>).
    "<eos>",
    "</s>",
];

/// A tokenizer plus the model's special ids. Cheap to clone (shared).
#[derive(Clone)]
pub struct Tokenizer {
    inner: Arc<Inner>,
}

struct Inner {
    hf: tokenizers::Tokenizer,
    /// Token texts by id, as the vocabulary spells them (byte-level `Ġ` etc. included); empty for
    /// an id the vocabulary does not define.
    tokens: Vec<String>,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    eos_ids: Vec<u32>,
    /// Encode text that starts with a space as if it had one more: SentencePiece's dummy prefix
    /// for a pipeline whose `Metaspace` would not add it there (GGUF Mistral v3, see gguf.rs).
    prefix_leading_space: bool,
    /// The vocabulary spells bytes GPT-2's way (computed on first use).
    byte_level: std::sync::OnceLock<bool>,
    /// Special ids the tokenizer puts before and after a text encoded "with special tokens"
    /// (what sentence-transformers feeds an embedding model; `encode_wrapped`).
    wrap: (Vec<u32>, Vec<u32>),
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("bos", &self.inner.bos)
            .field("eos", &self.inner.eos)
            .field("add_bos", &self.inner.add_bos)
            .field("eos_ids", &self.inner.eos_ids)
            .finish()
    }
}

/// serde's message for a part none of whose kinds matched (the tokenizers crate reads models,
/// normalizers, pre-tokenizers, post-processors and decoders untagged) in the file's words.
fn untagged(msg: &str) -> String {
    const PARTS: [(&str, &str); 5] = [
        ("ModelUntagged", "the model (BPE, WordPiece, WordLevel or Unigram)"),
        ("NormalizerUntagged", "a normalizer"),
        ("PreTokenizerUntagged", "a pre_tokenizer"),
        ("PostProcessorUntagged", "a post_processor"),
        ("DecoderUntagged", "a decoder"),
    ];
    match PARTS.iter().find(|(tag, _)| msg.contains("untagged enum") && msg.contains(tag)) {
        Some((_, part)) => format!("{part} has an unknown type or fields that do not fit its type"),
        None => msg.to_string(),
    }
}

pub(crate) fn tok_err(e: impl std::fmt::Display) -> Error {
    Error::Tokenizer(e.to_string())
}

impl Tokenizer {
    /// Build from the `tokenizer.ggml.*` metadata of a GGUF file. Supported models: "gpt2"
    /// (byte-level BPE) and "llama" (SentencePiece-style BPE with byte fallback).
    pub fn from_gguf(g: &GgufFile) -> Result<Tokenizer> {
        gguf::build(g)
    }

    /// Load a Hugging Face tokenizer.json; BOS/EOS and `add_bos_token` come from
    /// tokenizer_config.json when given.
    pub fn from_hf_json(tokenizer_json: &str, tokenizer_config_json: Option<&str>) -> Result<Tokenizer> {
        // Parsed once: validated as JSON, then built from the same value.
        let parsed: serde_json::Value =
            serde_json::from_str(tokenizer_json).map_err(|e| tok_err(format!("tokenizer.json: {e}")))?;
        validate::hf_json(&parsed)?;
        let hf: tokenizers::Tokenizer = serde_json::from_value(parsed)
            .map_err(|e| tok_err(format!("tokenizer.json: {}", untagged(&e.to_string()))))?;
        let config: serde_json::Value = match tokenizer_config_json {
            Some(s) => serde_json::from_str(s).map_err(|e| tok_err(format!("tokenizer_config.json: {e}")))?,
            None => serde_json::Value::Null,
        };
        // A special token is either a string or an AddedToken object {"content": ...}.
        let special = |key: &str| -> Option<u32> {
            let v = config.get(key)?;
            let text = v.as_str().or_else(|| v.get("content")?.as_str())?;
            let id = hf.token_to_id(text);
            if id.is_none() {
                log::warn!(
                    "tokenizer_config.json: {key} {text:?} is not a token of tokenizer.json's vocabulary; ignored"
                );
            }
            id
        };
        let bos = special("bos_token");
        let eos = special("eos_token");
        let add_bos = match config.get("add_bos_token").and_then(|v| v.as_bool()) {
            Some(b) => b,
            // Llama 3 style: no flag, the post-processor adds BOS. Ask it.
            None => match bos {
                Some(b) => hf.encode_fast("a", true).map(|e| e.get_ids().first() == Some(&b)).unwrap_or(false),
                None => false,
            },
        };
        let n = hf.get_vocab_size(true);
        if n == 0 {
            return Err(tok_err("tokenizer.json: the vocabulary is empty"));
        }
        let mut tokens = vec![String::new(); n];
        for (text, id) in hf.get_vocab(true) {
            if let Some(slot) = tokens.get_mut(id as usize) {
                *slot = text;
            }
        }
        let specials: Vec<u32> =
            hf.get_added_tokens_decoder().iter().filter(|(_, t)| t.special).map(|(&id, _)| id).collect();
        let eos_ids = collect_eos_ids(eos, &[], &tokens, |id| specials.contains(&id));
        // transformers 5 rebuilds the post-processor as [bos] $A [eos] when tokenizer_config.json
        // names either flag (TokenizersBackend.update_post_processor); else tokenizer.json's own
        // post-processor decides.
        let flag = |k: &str| config.get(k).map(|v| v.as_bool().unwrap_or(false));
        let wrap = match (flag("add_bos_token"), flag("add_eos_token")) {
            (None, None) => probe_wrap(&hf),
            (b, e) => (
                bos.filter(|_| b == Some(true)).into_iter().collect(),
                eos.filter(|_| e == Some(true)).into_iter().collect(),
            ),
        };
        let mut tok = Tokenizer::assemble(hf, tokens, bos, eos, add_bos, eos_ids);
        Arc::get_mut(&mut tok.inner).expect("not shared yet").wrap = wrap;
        Ok(tok)
    }

    fn assemble(
        hf: tokenizers::Tokenizer,
        tokens: Vec<String>,
        bos: Option<u32>,
        eos: Option<u32>,
        add_bos: bool,
        eos_ids: Vec<u32>,
    ) -> Self {
        Tokenizer {
            inner: Arc::new(Inner {
                hf,
                tokens,
                bos,
                eos,
                add_bos,
                eos_ids,
                prefix_leading_space: false,
                byte_level: Default::default(),
                wrap: (bos.filter(|_| add_bos).into_iter().collect(), Vec::new()),
            }),
        }
    }

    fn prefix_leading_space(&mut self) {
        Arc::get_mut(&mut self.inner).expect("not shared yet").prefix_leading_space = true;
    }

    /// GGUF: llama.cpp appends EOS to embedding inputs when `tokenizer.ggml.add_eos_token` says so.
    pub(crate) fn set_add_eos(&mut self, add: bool) {
        let inner = Arc::get_mut(&mut self.inner).expect("not shared yet");
        inner.wrap.1 = inner.eos.filter(|_| add).into_iter().collect();
    }

    /// Ids for `text` as a model's tokenizer gives them "with special tokens" (the BOS/EOS or
    /// other ids its post-processor adds around it), the text cut to fit `max_len` in all, the
    /// added ids kept: what transformers' `tokenizer(text, truncation=True, max_length=...)` gives.
    pub fn encode_wrapped(&self, text: &str, max_len: usize) -> Result<Vec<u32>> {
        let (pre, post) = &self.inner.wrap;
        let mut body = self.encode(text)?;
        body.truncate(max_len.saturating_sub(pre.len() + post.len()));
        Ok([&pre[..], &body, &post[..]].concat())
    }

    /// Whether `id` is a special token (added tokens marked special; BOS/EOS).
    pub fn is_special(&self, id: u32) -> bool {
        Some(id) == self.inner.bos
            || Some(id) == self.inner.eos
            || self.inner.hf.get_added_tokens_decoder().get(&id).is_some_and(|t| t.special)
    }

    /// Token ids for `text`, nothing added (no BOS); special-token text such as `<|im_start|>` is
    /// recognized and becomes its id.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        let spaced;
        let text = if self.inner.prefix_leading_space && text.starts_with(' ') {
            spaced = format!(" {text}");
            &spaced
        } else {
            text
        };
        let enc = self.inner.hf.encode_fast(text, false).map_err(tok_err)?;
        Ok(enc.get_ids().to_vec())
    }

    /// Text for `ids`. Nothing is skipped: special tokens render as their text. Bytes that do not
    /// form valid UTF-8 become U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        self.check_ids(ids)?;
        self.inner.hf.decode(ids, false).map_err(tok_err)
    }

    /// A decoder that turns ids into text one at a time as they are generated.
    pub fn stream(&self) -> StreamDecoder {
        StreamDecoder::new(self.clone())
    }

    pub fn bos_id(&self) -> Option<u32> {
        self.inner.bos
    }
    pub fn eos_id(&self) -> Option<u32> {
        self.inner.eos
    }
    /// Whether a prompt should start with BOS (the engine adds it; `encode` never does).
    pub fn add_bos(&self) -> bool {
        self.inner.add_bos
    }
    /// Ids that end generation in a chat: EOS, then end-of-turn/end-of-message tokens.
    pub fn eos_ids(&self) -> Vec<u32> {
        self.inner.eos_ids.clone()
    }
    /// The vocabulary's text for `id` (as stored: byte-level vocabularies spell a space `Ġ`).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.inner.tokens.get(id as usize).map(String::as_str).filter(|s| !s.is_empty())
    }
    /// Number of token ids (the embedding table's rows must cover this).
    pub fn vocab_size(&self) -> usize {
        self.inner.tokens.len()
    }

    /// The id of a token spelled `text` in the vocabulary (special tokens included).
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.inner.hf.token_to_id(text)
    }

    /// One token's bytes as generated text holds them (special tokens: their text); see
    /// `token_bytes`.
    pub fn piece_bytes(&self, id: u32) -> Vec<u8> {
        self.token_text(id).map(|t| unspell(t, self.is_byte_level())).unwrap_or_default()
    }

    fn is_byte_level(&self) -> bool {
        *self.inner.byte_level.get_or_init(|| {
            serde_json::to_string(&self.inner.hf.get_decoder()).is_ok_and(|d| d.contains("\"ByteLevel\""))
        })
    }

    /// Every token's bytes, by id, as generated text would hold them: byte-level pieces mapped
    /// back to bytes (`Ġ` is a space), SentencePiece's `▁` a space and `<0xAB>` one byte.
    /// Special tokens get the 0xFF prefix (never valid UTF-8, so no text spells them), the
    /// convention of the constraint engine (toktrie); ids the vocabulary lacks are empty.
    pub fn token_bytes(&self) -> Vec<Vec<u8>> {
        let byte_level = self.is_byte_level();
        let specials: std::collections::HashSet<u32> =
            self.inner.hf.get_added_tokens_decoder().iter().filter(|(_, t)| t.special).map(|(&id, _)| id).collect();
        let tokens = self.inner.tokens.iter().enumerate();
        tokens
            .map(|(id, t)| match () {
                _ if t.is_empty() => Vec::new(),
                _ if specials.contains(&(id as u32)) => [&[0xFF][..], t.as_bytes()].concat(),
                _ => unspell(t, byte_level),
            })
            .collect()
    }

    fn check_ids(&self, ids: &[u32]) -> Result<()> {
        match ids.iter().find(|&&id| self.token_text(id).is_none()) {
            None => Ok(()),
            Some(id) => Err(tok_err(format!("token id {id} is not in the vocabulary ({} tokens)", self.vocab_size()))),
        }
    }
}

/// A vocabulary entry's bytes: GPT-2's byte-level alphabet mapped back (an added token that is not
/// in that alphabet is its text), else SentencePiece's byte-fallback `<0xAB>` or `▁` for a space.
fn unspell(t: &str, byte_level: bool) -> Vec<u8> {
    if byte_level {
        let unbyte = gpt2_unicode_to_byte();
        return t
            .chars()
            .map(|c| unbyte.get(&c).copied())
            .collect::<Option<Vec<u8>>>()
            .unwrap_or_else(|| t.as_bytes().to_vec());
    }
    match byte_fallback(t) {
        Some(b) => vec![b],
        None => t.replace('\u{2581}', " ").into_bytes(),
    }
}

/// GPT-2's byte-level alphabet backwards: the printable bytes stand for themselves, the others
/// were moved to U+0100 and up, in order. Built once.
fn gpt2_unicode_to_byte() -> &'static std::collections::HashMap<char, u8> {
    static MAP: std::sync::OnceLock<std::collections::HashMap<char, u8>> = std::sync::OnceLock::new();
    MAP.get_or_init(|| {
        let mut map = std::collections::HashMap::new();
        let mut shifted = 0u32;
        for b in 0u32..256 {
            let printable = (33..=126).contains(&b) || (161..=172).contains(&b) || (174..=255).contains(&b);
            let c = if printable {
                b
            } else {
                shifted += 1;
                255 + shifted
            };
            map.insert(char::from_u32(c).expect("below U+0200"), b as u8);
        }
        map
    })
}

/// `<0xAB>`: a SentencePiece byte-fallback token.
fn byte_fallback(t: &str) -> Option<u8> {
    let hex = t.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

/// EOS first, then the explicit end-of-turn ids from metadata, then special tokens with a known
/// end-of-turn name; no duplicates.
fn collect_eos_ids(
    eos: Option<u32>,
    explicit: &[u32],
    tokens: &[String],
    is_special: impl Fn(u32) -> bool,
) -> Vec<u32> {
    let mut out: Vec<u32> = eos.into_iter().chain(explicit.iter().copied()).collect();
    for name in END_OF_TURN {
        if let Some(id) = tokens.iter().position(|t| t == name) {
            if is_special(id as u32) {
                out.push(id as u32);
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|id| seen.insert(*id));
    out
}

/// The ids a tokenizer.json's post-processor adds around a single text: found by encoding a
/// probe text with and without special tokens.
fn probe_wrap(hf: &tokenizers::Tokenizer) -> (Vec<u32>, Vec<u32>) {
    let (Ok(plain), Ok(full)) = (hf.encode_fast("a", false), hf.encode_fast("a", true)) else {
        return (Vec::new(), Vec::new());
    };
    let (plain, full) = (plain.get_ids(), full.get_ids());
    match (0..=full.len().saturating_sub(plain.len())).find(|&i| full[i..].starts_with(plain)) {
        Some(i) if !plain.is_empty() => (full[..i].to_vec(), full[i + plain.len()..].to_vec()),
        _ => (Vec::new(), Vec::new()),
    }
}
