// Prefill GLU: h[t, j] = act(gate[t, j]) * up[t, j], where each token's row of `gu` holds the
// gate outputs then the up outputs ([gate; up] is one concatenated matrix).
// SiLU (Llama, Qwen, Phi-3), GELU with the tanh approximation (Gemma) or ReLU² (BitNet).
// F16_OUT (F even): two outputs an invocation, also written in f16 to h16 (pairs packed in
// words, as to_f16.wgsl would leave them) for the matrix-unit matmul that reads them.
// I8_OUT (F a multiple of 32): four outputs an invocation, eight a 32-output block
// (quant_block.wgsl quant_part), written only as the 8-bit matmul reads them: 16 words a block
// to h16, its (d, sum) to h8s.
// Dispatch: Elems(F), Elems(F / 2) with F16_OUT, Elems(F / 4) with I8_OUT.

override F: u32;
override GELU: bool = false;
override RELU2: bool = false;
override F16_OUT: bool = false;
override I8_OUT: bool = false;

@group(0) @binding(0) var<storage, read> gu: array<f32>;
@group(0) @binding(1) var<storage, read_write> h: array<f32>;
@group(0) @binding(2) var<storage, read_write> h16: array<u32>;
@group(0) @binding(6) var<storage, read_write> h8s: array<vec2<f32>>;

fn glu(i: u32) -> f32 {
    let t = i / F;
    let j = i % F;
    let g = gu[t * 2u * F + j];
    let u = gu[t * 2u * F + F + j];
    var a: f32;
    if (GELU) {
        a = 0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
    } else if (RELU2) {
        a = max(g, 0.0) * max(g, 0.0);
    } else {
        a = g / (1.0 + exp(-g));
    }
    return a * u;
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (I8_OUT) {
        // No early return: every invocation takes part in its block's reduction.
        let n = step.n_tokens * (F / 4u);
        let e = 4u * min(i, n - 1u);
        let q = quant_part(vec4<f32>(glu(e), glu(e + 1u), glu(e + 2u), glu(e + 3u)), lid);
        if (i < n) {
            let b = i / 8u;
            let w = plane_words(b, i % 8u);
            h16[w.x] = q.c;
            h16[w.y] = q.f;
            if (i % 8u == 0u) {
                h8s[b] = q.ds;
            }
        }
        return;
    }
    if (F16_OUT) {
        if (i >= step.n_tokens * F / 2u) {
            return;
        }
        let v = vec2<f32>(glu(2u * i), glu(2u * i + 1u));
        h[2u * i] = v.x;
        h[2u * i + 1u] = v.y;
        h16[i] = pack_h2(v);
        return;
    }
    if (i >= step.n_tokens * F) {
        return;
    }
    h[i] = glu(i);
}
