// The matrix-unit prefill matmul (matmul_coop.wgsl) with a 128x128 output tile for wide weight
// matrices: 256 invocations, eight 32-wide subgroups each multiplying a 32 (tokens) x 64 (rows)
// eighth as 2 x 4 products of 16x16 f16 matrices accumulated in f32. Twice the tile of
// matmul_coop.wgsl in each direction reads each A and W element half as often per product.
// Both operands' K steps pass through workgroup memory (two halves each, one barrier a step):
// every invocation copies its share of A with 8-byte loads (H100, Llama-3.2-1B gate+up for 512
// tokens: 6.5 -> 5.6 ms against matrix loads of A from memory, which each of the two subgroups
// sharing a fragment issued). The finished tile passes through workgroup memory in 16-token
// eighths (48 KiB in all).
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

// Row stride of the f16 tiles: BK halves and 16 bytes of padding. Rows 64 bytes apart put the
// eight 16-byte rows that one matrix-load phase reads on a quarter of the banks; 80 bytes apart
// they cover all 32 (H100: gate+up of Llama-3.2-1B 10.9 -> 8.1 ms for 512 tokens).
const BKP: u32 = BK + 8u;

const WBUF: u32 = 5120u;                      // WN * BKP (= WM * BKP)
var<workgroup> w_h: array<vec4<f16>, 2560>;   // 2 x [WN][BKP] halves in fours: row n, then k
var<workgroup> a_h: array<vec4<f16>, 2560>;   // 2 x [WM][BKP]: token m, then k
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

// This invocation's share of A's K step: 8 halves of token j / 4 from k0 + 8 (j % 4), for j =
// lid and lid + 256 (as load_runs for W).
struct ARuns {
    a0: vec4<f16>,
    a1: vec4<f16>,
    b0: vec4<f16>,
    b1: vec4<f16>,
}

// The run's first vec4 in a16, and its first half in a K step's half of a_h.
fn a_src(m0: u32, k0: u32, j: u32) -> u32 {
    return ((m0 + j / 4u) * K + k0 + (j % 4u) * 8u) / 4u;
}

fn a_dst(j: u32) -> u32 {
    return (j / 4u) * BKP + (j % 4u) * 8u;
}

fn load_as(m0: u32, k0: u32, lid: u32) -> ARuns {
    var t: ARuns;
    let p = a_src(m0, k0, lid);
    let q = a_src(m0, k0, lid + 256u);
    t.a0 = a16[p];
    t.a1 = a16[p + 1u];
    t.b0 = a16[q];
    t.b1 = a16[q + 1u];
    return t;
}

fn put_as(t: ARuns, lid: u32, base: u32) {
    let p = (base + a_dst(lid)) / 4u;
    let q = (base + a_dst(lid + 256u)) / 4u;
    a_h[p] = t.a0;
    a_h[p + 1u] = t.a1;
    a_h[q] = t.b0;
    a_h[q + 1u] = t.b1;
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
    // The first step staged before the loop; each iteration then multiplies from one half of
    // w_h and a_h while it stores the next step into the other (one barrier a step).
    put_runs(load_runs(n0, kb, lid, 256u), lid, 256u, 0u);
    put_as(load_as(m0, kb, lid), lid, 0u);
    workgroupBarrier();
    for (var k0 = kb; k0 < kb + ks; k0 += BK) {
        let cur = (((k0 - kb) / BK) % 2u) * WBUF;
        let more = k0 + BK < kb + ks;
        var t: Runs;
        var ta: ARuns;
        if (more) {
            t = load_runs(n0, k0 + BK, lid, 256u);
            ta = load_as(m0, k0 + BK, lid);
        }
        let ar = cur + qm * BKP;
        let x00 = coopLoadT<coop_mat16x16<f16, A>>(&a_h[ar / 4u], BKP / 4u);
        let x10 = coopLoadT<coop_mat16x16<f16, A>>(&a_h[(ar + 16u * BKP) / 4u], BKP / 4u);
        let b0 = coopLoad<coop_mat16x16<f16, B>>(&w_h[(cur + qn * BKP) / 4u], BKP / 4u);
        let b1 = coopLoad<coop_mat16x16<f16, B>>(&w_h[(cur + (qn + 16u) * BKP) / 4u], BKP / 4u);
        let b2 = coopLoad<coop_mat16x16<f16, B>>(&w_h[(cur + (qn + 32u) * BKP) / 4u], BKP / 4u);
        let b3 = coopLoad<coop_mat16x16<f16, B>>(&w_h[(cur + (qn + 48u) * BKP) / 4u], BKP / 4u);
        c00 = coopMultiplyAdd(x00, b0, c00);
        c01 = coopMultiplyAdd(x00, b1, c01);
        c02 = coopMultiplyAdd(x00, b2, c02);
        c03 = coopMultiplyAdd(x00, b3, c03);
        c10 = coopMultiplyAdd(x10, b0, c10);
        c11 = coopMultiplyAdd(x10, b1, c11);
        c12 = coopMultiplyAdd(x10, b2, c12);
        c13 = coopMultiplyAdd(x10, b3, c13);
        let x01 = coopLoadT<coop_mat16x16<f16, A>>(&a_h[(ar + 16u) / 4u], BKP / 4u);
        let x11 = coopLoadT<coop_mat16x16<f16, A>>(&a_h[(ar + 16u * BKP + 16u) / 4u], BKP / 4u);
        let d0 = coopLoad<coop_mat16x16<f16, B>>(&w_h[(cur + qn * BKP + 16u) / 4u], BKP / 4u);
        let d1 = coopLoad<coop_mat16x16<f16, B>>(&w_h[(cur + (qn + 16u) * BKP + 16u) / 4u], BKP / 4u);
        let d2 = coopLoad<coop_mat16x16<f16, B>>(&w_h[(cur + (qn + 32u) * BKP + 16u) / 4u], BKP / 4u);
        let d3 = coopLoad<coop_mat16x16<f16, B>>(&w_h[(cur + (qn + 48u) * BKP + 16u) / 4u], BKP / 4u);
        c00 = coopMultiplyAdd(x01, d0, c00);
        c01 = coopMultiplyAdd(x01, d1, c01);
        c02 = coopMultiplyAdd(x01, d2, c02);
        c03 = coopMultiplyAdd(x01, d3, c03);
        c10 = coopMultiplyAdd(x11, d0, c10);
        c11 = coopMultiplyAdd(x11, d1, c11);
        c12 = coopMultiplyAdd(x11, d2, c12);
        c13 = coopMultiplyAdd(x11, d3, c13);
        if (more) {
            put_runs(t, lid, 256u, WBUF - cur);
            put_as(ta, lid, WBUF - cur);
        }
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
