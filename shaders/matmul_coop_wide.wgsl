// The matrix-unit prefill matmul (matmul_coop.wgsl) with a 128x128 output tile for wide weight
// matrices: 256 invocations, eight 32-wide subgroups each multiplying a 32 (tokens) x 64 (rows)
// eighth as 2 x 4 products of 16x16 f16 matrices accumulated in f32. Twice the tile of
// matmul_coop.wgsl in each direction reads each A and W element half as often per product. The
// finished tile passes through workgroup memory in two 64-token halves (48 KiB in all).
// Dispatch: (ceil(N / 128), ceil(tokens / 128)).

const WM: u32 = 128u;
const WN: u32 = 128u;

var<workgroup> a_h: array<f16, 4096>;   // [WM][BK]: row m, then k
var<workgroup> w_h: array<f16, 4096>;   // [WN][BK]: row n, then k
var<workgroup> c_sh: array<f32, 8192>;  // [WM / 2][WN]: half of the finished tile

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let m0 = wg.y * WM;
    let n0 = wg.x * WN;
    // Subgroup s owns tokens qm .. qm + 31 and rows qn .. qn + 63.
    let s = lid / 32u;
    let qm = (s / 2u) * 32u;
    let qn = (s % 2u) * 64u;
    var c00 = coop_mat16x16<f32, C>();
    var c01 = coop_mat16x16<f32, C>();
    var c02 = coop_mat16x16<f32, C>();
    var c03 = coop_mat16x16<f32, C>();
    var c10 = coop_mat16x16<f32, C>();
    var c11 = coop_mat16x16<f32, C>();
    var c12 = coop_mat16x16<f32, C>();
    var c13 = coop_mat16x16<f32, C>();
    var t = load_tile(m0, n0, 0u, lid, 256u);
    for (var k0 = 0u; k0 < K; k0 += BK) {
        put_tile(t, lid, 256u);
        workgroupBarrier();
        if (k0 + BK < K) {
            t = load_tile(m0, n0, k0 + BK, lid, 256u);
        }
        for (var kk = 0u; kk < BK; kk += 16u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&a_h[qm * BK + kk], BK);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&a_h[(qm + 16u) * BK + kk], BK);
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&w_h[qn * BK + kk], BK);
            let b1 = coopLoad<coop_mat16x16<f16, B>>(&w_h[(qn + 16u) * BK + kk], BK);
            let b2 = coopLoad<coop_mat16x16<f16, B>>(&w_h[(qn + 32u) * BK + kk], BK);
            let b3 = coopLoad<coop_mat16x16<f16, B>>(&w_h[(qn + 48u) * BK + kk], BK);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c02 = coopMultiplyAdd(a0, b2, c02);
            c03 = coopMultiplyAdd(a0, b3, c03);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            c12 = coopMultiplyAdd(a1, b2, c12);
            c13 = coopMultiplyAdd(a1, b3, c13);
        }
        workgroupBarrier();
    }
    // Two halves of 64 tokens: subgroups 0-3 own the first, 4-7 the second.
    for (var h = 0u; h < 2u; h++) {
        if (qm / 64u == h) {
            let r0 = qm % 64u;
            coopStoreT(c00, &c_sh[r0 * WN + qn], WN);
            coopStoreT(c01, &c_sh[r0 * WN + qn + 16u], WN);
            coopStoreT(c02, &c_sh[r0 * WN + qn + 32u], WN);
            coopStoreT(c03, &c_sh[r0 * WN + qn + 48u], WN);
            coopStoreT(c10, &c_sh[(r0 + 16u) * WN + qn], WN);
            coopStoreT(c11, &c_sh[(r0 + 16u) * WN + qn + 16u], WN);
            coopStoreT(c12, &c_sh[(r0 + 16u) * WN + qn + 32u], WN);
            coopStoreT(c13, &c_sh[(r0 + 16u) * WN + qn + 48u], WN);
        }
        workgroupBarrier();
        // Invocation i writes row i / 4 of the half, columns 32 (i % 4) .. + 31.
        let r = lid / 4u;
        let col = (lid % 4u) * 32u;
        for (var j = 0u; j < 32u; j += 4u) {
            let o = r * WN + col + j;
            store(m0 + h * 64u + r, n0 + col + j, vec4<f32>(c_sh[o], c_sh[o + 1u], c_sh[o + 2u], c_sh[o + 3u]));
        }
        workgroupBarrier();
    }
}
