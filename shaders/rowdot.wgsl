// Four matrix rows times the activation vector, for the decode kernels (matvec, qkv_rope).
// The 32 invocations of a row group stride over the rows in chunks (32 weights = one quant
// block, or 8 float weights). Each invocation reads its activation chunk once and uses it for
// all four rows, so every weight costs part of one 128-bit load and no activation reload.
//
// Quantized blocks are decoded without int->float conversions (quarter rate on many GPUs):
// OR-ing an integer below 2^23 into the mantissa of 2^23 gives exactly 2^23 + that integer, and
// masking a nibble in place (no shift) leaves q * 16^i, which is undone by scaling the activation
// by 16^-i once per chunk (exact: powers of two). Per block, sum(w*x) = s * sum(q*x) + o * sum(x).
//
// With IDOT (quantized layouts only), the activation tile is instead staged as integers: per
// 32-element block a scale d and, per element, two signed bytes c and f with x ~ d * (c + f / 254)
// (error below 2^-15 of the block's largest value; one byte alone, as llama.cpp's integer kernels
// use, moved SmolLM2's logits by up to 1.1 against the f32 reference). A word of eight nibbles
// then costs four `dot4I8Packed` (4-way integer multiply-add) and three bit operations instead of
// ~24 float instructions, and decode is otherwise bound by instruction issue, not memory. The
// offset term uses the exact f32 block sums.
//
// With `norm`, x is RMS-normalized on the fly: scaled by the norm weight (vecs[NW_OFF..] +
// NW_OFFSET) as it is staged, and the sum of squares comes back for the caller to apply 1/rms
// after the reduction. Expects the kernel to declare K, WG, NW_OFF, NW_OFFSET, `xv(v)` (vec4 v of
// its x, binding 2) and `vecs` (binding 4); layout.wgsl precedes it.

@group(0) @binding(0) var<storage, read> w4: array<vec4<u32>>;

const MAGIC = vec4<u32>(0x4b000000u);
const TWO23: f32 = 8388608.0;
const Q4_MASK = vec4<u32>(0xfu, 0xf0u, 0xf00u, 0xf000u);
const Q4_SCALE = vec4<f32>(1.0, 0.0625, 0.00390625, 0.000244140625);
const Q8_MASK = vec4<u32>(0xffu, 0xff00u, 0xffu, 0xff00u);
const Q8_SCALE = vec4<f32>(1.0, 0.00390625, 1.0, 0.00390625);

struct Dots {
    v: vec4<f32>,
    ss: f32,
}

// Weights per chunk: a whole quant block, or 8 floats (one 128-bit load of F16/BF16).
fn chunk_len() -> u32 {
    if (LAYOUT >= 3u) {
        return 32u;
    }
    return 8u;
}

fn norm_w(k: u32) -> vec4<f32> {
    let b = NW_OFF + k;
    return vec4<f32>(vecs[b], vecs[b + 1u], vecs[b + 2u], vecs[b + 3u]) + NW_OFFSET;
}

// Eight nibbles of a Q4 word against activations prescaled by Q4_SCALE.
fn q4w(w: u32, a: vec4<f32>, b: vec4<f32>) -> f32 {
    let lo = bitcast<vec4<f32>>((vec4<u32>(w) & Q4_MASK) | MAGIC) - TWO23;
    let hi = bitcast<vec4<f32>>((vec4<u32>(w >> 16u) & Q4_MASK) | MAGIC) - TWO23;
    return dot(lo, a) + dot(hi, b);
}

// Four signed bytes of a Q8 word, biased to q + 128, against activations prescaled by Q8_SCALE.
fn q8w(w: u32, a: vec4<f32>) -> f32 {
    let u = w ^ 0x80808080u;
    return dot(bitcast<vec4<f32>>((vec4<u32>(u, u, u >> 16u, u >> 16u) & Q8_MASK) | MAGIC) - TWO23, a);
}

fn bf2(w: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(w << 16u), bitcast<f32>(w & 0xffff0000u));
}

// One activation chunk, prescaled for the layout, with the sums of its raw halves.
struct Xc {
    a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>,
    a4: vec4<f32>, a5: vec4<f32>, a6: vec4<f32>, a7: vec4<f32>,
    s_lo: f32,
    s_hi: f32,
}

// The raw words (and block scales/offsets) of one row's chunk, loaded ahead of their use.
struct Wc {
    a: vec4<u32>,
    b: vec4<u32>,
    m: vec4<f32>,
}

struct W4 {
    r0: Wc,
    r1: Wc,
    r2: Wc,
    r3: Wc,
}

// Row `row`, chunk `c` (32 quantized or 8 float weights).
fn wload(row: u32, c: u32) -> Wc {
    var w: Wc;
    let e = row * K + c * chunk_len();
    switch LAYOUT {
        case 3u: {
            w.a = w4[e / 32u];
            w.m = vec4<f32>(block_meta(e / 32u), 0.0, 0.0);
        }
        case 4u: {
            w.a = w4[e / 16u];
            w.b = w4[e / 16u + 1u];
            if (QBLOCK == 32u) {
                w.m = vec4<f32>(block_meta(e / 32u), 0.0, 0.0);
            } else {
                w.m = vec4<f32>(block_meta(e / 16u), block_meta(e / 16u + 1u));
            }
        }
        case 0u: {
            w.a = w4[e / 4u];
            w.b = w4[e / 4u + 1u];
        }
        default: {
            w.a = w4[e / 8u];
        }
    }
    return w;
}

fn wload4(r: vec4<u32>, c: u32) -> W4 {
    return W4(wload(r.x, c), wload(r.y, c), wload(r.z, c), wload(r.w, c));
}

// One row's chunk against the activation chunk.
fn wdot(w: Wc, xc: Xc) -> f32 {
    switch LAYOUT {
        case 3u: {
            let d = q4w(w.a.x, xc.a0, xc.a1) + q4w(w.a.y, xc.a2, xc.a3) + q4w(w.a.z, xc.a4, xc.a5) +
                    q4w(w.a.w, xc.a6, xc.a7);
            return w.m.x * d + w.m.y * (xc.s_lo + xc.s_hi);
        }
        case 4u: {
            let dl = q8w(w.a.x, xc.a0) + q8w(w.a.y, xc.a1) + q8w(w.a.z, xc.a2) + q8w(w.a.w, xc.a3);
            let dh = q8w(w.b.x, xc.a4) + q8w(w.b.y, xc.a5) + q8w(w.b.z, xc.a6) + q8w(w.b.w, xc.a7);
            if (QBLOCK == 32u) {
                return w.m.x * (dl + dh) + (w.m.y - 128.0 * w.m.x) * (xc.s_lo + xc.s_hi);
            }
            return w.m.x * dl + (w.m.y - 128.0 * w.m.x) * xc.s_lo + w.m.z * dh + (w.m.w - 128.0 * w.m.z) * xc.s_hi;
        }
        case 0u: {
            return dot(bitcast<vec4<f32>>(w.a), xc.a0) + dot(bitcast<vec4<f32>>(w.b), xc.a1);
        }
        case 1u: {
            return dot(vec4<f32>(unpack2x16float(w.a.x), unpack2x16float(w.a.y)), xc.a0) +
                   dot(vec4<f32>(unpack2x16float(w.a.z), unpack2x16float(w.a.w)), xc.a1);
        }
        default: {
            return dot(vec4<f32>(bf2(w.a.x), bf2(w.a.y)), xc.a0) + dot(vec4<f32>(bf2(w.a.z), bf2(w.a.w)), xc.a1);
        }
    }
}

fn wdot4(w: W4, xc: Xc) -> vec4<f32> {
    return vec4<f32>(wdot(w.r0, xc), wdot(w.r1, xc), wdot(w.r2, xc), wdot(w.r3, xc));
}

// With MERGE (the attention output projection, at depths of at most MSPLITS splits), x is the
// split attention partials of attn_decode.wgsl ([heads][MCAP][MHD + 4]: acc, max, sum, pad),
// merged while staging as attn_combine.wgsl would: that saves its dispatch and its round trips.
override MERGE: bool = false;
override MHD: u32 = 64u;
override MNH: u32 = 1u;
override MCAP: u32 = 1u;
override MW_LEN: u32 = 1u;     // MNH * MSPLITS with MERGE
const MSPLITS: u32 = 16u;
// Per head and split: (max, sum), then the split's weight e^(max - M) / L.
var<workgroup> mw: array<vec2<f32>, MW_LEN>;

// Every invocation must call it (barriers). Loops are counted to constants and the head
// bounded by min() so that a browser's range analysis proves every mw index (see xq_get).
fn merge_weights(lid: u32) {
    let n = (step.pos0 + 64u) / 64u;   // splits holding positions 0 ..= pos0; the host keeps n <= MSPLITS
    let stride = MHD + 4u;
    for (var it = 0u; it < (MNH * MSPLITS + WG - 1u) / WG; it++) {
        let i = lid + it * WG;
        if (i >= MNH * MSPLITS) {
            break;
        }
        let h = i / MSPLITS;
        let sp = i % MSPLITS;
        var ml = vec2<f32>(-3.0e38, 0.0);
        if (sp < n) {
            ml = xv((h * MCAP * stride + sp * stride + MHD) / 4u).xy;
        }
        mw[min(h, MNH - 1u) * MSPLITS + sp] = ml;
    }
    workgroupBarrier();
    for (var it = 0u; it < (MNH + WG - 1u) / WG; it++) {
        let h = lid + it * WG;
        if (h >= MNH) {
            break;
        }
        let hb = min(h, MNH - 1u) * MSPLITS;
        var big_m = -3.0e38;
        for (var sp = 0u; sp < MSPLITS; sp++) {
            if (sp < n) {
                big_m = max(big_m, mw[hb + sp].x);
            }
        }
        var l = 0.0;
        for (var sp = 0u; sp < MSPLITS; sp++) {
            let ml = mw[hb + sp];
            if (sp < n && ml.x > -1.0e38) {   // splits wholly outside a sliding window carry nothing
                l += exp(ml.x - big_m) * ml.y;
            }
        }
        for (var sp = 0u; sp < MSPLITS; sp++) {
            let ml = mw[hb + sp];
            var w = 0.0;
            if (sp < n && ml.x > -1.0e38) {
                w = exp(ml.x - big_m) / l;
            }
            mw[hb + sp] = vec2<f32>(w, 0.0);
        }
    }
    workgroupBarrier();
}

// Split sp's accumulator at vec4 index v (zero past the last split).
fn pacc(v: u32, sp: u32, n: u32) -> vec4<f32> {
    if (sp < n) {
        return xv(v + sp * ((MHD + 4u) / 4u));
    }
    return vec4<f32>(0.0);
}

// x[k .. k + 4), merged from the partials with MERGE. Eight splits' loads are issued together.
// With XP, x is followed by XP partials of the previous layer's split FFN (ffn_split.wgsl, K
// apart), summed into `xps` first (`sum_parts`).
override XP: u32 = 0u;
override XP_LEN: u32 = 1u;     // K / 4 with XP (x is then staged whole)
var<workgroup> xps: array<vec4<f32>, XP_LEN>;

fn xin(k: u32) -> vec4<f32> {
    if (XP > 0u) {
        return xps[k / 4u];
    }
    if (!MERGE) {
        return xv(k / 4u);
    }
    let h = k / MHD;
    let v = (h * MCAP * (MHD + 4u) + k % MHD) / 4u;
    let n = (step.pos0 + 64u) / 64u;
    // Bounds a browser's range analysis can follow (see xq_get): no clamp on the mw reads.
    let wb = min(h, MNH - 1u) * MSPLITS;
    var acc = vec4<f32>(0.0);
    for (var s8 = 0u; s8 < MSPLITS / 8u; s8++) {
        let s0 = 8u * s8;
        if (s0 >= n) {
            continue;
        }
        let a0 = pacc(v, s0, n);
        let a1 = pacc(v, s0 + 1u, n);
        let a2 = pacc(v, s0 + 2u, n);
        let a3 = pacc(v, s0 + 3u, n);
        let a4 = pacc(v, s0 + 4u, n);
        let a5 = pacc(v, s0 + 5u, n);
        let a6 = pacc(v, s0 + 6u, n);
        let a7 = pacc(v, s0 + 7u, n);
        acc += mw[wb + s0].x * a0 + mw[wb + s0 + 1u].x * a1 + mw[wb + s0 + 2u].x * a2 + mw[wb + s0 + 3u].x * a3 +
               mw[wb + s0 + 4u].x * a4 + mw[wb + s0 + 5u].x * a5 + mw[wb + s0 + 6u].x * a6 + mw[wb + s0 + 7u].x * a7;
    }
    return acc;
}

// Activations are staged in workgroup memory one tile of KT elements at a time (x read once
// per workgroup with coalesced loads, normalized once), at a padded index so the strided vec4
// reads of a row group hit distinct banks.
override KT: u32 = 2048u;
// Row groups that share four rows, each taking every S-th chunk: with few rows, more row groups
// per row keep enough loads in flight.
override S: u32 = 1u;
override XS_LEN: u32 = 576u;    // KT / 4 + KT / 32 (naga cannot size arrays by expressions)
var<workgroup> xs: array<vec4<f32>, XS_LEN>;
var<workgroup> ssg: array<f32, 32>;

override IDOT: bool = false;
// IDOT tile, 5 slots a block: the coarse bytes (two vec4 of packed words), the fine bytes (two
// more), then (d, sum of the first 16, sum of the last 16) as f32 bits. Word order follows the
// weights: for Q4, the even and odd elements of each 8 in separate words (to meet nibbles masked
// in place); for Q8, four consecutive elements a word. The 80-byte stride is bank-conflict-free.
override XB_LEN: u32 = 5u;     // 5 * KT / 32 with IDOT
var<workgroup> xb: array<vec4<u32>, XB_LEN>;

// Coarse and fine bytes of four prescaled values (|s| <= 127).
fn q2(s: vec4<f32>) -> vec2<u32> {
    let c = round(s);
    return vec2<u32>(pack4xI8(vec4<i32>(c)), pack4xI8(vec4<i32>(round((s - c) * 254.0))));
}

// Stage x[k0 .. k0 + len) (len a multiple of 32) as integer blocks; returns this invocation's sum
// of squares of the raw x. Four neighbouring invocations share a block, eight values each, and
// find its scale and sums together (`quad_max`, `stage_words`, reduce_*.wgsl). Every
// invocation must call it.
fn stage_q(k0: u32, len: u32, lid: u32, norm: bool) -> f32 {
    var ss = 0.0;
    let n8 = len / 8u;
    // Every invocation runs every trip (the quad operations need their neighbours); those past
    // the end read a valid clamped address and write nothing.
    for (var it = 0u; it < (KT / 8u + WG - 1u) / WG; it++) {
        let g0 = it * WG;
        if (g0 >= n8) {
            break;
        }
        let g = g0 + lid;
        let on = g < n8;
        let k = k0 + 8u * min(g, n8 - 1u);
        var a = xin(k);
        var b = xin(k + 4u);
        if (norm) {
            ss += select(0.0, dot(a, a) + dot(b, b), on);
            a *= norm_w(k);
            b *= norm_w(k + 4u);
        }
        let m = max(abs(a), abs(b));
        var amax = max(max(m.x, m.y), max(m.z, m.w));
        amax = quad_max(amax, lid);
        let inv = select(0.0, 127.0 / amax, amax > 0.0);
        var q0: vec2<u32>;
        var q1: vec2<u32>;
        if (LAYOUT == 3u) {
            q0 = q2(vec4<f32>(a.xz, b.xz) * inv);
            q1 = q2(vec4<f32>(a.yw, b.yw) * inv);
        } else {
            q0 = q2(a * inv);
            q1 = q2(b * inv);
        }
        // Whole-vector stores only: WGSL lets a store to one component rewrite the whole vector
        // (Metal and D3D compile it so), and a block's four invocations share its vectors. An
        // even invocation of a pair writes the pair's coarse words, the odd one its fine words,
        // each with the other's half traded; invocation 0 writes the scale and both pairs' sums.
        let j = g % 4u;
        let odd = (j & 1u) == 1u;
        let sent = select(vec2<u32>(q0.y, q1.y), vec2<u32>(q0.x, q1.x), odd);
        let t = stage_words(sent, dot(a + b, vec4<f32>(1.0)), lid);
        if (on) {
            let slot = 5u * (g / 4u) + j / 2u;
            if (odd) {
                xb[slot + 2u] = vec4<u32>(t.xy, q0.y, q1.y);
            } else {
                xb[slot] = vec4<u32>(q0.x, q1.x, t.xy);
            }
            if (j == 0u) {
                xb[slot + 4u] = vec4<u32>(bitcast<u32>(amax / 127.0), t.zw, 0u);
            }
        }
    }
    return ss;
}

// One staged block of x, as `idot` takes it.
struct Xq {
    c0: vec4<u32>, c1: vec4<u32>,   // coarse bytes, elements 0..15 and 16..31
    f0: vec4<u32>, f1: vec4<u32>,   // fine bytes
    md: vec4<f32>,                  // (d, sum of 0..15, sum of 16..31, -)
}

// One min() instead of a browser's clamp on each of the five reads (see matmul_i8.wgsl put_a).
fn xq_get(c: u32) -> Xq {
    let b = 5u * min(c, XB_LEN / 5u - 1u);
    return Xq(xb[b], xb[b + 1u], xb[b + 2u], xb[b + 3u], bitcast<vec4<f32>>(xb[b + 4u]));
}

// Integer dots of four x words with four (already unpacked) weight words: coarse + fine / 254.
fn idot4(w: vec4<u32>, c: vec4<u32>, f: vec4<u32>) -> f32 {
    let ic = dot4I8Packed(w.x, c.x) + dot4I8Packed(w.y, c.y) + dot4I8Packed(w.z, c.z) + dot4I8Packed(w.w, c.w);
    let i_f = dot4I8Packed(w.x, f.x) + dot4I8Packed(w.y, f.y) + dot4I8Packed(w.z, f.z) + dot4I8Packed(w.w, f.w);
    return f32(ic) + f32(i_f) * (1.0 / 254.0);
}

// One row's quantized chunk against a staged block.
fn idot(w: Wc, xq: Xq) -> f32 {
    if (LAYOUT == 3u) {
        let m = vec4<u32>(0x0f0f0f0fu);
        let lo = (vec4<u32>(w.a.xx, w.a.yy) >> vec4<u32>(0u, 4u, 0u, 4u)) & m;
        let hi = (vec4<u32>(w.a.zz, w.a.ww) >> vec4<u32>(0u, 4u, 0u, 4u)) & m;
        let d = idot4(lo, xq.c0, xq.f0) + idot4(hi, xq.c1, xq.f1);
        return w.m.x * xq.md.x * d + w.m.y * (xq.md.y + xq.md.z);
    }
    let dl = idot4(w.a, xq.c0, xq.f0);
    let dh = idot4(w.b, xq.c1, xq.f1);
    if (QBLOCK == 32u) {
        return w.m.x * xq.md.x * (dl + dh) + w.m.y * (xq.md.y + xq.md.z);
    }
    return xq.md.x * (w.m.x * dl + w.m.z * dh) + w.m.y * xq.md.y + w.m.w * xq.md.z;
}


fn xs_slot(v: u32) -> u32 {
    return v + v / 8u;
}

fn xget(k: u32) -> vec4<f32> {
    return xs[xs_slot(k / 4u)];
}

// Stage x[k0 .. k0 + len) (len a multiple of 4); returns this invocation's sum of squares.
fn stage(k0: u32, len: u32, lid: u32, norm: bool) -> f32 {
    var ss = 0.0;
    for (var it = 0u; it < (KT / 4u + WG - 1u) / WG; it++) {
        let v = lid + it * WG;
        if (v >= len / 4u) {
            break;
        }
        var a = xin(k0 + 4u * v);
        if (norm) {
            ss += dot(a, a);
            a *= norm_w(k0 + 4u * v);
        }
        xs[xs_slot(v)] = a;
    }
    return ss;
}

// Sum over the workgroup (every invocation must call it).
fn wg_sum(v: f32, lid: u32) -> f32 {
    let s = reduce4(vec4<f32>(v, 0.0, 0.0, 0.0), lid).x;
    if (lid % 32u == 0u) {
        ssg[lid / 32u] = s;
    }
    workgroupBarrier();
    var tot = 0.0;
    for (var i = 0u; i < WG / 32u; i++) {
        tot += ssg[i];
    }
    return tot;
}

// Dots of rows r (clamped in range by the caller) for invocation `lid` of the workgroup; the
// row group's 32 invocations each hold a partial sum over slice `slice` of S interleaved
// slices of the row. Every invocation must call it (barriers). With `norm`, `ss` is the
// workgroup's full sum of squares of x.
fn dot4(r: vec4<u32>, lid: u32, slice: u32, norm: bool) -> Dots {
    var out: Dots;
    var ss = 0.0;
    let t = slice * 32u + lid % 32u;
    let ch = chunk_len();
    let last = K / ch - 1u;
    for (var tile = 0u; tile < (K + KT - 1u) / KT; tile++) {
        let k0 = tile * KT;
        let len = min(KT, K - k0);
        // This invocation's first chunk of the tile is requested before x is staged, so the two
        // memory round trips overlap; each later chunk is requested one step ahead.
        var w = wload4(r, min(k0 / ch + t, last));
        if (MERGE && k0 == 0u) {
            merge_weights(lid);
        }
        if (XP > 0u && k0 == 0u) {
            sum_parts(lid);
        }
        workgroupBarrier();
        if (IDOT) {
            ss += stage_q(k0, len, lid, norm);
            workgroupBarrier();
            for (var it = 0u; it < (KT / 32u + 32u * S - 1u) / (32u * S); it++) {
                let c = t + it * 32u * S;
                if (c >= len / 32u) {
                    break;
                }
                let next = wload4(r, min(k0 / 32u + c + 32u * S, last));
                let xq = xq_get(c);
                out.v += vec4<f32>(idot(w.r0, xq), idot(w.r1, xq), idot(w.r2, xq), idot(w.r3, xq));
                w = next;
            }
            continue;
        }
        ss += stage(k0, len, lid, norm);
        workgroupBarrier();
        for (var it = 0u; it < (KT / 8u + 32u * S - 1u) / (32u * S); it++) {
            let c = t + it * 32u * S;
            if (c >= len / ch) {
                break;
            }
            let next = wload4(r, min(k0 / ch + c + 32u * S, last));
            out.v += wdot4(w, x_chunk(c * ch));
            w = next;
        }
    }
    if (norm) {
        out.ss = wg_sum(ss, lid);
    }
    return out;
}

// x plus the split FFN's partials, each vec4 summed by one invocation: all of them share the
// partials' reads (staging has fewer active invocations: an eighth of x's length with integer
// activations). Every invocation must call it (barrier).
fn sum_parts(lid: u32) {
    for (var it = 0u; it < (K / 4u + WG - 1u) / WG; it++) {
        let v = lid + it * WG;
        if (v >= K / 4u) {
            break;
        }
        var a = xv(v);
        for (var p = 1u; p <= XP; p++) {
            a += xv(p * (K / 4u) + v);
        }
        xps[v] = a;
    }
    workgroupBarrier();
}

// Stage x[k0 .. k0 + len) as the adapter's dot products read it; returns this invocation's sum
// of squares of the raw x. Every invocation must call it.
fn stage_tile(k0: u32, len: u32, lid: u32, norm: bool) -> f32 {
    if (IDOT) {
        return stage_q(k0, len, lid, norm);
    }
    return stage(k0, len, lid, norm);
}

// The staged chunk at tile element k (the f32 staging).
fn x_chunk(k: u32) -> Xc {
    if (LAYOUT >= 3u) {
        return xc_of(xget(k), xget(k + 4u), xget(k + 8u), xget(k + 12u), xget(k + 16u), xget(k + 20u), xget(k + 24u),
                     xget(k + 28u));
    }
    let z = vec4<f32>(0.0);
    return xc_of(xget(k), xget(k + 4u), z, z, z, z, z, z);
}

// One row's chunk c of the staged tile, with either staging.
fn chunk_dot(w: Wc, c: u32) -> f32 {
    if (IDOT) {
        return idot(w, xq_get(c));
    }
    return wdot(w, x_chunk(c * chunk_len()));
}

// An activation chunk as `wdot` takes it: for quantized layouts prescaled, with its halves' sums.
fn xc_of(a0: vec4<f32>, a1: vec4<f32>, a2: vec4<f32>, a3: vec4<f32>, a4: vec4<f32>, a5: vec4<f32>, a6: vec4<f32>,
         a7: vec4<f32>) -> Xc {
    if (LAYOUT < 3u) {
        return Xc(a0, a1, a2, a3, a4, a5, a6, a7, 0.0, 0.0);
    }
    let one = vec4<f32>(1.0);
    var sc = Q4_SCALE;
    if (LAYOUT == 4u) {
        sc = Q8_SCALE;
    }
    return Xc(a0 * sc, a1 * sc, a2 * sc, a3 * sc, a4 * sc, a5 * sc, a6 * sc, a7 * sc, dot(a0 + a1 + a2 + a3, one),
              dot(a4 + a5 + a6 + a7, one));
}

var<workgroup> parts: array<vec4<f32>, 32>;

// Row group `lid / 32`'s reduced dots `v`, summed over the S slices of its rows (every
// invocation must call it; all invocations of those groups get the total).
fn join_slices(v: vec4<f32>, lid: u32) -> vec4<f32> {
    if (S == 1u) {
        return v;
    }
    let grp = lid / 32u;
    if (lid % 32u == 0u) {
        parts[grp] = v;
    }
    workgroupBarrier();
    var tot = vec4<f32>(0.0);
    // Left uncounted: counted to S it made the Llama-3.2-1B shape's native decode 1% slower
    // (naga, H200), and it runs once a kernel.
    for (var i = grp - grp % S; i < grp - grp % S + S; i++) {
        tot += parts[i];
    }
    return tot;
}
