// Prefill GLU: h[t, j] = act(gate[t, j]) * up[t, j] (glu.wgsl), where each token's row of `gu`
// holds the gate outputs then the up outputs ([gate; up] is one concatenated matrix); UNGATED:
// h[t, j] = act(up[t, j]), rows of F up outputs. Where the
// 8-bit matmul takes both matrices it does this itself (matmul_i8.wgsl GLU) and this pass is not
// run.
// F16_OUT (F even): two outputs an invocation, also written in f16 to h16 (pairs packed in
// words, as to_f16.wgsl would leave them) for the matrix-unit matmul that reads them.
// I8_OUT (F a multiple of 32): four outputs an invocation, eight a 32-output block
// (quant_block.wgsl quant_part), written only as the 8-bit matmul reads them: 16 words a block
// to h16, its (d, sum) to h8s.
// Dispatch: Elems(F), Elems(F / 2) with F16_OUT, Elems(F / 4) with I8_OUT.

override F: u32;
override F16_OUT: bool = false;
override I8_OUT: bool = false;

@group(0) @binding(0) var<storage, read> gu: array<f32>;
@group(0) @binding(1) var<storage, read_write> h: array<f32>;
@group(0) @binding(2) var<storage, read_write> h16: array<u32>;
@group(0) @binding(6) var<storage, read_write> h8s: array<vec2<f32>>;

fn glu_at(i: u32) -> f32 {
    if (UNGATED) {
        return glu_act(gu[i]);
    }
    let t = i / F;
    let j = i % F;
    return glu(gu[t * 2u * F + j], gu[t * 2u * F + F + j]);
}

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (I8_OUT) {
        // No early return: every invocation takes part in its block's reduction.
        let n = step.n_tokens * (F / 4u);
        let e = 4u * min(i, n - 1u);
        let q = quant_part(vec4<f32>(glu_at(e), glu_at(e + 1u), glu_at(e + 2u), glu_at(e + 3u)), lid);
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
        let v = vec2<f32>(glu_at(2u * i), glu_at(2u * i + 1u));
        h[2u * i] = v.x;
        h[2u * i + 1u] = v.y;
        h16[i] = pack_h2(v);
        return;
    }
    if (i >= step.n_tokens * F) {
        return;
    }
    h[i] = glu_at(i);
}
