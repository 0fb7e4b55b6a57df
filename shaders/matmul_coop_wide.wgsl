// The matrix-unit prefill matmul (matmul_coop.wgsl) with a 128x128 output tile for wide weight
// matrices: 256 invocations, eight 32-wide subgroups each multiplying a 32 (tokens) x 64 (rows)
// eighth as 2 x 4 products of 16x16 f16 matrices accumulated in f32. Twice the tile of
// matmul_coop.wgsl in each direction reads each A and W element half as often per product. The
// finished tile passes through workgroup memory in 32-token quarters.
// Dispatch: (ceil(N / 128), ceil(tokens / 128)).

const WM: u32 = 128u;
const WN: u32 = 128u;

// Row stride of the f16 W tile: BK halves and 16 bytes of padding. Rows 64 bytes apart put the
// eight 16-byte rows that one matrix-load phase reads on a quarter of the banks; 80 bytes apart
// they cover all 32 (H100: gate+up of Llama-3.2-1B 10.9 -> 8.1 ms for 512 tokens).
const BKP: u32 = BK + 8u;

const WBUF: u32 = 5120u;                // WN * BKP
var<workgroup> w_h: array<f16, 10240>;  // 2 x [WN][BKP]: row n, then k
var<workgroup> c_sh: array<f32, 4096>;  // [WM / 4][WN]: a quarter of the finished tile

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
    // A's fragments load one K step ahead (matmul_f16.wgsl).
    let arow = (m0 + qm) * K;
    var a = load_a(arow, 0u);
    // W's first step staged before the loop; each iteration then multiplies from one half of
    // w_h while it stores the next step into the other (one barrier a step instead of two).
    put_runs(load_runs(n0, 0u, lid, 256u), lid, 256u, 0u);
    workgroupBarrier();
    for (var k0 = 0u; k0 < K; k0 += BK) {
        let cur = ((k0 / BK) % 2u) * WBUF;
        let more = k0 + BK < K;
        var t: Runs;
        if (more) {
            t = load_runs(n0, k0 + BK, lid, 256u);
        }
        // The last step loads its own fragments again: matrix loads stay out of branches.
        let x = a;
        a = load_a(arow, min(k0 + BK, K - BK));
        let b0 = coopLoad<coop_mat16x16<f16, B>>(&w_h[cur + qn * BKP], BKP);
        let b1 = coopLoad<coop_mat16x16<f16, B>>(&w_h[cur + (qn + 16u) * BKP], BKP);
        let b2 = coopLoad<coop_mat16x16<f16, B>>(&w_h[cur + (qn + 32u) * BKP], BKP);
        let b3 = coopLoad<coop_mat16x16<f16, B>>(&w_h[cur + (qn + 48u) * BKP], BKP);
        c00 = coopMultiplyAdd(x.x00, b0, c00);
        c01 = coopMultiplyAdd(x.x00, b1, c01);
        c02 = coopMultiplyAdd(x.x00, b2, c02);
        c03 = coopMultiplyAdd(x.x00, b3, c03);
        c10 = coopMultiplyAdd(x.x10, b0, c10);
        c11 = coopMultiplyAdd(x.x10, b1, c11);
        c12 = coopMultiplyAdd(x.x10, b2, c12);
        c13 = coopMultiplyAdd(x.x10, b3, c13);
        let d0 = coopLoad<coop_mat16x16<f16, B>>(&w_h[cur + qn * BKP + 16u], BKP);
        let d1 = coopLoad<coop_mat16x16<f16, B>>(&w_h[cur + (qn + 16u) * BKP + 16u], BKP);
        let d2 = coopLoad<coop_mat16x16<f16, B>>(&w_h[cur + (qn + 32u) * BKP + 16u], BKP);
        let d3 = coopLoad<coop_mat16x16<f16, B>>(&w_h[cur + (qn + 48u) * BKP + 16u], BKP);
        c00 = coopMultiplyAdd(x.x01, d0, c00);
        c01 = coopMultiplyAdd(x.x01, d1, c01);
        c02 = coopMultiplyAdd(x.x01, d2, c02);
        c03 = coopMultiplyAdd(x.x01, d3, c03);
        c10 = coopMultiplyAdd(x.x11, d0, c10);
        c11 = coopMultiplyAdd(x.x11, d1, c11);
        c12 = coopMultiplyAdd(x.x11, d2, c12);
        c13 = coopMultiplyAdd(x.x11, d3, c13);
        if (more) {
            put_runs(t, lid, 256u, WBUF - cur);
        }
        workgroupBarrier();
    }
    // Quarter h holds tokens 32h .. 32h + 31, owned by subgroups 2h and 2h + 1.
    for (var h = 0u; h < 4u; h++) {
        if (qm == h * 32u) {
            coopStoreT(c00, &c_sh[qn], WN);
            coopStoreT(c01, &c_sh[qn + 16u], WN);
            coopStoreT(c02, &c_sh[qn + 32u], WN);
            coopStoreT(c03, &c_sh[qn + 48u], WN);
            coopStoreT(c10, &c_sh[16u * WN + qn], WN);
            coopStoreT(c11, &c_sh[16u * WN + qn + 16u], WN);
            coopStoreT(c12, &c_sh[16u * WN + qn + 32u], WN);
            coopStoreT(c13, &c_sh[16u * WN + qn + 48u], WN);
        }
        workgroupBarrier();
        // Invocation i writes row i / 8 of the quarter, columns 16 (i % 8) .. + 15.
        let r = lid / 8u;
        let col = (lid % 8u) * 16u;
        for (var j = 0u; j < 16u; j += 4u) {
            let o = r * WN + col + j;
            store(m0 + h * 32u + r, n0 + col + j, vec4<f32>(c_sh[o], c_sh[o + 1u], c_sh[o + 2u], c_sh[o + 3u]));
        }
        workgroupBarrier();
    }
}
