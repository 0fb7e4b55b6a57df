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

/// The browsers' side of the adapter: WebGPU's default limits, no subgroups, f32 activations,
/// attention splits merged by a dispatch. This test binary is its own process, so the switches
/// reach only its GPU.
fn browser_limits() {
    std::env::set_var("FERROLM_WEBGPU_LIMITS", "1");
    std::env::set_var("FERROLM_NO_SUBGROUPS", "1");
    std::env::set_var("FERROLM_NO_IDOT", "1");
    std::env::set_var("FERROLM_NO_FUSED_ATTENTION", "1");
}

#[test]
fn wide_model_runs_within_webgpu_default_limits() {
    browser_limits();
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

/// An FFN wide enough that the default 512 tokens' gate and up rows would pass the 128 MiB
/// storage binding every adapter guarantees: the prefill batch shrinks to fit (and a prompt
/// longer than it runs in chunks) instead of the load failing.
#[test]
fn prefill_batch_shrinks_to_the_storage_binding_limit() {
    browser_limits();
    let mut shape = synth::shape("smollm2-135m").unwrap();
    shape.ffn = 40960;
    shape.vocab = 512;
    let opts = SynthOptions { shape, ty: GgmlType::Q4_0, seed: 5, layers: Some(1), sparse: false };
    let model = common::SynthModel::write("webgpu-limits-batch", &opts);
    let src = FileSource::open(&model.path).unwrap();
    let load = LoadOptions { context_length: Some(640), ..Default::default() };
    assert_eq!(load.max_batch, 512);
    let mut engine = block_on(Engine::load(&src, &load, &mut |_, _, _| {})).unwrap();
    let binding = engine.rt.gpu.limits.max_storage_buffer_binding_size;
    assert_eq!(binding, 128 << 20);
    let fits = (binding / (2 * 40960 * 4)) as usize;
    assert_eq!(engine.rt.max_batch, fits);
    let prompt: Vec<u32> = (0..fits as u32 + 3).map(|i| 3 + i % 200).collect();
    let got =
        block_on(engine.generate(&prompt, &GenerateOptions { max_tokens: 2, ..Default::default() }, &mut |_, _| true))
            .unwrap();
    assert_eq!(got.tokens.len(), 2);
    engine.rt.gpu.check().unwrap();
}
