// The second half of a split-K matmul (matmul_coop_wide.wgsl with KSPLIT > 1): the KSPLIT
// partial products of a token's row, written to `part` without the epilogue, are summed and
// stored through matmul_out.wgsl's `store` (bias, residual add). Four outputs an invocation
// (ops::matmul::k_splits splits only matrices whose N is a multiple of 4).
// Bindings: 3 C, 4 vecs, 6 the partial products ([KSPLIT][tokens][N]); 5 step.
// Dispatch: Elems(N / 4).

override KSPLIT: u32;

@group(0) @binding(6) var<storage, read> part: array<vec4<f32>>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let n4 = N / 4u;
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= step.n_tokens * n4) {
        return;
    }
    var v = part[i];
    for (var s = 1u; s < KSPLIT; s++) {
        v += part[s * step.n_tokens * n4 + i];
    }
    store(i / n4, (i % n4) * 4u, v);
}
