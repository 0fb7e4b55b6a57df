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
