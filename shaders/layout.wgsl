// Which weight layout a kernel reads, and each block's (scale, offset): prepended to every kernel
// that reads a weight matrix, before its word access (weights.wgsl for prefill and embedding,
// rowdot.wgsl for decode). Layouts are documented in crate/src/weights/pack.rs: block b's pair is
// w_meta[2b], w_meta[2b + 1] as f32 bits, or one word w_meta[b] of two f16 halves with META16.

override LAYOUT: u32 = 0u;       // 0 F32, 1 F16, 2 BF16, 3 Q4, 4 Q8
override QBLOCK: u32 = 32u;      // elements per (scale, offset) pair of the quantized layouts
override META16: bool = false;

@group(0) @binding(1) var<storage, read> w_meta: array<u32>;

fn block_meta(b: u32) -> vec2<f32> {
    if (META16) {
        return unpack2x16float(w_meta[b]);
    }
    return vec2<f32>(bitcast<f32>(w_meta[2u * b]), bitcast<f32>(w_meta[2u * b + 1u]));
}
