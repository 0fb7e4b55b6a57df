// Grouped-query attention over the KV cache, one workgroup per (query head, token): causal, or
// (CAUSAL false, encoders such as EmbeddingGemma) over every token of the step.
// Keys are visited in chunks of 64 with an online softmax (running max and sum), so the
// context length is bounded only by the cache, not by workgroup memory.

override HD: u32;
override NH: u32;
override NKV: u32;
override CTX: u32;
override CAP: u32;            // cache slots per KV head: position p lives in slot p % CAP
override SCALE: f32;
override SOFTCAP: f32 = 0.0;   // 0: off; else scores = SOFTCAP * tanh(scores / SOFTCAP)
override WINDOW: u32 = 0u;     // 0: no window; else keys less than WINDOW positions away
override CAUSAL: bool = true;  // false: keys after the query too (the step holds the whole input)
override QSTRIDE: u32;        // floats between tokens' q rows (q sits first in each [q; k; v] row)

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k_cache: array<vec4<u32>>;  // the layer's KV buffer, k half
@group(0) @binding(2) var<storage, read> v_cache: array<u32>;        // the same buffer, v half at V_BASE
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

const CH: u32 = 64u;

var<workgroup> q_sh: array<vec4<f32>, 64>;   // HD <= 256
var<workgroup> p_sh: array<f32, 64>;

// Value word w of key i of the chunk at c (0 past the chunk's n keys or the row's words).
fn vw(c: u32, i: u32, n: u32, w: u32, kv_row0: u32) -> u32 {
    let words = HD / 2u;
    if (i < n && w < words) {
        return v_cache[NKV * CAP * words + (kv_row0 + (c + i) % CAP) * words + w];
    }
    return 0u;
}

fn pv8(p0: vec4<f32>, p1: vec4<f32>, v0: vec4<u32>, v1: vec4<u32>) -> vec2<f32> {
    return p0.x * unpack2x16float(v0.x) + p0.y * unpack2x16float(v0.y) + p0.z * unpack2x16float(v0.z) +
           p0.w * unpack2x16float(v0.w) + p1.x * unpack2x16float(v1.x) + p1.y * unpack2x16float(v1.y) +
           p1.z * unpack2x16float(v1.z) + p1.w * unpack2x16float(v1.w);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let h = wg.x;
    let t = wg.y;
    if (t >= step.n_tokens) {
        return;
    }
    let kvh = h / (NH / NKV);
    let pos = step.pos0 + t;
    var end = pos + 1u;
    if (!CAUSAL) {
        end = step.pos0 + step.n_tokens;
        if (WINDOW > 0u) {
            end = min(end, pos + WINDOW);
        }
    }
    var start = 0u;
    if (WINDOW > 0u && pos + 1u > WINDOW) {
        start = pos + 1u - WINDOW;
    }
    let qbase = t * QSTRIDE + h * HD;
    let obase = (t * NH + h) * HD;
    if (tid < HD / 4u) {
        let i = qbase + 4u * tid;
        q_sh[tid] = vec4<f32>(q[i], q[i + 1u], q[i + 2u], q[i + 3u]) * SCALE;
    }
    workgroupBarrier();

    let words = HD / 2u;           // packed f16 pairs per cache row
    let kv_row0 = kvh * CAP;
    var m = -3.0e38;
    var l = 0.0;
    var acc0 = vec2<f32>(0.0);     // dims (2 tid, 2 tid + 1)
    var acc1 = vec2<f32>(0.0);     // dims (2 (tid + 64), ...) when HD > 128
    for (var c = start; c < end; c += CH) {
        let j = c + tid;
        var s = -3.0e38;
        if (j < end) {
            let kb = (kv_row0 + j % CAP) * (words / 4u);
            var d = 0.0;
            for (var i = 0u; i < words / 4u; i++) {
                let kw = k_cache[kb + i];
                let k0 = vec4<f32>(unpack2x16float(kw.x), unpack2x16float(kw.y));
                let k1 = vec4<f32>(unpack2x16float(kw.z), unpack2x16float(kw.w));
                d += dot(q_sh[2u * i], k0) + dot(q_sh[2u * i + 1u], k1);
            }
            if (SOFTCAP > 0.0) {
                d = SOFTCAP * tanh(d / SOFTCAP);
            }
            s = d;
        }
        p_sh[tid] = s;
        workgroupBarrier();
        let n = min(CH, end - c);
        var cmax = m;
        for (var i = 0u; i < n; i++) {
            cmax = max(cmax, p_sh[i]);
        }
        let corr = exp(m - cmax);
        l *= corr;
        acc0 *= corr;
        acc1 *= corr;
        m = cmax;
        // Eight keys' value words are requested before any is used: a loop that consumes each
        // load right away waits one memory latency per key.
        for (var i = 0u; i < n; i += 8u) {
            let lo0 = vec4<u32>(vw(c, i, n, tid, kv_row0), vw(c, i + 1u, n, tid, kv_row0),
                                vw(c, i + 2u, n, tid, kv_row0), vw(c, i + 3u, n, tid, kv_row0));
            let lo1 = vec4<u32>(vw(c, i + 4u, n, tid, kv_row0), vw(c, i + 5u, n, tid, kv_row0),
                                vw(c, i + 6u, n, tid, kv_row0), vw(c, i + 7u, n, tid, kv_row0));
            let w2 = tid + 64u;
            let hi0 = vec4<u32>(vw(c, i, n, w2, kv_row0), vw(c, i + 1u, n, w2, kv_row0),
                                vw(c, i + 2u, n, w2, kv_row0), vw(c, i + 3u, n, w2, kv_row0));
            let hi1 = vec4<u32>(vw(c, i + 4u, n, w2, kv_row0), vw(c, i + 5u, n, w2, kv_row0),
                                vw(c, i + 6u, n, w2, kv_row0), vw(c, i + 7u, n, w2, kv_row0));
            // Keys past n have p = exp(-3e38 - m) = 0 and value words 0.
            let p0 = vec4<f32>(exp(p_sh[i] - m), exp(p_sh[i + 1u] - m), exp(p_sh[i + 2u] - m),
                               exp(p_sh[i + 3u] - m));
            let p1 = vec4<f32>(exp(p_sh[i + 4u] - m), exp(p_sh[i + 5u] - m), exp(p_sh[i + 6u] - m),
                               exp(p_sh[i + 7u] - m));
            l += dot(p0, vec4<f32>(1.0)) + dot(p1, vec4<f32>(1.0));
            acc0 += pv8(p0, p1, lo0, lo1);
            acc1 += pv8(p0, p1, hi0, hi1);
        }
        workgroupBarrier();
    }
    let inv = 1.0 / l;
    if (tid < words) {
        out[obase + 2u * tid] = acc0.x * inv;
        out[obase + 2u * tid + 1u] = acc0.y * inv;
    }
    if (tid + 64u < words) {
        out[obase + 2u * (tid + 64u)] = acc1.x * inv;
        out[obase + 2u * (tid + 64u) + 1u] = acc1.y * inv;
    }
}
