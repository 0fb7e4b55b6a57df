//! Checks of a tokenizer before the `tokenizers` crate sees it. That crate trusts its input in
//! places: a BPE merge whose halves or result are missing from the vocabulary, or whose right
//! half is shorter than the continuing-subword prefix, panics (or slices bytes unchecked) while
//! the model is built; a post-processor template naming a special token it does not define
//! panics when encoding; ids far past the vocabulary size become allocations. A bad file must
//! give an error, not a crash, so everything such a path depends on is checked here first.

use crate::error::Result;
use crate::model::bounds;
use serde_json::Value;
use std::collections::HashSet;

use super::tok_err;

/// The longest token text accepted (bytes). Real vocabularies stay under a few hundred; the
/// GGUF path's merge reconstruction is quadratic in a token's length.
pub const MAX_TOKEN_BYTES: usize = 4096;

/// A token text of the vocabulary or an added token: not absurdly long.
pub fn token_text(what: &str, t: &str) -> Result<()> {
    if t.len() > MAX_TOKEN_BYTES {
        return Err(tok_err(format!(
            "{what}: a token of {} bytes (\"{}...\"); at most {MAX_TOKEN_BYTES} are accepted",
            t.len(),
            t.chars().take(16).collect::<String>()
        )));
    }
    Ok(())
}

fn id(what: &str, v: &Value) -> Result<u64> {
    match v.as_u64() {
        Some(i) if i < bounds::VOCAB.1 => Ok(i),
        _ => Err(tok_err(format!("tokenizer.json: {what} has id {v}, outside 0..{}", bounds::VOCAB.1))),
    }
}

/// tokenizer.json, parsed: the model's vocabulary and merges, the added tokens and the
/// post-processor's special tokens.
pub fn hf_json(root: &Value) -> Result<()> {
    let bad = |m: String| Err(tok_err(format!("tokenizer.json: {m}")));
    let model = root.get("model").filter(|m| m.is_object());
    let Some(model) = model else { return bad("no model object".into()) };
    let kind = model.get("type").and_then(Value::as_str).unwrap_or("BPE");
    let mut vocab: HashSet<&str> = HashSet::new();
    match model.get("vocab") {
        Some(Value::Object(map)) => {
            if map.len() as u64 > bounds::VOCAB.1 {
                return bad(format!("{} vocabulary entries; at most {}", map.len(), bounds::VOCAB.1));
            }
            // Two texts under one id would make that id's text whichever the map yields last.
            let mut owner: std::collections::HashMap<u64, &str> = std::collections::HashMap::new();
            for (t, i) in map {
                token_text("tokenizer.json vocab", t)?;
                let i = id(&format!("vocab entry {t:?}"), i)?;
                if let Some(first) = owner.insert(i, t) {
                    let (a, b) = if first < t.as_str() { (first, t.as_str()) } else { (t.as_str(), first) };
                    return bad(format!("vocab entries {a:?} and {b:?} both have id {i}"));
                }
                vocab.insert(t);
            }
        }
        // Unigram: [[piece, score], ...].
        Some(Value::Array(list)) => {
            if list.len() as u64 > bounds::VOCAB.1 {
                return bad(format!("{} vocabulary entries; at most {}", list.len(), bounds::VOCAB.1));
            }
            for e in list {
                let t = e
                    .get(0)
                    .and_then(Value::as_str)
                    .ok_or_else(|| tok_err(format!("tokenizer.json: vocab entry {e}")))?;
                token_text("tokenizer.json vocab", t)?;
                vocab.insert(t);
            }
        }
        None if kind == "BPE" || kind == "WordPiece" || kind == "WordLevel" || kind == "Unigram" => {
            return bad(format!("the {kind} model has no vocab"));
        }
        _ => return bad("model.vocab must be an object or a list".into()),
    }
    if kind == "BPE" {
        let prefix = model.get("continuing_subword_prefix").and_then(Value::as_str).unwrap_or("");
        let merges = match model.get("merges") {
            None | Some(Value::Null) => &Vec::new(),
            Some(Value::Array(m)) => m,
            Some(v) => return bad(format!("merges must be a list, found {v}")),
        };
        for m in merges {
            let (a, b) = match m {
                Value::String(s) => match s.split(' ').collect::<Vec<_>>()[..] {
                    [a, b] => (a, b),
                    _ => return bad(format!("merge {s:?} is not two tokens separated by one space")),
                },
                Value::Array(p) => match (p.first().and_then(Value::as_str), p.get(1).and_then(Value::as_str), p.len())
                {
                    (Some(a), Some(b), 2) => (a, b),
                    _ => return bad(format!("merge {m} is not a pair of tokens")),
                },
                _ => return bad(format!("merge {m} is not a pair of tokens")),
            };
            if !b.starts_with(prefix) {
                return bad(format!("merge ({a:?}, {b:?}): the right half lacks the subword prefix {prefix:?}"));
            }
            let joined = format!("{a}{}", &b[prefix.len()..]);
            for t in [a, b, joined.as_str()] {
                if !vocab.contains(t) {
                    return bad(format!("merge ({a:?}, {b:?}) needs {t:?}, which is not in the vocabulary"));
                }
            }
        }
    }
    let mut specials: HashSet<&str> = HashSet::new();
    for t in root.get("added_tokens").and_then(Value::as_array).into_iter().flatten() {
        let content = t.get("content").and_then(Value::as_str).unwrap_or("");
        token_text("tokenizer.json added_tokens", content)?;
        id(&format!("added token {content:?}"), t.get("id").unwrap_or(&Value::Null))?;
    }
    // Decoders the tokenizers crate panics in: Strip with `stop` > 0 indexes before the start of a
    // token shorter than `stop` (found by fuzzing; real tokenizers strip at the start only).
    let mut stack: Vec<&Value> = root.get("decoder").into_iter().collect();
    while let Some(d) = stack.pop() {
        if let Some(list) = d.get("decoders").and_then(Value::as_array) {
            stack.extend(list);
        }
        if d.get("type").and_then(Value::as_str) == Some("Strip") {
            let stop = d.get("stop").and_then(Value::as_u64).unwrap_or(0);
            if stop != 0 {
                return bad(format!(
                    "a Strip decoder with stop = {stop} is not supported (only stripping at the start)"
                ));
            }
        }
    }
    normalizers_and_decoders(root)?;
    // A post-processor (or each of a Sequence's) whose template names special tokens. The
    // tokenizers crate reads post-processors untagged, by shape: an object with a template but no
    // (or a misspelt) "type" is a TemplateProcessing too (a fuzz input panicked there).
    let mut stack: Vec<&Value> = root.get("post_processor").into_iter().collect();
    while let Some(p) = stack.pop() {
        if let Some(list) = p.get("processors").and_then(Value::as_array) {
            stack.extend(list);
        }
        let template = p.get("single").is_some() || p.get("pair").is_some();
        if p.get("type").and_then(Value::as_str) != Some("TemplateProcessing") && !template {
            continue;
        }
        specials.clear();
        if let Some(map) = p.get("special_tokens").and_then(Value::as_object) {
            for (name, s) in map {
                let ids = s.get("ids").and_then(Value::as_array).map_or(0, Vec::len);
                let tokens = s.get("tokens").and_then(Value::as_array).map_or(0, Vec::len);
                if ids != tokens {
                    return bad(format!("special token {name:?} of the template has {ids} ids for {tokens} tokens"));
                }
                for i in s.get("ids").and_then(Value::as_array).into_iter().flatten() {
                    id(&format!("template special token {name:?}"), i)?;
                }
                specials.insert(name);
            }
        }
        for key in ["single", "pair"] {
            for piece in p.get(key).and_then(Value::as_array).into_iter().flatten() {
                if let Some(name) = piece.get("SpecialToken").and_then(|s| s.get("id")).and_then(Value::as_str) {
                    if !specials.contains(name) {
                        return bad(format!("the template uses special token {name:?}, which it does not define"));
                    }
                }
            }
        }
    }
    Ok(())
}

/// How much a normalizer or decoder may grow a text, at most: a few `Replace("a", "a" * 1000)`
/// in a row made a small file ask for gigabytes from a short prompt. Real tokenizers replace one
/// character or a run of spaces by one character (2 here: a regex is taken as matching one
/// character), and T5's character map with its space rule comes to 22.
pub const MAX_TEXT_GROWTH: f64 = 64.0;

/// The most a normalizer (or with `decoder`, a decoder) multiplies a text's length by, roughly:
/// Replace rules, ByteLevel (a byte past ASCII becomes two), Precompiled maps (their longest
/// replacement over its key), one after another in a Sequence; a Precompiled map that the
/// tokenizers crate would panic on is an error.
fn growth(v: &Value, decoder: bool) -> std::result::Result<f64, String> {
    Ok(match v.get("type").and_then(Value::as_str) {
        Some("Sequence") => {
            let list = v.get(if decoder { "decoders" } else { "normalizers" }).and_then(Value::as_array);
            let mut g = 1.0f64;
            for child in list.into_iter().flatten() {
                g = (g * growth(child, decoder)?).min(f64::MAX);
            }
            g
        }
        Some("Replace") => {
            let content = v.get("content").and_then(Value::as_str).map_or(0, |c| c.chars().count()) as f64;
            // An empty or regex pattern may match between any two characters: content + 1 each.
            let pattern = v.get("pattern").and_then(|p| p.get("String")).and_then(Value::as_str);
            match pattern.map(|p| p.chars().count()) {
                Some(n) if n > 0 => (content / n as f64).max(1.0),
                _ => content + 1.0,
            }
        }
        Some("ByteLevel") if !decoder => 2.0,
        Some("Precompiled") if !decoder => {
            let map = v.get("precompiled_charsmap").and_then(Value::as_str).and_then(crate::base64::decode);
            let map = map.ok_or("the Precompiled normalizer's precompiled_charsmap is not base64")?;
            let ratio = charsmap(&map).map_err(|e| format!("the Precompiled normalizer: {e}"))?;
            // Only now the crate's own parse (it panics where it fails), for its errors.
            serde_json::from_str::<tokenizers::normalizers::Precompiled>(&v.to_string())
                .map_err(|e| format!("the Precompiled normalizer: {e}"))?;
            ratio
        }
        _ => 1.0,
    })
}

/// Normalizers and decoders the tokenizers crate panics in, or that grow text without bound.
fn normalizers_and_decoders(root: &Value) -> Result<()> {
    for (key, decoder) in [("normalizer", false), ("decoder", true)] {
        let Some(top) = root.get(key) else { continue };
        let g = growth(top, decoder).map_err(|e| tok_err(format!("tokenizer.json: {e}")))?;
        if g > MAX_TEXT_GROWTH {
            let times = if g < 1e6 { format!("{g:.0}") } else { "over a million".into() };
            return Err(tok_err(format!(
                "tokenizer.json: the {key} can grow a text {times} times; at most {MAX_TEXT_GROWTH} are accepted"
            )));
        }
    }
    Ok(())
}

/// The longest replacement a Precompiled normalizer's map may give one character (bytes): real
/// maps stay under 40 (U+FDFA, an Arabic ligature, becomes 33 bytes).
const MAX_CHARSMAP_REPLACEMENT: usize = 64;

/// A SentencePiece character map (spm_precompiled's layout: the double-array trie's byte length,
/// its 32-bit units, then NUL-separated replacements) that its lookup can walk without leaving
/// the trie, whose leaves name replacements that exist and are short; returns the largest ratio
/// of a replacement's length to its key's. spm_precompiled indexes the trie and the replacement
/// text unchecked (a map that parses could still panic on the first character it normalizes),
/// and reserves the header's trie length before reading it.
fn charsmap(map: &[u8]) -> std::result::Result<f64, String> {
    let word = |i: usize| map.get(i..i + 4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize);
    let trie_bytes = word(0).ok_or("shorter than its header")?;
    if trie_bytes > map.len() - 4 {
        return Err(format!("its trie of {trie_bytes} bytes is longer than the map"));
    }
    let units: Vec<usize> =
        (0..trie_bytes / 4).map(|i| word(4 + 4 * i)).collect::<Option<_>>().ok_or("its trie is cut short")?;
    let text = &map[4 + 4 * units.len()..];
    let text = std::str::from_utf8(text).map_err(|_| "its replacements are not UTF-8")?;
    // The unit's fields as spm_precompiled reads them.
    let offset = |u: usize| (u >> 10) << ((u & (1 << 9)) >> 6);
    let label = |u: usize| u & ((1 << 31) | 0xff);
    let has_leaf = |u: usize| (u >> 8) & 1 == 1;
    let value = |u: usize| u & ((1 << 31) - 1);
    let root = *units.first().ok_or("its trie is empty")?;
    let mut seen = HashSet::new();
    let mut ratio = 1.0f64;
    // (node, bytes of key that lead to it): a trie, so each node has one depth.
    let mut todo = vec![(offset(root), 0usize)];
    while let Some((pos, depth)) = todo.pop() {
        if !seen.insert(pos) {
            continue;
        }
        for c in 1..256usize {
            let q = pos ^ c;
            let unit = *units.get(q).ok_or("its trie points outside itself")?;
            if label(unit) != c {
                continue;
            }
            let next = q ^ offset(unit);
            if has_leaf(unit) {
                let v = value(*units.get(next).ok_or("its trie points outside itself")?);
                let rest = text.get(v..).ok_or("a replacement starts outside the text or inside a character")?;
                let len = rest.bytes().take(MAX_CHARSMAP_REPLACEMENT + 1).position(|b| b == 0).unwrap_or(rest.len());
                if len > MAX_CHARSMAP_REPLACEMENT {
                    return Err(format!("a replacement is longer than {MAX_CHARSMAP_REPLACEMENT} bytes"));
                }
                ratio = ratio.max(len as f64 / (depth + 1) as f64);
            }
            todo.push((next, depth + 1));
        }
    }
    Ok(ratio)
}
