// What the matrix-unit matmuls (matmul_coop.wgsl, matmul_coop_wide.wgsl) share beside the tile:
// A in f16 in memory (to_f16.wgsl converts each input once, rows of K, in buffers with whole
// tiles of rows), and the staging of a K step of 64 of A and W into the f16 tiles `a_h` and
// `w_h` (k contiguous, row stride BKP halves) that each kernel declares with its own row count
// and invocation count THREADS (four runs of 8 values of each operand an invocation).
// Each kernel loads the next step (A in 8-byte loads, W as stored: load_raw8) before the current
// step's products, then after a barrier converts W and stores both in place of the current step,
// and a second barrier follows. Until session 14 the kernels used steps of 32 in two alternating
// halves with one barrier a step and converted W right after its loads inside `if (more)`: each
// invocation waited for its weights before its products, held half as much in flight and read
// W's rows in 16-byte pieces (H100 pp512, BENCHMARKS.md session 14: 1B 35.1k -> 44.0k tok/s,
// Phi-3 11.1k -> 15.6k, SmolLM2's 64x64 down projection 1.39 -> 1.00 ms).
// Loads stay unconditional: rows past N repeat row N - 1 (their products are never stored), k
// past K repeats the row's last 8 (K is whole 32-element blocks; a kernel whose K has a half
// step at the end multiplies only its valid half), and the last step loads itself again.

@group(0) @binding(2) var<storage, read> a16: array<vec4<f16>>;

const STEP_K: u32 = 64u;
// Row stride of the f16 tiles: STEP_K halves and 16 bytes of padding, 144 bytes: the eight
// 16-byte rows one matrix-load phase reads fall on distinct banks (unpadded 64-byte rows put
// them on a quarter of the banks: H100, 1B gate+up 10.9 -> 8.1 ms for 512 tokens).
const BKP: u32 = STEP_K + 8u;

// This invocation's share of a K step: runs lid + THREADS i (i < 4) of 8 weights and of 8
// halves of A.
struct KStep {
    w0: Raw8,
    w1: Raw8,
    w2: Raw8,
    w3: Raw8,
    a0: vec4<f16>,
    a1: vec4<f16>,
    a2: vec4<f16>,
    a3: vec4<f16>,
    a4: vec4<f16>,
    a5: vec4<f16>,
    a6: vec4<f16>,
    a7: vec4<f16>,
}

// Where run j of the step at k0 starts in its row: 8 (j % 8) on, kept within the row where K
// ends in a half step (the clamp, a constant condition, cost the wide kernel 5-8% where kept
// for every K: H100, Phi-3 pp512 down projection 6.02 -> 6.48 ms).
fn run_k(k0: u32, j: u32) -> u32 {
    let k = k0 + (j % 8u) * 8u;
    if (K % STEP_K == 0u) {
        return k;
    }
    return min(k, K - 8u);
}

// Run j of W: row j / 8 of the tile at n0.
fn w_run(n0: u32, k0: u32, j: u32) -> Raw8 {
    return load_raw8(min(n0 + j / 8u, N - 1u) * K + run_k(k0, j));
}

// Run j of A (token j / 8 of the tile at m0): its first vec4 in a16.
fn a_at(m0: u32, k0: u32, j: u32) -> u32 {
    return ((m0 + j / 8u) * K + run_k(k0, j)) / 4u;
}

fn load_step(n0: u32, m0: u32, k0: u32, lid: u32) -> KStep {
    var t: KStep;
    t.w0 = w_run(n0, k0, lid);
    t.w1 = w_run(n0, k0, lid + THREADS);
    t.w2 = w_run(n0, k0, lid + 2u * THREADS);
    t.w3 = w_run(n0, k0, lid + 3u * THREADS);
    let p0 = a_at(m0, k0, lid);
    let p1 = a_at(m0, k0, lid + THREADS);
    let p2 = a_at(m0, k0, lid + 2u * THREADS);
    let p3 = a_at(m0, k0, lid + 3u * THREADS);
    t.a0 = a16[p0];
    t.a1 = a16[p0 + 1u];
    t.a2 = a16[p1];
    t.a3 = a16[p1 + 1u];
    t.a4 = a16[p2];
    t.a5 = a16[p2 + 1u];
    t.a6 = a16[p3];
    t.a7 = a16[p3 + 1u];
    return t;
}

// Run j's first half in w_h / a_h.
fn dst(j: u32) -> u32 {
    return (j / 8u) * BKP + (j % 8u) * 8u;
}

// Run `raw` of 8 weights into w_h at half `o` (a multiple of 4), as vec4<f16>: one 8-byte store
// per four weights instead of four 2-byte ones (H100, Llama-3.2-1B pp512: gate+up 7.1 -> 6.5 ms).
fn put_w8(o: u32, raw: Raw8) {
    let w = dequant8(raw);
    w_h[o / 4u] = vec4<f16>(w.lo);
    w_h[o / 4u + 1u] = vec4<f16>(w.hi);
}

fn put_step(t: KStep, lid: u32) {
    put_w8(dst(lid), t.w0);
    put_w8(dst(lid + THREADS), t.w1);
    put_w8(dst(lid + 2u * THREADS), t.w2);
    put_w8(dst(lid + 3u * THREADS), t.w3);
    let p0 = dst(lid) / 4u;
    let p1 = dst(lid + THREADS) / 4u;
    let p2 = dst(lid + 2u * THREADS) / 4u;
    let p3 = dst(lid + 3u * THREADS) / 4u;
    a_h[p0] = t.a0;
    a_h[p0 + 1u] = t.a1;
    a_h[p1] = t.a2;
    a_h[p1 + 1u] = t.a3;
    a_h[p2] = t.a4;
    a_h[p2 + 1u] = t.a5;
    a_h[p3] = t.a6;
    a_h[p3 + 1u] = t.a7;
}
