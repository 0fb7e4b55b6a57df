// Prefill: rotary embedding for the q and k parts of every token's [q; k; v] row (in place for q),
// then k and v appended to this layer's KV cache as packed f16 pairs
// (layout [k|v][kv_head][position][HD / 2]). Pairs are (2i, 2i + 1): the loader permutes
// NeoX-style weights into this order. One thread per pair; heads 0..NH are q, then NKV k heads,
// then NKV v heads. With a per-head norm (QK_NORM), which sums over the head first, one
// workgroup per (head, token); otherwise (FLAT) workgroup x of a token takes its pairs 128x ..
// 128x + 127 across heads: one workgroup a head left 64 or 80 of 128 invocations idle and made
// the GPU schedule 96 workgroups per Phi-3 token (H100 pp512: see BENCHMARKS.md session 14).
// cos/sin come from a table made on the CPU in f64 (GPU sin/cos are too coarse at large angles).

override HD: u32;
override ROT: u32;
override NH: u32;
override NKV: u32;
override CAP: u32;   // cache slots per KV head: position p lives in slot p % CAP
override QK_NORM: bool = false;  // per-head RMSNorm of q and k first (Qwen3, Gemma 3)
override QK_NORM_AFTER: bool = false;  // ... of the rotated q and k instead (HunYuan)
override Q_NORM_OFF: u32 = 0u;
override K_NORM_OFF: u32 = 0u;
override EPS: f32 = 1e-6;
override NW_OFFSET: f32 = 0.0;
override FLAT: bool = false;
override QSTRIDE: u32 = 0u;  // floats between tokens' rows when they hold more than [q; k; v] (0: NH + 2 NKV heads)

@group(0) @binding(0) var<storage, read_write> qkv: array<f32>;
@group(0) @binding(3) var<storage, read_write> kv: array<u32>;
@group(0) @binding(4) var<storage, read> vecs: array<f32>;
@group(0) @binding(6) var<storage, read> rope: array<vec2<f32>>;

var<workgroup> ss_sh: array<f32, 128>;

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let t = wg.y;
    if (t >= step.n_tokens) {
        return;
    }
    // Head and pair of this invocation (`wg.x` alone decides the per-head norm's barriers,
    // which must stay in uniform control flow).
    var head = wg.x;
    var w = lid;
    if (FLAT) {
        let j = min(wg.x * 128u + lid, (NH + 2u * NKV) * (HD / 2u) - 1u);
        head = j / (HD / 2u);
        w = j % (HD / 2u);
    }
    let live = w < HD / 2u;
    let pos = step.pos0 + t;
    var stride = (NH + 2u * NKV) * HD;
    if (QSTRIDE > 0u) {
        stride = QSTRIDE;
    }
    let i = t * stride + head * HD + 2u * w;
    var a = 0.0;
    var b = 0.0;
    if (live) {
        a = qkv[i];
        b = qkv[i + 1u];
    }
    let is_v = head >= NH + NKV;
    let rotates = live && !is_v && 2u * w < ROT;
    if (QK_NORM_AFTER && rotates) {
        let p = rotate(a, b, rope[pos * (ROT / 2u) + w]);
        a = p.x;
        b = p.y;
    }
    if (QK_NORM && wg.x < NH + NKV) {
        ss_sh[lid] = a * a + b * b;
        workgroupBarrier();
        for (var s = 64u; s > 0u; s >>= 1u) {
            if (lid < s) {
                ss_sh[lid] += ss_sh[lid + s];
            }
            workgroupBarrier();
        }
        let inv = 1.0 / sqrt(ss_sh[0] / f32(HD) + EPS);
        var off = Q_NORM_OFF;
        if (head >= NH) {
            off = K_NORM_OFF;
        }
        a *= inv * (vecs[off + 2u * w] + NW_OFFSET);
        b *= inv * (vecs[off + 2u * w + 1u] + NW_OFFSET);
    }
    if (!live) {
        return;
    }
    if (!QK_NORM_AFTER && rotates) {
        let p = rotate(a, b, rope[pos * (ROT / 2u) + w]);
        a = p.x;
        b = p.y;
    }
    if (head < NH) {
        let s = q_temperature(pos);
        qkv[i] = a * s;
        qkv[i + 1u] = b * s;
        return;
    }
    let kvh = head - NH;   // k heads 0..NKV, v heads NKV..2NKV: region-major, as the layout wants
    kv[(kvh * CAP + pos % CAP) * (HD / 2u) + w] = pack2x16float(vec2<f32>(a, b));
}
