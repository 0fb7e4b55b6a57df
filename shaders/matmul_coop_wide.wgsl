// The matrix-unit prefill matmul (matmul_coop.wgsl) with a 128x128 output tile for wide weight
// matrices: 256 invocations, eight 32-wide subgroups each multiplying a 32 (tokens) x 64 (rows)
// eighth as 2 x 4 products of 16x16 f16 matrices accumulated in f32. Twice the tile of
// matmul_coop.wgsl in each direction reads each A and W element half as often per product.
// K steps of 64 staged as matmul_f16.wgsl describes; K and each split range of K are whole
// steps (ops::matmul::tile_for gives other matrices the 64x64 kernel).
// The finished tile passes through workgroup memory in 16-token eighths.
// Split K: with KSPLIT > 1 workgroup z takes the z-th of KSPLIT equal ranges of K and writes its
// product without the epilogue to `part` for matmul_sum.wgsl (matrices of few 128-row tiles and
// long rows otherwise leave most of the GPU idle). A constant, not the grid's depth: with K's
// range known when the pipeline is built the loop ran as fast as before (a range from the grid
// cost 14% on the unsplit matrices, H100).
// Bindings: as matmul_tile.wgsl, and 6 the partial products ([KSPLIT][tokens][N]).
// Dispatch: SplitTiles: (ceil(N / 128), ceil(tokens / 128), KSPLIT).

override KSPLIT: u32 = 1u;

const WM: u32 = 128u;
const WN: u32 = 128u;
const THREADS: u32 = 256u;

var<workgroup> w_h: array<vec4<f16>, 2304>;   // [WN][BKP] halves in fours: row n, then k
var<workgroup> a_h: array<vec4<f16>, 2304>;   // [WM][BKP]: token m, then k
var<workgroup> c_sh: array<f32, 2048>;        // [16][WN]: an eighth of the finished tile

@group(0) @binding(6) var<storage, read_write> part: array<f32>;

// Four outputs of split z's partial product (store's bounds, no epilogue).
fn store_part(z: u32, m: u32, n: u32, v4: vec4<f32>) {
    if (m >= step.n_tokens) {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        if (n + j < N) {
            part[(z * step.n_tokens + m) * N + n + j] = v4[j];
        }
    }
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let m0 = wg.y * WM;
    let n0 = wg.x * WN;
    let ks = K / KSPLIT;
    let kb = select(wg.z * ks, 0u, KSPLIT == 1u);
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
    put_step(load_step(n0, m0, kb, lid), lid);
    workgroupBarrier();
    for (var k0 = kb; k0 < kb + ks; k0 += STEP_K) {
        // The last step loads itself again: no branch between the loads and the products.
        let t = load_step(n0, m0, min(k0 + STEP_K, kb + ks - STEP_K), lid);
        for (var kk = 0u; kk < STEP_K; kk += 16u) {
            let ar = qm * BKP + kk;
            let x0 = coopLoadT<coop_mat16x16<f16, A>>(&a_h[ar / 4u], BKP / 4u);
            let x1 = coopLoadT<coop_mat16x16<f16, A>>(&a_h[(ar + 16u * BKP) / 4u], BKP / 4u);
            let b0 = coopLoad<coop_mat16x16<f16, B>>(&w_h[(qn * BKP + kk) / 4u], BKP / 4u);
            let b1 = coopLoad<coop_mat16x16<f16, B>>(&w_h[((qn + 16u) * BKP + kk) / 4u], BKP / 4u);
            let b2 = coopLoad<coop_mat16x16<f16, B>>(&w_h[((qn + 32u) * BKP + kk) / 4u], BKP / 4u);
            let b3 = coopLoad<coop_mat16x16<f16, B>>(&w_h[((qn + 48u) * BKP + kk) / 4u], BKP / 4u);
            c00 = coopMultiplyAdd(x0, b0, c00);
            c01 = coopMultiplyAdd(x0, b1, c01);
            c02 = coopMultiplyAdd(x0, b2, c02);
            c03 = coopMultiplyAdd(x0, b3, c03);
            c10 = coopMultiplyAdd(x1, b0, c10);
            c11 = coopMultiplyAdd(x1, b1, c11);
            c12 = coopMultiplyAdd(x1, b2, c12);
            c13 = coopMultiplyAdd(x1, b3, c13);
        }
        workgroupBarrier();
        put_step(t, lid);
        workgroupBarrier();
    }
    // Eighth e holds tokens 16e .. 16e + 15: the c0_ of subgroups 2(e / 2) and 2(e / 2) + 1
    // for even e, their c1_ for odd e.
    for (var e = 0u; e < 8u; e++) {
        if (qm == (e / 2u) * 32u) {
            if (e % 2u == 0u) {
                coopStoreT(c00, &c_sh[qn], WN);
                coopStoreT(c01, &c_sh[qn + 16u], WN);
                coopStoreT(c02, &c_sh[qn + 32u], WN);
                coopStoreT(c03, &c_sh[qn + 48u], WN);
            } else {
                coopStoreT(c10, &c_sh[qn], WN);
                coopStoreT(c11, &c_sh[qn + 16u], WN);
                coopStoreT(c12, &c_sh[qn + 32u], WN);
                coopStoreT(c13, &c_sh[qn + 48u], WN);
            }
        }
        workgroupBarrier();
        // Invocation i writes row i / 16 of the eighth, columns 8 (i % 16) .. + 7.
        let r = lid / 16u;
        let col = (lid % 16u) * 8u;
        for (var j = 0u; j < 8u; j += 4u) {
            let o = r * WN + col + j;
            let v = vec4<f32>(c_sh[o], c_sh[o + 1u], c_sh[o + 2u], c_sh[o + 3u]);
            if (KSPLIT == 1u) {
                store(m0 + e * 16u + r, n0 + col + j, v);
            } else {
                store_part(wg.z, m0 + e * 16u + r, n0 + col + j, v);
            }
        }
        workgroupBarrier();
    }
}
