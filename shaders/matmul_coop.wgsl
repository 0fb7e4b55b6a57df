// Prefill matmul on the GPU's matrix units (wgpu's cooperative matrices: VK_KHR_cooperative_matrix,
// the tensor cores on NVIDIA), over the tile of matmul_tile.wgsl: K steps of 64 of A and of W
// (converted to f16) staged in workgroup memory as matmul_f16.wgsl describes; each of the four
// 32-wide subgroups multiplies one 32x32 quarter of the 64x64 output as 2 x 2 products of 16x16
// f16 matrices accumulated in f32. The quarters then pass through workgroup memory to the
// shared epilogue (bias, residual add, edges). K may end in a half step (K is whole 32-element
// blocks). Until session 14 A's fragments came from memory by matrix loads and W in steps of
// 32 (H100 pp512: SmolLM2's down projection 1.39 -> 1.00 ms, 1B's o 1.50 -> 1.16). Chosen only
// where the adapter offers 16x16x16 f16 x f16 -> f32 products on 32-wide subgroups
// (crate/src/gpu/mod.rs); the assembler puts `enable f16; enable wgpu_cooperative_matrix;` first.
// Dispatch: Tiles(N): (ceil(N / 64), ceil(tokens / 64)).

const THREADS: u32 = 128u;

var<workgroup> w_h: array<vec4<f16>, 1152>;   // [BN][BKP] halves in fours: row n, then k
var<workgroup> a_h: array<vec4<f16>, 1152>;   // [BM][BKP]: token m, then k
var<workgroup> c_sh: array<f32, 4096>;        // [BM][BN]: the finished tile

struct Acc {
    c00: coop_mat16x16<f32, C>,
    c01: coop_mat16x16<f32, C>,
    c10: coop_mat16x16<f32, C>,
    c11: coop_mat16x16<f32, C>,
}

// The products of the staged step's first `n` columns of K (n a multiple of 16) for the
// subgroup's quarter at (qm, qn), added to `c`.
fn multiply(c: Acc, qm: u32, qn: u32, n: u32) -> Acc {
    var r = c;
    for (var kk = 0u; kk < n; kk += 16u) {
        let x0 = coopLoadT<coop_mat16x16<f16, A>>(&a_h[(qm * BKP + kk) / 4u], BKP / 4u);
        let x1 = coopLoadT<coop_mat16x16<f16, A>>(&a_h[((qm + 16u) * BKP + kk) / 4u], BKP / 4u);
        let b0 = coopLoad<coop_mat16x16<f16, B>>(&w_h[(qn * BKP + kk) / 4u], BKP / 4u);
        let b1 = coopLoad<coop_mat16x16<f16, B>>(&w_h[((qn + 16u) * BKP + kk) / 4u], BKP / 4u);
        r.c00 = coopMultiplyAdd(x0, b0, r.c00);
        r.c01 = coopMultiplyAdd(x0, b1, r.c01);
        r.c10 = coopMultiplyAdd(x1, b0, r.c10);
        r.c11 = coopMultiplyAdd(x1, b1, r.c11);
    }
    return r;
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let m0 = wg.y * BM;
    let n0 = wg.x * BN;
    // Subgroup s (invocations 32s .. 32s + 31 on 32-wide subgroups) owns rows qm.., columns qn...
    let s = lid / 32u;
    let qm = (s / 2u) * 32u;
    let qn = (s % 2u) * 32u;
    var c: Acc;
    c.c00 = coop_mat16x16<f32, C>();
    c.c01 = coop_mat16x16<f32, C>();
    c.c10 = coop_mat16x16<f32, C>();
    c.c11 = coop_mat16x16<f32, C>();
    // The last step staged: the last whole one, or the half step at the end.
    let last = ((K - 1u) / STEP_K) * STEP_K;
    put_step(load_step(n0, m0, 0u, lid), lid);
    workgroupBarrier();
    for (var k0 = 0u; k0 + STEP_K <= K; k0 += STEP_K) {
        // The last step loads itself again: no branch between the loads and the products.
        let t = load_step(n0, m0, min(k0 + STEP_K, last), lid);
        c = multiply(c, qm, qn, STEP_K);
        workgroupBarrier();
        put_step(t, lid);
        workgroupBarrier();
    }
    if (K % STEP_K != 0u) {
        c = multiply(c, qm, qn, K % STEP_K);
    }
    coopStoreT(c.c00, &c_sh[qm * BN + qn], BN);
    coopStoreT(c.c01, &c_sh[qm * BN + qn + 16u], BN);
    coopStoreT(c.c10, &c_sh[(qm + 16u) * BN + qn], BN);
    coopStoreT(c.c11, &c_sh[(qm + 16u) * BN + qn + 16u], BN);
    workgroupBarrier();
    // Invocation i writes row i / 2, columns 32 (i % 2) .. + 31.
    let r = lid / 2u;
    let col = (lid % 2u) * 32u;
    for (var j = 0u; j < 32u; j += 4u) {
        let o = r * BN + col + j;
        store(m0 + r, n0 + col + j, vec4<f32>(c_sh[o], c_sh[o + 1u], c_sh[o + 2u], c_sh[o + 3u]));
    }
}
