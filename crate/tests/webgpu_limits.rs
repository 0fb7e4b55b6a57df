//! A Llama-3.2-1B-wide model (one layer, small vocabulary) built and run within the limits every
//! WebGPU adapter guarantees, on the browsers' kernel variants (no subgroups, f32 activations):
//! each decode kernel's workgroup arrays must fit 16 KiB, on both sides of the depth where the
//! output projection stops merging the attention splits itself.

mod common;
use ferrolm::engine::{Engine, GenerateOptions, LoadOptions};
use ferrolm::gpu::block_on;
use ferrolm::synth::{self, SynthOptions};
use ferrolm::weights::quant::GgmlType;
use ferrolm::weights::FileSource;

#[test]
fn wide_model_runs_within_webgpu_default_limits() {
    // This test binary is its own process, so the switches reach only its GPU.
    std::env::set_var("FERROLM_WEBGPU_LIMITS", "1");
    std::env::set_var("FERROLM_NO_SUBGROUPS", "1");
    std::env::set_var("FERROLM_NO_IDOT", "1");
    std::env::set_var("FERROLM_NO_FUSED_ATTENTION", "1");
    let mut shape = synth::shape("llama-3.2-1b").unwrap();
    shape.ffn = 512;
    shape.vocab = 512;
    let opts = SynthOptions { shape, ty: GgmlType::Q4_0, seed: 3, layers: Some(1), sparse: false };
    let model = common::SynthModel::write("webgpu-limits", &opts);
    let src = FileSource::open(&model.path).unwrap();
    let load = LoadOptions { context_length: Some(640), ..Default::default() };
    let mut engine = block_on(Engine::load(&src, &load, &mut |_, _, _| {})).unwrap();
    assert_eq!(engine.rt.gpu.limits.max_compute_workgroup_storage_size, 16384);
    // 8 prompt tokens (short: merged in the projection), then 500 (past the merge depth).
    for n in [8usize, 500] {
        let prompt: Vec<u32> = (0..n as u32).map(|i| 3 + i % 200).collect();
        let opts = GenerateOptions { max_tokens: 4, ..Default::default() };
        let got = block_on(engine.generate(&prompt, &opts, &mut |_, _| true)).unwrap();
        assert_eq!(got.tokens.len(), 4, "prompt of {n}");
        engine.rt.gpu.check().unwrap();
    }
}
