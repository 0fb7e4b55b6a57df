//! A model's description as a file gives it: config.json text (with generation_config.json and
//! tokenizer_config.json read from the same bytes), or a GGUF file's metadata. Every path must end
//! in Ok or a typed error — no panic, no allocation sized from an unchecked number — and an
//! accepted config must yield its rotary tables.
#![no_main]

use ferrolm::model::config::ModelConfig;
use ferrolm::model::hf_config::{GenerationConfig, HfConfig, LayerKind, TokenizerConfig};
use ferrolm::weights::gguf::GgufFile;
use ferrolm::weights::MemSource;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.starts_with(b"GGUF") {
        let src = MemSource::new(data.to_vec(), "fuzz.gguf");
        if let Ok(g) = GgufFile::read(&src) {
            let _ = ModelConfig::from_gguf(&g).map_err(|e| e.to_string());
            let _ = ferrolm::tokenizer::Tokenizer::from_gguf(&g).map_err(|e| e.to_string());
            let _ = ferrolm::chat_template::ChatTemplate::from_gguf(&g).map_err(|e| e.to_string());
        }
        return;
    }
    let Ok(text) = std::str::from_utf8(data) else { return };
    let _ = GenerationConfig::from_json(text).map_err(|e| e.to_string());
    let _ = TokenizerConfig::from_json(text).map_err(|e| e.to_string());
    let Ok(h) = HfConfig::from_json(text) else { return };
    if ModelConfig::from_hf(&h).is_ok() {
        for kind in [LayerKind::Full, LayerKind::Sliding] {
            for len in [None, Some(1), Some(1 << 20)] {
                let _ = h.rope_inv_freq(kind, len).map_err(|e| e.to_string());
            }
            let _ = h.rope_attention_factor(kind);
        }
    }
});
