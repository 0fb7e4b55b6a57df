// Prefill activations to 8-bit integers for matmul_i8.wgsl, as the decode matvecs stage theirs
// (rowdot.wgsl): each 32-element block of a row, scaled by 127 / max|x| to s, as two planes of
// bytes, coarse c = round(s) and fine f = round((s - c) * 254), so x = d (254 c + f) with
// d = max|x| / (127 * 254), about 15 bits a value. One byte a value (plain 8-bit activations)
// lost too much where one channel dwarfs the rest of its block, as real models' hidden states
// do: SmolLM2-135M's top logits moved by up to 0.52 and three of nine greedy continuations
// changed. Beside the planes: (d, sum x), the exact block sum for the weights' offsets.
// One invocation a block (the block's arithmetic: quant_block.wgsl).
// Bindings: 0 x ([tokens][K] f32), 1 q (per block: 8 words of c, 8 of f), 2 (d, sum x) per block.
// Dispatch: Elems(K / 32).

override K: u32;   // a multiple of 32

@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> q: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> s: array<vec2<f32>>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let b = gid.x + gid.y * nwg.x * 256u;
    if (b >= step.n_tokens * (K / 32u)) {
        return;
    }
    var v: array<vec4<f32>, 8>;
    for (var i = 0u; i < 8u; i++) {
        v[i] = x[8u * b + i];
    }
    let qb = quant_block(v);
    q[4u * b] = vec4<u32>(qb.c[0], qb.c[1], qb.c[2], qb.c[3]);
    q[4u * b + 1u] = vec4<u32>(qb.c[4], qb.c[5], qb.c[6], qb.c[7]);
    q[4u * b + 2u] = vec4<u32>(qb.f[0], qb.f[1], qb.f[2], qb.f[3]);
    q[4u * b + 3u] = vec4<u32>(qb.f[4], qb.f[5], qb.f[6], qb.f[7]);
    s[b] = qb.ds;
}
