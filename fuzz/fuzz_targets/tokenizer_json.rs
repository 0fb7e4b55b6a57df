//! tokenizer.json text into the tokenizer (ferrolm's checks, then the `tokenizers` crate, which
//! panics on several malformed files): Ok or a typed error, never a panic; an accepted tokenizer
//! must encode, decode and list its token bytes.
#![no_main]

use ferrolm::tokenizer::Tokenizer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    // An optional tokenizer_config.json after a NUL.
    let (json, config) = match text.split_once('\0') {
        Some((a, b)) => (a, Some(b)),
        None => (text, None),
    };
    let Ok(tok) = Tokenizer::from_hf_json(json, config) else { return };
    for sample in ["", "Hello, world! 123", "日本語 😀 \u{0} \t\n  x", "<|im_start|>user\nab<|im_end|>"] {
        if let Ok(ids) = tok.encode(sample) {
            let _ = tok.decode(&ids);
            let mut stream = tok.stream();
            for &id in &ids {
                let _ = stream.push(id);
            }
        }
    }
    let n = tok.vocab_size() as u32;
    let _ = tok.decode(&[0, n.saturating_sub(1), n, u32::MAX]);
    let _ = tok.token_bytes();
    let _ = (tok.bos_id(), tok.eos_ids(), tok.add_bos());
});
