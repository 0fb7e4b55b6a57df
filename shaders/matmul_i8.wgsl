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
// Bindings: 0 W words, 1 W block meta (layout.wgsl), 2 A's bytes (per block 8 words of c, 8 of
// f), 3 C, 4 vecs (biases), 5 step, 6 A's per-block (d_a, sum).
// Dispatch: Tiles(N): (ceil(N / 64), ceil(tokens / 64)).

override K: u32;   // a multiple of 64 (two blocks a step)

const KB: u32 = 2u;      // blocks a K step
const RS: u32 = 20u;     // staged W row stride in words: KB * 8 and 16 bytes of padding
const RSA: u32 = 36u;    // staged A row stride: KB * (8 words of c, 8 of f) and the padding

var<workgroup> a_sh: array<i32, 2304>;         // [64 tokens][RSA]
var<workgroup> w_sh: array<i32, 1280>;         // [64 rows][RS]
var<workgroup> as_sh: array<vec2<f32>, 128>;   // [64 tokens][KB] (d_a, sum)
var<workgroup> ws_sh: array<vec2<f32>, 128>;   // [64 rows][KB] (scale, offset)
var<workgroup> scratch: array<i32, 16u * TILE>;  // [4 subgroups][4 products][16][TS]

@group(0) @binding(0) var<storage, read> w_vec: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> a_q: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read> a_s: array<vec2<f32>>;

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
    let n = min(n0 + li / KB, N - 1u);
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
    ws_sh[li % 128u] = st.ws;
    as_sh[li % 128u] = st.s;
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
                let ws = ws_sh[n * KB + j];
                for (var i = 0u; i < 8u; i++) {
                    // The two half-subgroups read rows PAIR apart: TS * PAIR words, 16 banks.
                    let r = i % PAIR + 2u * PAIR * (i / PAIR) + PAIR * (lane / 16u);
                    let m = sm + (p / 2u) * 16u + r;
                    let a = as_sh[m * KB + j];
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
    for (var i = 0u; i < 8u; i++) {
        let idx = lane + 32u * i;
        let row = idx / 8u;
        let col = (idx % 8u) * 4u;
        let o = base + row * 32u + col;
        let v = bitcast<vec4<f32>>(vec4<i32>(scratch[o], scratch[o + 1u], scratch[o + 2u], scratch[o + 3u]));
        store(t0 + sm + row, n0 + sn + col, v);
    }
}
