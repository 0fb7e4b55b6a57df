// Decode attention, split over the KV length (flash-decoding): workgroup (head, split) scores
// CH consecutive cached positions against the single query, and writes its partial softmax
// state (max, sum, weighted V) for `attn_combine` to merge. Splitting keeps the GPU busy at
// any depth: 9 heads x (depth / 64) splits instead of 9 workgroups.

struct Step {
    n_tokens: u32,
    pos0: u32,
    _p0: u32,
    _p1: u32,
}

override HD: u32;
override NH: u32;
override NKV: u32;
override CTX: u32;
override SCALE: f32;
override SOFTCAP: f32 = 0.0;
override WINDOW: u32 = 0u;

const CH: u32 = 64u;

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k_cache: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> v_cache: array<u32>;
@group(0) @binding(3) var<storage, read_write> part: array<f32>;   // [NH][splits][HD + 2]
@group(0) @binding(5) var<uniform> step: Step;

var<workgroup> q_sh: array<vec4<f32>, 64>;
var<workgroup> p_sh: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let h = wg.x;
    let split = wg.y;
    let kvh = h / (NH / NKV);
    let end = step.pos0 + 1u;
    var start = 0u;
    if (WINDOW > 0u && end > WINDOW) {
        start = end - WINDOW;
    }
    // Splits are laid on absolute positions so the combine step knows them from pos alone.
    let c0 = split * CH;
    let words = HD / 2u;
    let slot = (h * ((CTX + CH - 1u) / CH) + split) * (HD + 2u);
    if (tid < HD / 4u) {
        let i = h * HD + 4u * tid;
        q_sh[tid] = vec4<f32>(q[i], q[i + 1u], q[i + 2u], q[i + 3u]) * SCALE;
    }
    workgroupBarrier();
    let j = c0 + tid;
    var s = -3.0e38;
    if (j >= start && j < end) {
        let kb = (kvh * CTX + j) * (words / 4u);
        var d = 0.0;
        for (var i = 0u; i < words / 4u; i++) {
            let kw = k_cache[kb + i];
            d += dot(q_sh[2u * i], vec4<f32>(unpack2x16float(kw.x), unpack2x16float(kw.y)))
               + dot(q_sh[2u * i + 1u], vec4<f32>(unpack2x16float(kw.z), unpack2x16float(kw.w)));
        }
        if (SOFTCAP > 0.0) {
            d = SOFTCAP * tanh(d / SOFTCAP);
        }
        s = d;
    }
    p_sh[tid] = s;
    workgroupBarrier();
    var m = -3.0e38;
    for (var i = 0u; i < CH; i++) {
        m = max(m, p_sh[i]);
    }
    var l = 0.0;
    var acc0 = vec2<f32>(0.0);
    var acc1 = vec2<f32>(0.0);
    let v_base = NKV * CTX * words + kvh * CTX * words;
    if (m > -1.0e38) {
        for (var i = 0u; i < CH; i++) {
            let p = exp(p_sh[i] - m);   // exactly 0 for positions outside [start, end)
            l += p;
            if (p > 0.0) {
                let vb = v_base + (c0 + i) * words;
                if (tid < words) {
                    acc0 += p * unpack2x16float(v_cache[vb + tid]);
                }
                if (tid + 64u < words) {
                    acc1 += p * unpack2x16float(v_cache[vb + tid + 64u]);
                }
            }
        }
    }
    if (tid < words) {
        part[slot + 2u * tid] = acc0.x;
        part[slot + 2u * tid + 1u] = acc0.y;
    }
    if (tid + 64u < words) {
        part[slot + 2u * (tid + 64u)] = acc1.x;
        part[slot + 2u * (tid + 64u) + 1u] = acc1.y;
    }
    if (tid == 0u) {
        part[slot + HD] = m;
        part[slot + HD + 1u] = l;
    }
}
