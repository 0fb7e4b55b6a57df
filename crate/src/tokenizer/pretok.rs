//! Pre-tokenizer (text splitting) for byte-level BPE vocabularies, chosen by the GGUF key
//! `tokenizer.ggml.pre`. The names and regex lists follow llama.cpp (`src/llama-vocab.cpp`), which
//! wrote these files; where llama.cpp rewrote a regex for its own engine (`(?i:...)` spelled as
//! `'[sS]`...), we use the original form from the model's tokenizer.json, as transformers does.
//!
//! Each regex is applied in turn to the pieces the previous one produced, keeping matches and the
//! text between them (`Isolated`), exactly like llama.cpp's `unicode_regex_split`; then the pieces
//! are mapped to the byte alphabet.

use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;

use crate::error::{Error, Result};

/// GPT-2's split. tokenizers' `ByteLevel` applies it itself when `use_regex` is on.
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+";
const LLAMA3: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Like Llama 3 but every digit on its own.
const QWEN2: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen 3.5: Qwen2's split with combining marks (`\p{M}`) kept with their letters and out of
/// the punctuation runs (llama.cpp's LLAMA_VOCAB_PRE_TYPE_QWEN35).
const QWEN35: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
const TEKKEN: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*",
    r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
const GPT4O: &str = concat!(
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
);
// Escapes mark code points that Unicode normalization (an editor, a copy) would silently change.
const DEEPSEEK_LLM_LETTERS: &str = concat!(
    r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-\x{1f7d}ᾀ-ᾴᾶ-ᾼ\x{1fbe}ῂ-ῄῆ-ῌῐ-\x{1fd3}ῖ-\x{1fdb}ῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤ\x{2126}ℨ\x{212a}-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ",
    r"\x{10400}-\x{1044f}𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+"
);
const CJK: &str = "[一-龥ࠀ-一가-퟿]+";

/// The regex list for a `tokenizer.ggml.pre` value; `None` for an unknown name.
fn regex_list(pre: &str) -> Option<Vec<&'static str>> {
    Some(match pre {
        // No `pre` key: transformers and llama.cpp's BPE default both fall back to GPT-2's split
        // (llama.cpp's "default" list adds punctuation splits that no real vocabulary was trained
        // with, and it warns that output quality suffers; we follow transformers).
        "" | "default" | "gpt2" | "gpt-2" | "phi-2" | "mpt" | "olmo" | "jais" | "trillion" | "granite-docling"
        | "roberta-bpe" | "jina-es" | "jina-de" | "jina-v1-en" | "jina-v2-es" | "jina-v2-de" | "jina-v2-code"
        | "gigachat" | "mellum" | "a.x-4.0" => vec![GPT2],
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0" | "lfm2" | "dbrx"
        | "smaug-bpe" | "chatglm-bpe" => vec![LLAMA3],
        "qwen2" | "deepseek-r1-qwen" | "megrez" | "stablelm2" | "hunyuan" => vec![QWEN2],
        "qwen35" => vec![QWEN35],
        // Digits split one by one first (the model's tokenizer.json: `Digits(individual_digits)`).
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva-7b" => {
            vec![r"\p{N}", GPT2]
        }
        "falcon" => vec![r"[\p{P}\$\+<=>\^~\|`]+", GPT2, "[0-9][0-9][0-9]"],
        "deepseek-llm" => {
            vec![r"[\r\n]", DEEPSEEK_LLM_LETTERS, r"\s?[!-/:-~！-／：-～‘-‟　-。]+", r"\s+$", CJK, r"\p{N}+"]
        }
        "deepseek-coder" => vec![r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", CJK, r"\p{N}"],
        "deepseek-v3" => vec![
            r"\p{N}{1,3}",
            "[一-龥\u{3040}-ゟ゠-ヿ]+",
            r"[!\x22#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        ],
        "tekken" => vec![TEKKEN],
        "gpt-4o" | "llama4" | "minimax-m2" => vec![GPT4O],
        "poro-chat" | "bloom" | "gpt3-finnish" => vec![r" ?[^(\s|.,!?…。，、।۔،)]+"],
        "viking" => vec![r" ?[^(\s|.,!?…。，、।۔،)]+", r"\p{N}"],
        _ => return None,
    })
}

/// Whether a whole piece that is itself a token skips the merges (tokenizers' `ignore_merges`):
/// llama.cpp turns this on for these `pre` names, as their tokenizer.json files do. It changes the
/// result for pieces that the merges would not rebuild ("Cửa Việt" with Llama 3).
pub(super) fn ignores_merges(pre: &str) -> bool {
    matches!(
        pre,
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "falcon-h1" | "pixtral" | "midm-2.0" | "lfm2" | "tekken"
    )
}

/// Whether the model's tokenizer.json normalizes text to NFC before splitting it: Qwen's do
/// (`"normalizer": {"type": "NFC"}`). llama.cpp skips that step, so a decomposed "é" tokenizes
/// differently there; we follow the model's own tokenizer.
pub(super) fn nfc(pre: &str) -> bool {
    matches!(pre, "qwen2" | "qwen35" | "deepseek-r1-qwen")
}

/// Build the pre-tokenizer for a byte-level vocabulary.
pub(super) fn byte_level(pre: &str) -> Result<PreTokenizerWrapper> {
    let list = regex_list(pre).unwrap_or_else(|| {
        // llama.cpp refuses unknown names; transformers silently uses GPT-2's split. A model still
        // loads, so warn loudly rather than refuse.
        log::warn!("unknown tokenizer.ggml.pre {pre:?}: splitting text like GPT-2; tokens may differ from the model's");
        vec![GPT2]
    });
    if list == [GPT2] {
        return Ok(ByteLevel::new(false, true, true).into());
    }
    let mut seq: Vec<PreTokenizerWrapper> = Vec::with_capacity(list.len() + 1);
    for re in list {
        let split = Split::new(SplitPattern::Regex(re.to_string()), SplitDelimiterBehavior::Isolated, false)
            .map_err(|e| Error::Tokenizer(format!("pre-tokenizer {pre:?}: bad regex {re:?}: {e}")))?;
        seq.push(split.into());
    }
    seq.push(ByteLevel::new(false, true, false).into());
    Ok(Sequence::new(seq).into())
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_listed_regex_compiles() {
        for pre in [
            "gpt2",
            "llama-bpe",
            "qwen2",
            "qwen35",
            "smollm",
            "falcon",
            "deepseek-llm",
            "deepseek-coder",
            "deepseek-v3",
            "tekken",
            "gpt-4o",
            "bloom",
            "viking",
        ] {
            super::byte_level(pre).unwrap_or_else(|e| panic!("{pre}: {e}"));
        }
    }

    /// Qwen 3.5's split keeps a combining mark with its letters; Qwen2's cuts the word there.
    #[test]
    fn qwen35_keeps_combining_marks_in_words() {
        use tokenizers::{OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer};
        let words = |pre: &str, text: &str| -> Vec<String> {
            let mut s = PreTokenizedString::from(text);
            super::byte_level(pre).unwrap().pre_tokenize(&mut s).unwrap();
            s.get_splits(OffsetReferential::Original, OffsetType::Byte)
                .into_iter()
                .map(|(w, _, _)| w.to_string())
                .collect()
        };
        // "नमस्ते": the virama and vowel signs are marks (\p{M}).
        let text = "say नमस्ते 42";
        assert_eq!(words("qwen35", text).len(), 5, "{:?}", words("qwen35", text));
        assert!(words("qwen2", text).len() > 5, "{:?}", words("qwen2", text));
    }
}
