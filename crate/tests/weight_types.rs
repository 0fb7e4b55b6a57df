//! Every weight type `make-gguf` writes, end to end: a small random-weight model of the type (with
//! the fallback types llama.cpp's quantizer puts where a row is not a whole number of 256-element
//! blocks) runs prefill and a decode step through the engine, and its logits agree with the same
//! model whose tensors were dequantized by the CPU reference and stored as F32. The kernels meet
//! each type's packed layout (and, natively, the integer-activation decode path) this way.

mod common;
use ferrolm::engine::{Engine, LoadOptions};
use ferrolm::gpu::block_on;
use ferrolm::synth::{self, Shape, SynthOptions};
use ferrolm::weights::gguf::GgufFile;
use ferrolm::weights::gguf_write::GgufWriter;
use ferrolm::weights::quant::{dequantize, GgmlType};
use ferrolm::weights::FileSource;
use std::path::Path;

/// Writes `path`'s model again with every tensor dequantized to F32, except those `keep` returns
/// other (type, bytes) for.
fn rewrite(path: &Path, out: &Path, keep: impl Fn(&str, u64) -> Option<(GgmlType, Vec<u8>)>) {
    let src = FileSource::open(path).unwrap();
    let g = GgufFile::read(&src).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in &g.metadata {
        w.add(k.clone(), v.clone()).unwrap();
    }
    for t in &g.tensors {
        let (ty, bytes) = keep(&t.name, t.n_elements).unwrap_or_else(|| {
            let raw = g.read_tensor(&src, t).unwrap();
            let mut x = vec![0f32; t.n_elements as usize];
            dequantize(t.ty, &raw, &mut x).unwrap();
            (GgmlType::F32, bytemuck::cast_slice(&x).to_vec())
        });
        w.add_tensor(t.name.clone(), &t.dims, ty, bytes).unwrap();
    }
    let mut f = std::io::BufWriter::new(std::fs::File::create(out).unwrap());
    w.write(&mut f).unwrap();
}

fn f32_twin(path: &Path, out: &Path) {
    rewrite(path, out, |_, _| None)
}

/// Prefill logits of a short prompt, then the logits of one decode step.
fn run(path: &Path) -> (Vec<f32>, Vec<f32>) {
    let src = FileSource::open(path).unwrap();
    let mut e = block_on(Engine::load(&src, &LoadOptions::default(), &mut |_, _, _| {})).unwrap();
    let prefill = block_on(e.rt.forward(&[1, 5, 9, 14, 2, 7, 30])).unwrap();
    let decode = block_on(e.rt.forward(&[11])).unwrap();
    (prefill, decode)
}

/// Hidden 384: the attention and gate/up rows fall back for 256-element types, the down
/// projection (input 512) keeps the type.
fn tiny() -> Shape {
    let (hidden, layers, heads, kv_heads, ffn, vocab, context) = (384, 2, 6, 2, 512, 512, 256);
    Shape {
        name: "tiny",
        hidden,
        layers,
        heads,
        kv_heads,
        ffn,
        vocab,
        context,
        ..synth::shape("smollm2-135m").unwrap()
    }
}

#[test]
fn every_type_matches_its_f32_dequantization() {
    let shape = tiny();
    let mut failures = Vec::new();
    for ty in synth::TYPES {
        let opts = SynthOptions { shape: shape.clone(), ty, seed: 7, layers: None, sparse: false };
        let model = common::SynthModel::write(&format!("types-{}", ty.name()), &opts);
        let twin = model.dir.join("f32.gguf");
        f32_twin(&model.path, &twin);
        let (got, want) = (run(&model.path), run(&twin));
        for (what, g, w) in [("prefill", &got.0, &want.0), ("decode", &got.1, &want.1)] {
            let scale = w.iter().fold(0f32, |a, v| a.max(v.abs()));
            let err = g.iter().zip(w).fold(0f32, |a, (x, y)| a.max((x - y).abs()));
            eprintln!("{}: {what} max |logit| {scale:.4}, max error vs F32 {err:.2e}", ty.name());
            // The integer-activation decode path rounds x to 2^-15 of each block's largest value.
            if err.is_nan() || err > 5e-4 * scale.max(1.0) || scale == 0.0 {
                failures.push(format!("{} {what}: error {err:e} (logits up to {scale})", ty.name()));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn grid_types_are_refused_with_the_nearest_preset() {
    let opts = SynthOptions { shape: tiny(), ty: GgmlType::Q4_0, seed: 1, layers: None, sparse: false };
    let model = common::SynthModel::write("types-iq2", &opts);
    let out = model.dir.join("iq2.gguf");
    let ty = GgmlType::IQ2_XXS;
    rewrite(&model.path, &out, |name, n| {
        (name == "blk.1.ffn_down.weight").then(|| (ty, vec![0u8; ty.bytes_for(n).unwrap() as usize]))
    });
    let src = FileSource::open(&out).unwrap();
    match block_on(Engine::load(&src, &LoadOptions::default(), &mut |_, _, _| {})) {
        Err(ferrolm::Error::Unsupported(msg)) => {
            for want in ["blk.1.ffn_down.weight", "IQ2_XXS", "Q2_K"] {
                assert!(msg.contains(want), "{msg}");
            }
        }
        Err(e) => panic!("expected an unsupported-type error, got {e}"),
        Ok(_) => panic!("an IQ2_XXS tensor was accepted"),
    }
}
