// Prefill activations to 8-bit integers for matmul_i8.wgsl, as the decode matvecs stage theirs
// (rowdot.wgsl): each 32-element block of a row, scaled by 127 / max|x| to s, as two planes of
// bytes, coarse c = round(s) and fine f = round((s - c) * 254), so x = d (254 c + f) with
// d = max|x| / (127 * 254), about 15 bits a value. One byte a value (plain 8-bit activations)
// lost too much where one channel dwarfs the rest of its block, as real models' hidden states
// do: SmolLM2-135M's top logits moved by up to 0.52 and three of nine greedy continuations
// changed. Beside the planes: (d, sum x), the exact block sum for the weights' offsets.
// Four values an invocation, eight a block (quant_block.wgsl quant_part).
// Bindings: 0 x ([tokens][K] f32), 1 q (per block: 8 words of c, 8 of f), 2 (d, sum x) per block.
// Dispatch: Elems(K / 4).

override K: u32;   // a multiple of 32

@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> q: array<u32>;
@group(0) @binding(2) var<storage, read_write> s: array<vec2<f32>>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let i = gid.x + gid.y * nwg.x * 256u;
    // No early return: every invocation takes part in its block's reduction.
    let n = step.n_tokens * (K / 4u);
    let p = quant_part(x[min(i, n - 1u)], lid);
    if (i < n) {
        let b = i / 8u;
        let w = plane_words(b, i % 8u);
        q[w.x] = p.c;
        q[w.y] = p.f;
        if (i % 8u == 0u) {
            s[b] = p.ds;
        }
    }
}
