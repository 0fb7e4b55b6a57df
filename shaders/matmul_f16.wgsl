// What the matrix-unit matmuls (matmul_coop.wgsl, matmul_coop_wide.wgsl) share beside the tile:
// A in f16 straight from memory (to_f16.wgsl converts each input once, rows of K, in buffers
// with whole tiles of rows), and the staging of W's K step into the f16 tile `w_h` (k
// contiguous, row stride BKP; two of them, WBUF halves apart) that each kernel declares with its own size. Matrix loads of A
// from memory rather than through workgroup memory: each invocation then converts and stores
// only its weights, the part of a K step that cost the most.

@group(0) @binding(2) var<storage, read> a16: array<f16>;

// A's fragments of one K step for a subgroup's 32 tokens: rows r and r + 16 (x0_, x1_), k's k0 ..
// k0 + 15 and k0 + 16 .. k0 + 31 (x_0, x_1), `arow` the first row's offset in a16. Both kernels
// load the next step's while the current one multiplies: loaded just before their products,
// their latency set the pace (H100, Llama-3.2-1B gate+up: 8.5 ms for 512 tokens, 6.0 with A
// from workgroup memory).
struct AFrags {
    x00: coop_mat16x16<f16, A>,
    x01: coop_mat16x16<f16, A>,
    x10: coop_mat16x16<f16, A>,
    x11: coop_mat16x16<f16, A>,
}

fn load_a(arow: u32, k0: u32) -> AFrags {
    var f: AFrags;
    f.x00 = coopLoadT<coop_mat16x16<f16, A>>(&a16[arow + k0], K);
    f.x01 = coopLoadT<coop_mat16x16<f16, A>>(&a16[arow + k0 + 16u], K);
    f.x10 = coopLoadT<coop_mat16x16<f16, A>>(&a16[arow + 16u * K + k0], K);
    f.x11 = coopLoadT<coop_mat16x16<f16, A>>(&a16[arow + 16u * K + k0 + 16u], K);
    return f;
}

// This invocation's share of one K step of W: runs j and j + wg of 8 weights (load_w).
struct Runs {
    w0: W8,
    w1: W8,
}

fn load_runs(n0: u32, k0: u32, lid: u32, wg: u32) -> Runs {
    var t: Runs;
    t.w0 = load_w(n0, k0, lid);
    t.w1 = load_w(n0, k0, lid + wg);
    return t;
}

fn put_w(base: u32, j: u32, w: W8) {
    let o = base + (j / 4u) * BKP + (j % 4u) * 8u;
    w_h[o] = f16(w.lo.x);
    w_h[o + 1u] = f16(w.lo.y);
    w_h[o + 2u] = f16(w.lo.z);
    w_h[o + 3u] = f16(w.lo.w);
    w_h[o + 4u] = f16(w.hi.x);
    w_h[o + 5u] = f16(w.hi.y);
    w_h[o + 6u] = f16(w.hi.z);
    w_h[o + 7u] = f16(w.hi.w);
}

// Into the half of `w_h` at `base`: the kernels alternate two halves, so a step's weights are
// stored while the previous step's products read the other half, one barrier a step.
fn put_runs(t: Runs, lid: u32, wg: u32, base: u32) {
    put_w(base, lid, t.w0);
    put_w(base, lid + wg, t.w1);
}
