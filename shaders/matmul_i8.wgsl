// The prefill matmul on 8-bit integers, for browsers whose adapters offer 8-bit subgroup
// matrices (Chromium's `chromium-experimental-subgroup-matrix`, i8 x i8 -> i32 16x16x32) but no
// f16: C[m, n] (+)= sum over 32-element blocks b of
//   scale_w[n, b] * d_a[m, b] * (q_a[m, b] . q_w[n, b]) + offset_w[n, b] * sum_a[m, b]
// where the weights' integers are those of their quantized layout (Q4 nibbles 0..15 or Q8
// bytes, value = q * scale + offset) and the activations' producer (rmsnorm.wgsl, ffn_act.wgsl
// I8_OUT) or quant_rows.wgsl left them as 254 c + f in two planes of bytes (about 15 bits a value) with their scale d_a and exact sum per block.
// Each block's integer product (254 c . q_w + f . q_w, two matrix products) is exact in i32, so
// the result is that of the weights as stored and the activations to 15 bits per block, as the
// decode matvecs with integer dot products compute it.
// 64x64 output tiles, 128 invocations: four 32-wide subgroups each own a 32 (tokens) x 32 (rows)
// quarter as 2 x 2 products of 16x16 matrices. A K step is two blocks; both operands pass
// through workgroup memory as bytes (the Q4 nibbles spread to bytes on the way). A block's
// products are integers under that block's scales, so each one leaves the matrices through
// workgroup memory (`scratch`) and every invocation scales its share into f32 accumulators.
// `products` (i8_smx.wgsl on subgroup matrices, i8_dot.wgsl with packed dot products, which the
// kernel tests run where no matrices exist) writes the block's products to `scratch`.
// A product's 16 rows lie TS words apart in `scratch`, and the two halves of a subgroup read
// rows PAIR apart (TS * PAIR = 16 banks mod 32): both come from the pipeline (TS 24 where the
// adapter gives 40 KiB of workgroup memory; the matrices store a result two words a lane, and
// at 16 words four of a subgroup's rows share banks: Chromium on an H200, the 1B shape's
// gate+up 10.84 -> 9.70 ms; else 16, 32 KiB in all). TILE = 16 TS.
// GLU (W = [gate; up], F = N / 2 units, a multiple of 32): a tile's 64 columns are the gate rows
// of 32 units and then their up rows, and instead of C it writes glu(gate, up) (glu.wgsl) as the
// down projection's 8-bit input (quant_block.wgsl: a token's 32 units are one block), which
// spares prefill the GLU pass and the [gate; up] rows' round trip through memory.
// Bindings: 0 W words, 1 W block meta (layout.wgsl), 2 A's bytes (per block 8 words of c, 8 of
// f), 3 C, 4 vecs (biases), 5 step, 6 A's per-block (d_a, sum); with GLU 7 the output's planes,
// 8 its per-block (d, sum).
// Dispatch: Tiles(N): (ceil(N / 64), ceil(tokens / 64)).

override K: u32;   // a multiple of 64 (two blocks a step)
override GLU: bool = false;

const KB: u32 = 2u;      // blocks a K step
const RS: u32 = 20u;     // staged W row stride in words: KB * 8 and 16 bytes of padding
const RSA: u32 = 36u;    // staged A row stride: KB * (8 words of c, 8 of f) and the padding

var<workgroup> a_sh: array<i32, 2304>;         // [64 tokens][RSA]
var<workgroup> w_sh: array<i32, 1280>;         // [64 rows][RS]
// The blocks' pairs live in quant_block.wgsl's qpart_sh: A's [64 tokens][KB] (d_a, sum) in the
// first half, W's [64 rows][KB] (scale, offset) in the second; the GLU epilogue's quant_part
// takes the array back once the K loop is done.
var<workgroup> scratch: array<i32, 16u * TILE>;  // [4 subgroups][4 products][16][TS]

@group(0) @binding(0) var<storage, read> w_vec: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> a_q: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read> a_s: array<vec2<f32>>;
@group(0) @binding(7) var<storage, read_write> h8: array<u32>;
@group(0) @binding(8) var<storage, read_write> h8s: array<vec2<f32>>;

// The weight row of the tile's column c (tiles at n0 = 64 x): rows in order, or with GLU the
// gate rows of units 32 x .. 32 x + 31, then their up rows.
fn w_row(n0: u32, c: u32) -> u32 {
    if (GLU) {
        let f = N / 2u;
        return min(n0 / 2u + c % 32u, f - 1u) + (c / 32u) * f;
    }
    return min(n0 + c, N - 1u);
}

// Four nibbles (the low 16 bits) as four bytes.
fn spread(x: u32) -> i32 {
    return bitcast<i32>((x & 0xfu) | ((x & 0xf0u) << 4u) | ((x & 0xf00u) << 8u) | ((x & 0xf000u) << 12u));
}

// This invocation's share of a K step as loaded: four vec4 of A's bytes (runs li + 128 r), one
// weight block as stored (Q4: one vec4 of nibbles; Q8: two of bytes) with its (scale, offset),
// and one (d_a, sum) of A. Loaded before the previous step's products and stored after them, so
// the loads' latency hides behind that work. Tokens past the step and rows past N repeat the
// last ones (their outputs are never stored): the loads need no branch.
struct Staged {
    a0: vec4<u32>,
    a1: vec4<u32>,
    a2: vec4<u32>,
    a3: vec4<u32>,
    w0: vec4<u32>,
    w1: vec4<u32>,
    ws: vec2<f32>,
    s: vec2<f32>,
}

// Run idx of A's step at block kb0: token idx / (4 KB), vec4 idx % (4 KB) of its blocks.
fn load_a(t0: u32, kb0: u32, idx: u32) -> vec4<u32> {
    let m = min(t0 + idx / (4u * KB), step.n_tokens - 1u);
    return a_q[(m * (K / 32u) + kb0) * 4u + idx % (4u * KB)];
}

fn load_step(t0: u32, n0: u32, kb0: u32, li: u32) -> Staged {
    var st: Staged;
    st.a0 = load_a(t0, kb0, li);
    st.a1 = load_a(t0, kb0, li + 128u);
    st.a2 = load_a(t0, kb0, li + 256u);
    st.a3 = load_a(t0, kb0, li + 384u);
    // Row n's block j: invocation li takes row li / KB, block li % KB.
    let n = w_row(n0, li / KB);
    let b = kb0 + li % KB;
    let i = n * (K / 32u) + b;
    if (LAYOUT == 3u) {
        st.w0 = w_vec[i];
    } else {
        st.w0 = w_vec[2u * i];
        st.w1 = w_vec[2u * i + 1u];
    }
    st.ws = block_meta((n * K + b * 32u) / QBLOCK);
    st.s = a_s[min(t0 + li / KB, step.n_tokens - 1u) * (K / 32u) + b];
    return st;
}

// Run idx of A into a_sh; four words of W into w_sh at d (two functions: WGSL pointers to
// workgroup arrays carry the array's length in their type).
// Browsers clamp every workgroup index they cannot prove in range, and a clamp also splits the
// four stores of a vec4 that could have been one; one min() on entry (here and in put_w) lets
// Chromium's range analysis prove the derived indices (prefill attention and these matmuls
// took 0.61-0.70x the time with the clamps off, H200).
fn put_a(idx: u32, v: vec4<u32>) {
    let i = min(idx, 511u);   // four runs of 128 invocations
    let d = (i / (4u * KB)) * RSA + (i % (4u * KB)) * 4u;
    let s = bitcast<vec4<i32>>(v);
    a_sh[d] = s.x;
    a_sh[d + 1u] = s.y;
    a_sh[d + 2u] = s.z;
    a_sh[d + 3u] = s.w;
}

fn put_w(d_in: u32, v: vec4<u32>) {
    let d = min(d_in, 64u * RS - 4u);
    let s = bitcast<vec4<i32>>(v);
    w_sh[d] = s.x;
    w_sh[d + 1u] = s.y;
    w_sh[d + 2u] = s.z;
    w_sh[d + 3u] = s.w;
}

fn put_step(st: Staged, li: u32) {
    put_a(li, st.a0);
    put_a(li + 128u, st.a1);
    put_a(li + 256u, st.a2);
    put_a(li + 384u, st.a3);
    // Row li / KB's block li % KB as eight words of bytes (Q4 nibbles spread to bytes).
    let d = (li / KB) * RS + (li % KB) * 8u;
    if (LAYOUT == 3u) {
        let w = st.w0;
        put_w(d, vec4<u32>(bitcast<u32>(spread(w.x & 0xffffu)), bitcast<u32>(spread(w.x >> 16u)),
                           bitcast<u32>(spread(w.y & 0xffffu)), bitcast<u32>(spread(w.y >> 16u))));
        put_w(d + 4u, vec4<u32>(bitcast<u32>(spread(w.z & 0xffffu)), bitcast<u32>(spread(w.z >> 16u)),
                                bitcast<u32>(spread(w.w & 0xffffu)), bitcast<u32>(spread(w.w >> 16u))));
    } else {
        put_w(d, st.w0);
        put_w(d + 4u, st.w1);
    }
    qpart_sh[128u + li % 128u] = st.ws;
    qpart_sh[li % 128u] = st.s;
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let sg = li / 32u;
    let lane = li % 32u;
    let t0 = wg.y * 64u;
    let n0 = wg.x * 64u;
    let sm = (sg / 2u) * 32u;
    let sn = (sg % 2u) * 32u;
    let nb = K / 32u;
    // acc[4 * 8]: product p = 2 mi + ni; element i of its 16x16 is column lane % 16 of row
    // i % PAIR + 2 PAIR (i / PAIR) + PAIR (lane / 16) (with PAIR 1: element lane + 32 i).
    var acc: array<f32, 32>;
    put_step(load_step(t0, n0, 0u, li), li);
    workgroupBarrier();
    for (var kb0 = 0u; kb0 < nb; kb0 += KB) {
        // The next step (the last one loads itself again).
        let st = load_step(t0, n0, min(kb0 + KB, nb - KB), li);
        for (var j = 0u; j < KB; j++) {
            products(sg, lane, sm, sn, j);
            workgroupBarrier();
            for (var p = 0u; p < 4u; p++) {
                let n = sn + (p % 2u) * 16u + lane % 16u;
                let ws = qpart_sh[128u + n * KB + j];
                for (var i = 0u; i < 8u; i++) {
                    // The two half-subgroups read rows PAIR apart: TS * PAIR words, 16 banks.
                    let r = i % PAIR + 2u * PAIR * (i / PAIR) + PAIR * (lane / 16u);
                    let m = sm + (p / 2u) * 16u + r;
                    let a = qpart_sh[m * KB + j];
                    let v = f32(scratch[(sg * 4u + p) * TILE + r * TS + lane % 16u]);
                    acc[p * 8u + i] += ws.x * (a.x * v) + ws.y * a.y;
                }
            }
            workgroupBarrier();
        }
        // Every read of this step's staged operands ended at the barrier above.
        put_step(st, li);
        workgroupBarrier();
    }
    // The quarter through workgroup memory, as 32 rows of 32, so that stores take four
    // consecutive outputs of a token.
    let base = sg * 4u * TILE;
    for (var p = 0u; p < 4u; p++) {
        for (var i = 0u; i < 8u; i++) {
            let row = (p / 2u) * 16u + i % PAIR + 2u * PAIR * (i / PAIR) + PAIR * (lane / 16u);
            let col = (p % 2u) * 16u + lane % 16u;
            scratch[base + row * 32u + col] = bitcast<i32>(acc[p * 8u + i]);
        }
    }
    workgroupBarrier();
    if (GLU) {
        glu_out(t0, wg.x, li);
        return;
    }
    for (var i = 0u; i < 8u; i++) {
        let idx = lane + 32u * i;
        let row = idx / 8u;
        let col = (idx % 8u) * 4u;
        let o = base + row * 32u + col;
        let v = bitcast<vec4<f32>>(vec4<i32>(scratch[o], scratch[o + 1u], scratch[o + 2u], scratch[o + 3u]));
        store(t0 + sm + row, n0 + sn + col, v);
    }
}

// With GLU: the tile's 64 tokens x 32 units from the quarters in `scratch` (subgroup 2 i: the
// gate rows of tokens 32 i .., 2 i + 1: their up rows; 32 x 32 each), eight invocations a token's
// block of 32 units, four units each.
fn glu_out(t0: u32, x: u32, li: u32) {
    let f = N / 2u;
    let part = li % 8u;
    let unit = 32u * x + 4u * part;
    var gb = vec4<f32>(0.0);
    var ub = vec4<f32>(0.0);
    if (HAS_BIAS) {
        let j = BIAS_OFF + min(unit, f - 4u);
        gb = vec4<f32>(vecs[j], vecs[j + 1u], vecs[j + 2u], vecs[j + 3u]);
        ub = vec4<f32>(vecs[j + f], vecs[j + f + 1u], vecs[j + f + 2u], vecs[j + f + 3u]);
    }
    for (var r0 = 0u; r0 < 64u; r0 += 16u) {
        let row = r0 + li / 8u;
        let o = (row / 32u) * 8u * TILE + (row % 32u) * 32u + 4u * part;
        let g = bitcast<vec4<f32>>(vec4<i32>(scratch[o], scratch[o + 1u], scratch[o + 2u], scratch[o + 3u])) + gb;
        let p = o + 4u * TILE;
        let u = bitcast<vec4<f32>>(vec4<i32>(scratch[p], scratch[p + 1u], scratch[p + 2u], scratch[p + 3u])) + ub;
        let q = quant_part(vec4<f32>(glu(g.x, u.x), glu(g.y, u.y), glu(g.z, u.z), glu(g.w, u.w)), li);
        let t = t0 + row;
        if (t < step.n_tokens && unit < f) {
            let b = t * (f / 32u) + x;
            let pw = plane_words(b, part);
            h8[pw.x] = q.c;
            h8[pw.y] = q.f;
            if (part == 0u) {
                h8s[b] = q.ds;
            }
        }
    }
}
