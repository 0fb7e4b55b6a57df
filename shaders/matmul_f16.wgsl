// What the matrix-unit matmuls (matmul_coop.wgsl, matmul_coop_wide.wgsl) share beside the tile:
// A in f16 in memory (to_f16.wgsl converts each input once, rows of K, in buffers with whole
// tiles of rows), read in fours of halves, and the staging of W's K step into the f16 tile `w_h`
// (k contiguous, row stride BKP halves; two of them, WBUF halves apart) that each kernel
// declares with its own size, as vec4<f16>: one 8-byte store per four weights instead of four
// 2-byte ones (H100, Llama-3.2-1B pp512: gate+up 7.1 -> 6.5 ms, down 6.0 -> 5.1). Matrix loads
// take the vec4 arrays with strides in vec4s. The 64x64 kernel loads A's fragments from memory
// (load_a), the wide one stages A beside W.

@group(0) @binding(2) var<storage, read> a16: array<vec4<f16>>;

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
    f.x00 = coopLoadT<coop_mat16x16<f16, A>>(&a16[(arow + k0) / 4u], K / 4u);
    f.x01 = coopLoadT<coop_mat16x16<f16, A>>(&a16[(arow + k0 + 16u) / 4u], K / 4u);
    f.x10 = coopLoadT<coop_mat16x16<f16, A>>(&a16[(arow + 16u * K + k0) / 4u], K / 4u);
    f.x11 = coopLoadT<coop_mat16x16<f16, A>>(&a16[(arow + 16u * K + k0 + 16u) / 4u], K / 4u);
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
    let o = (base + (j / 4u) * BKP + (j % 4u) * 8u) / 4u;
    w_h[o] = vec4<f16>(w.lo);
    w_h[o + 1u] = vec4<f16>(w.hi);
}

// Into the half of `w_h` at `base`: the kernels alternate two halves, so a step's weights are
// stored while the previous step's products read the other half, one barrier a step.
fn put_runs(t: Runs, lid: u32, wg: u32, base: u32) {
    put_w(base, lid, t.w0);
    put_w(base, lid + wg, t.w1);
}
