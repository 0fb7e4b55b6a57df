//! Tokenizer from GGUF metadata (llama.cpp's `tokenizer.ggml.*` keys). The aim is the ids of the
//! model's own tokenizer (its tokenizer.json, or SentencePiece), which is what llama.cpp gives too;
//! crate/tests/tokenizer_families.rs checks that on real vocabularies of each family. The pipeline
//! follows what transformers builds from the same file (`integrations/gguf/`) except where that
//! differs from the model's tokenizer:
//!
//! * "gpt2": byte-level BPE from `tokens` + `merges`; the text split follows `tokenizer.ggml.pre`
//!   (see `pretok.rs`, which also says which vocabularies skip merges for whole-token pieces and
//!   which normalize to NFC first).
//! * "llama": SentencePiece-style BPE with byte fallback (`<0x0A>`), `▁` for spaces. When the file
//!   has no merges they are derived from the scores the way transformers does (`generate_merges`),
//!   which reproduces SentencePiece's "merge the best-scoring pair first". With
//!   `add_space_prefix` (the default) a `▁` goes before the text and after each special token,
//!   even before a leading space, as llama.cpp does (transformers' plain LlamaTokenizer skips it
//!   for text that starts with a space). Mistral's v2/v3 vocabularies (control tokens [INST] and
//!   [/INST]) follow mistral-common instead: no second `▁` after a special token.
//!
//! Control tokens (type 3) and the BOS/EOS/UNK/PAD tokens become special added tokens and
//! user-defined tokens (type 4) plain added tokens, so their text in a prompt maps to their id; a
//! model named Phi-3 gets llama.cpp's (and its tokenizer_config's) `rstrip` on them.
//! Everything is validated first: the `tokenizers` crate panics on some malformed input (a merge
//! longer than every token), and a bad file must give an error, not a crash.

use std::collections::HashMap;

use tokenizers::decoders::byte_fallback::ByteFallback;
use tokenizers::decoders::byte_level::ByteLevel;
use tokenizers::decoders::fuse::Fuse;
use tokenizers::decoders::sequence::Sequence;
use tokenizers::decoders::strip::Strip;
use tokenizers::decoders::DecoderWrapper;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::prepend::Prepend;
use tokenizers::normalizers::replace::Replace;
use tokenizers::normalizers::unicode::NFC;
use tokenizers::normalizers::{NormalizerWrapper, Sequence as NormalizerSequence};
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
use tokenizers::AddedToken;

use super::{collect_eos_ids, pretok, tok_err, Tokenizer};
use crate::error::{Error, Result};
use crate::weights::gguf::GgufFile;

const CONTROL: i64 = 3;
const USER_DEFINED: i64 = 4;

/// Whether a vocabulary entry may become an added (special or user-defined) token: in a GPT-2
/// vocabulary only entries spelled in its byte alphabet.
type SpecialFilter = Box<dyn Fn(&str) -> bool>;

/// GPT-2's byte-to-character table: printable bytes stand for themselves, the rest are shifted
/// to U+0100.. so that every byte has a visible, non-space character.
fn bytes_to_unicode() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..256u32 {
        let printable = (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
        table[b as usize] = if printable {
            char::from_u32(b).unwrap()
        } else {
            next += 1;
            char::from_u32(next - 1).unwrap()
        };
    }
    table
}

pub(super) fn build(g: &GgufFile) -> Result<Tokenizer> {
    let meta = |e: crate::weights::gguf::GgufError| tok_err(e);
    let model = g
        .get_str("tokenizer.ggml.model")
        .map_err(meta)?
        .ok_or_else(|| tok_err("the GGUF has no tokenizer (tokenizer.ggml.model is missing)"))?;
    let tokens: Vec<String> = g
        .get_str_array("tokenizer.ggml.tokens")
        .map_err(meta)?
        .ok_or_else(|| tok_err("tokenizer.ggml.tokens (the vocabulary) is missing"))?
        .into_iter()
        .map(str::to_owned)
        .collect();
    let n = tokens.len();
    if n == 0 || n as u64 > crate::model::bounds::VOCAB.1 {
        return Err(tok_err(format!(
            "tokenizer.ggml.tokens has {n} entries (1 to {} are accepted)",
            crate::model::bounds::VOCAB.1
        )));
    }
    for t in &tokens {
        super::validate::token_text("tokenizer.ggml.tokens", t)?;
    }
    let same_len = |key: &str, len: Option<usize>| match len {
        Some(l) if l != n => Err(tok_err(format!("{key} has {l} entries but tokenizer.ggml.tokens has {n}"))),
        _ => Ok(()),
    };
    let types = g.get_i64_array("tokenizer.ggml.token_type").map_err(meta)?.unwrap_or_default();
    same_len("tokenizer.ggml.token_type", (!types.is_empty()).then_some(types.len()))?;
    // llama.cpp's kinds: 0 undefined, 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte.
    if let Some((i, t)) = types.iter().enumerate().find(|(_, t)| !(0..=6).contains(*t)) {
        return Err(tok_err(format!(
            "tokenizer.ggml.token_type[{i}] = {t} is not a token kind (0 to 6; token {:?})",
            tokens[i]
        )));
    }
    let scores = g.get_f64_array("tokenizer.ggml.scores").map_err(meta)?;
    same_len("tokenizer.ggml.scores", scores.as_ref().map(Vec::len))?;
    let merges = g.get_str_array("tokenizer.ggml.merges").map_err(meta)?;

    let id = |key: &str| -> Result<Option<u32>> {
        match g.get(&format!("tokenizer.ggml.{key}")) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(i) if (i as usize) < n => Ok(Some(i as u32)),
                // llama.cpp writes -1 (as a signed or wrapped value) for "none".
                _ if v.as_i64() == Some(-1) || v.as_u64() == Some(u32::MAX as u64) => Ok(None),
                _ => {
                    let shown = v
                        .as_i64()
                        .map(|x| x.to_string())
                        .or_else(|| v.as_str().map(|t| format!("{t:?} (a string)")))
                        .unwrap_or_else(|| format!("a value of type {}", v.type_name()));
                    Err(tok_err(format!(
                        "tokenizer.ggml.{key} = {shown} is not a token id (the vocabulary has {n} tokens)"
                    )))
                }
            },
        }
    };
    let (bos, eos, unk, pad) =
        (id("bos_token_id")?, id("eos_token_id")?, id("unknown_token_id")?, id("padding_token_id")?);
    let eot: Vec<u32> = [id("eot_token_id")?, id("eom_token_id")?].into_iter().flatten().collect();
    let ty = |i: usize| types.get(i).copied().unwrap_or(1);
    let mut prefix_leading_space = false;

    let (mut hf, add_bos_default, specials_ok): (tokenizers::Tokenizer, bool, SpecialFilter) = match model {
        "gpt2" => {
            let pre = g.get_str("tokenizer.ggml.pre").map_err(meta)?.unwrap_or("default");
            let table = bytes_to_unicode();
            let alphabet: std::collections::HashSet<char> = table.iter().copied().collect();
            // A token written with characters outside the byte alphabet (a plain space, say) is
            // respelled byte by byte, as transformers does.
            let vocab: Vocab = tokens
                .iter()
                .enumerate()
                .map(|(i, t)| {
                    let key = if t.chars().all(|c| alphabet.contains(&c)) {
                        t.clone()
                    } else {
                        t.bytes().map(|b| table[b as usize]).collect()
                    };
                    (key, i as u32)
                })
                .collect();
            let merges =
                merges.ok_or_else(|| tok_err("a gpt2 tokenizer needs tokenizer.ggml.merges, which is missing"))?;
            let merges = parse_merges(&merges, &vocab)?;
            let bpe = BPE::builder()
                .vocab_and_merges(vocab, merges)
                .ignore_merges(pretok::ignores_merges(pre))
                .build()
                .map_err(tok_err)?;
            let mut hf = tokenizers::Tokenizer::new(bpe);
            if pretok::nfc(pre) {
                hf.with_normalizer(Some(NFC)).map_err(tok_err)?;
            }
            hf.with_pre_tokenizer(Some(pretok::byte_level(pre)?));
            hf.with_decoder(Some(ByteLevel::default()));
            // A control token outside the byte alphabet is a llama.cpp mislabel; transformers skips it.
            (hf, false, Box::new(move |t: &str| t.chars().all(|c| alphabet.contains(&c))))
        }
        "llama" => {
            let add_space_prefix = g.get_bool("tokenizer.ggml.add_space_prefix").map_err(meta)?.unwrap_or(true);
            let vocab: Vocab = tokens.iter().enumerate().map(|(i, t)| (t.clone(), i as u32)).collect();
            let merges = match merges {
                Some(m) => parse_merges(&m, &vocab)?,
                None => {
                    let scores = scores.ok_or_else(|| {
                        tok_err("a llama tokenizer needs tokenizer.ggml.scores (or merges), which are missing")
                    })?;
                    merges_from_scores(&tokens, &scores, &vocab)
                }
            };
            let bpe = BPE::builder()
                .vocab_and_merges(vocab, merges)
                .fuse_unk(true)
                .byte_fallback(true)
                .build()
                .map_err(tok_err)?;
            let mut hf = tokenizers::Tokenizer::new(bpe);
            // llama.cpp's SentencePiece rule: with add_space_prefix, one `▁` goes before the text
            // and after every special token, also when the text already starts with a space
            // ("  hi" is `▁▁▁hi`, as SentencePiece's dummy prefix and Phi-3's and Llama 2's
            // tokenizer.json make it). A normalizer runs on each piece between special tokens, so
            // `Prepend` does exactly that; `Metaspace` would skip text that starts with a space.
            //
            // Mistral's v2/v3 vocabularies (control tokens [INST] and [/INST]) are the exception:
            // mistral-common encodes each message on its own and puts the control tokens between,
            // so "[INST] What" must be [INST] `▁What`, where llama.cpp's rule gives [INST] `▁` `▁What`
            // (their tokenizer.json agrees with mistral-common: Metaspace, not legacy). There a
            // piece after a special token gets `▁` only when it does not start with a space, and
            // the start of the text keeps SentencePiece's prefix (see `Tokenizer::encode`).
            let space: NormalizerWrapper = Replace::new(" ", "▁").map_err(tok_err)?.into();
            let control = |t: &str| tokens.iter().zip(0..).any(|(x, i)| x == t && ty(i) == CONTROL);
            if add_space_prefix && control("[INST]") && control("[/INST]") {
                hf.with_pre_tokenizer(Some(Metaspace::new('▁', PrependScheme::Always, false)));
                prefix_leading_space = true;
            } else if add_space_prefix {
                hf.with_normalizer(Some(NormalizerSequence::new(vec![Prepend::new("▁".into()).into(), space])))
                    .map_err(tok_err)?;
            } else {
                hf.with_normalizer(Some(space)).map_err(tok_err)?;
            }
            let mut dec: Vec<DecoderWrapper> =
                vec![Replace::new("▁", " ").map_err(tok_err)?.into(), ByteFallback::new().into(), Fuse::new().into()];
            if add_space_prefix {
                dec.push(Strip::new(' ', 1, 0).into());
            }
            hf.with_decoder(Some(Sequence::new(dec)));
            (hf, true, Box::new(|_: &str| true))
        }
        other => return Err(Error::Unsupported(format!("tokenizer model {other:?} (supported: gpt2, llama)"))),
    };

    // llama.cpp gives the special tokens of a model named Phi-3 `rstrip` (whitespace after them is
    // dropped), except <unk>, <s> and <|endoftext|>: what Phi-3's tokenizer_config.json says.
    let name = g.get_str("general.name").map_err(meta)?.unwrap_or("").to_lowercase();
    let phi3 = name.contains("phi-3") || name.contains("phi3");
    let rstrip = |t: &str| phi3 && !["<unk>", "<s>", "<|endoftext|>"].contains(&t);
    let is_special_id = |i: usize| ty(i) == CONTROL || [bos, eos, unk, pad].contains(&Some(i as u32));
    let special: Vec<AddedToken> = (0..n)
        .filter(|&i| is_special_id(i) && specials_ok(&tokens[i]))
        .map(|i| AddedToken::from(tokens[i].clone(), true).normalized(false).rstrip(rstrip(&tokens[i])))
        .collect();
    hf.add_special_tokens(special).map_err(tok_err)?;
    let user: Vec<AddedToken> = (0..n)
        .filter(|&i| ty(i) == USER_DEFINED && !is_special_id(i) && specials_ok(&tokens[i]))
        .map(|i| AddedToken::from(tokens[i].clone(), false).normalized(false).rstrip(rstrip(&tokens[i])))
        .collect();
    hf.add_tokens(user).map_err(tok_err)?;

    let add_bos = g.get_bool("tokenizer.ggml.add_bos_token").map_err(meta)?.unwrap_or(add_bos_default);
    let eos_ids = collect_eos_ids(eos, &eot, &tokens, |i| ty(i as usize) == CONTROL);
    let mut tok = Tokenizer::assemble(hf, tokens, bos, eos, add_bos, eos_ids);
    tok.set_add_eos(g.get_bool("tokenizer.ggml.add_eos_token").map_err(meta)?.unwrap_or(false));
    if prefix_leading_space {
        tok.prefix_leading_space();
    }
    Ok(tok)
}

/// "left right" lines; both halves and their concatenation must be tokens.
fn parse_merges(lines: &[&str], vocab: &Vocab) -> Result<Vec<(String, String)>> {
    lines
        .iter()
        .enumerate()
        .map(|(i, line)| {
            let bad = |why: String| tok_err(format!("tokenizer.ggml.merges[{i}] = {line:?}: {why}"));
            let (a, b) = line
                .split_once(' ')
                .filter(|(_, b)| !b.contains(' '))
                .ok_or_else(|| bad("not two tokens separated by one space".into()))?;
            for t in [a.to_string(), b.to_string(), format!("{a}{b}")] {
                if !vocab.contains_key(&t) {
                    return Err(bad(format!("{t:?} is not in the vocabulary")));
                }
            }
            Ok((a.to_string(), b.to_string()))
        })
        .collect()
}

/// transformers' `generate_merges(vocab, scores)`: every split of every token into two tokens is
/// a merge, ranked by the whole token's score (best first), then by the left and right lengths
/// (longer first); ties keep vocabulary order, splits of one token ordered by the halves' ids.
fn merges_from_scores(tokens: &[String], scores: &[f64], vocab: &Vocab) -> Vec<(String, String)> {
    // Python dicts: the last id/score wins for a duplicated token, the first position orders it.
    let mut score: HashMap<&str, f64> = HashMap::new();
    let mut order: Vec<&str> = Vec::new();
    for (t, &s) in tokens.iter().zip(scores) {
        if score.insert(t, s).is_none() {
            order.push(t);
        }
    }
    let mut merges: Vec<(String, String, f64, usize, usize)> = Vec::new();
    for t in order {
        let mut local = Vec::new();
        for (pos, _) in t.char_indices().skip(1) {
            let (l, r) = t.split_at(pos);
            if let (Some(&li), Some(&ri)) = (vocab.get(l), vocab.get(r)) {
                local.push((li, ri, l, r));
            }
        }
        local.sort_by_key(|&(li, ri, _, _)| (li, ri));
        merges.extend(
            local
                .into_iter()
                .map(|(_, _, l, r)| (l.to_string(), r.to_string(), score[t], l.chars().count(), r.chars().count())),
        );
    }
    // Stable sort, descending on (score, len left, len right): like Python's sorted(reverse=True).
    merges.sort_by(|a, b| b.2.total_cmp(&a.2).then(b.3.cmp(&a.3)).then(b.4.cmp(&a.4)));
    merges.into_iter().map(|(l, r, ..)| (l, r)).collect()
}
