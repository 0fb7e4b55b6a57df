//! Streaming decode: text for ids as they arrive, never splitting a character.
//!
//! Decoding ids one by one and concatenating is wrong twice over: a character can span several
//! tokens (byte-level pieces, `<0xE2>` byte fallback), and a decoder may treat the first token
//! specially (SentencePiece strips the leading space). So, like `tokenizers`' `DecodeStream`, we
//! decode a short window: the ids of the last emitted chunk (context) plus those not yet emitted,
//! and emit what the window adds to the context's text, once that does not end in U+FFFD (an
//! unfinished UTF-8 sequence). The concatenated output equals `decode(all ids)`.

use super::Tokenizer;
use crate::error::Result;

/// Past this many held-back ids the text is emitted anyway: a vocabulary token that really is
/// U+FFFD must not make the window (and the cost of each push) grow without bound.
const MAX_PENDING: usize = 32;

pub struct StreamDecoder {
    tok: Tokenizer,
    /// Context ids (already emitted) followed by pending ids.
    ids: Vec<u32>,
    /// Number of context ids at the front of `ids`.
    context: usize,
    /// `decode(ids[..context])`.
    context_text: String,
}

impl StreamDecoder {
    pub(super) fn new(tok: Tokenizer) -> Self {
        StreamDecoder { tok, ids: Vec::new(), context: 0, context_text: String::new() }
    }

    /// Add one id; returns the text it completes (often empty while a character is unfinished).
    pub fn push(&mut self, id: u32) -> Result<String> {
        self.tok.check_ids(&[id])?;
        self.ids.push(id);
        let text = self.tok.decode(&self.ids)?;
        let pending = self.ids.len() - self.context;
        let complete = !text.ends_with('\u{FFFD}') || pending >= MAX_PENDING;
        if !complete || text.len() <= self.context_text.len() || !text.starts_with(&self.context_text) {
            return Ok(String::new());
        }
        let new = text[self.context_text.len()..].to_string();
        // The ids just emitted become the context for what follows.
        self.ids.drain(..self.context);
        self.context = self.ids.len();
        self.context_text = self.tok.decode(&self.ids)?;
        Ok(new)
    }

    /// Flush whatever is held back; dangling bytes become U+FFFD. The decoder is then empty.
    pub fn finish(&mut self) -> Result<String> {
        let text = self.tok.decode(&self.ids)?;
        let rest = if text.starts_with(&self.context_text) {
            text[self.context_text.len()..].to_string()
        } else {
            String::new()
        };
        self.ids.clear();
        self.context = 0;
        self.context_text.clear();
        Ok(rest)
    }
}
