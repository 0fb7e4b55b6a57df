//! A weight that is NaN or infinite (a float value, or a quantized block's scale) would turn every
//! activation after it into NaN and the model's output into garbage: loading refuses it with a
//! ModelFormatError that names the tensor.

mod common;
use ferrolm::engine::Engine;
use ferrolm::gpu::block_on;
use ferrolm::weights::gguf::GgufFile;
use ferrolm::weights::quant::GgmlType;
use ferrolm::weights::FileSource;

/// A one-layer SmolLM2-shaped file of `ty`, with `patch` applied at byte `at` of tensor `name`'s
/// data; the load's error.
fn load_patched(ty: GgmlType, name: &str, at: u64, patch: &[u8]) -> Option<ferrolm::Error> {
    load_patched_shape("smollm2-135m", ty, name, at, patch)
}

fn load_patched_shape(shape: &str, ty: GgmlType, name: &str, at: u64, patch: &[u8]) -> Option<ferrolm::Error> {
    let shape = ferrolm::synth::Shape { vocab: 4096, ..ferrolm::synth::shape(shape).unwrap() };
    let opts = ferrolm::synth::SynthOptions { shape, ty, seed: 5, layers: Some(1), sparse: false };
    let m = common::SynthModel::write(&format!("nonfinite-{}-{}-{name}", opts.shape.name, ty.name()), &opts);
    let t = GgufFile::read(&FileSource::open(&m.path).unwrap()).unwrap().tensor(name).unwrap().clone();
    let mut bytes = std::fs::read(&m.path).unwrap();
    let o = (t.offset + at) as usize;
    bytes[o..o + patch.len()].copy_from_slice(patch);
    std::fs::write(&m.path, &bytes).unwrap();
    let src = FileSource::open(&m.path).unwrap();
    block_on(Engine::load(&src, &Default::default(), &mut |_, _, _| {})).err()
}

fn refused(e: Option<ferrolm::Error>, name: &str) {
    let e = e.unwrap_or_else(|| panic!("{name}: a non-finite value was loaded"));
    assert_eq!(e.kind(), "ModelFormatError", "{e}");
    assert!(e.to_string().contains(name) && e.to_string().contains("not finite"), "{e}");
}

#[test]
fn non_finite_weights_are_refused() {
    // The unpatched file loads (the same bytes written back).
    let sane = load_patched(GgmlType::F16, "blk.0.ffn_down.weight", 0, &[0x00, 0x3c]);
    assert!(sane.is_none(), "{sane:?}");
    // A NaN half in a float matrix, an infinite one past its first row.
    refused(load_patched(GgmlType::F16, "blk.0.ffn_down.weight", 6, &[0x00, 0x7e]), "blk.0.ffn_down.weight");
    refused(load_patched(GgmlType::F16, "blk.0.attn_q.weight", 2 * 576 * 3 + 2, &[0x00, 0xfc]), "blk.0.attn_q.weight");
    // An infinite block scale of a Q4_0 matrix (each 18-byte block starts with its f16 scale).
    refused(load_patched(GgmlType::Q4_0, "blk.0.ffn_gate.weight", 18 * 7, &[0x00, 0x7c]), "blk.0.ffn_gate.weight");
    // A NaN in an f32 norm vector.
    refused(load_patched(GgmlType::Q4_0, "output_norm.weight", 8, &f32::NAN.to_le_bytes()), "output_norm.weight");
}

/// Rotary frequency factors (Llama 3's `rope_freqs`, Phi-3's `rope_factors_*`) divide the
/// frequencies: a zero, negative or NaN one made greedy decoding repeat token 0 and sampling fail
/// with a message about the sampler. Loading refuses them.
#[test]
fn rotary_factors_must_be_positive() {
    for bad in [0.0f32, -1.0, f32::NAN] {
        let e = load_patched_shape("llama-3.2-1b", GgmlType::Q4_0, "rope_freqs.weight", 4, &bad.to_le_bytes())
            .unwrap_or_else(|| panic!("rope factor {bad} was loaded"));
        assert_eq!(e.kind(), "ModelFormatError", "{e}");
        assert!(e.to_string().contains("rope_freqs.weight") && e.to_string().contains("positive"), "{e}");
    }
}

/// Finite weights whose products overflow (a final norm of 3e38) give logits that are not
/// numbers at run time: generation stops with them named, greedy and sampled (here at the
/// first token; where they appear later, the GPU's pick comes back out of range and the engine
/// says the same: kernels.rs `lm_head_argmax_picks_first_maximum` checks the kernel's side).
#[test]
fn non_finite_logits_stop_generation() {
    use ferrolm::engine::GenerateOptions;
    use ferrolm::sampler::SamplingParams;
    let huge: Vec<u8> = std::iter::repeat_n(3e38f32.to_le_bytes(), 576).flatten().collect();
    let shape = ferrolm::synth::Shape { vocab: 4096, ..ferrolm::synth::shape("smollm2-135m").unwrap() };
    let opts = ferrolm::synth::SynthOptions { shape, ty: GgmlType::Q4_0, seed: 5, layers: Some(1), sparse: false };
    let m = common::SynthModel::write("nonfinite-logits", &opts);
    let t = GgufFile::read(&FileSource::open(&m.path).unwrap()).unwrap().tensor("output_norm.weight").unwrap().clone();
    let mut bytes = std::fs::read(&m.path).unwrap();
    bytes[t.offset as usize..t.offset as usize + huge.len()].copy_from_slice(&huge);
    std::fs::write(&m.path, &bytes).unwrap();
    let src = FileSource::open(&m.path).unwrap();
    let mut e = block_on(Engine::load(&src, &Default::default(), &mut |_, _, _| {})).unwrap();
    for sampling in [SamplingParams::default(), SamplingParams { temperature: 0.8, seed: 3, ..Default::default() }] {
        let what = format!("temperature {}", sampling.temperature);
        let o = GenerateOptions { max_tokens: 4, sampling, ..Default::default() };
        let r = block_on(e.generate(&[1, 2, 3], &o, &mut |_, _| true));
        let err = r.err().unwrap_or_else(|| panic!("{what}: generated from non-finite logits")).to_string();
        assert!(err.contains("non-finite logits"), "{what}: {err}");
    }
}
