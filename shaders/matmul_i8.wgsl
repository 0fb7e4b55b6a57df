// The prefill matmul on 8-bit integers, for browsers whose adapters offer 8-bit subgroup
// matrices (Chromium's `chromium-experimental-subgroup-matrix`, i8 x i8 -> i32 16x16x32) but no
// f16: C[m, n] (+)= sum over 32-element blocks b of
//   scale_w[n, b] * d_a[m, b] * (q_a[m, b] . q_w[n, b]) + offset_w[n, b] * sum_a[m, b]
// where the weights' integers are those of their quantized layout (Q4 nibbles 0..15 or Q8
// bytes, value = q * scale + offset) and quant_rows.wgsl left the activations as 254 c + f in
// two planes of bytes (about 15 bits a value) with their scale d_a and exact sum per block.
// Each block's integer product (254 c . q_w + f . q_w, two matrix products) is exact in i32, so
// the result is that of the weights as stored and the activations to 15 bits per block, as the
// decode matvecs with integer dot products compute it.
// 64x64 output tiles, 128 invocations: four 32-wide subgroups each own a 32 (tokens) x 32 (rows)
// quarter as 2 x 2 products of 16x16 matrices. A K step is two blocks; both operands pass
// through workgroup memory as bytes (the Q4 nibbles spread to bytes on the way), 32 KiB in all. A block's
// products are integers under that block's scales, so each one leaves the matrices through
// workgroup memory (`scratch`) and every invocation scales its share into f32 accumulators.
// `products` (i8_smx.wgsl on subgroup matrices, i8_dot.wgsl with packed dot products, which the
// kernel tests run where no matrices exist) writes the block's products to `scratch`.
// Bindings: 0 W words, 1 W block meta (layout.wgsl), 2 A's bytes (per block 8 words of c, 8 of
// f), 3 C, 4 vecs (biases), 5 step, 6 A's per-block (d_a, sum).
// Dispatch: Tiles(N): (ceil(N / 64), ceil(tokens / 64)).

override K: u32;   // a multiple of 64 (two blocks a step)

const KB: u32 = 2u;      // blocks a K step
const RS: u32 = 20u;     // staged W row stride in words: KB * 8 and 16 bytes of padding
const RSA: u32 = 36u;    // staged A row stride: KB * (8 words of c, 8 of f) and the padding
const TILE: u32 = 256u;  // one 16x16 product

var<workgroup> a_sh: array<i32, 2304>;         // [64 tokens][RSA]
var<workgroup> w_sh: array<i32, 1280>;         // [64 rows][RS]
var<workgroup> as_sh: array<vec2<f32>, 128>;   // [64 tokens][KB] (d_a, sum)
var<workgroup> ws_sh: array<vec2<f32>, 128>;   // [64 rows][KB] (scale, offset)
var<workgroup> scratch: array<i32, 4096>;      // [4 subgroups][4 products][16][16]

@group(0) @binding(0) var<storage, read> w_vec: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> a_q: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read> a_s: array<vec2<f32>>;

// Four nibbles (the low 16 bits) as four bytes.
fn spread(x: u32) -> i32 {
    return bitcast<i32>((x & 0xfu) | ((x & 0xf0u) << 4u) | ((x & 0xf00u) << 8u) | ((x & 0xf000u) << 12u));
}

// Block b of weight row n as eight words of bytes at w_sh[d..d + 8] (zeros past N).
fn stage_w(n: u32, b: u32, d: u32) {
    var x = array<vec4<u32>, 2>(vec4<u32>(0u), vec4<u32>(0u));
    if (n < N) {
        let i = n * (K / 32u) + b;
        if (LAYOUT == 3u) {
            let w = w_vec[i];
            x[0] = vec4<u32>(bitcast<u32>(spread(w.x & 0xffffu)), bitcast<u32>(spread(w.x >> 16u)),
                             bitcast<u32>(spread(w.y & 0xffffu)), bitcast<u32>(spread(w.y >> 16u)));
            x[1] = vec4<u32>(bitcast<u32>(spread(w.z & 0xffffu)), bitcast<u32>(spread(w.z >> 16u)),
                             bitcast<u32>(spread(w.w & 0xffffu)), bitcast<u32>(spread(w.w >> 16u)));
        } else {
            x[0] = w_vec[2u * i];
            x[1] = w_vec[2u * i + 1u];
        }
    }
    for (var h = 0u; h < 2u; h++) {
        let v = bitcast<vec4<i32>>(x[h]);
        w_sh[d + 4u * h] = v.x;
        w_sh[d + 4u * h + 1u] = v.y;
        w_sh[d + 4u * h + 2u] = v.z;
        w_sh[d + 4u * h + 3u] = v.w;
    }
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
    // acc[4 * 8]: product p = 2 mi + ni, element e = lane + 32 i of its 16x16 (row e / 16).
    var acc: array<f32, 32>;
    for (var kb0 = 0u; kb0 < nb; kb0 += KB) {
        // A: 64 tokens x KB blocks x four vec4 (512 loads); W and both scales: 64 x KB blocks.
        for (var r = 0u; r < 4u; r++) {
            let idx = li + 128u * r;
            let m = idx / (4u * KB);
            let part = idx % (4u * KB);
            var v = vec4<u32>(0u);
            if (t0 + m < step.n_tokens) {
                v = a_q[((t0 + m) * nb + kb0) * 4u + part];
            }
            let d = m * RSA + part * 4u;
            let s = bitcast<vec4<i32>>(v);
            a_sh[d] = s.x;
            a_sh[d + 1u] = s.y;
            a_sh[d + 2u] = s.z;
            a_sh[d + 3u] = s.w;
        }
        {
            let n = li / KB;
            let j = li % KB;
            stage_w(n0 + n, kb0 + j, n * RS + j * 8u);
            var ws = vec2<f32>(0.0);
            if (n0 + n < N) {
                ws = block_meta(((n0 + n) * K + (kb0 + j) * 32u) / QBLOCK);
            }
            ws_sh[li] = ws;
            var s = vec2<f32>(0.0);
            if (t0 + n < step.n_tokens) {
                s = a_s[(t0 + n) * nb + kb0 + j];
            }
            as_sh[li] = s;
        }
        workgroupBarrier();
        for (var j = 0u; j < KB; j++) {
            products(sg, lane, sm, sn, j);
            workgroupBarrier();
            for (var p = 0u; p < 4u; p++) {
                let n = sn + (p % 2u) * 16u + lane % 16u;
                let ws = ws_sh[n * KB + j];
                for (var i = 0u; i < 8u; i++) {
                    let m = sm + (p / 2u) * 16u + lane / 16u + 2u * i;
                    let a = as_sh[m * KB + j];
                    let v = f32(scratch[(sg * 4u + p) * TILE + lane + 32u * i]);
                    acc[p * 8u + i] += ws.x * (a.x * v) + ws.y * a.y;
                }
            }
            workgroupBarrier();
        }
    }
    // The quarter through workgroup memory, as 32 rows of 32, so that stores take four
    // consecutive outputs of a token.
    let base = sg * 4u * TILE;
    for (var p = 0u; p < 4u; p++) {
        for (var i = 0u; i < 8u; i++) {
            let row = (p / 2u) * 16u + lane / 16u + 2u * i;
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
