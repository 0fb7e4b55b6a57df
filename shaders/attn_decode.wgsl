// Decode attention, split over the KV length (flash-decoding): workgroup (head, split) scores
// CH consecutive cached positions against the single query and writes its partial softmax
// state (max, sum, weighted V) for `attn_combine` to merge. Splitting keeps the GPU busy at
// any depth (heads x depth/64 workgroups), and every loop below issues independent loads so
// the memory latency overlaps instead of adding up.

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
override CAP: u32;            // cache slots per KV head: position p lives in slot p % CAP
override SCALE: f32;
override SOFTCAP: f32 = 0.0;
override WINDOW: u32 = 0u;

const CH: u32 = 64u;   // positions per split
const WG: u32 = 128u;  // invocations: one key each while scoring, (word, key group) for V

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k_cache: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> v_cache: array<u32>;
@group(0) @binding(3) var<storage, read_write> part: array<f32>;   // [NH][splits][HD + 2]
@group(0) @binding(5) var<uniform> step: Step;

var<workgroup> q_sh: array<vec4<f32>, 64>;
var<workgroup> p_sh: array<f32, 64>;
var<workgroup> r_sh: array<f32, 128>;
var<workgroup> acc_sh: array<vec2<f32>, 128>;

// Tree reduction over the workgroup; `max_op` picks max, else sum.
fn reduce_wg(v: f32, tid: u32, max_op: bool) -> f32 {
    r_sh[tid] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s >>= 1u) {
        if (tid < s) {
            if (max_op) {
                r_sh[tid] = max(r_sh[tid], r_sh[tid + s]);
            } else {
                r_sh[tid] += r_sh[tid + s];
            }
        }
        workgroupBarrier();
    }
    let r = r_sh[0];
    workgroupBarrier();
    return r;
}

fn kdot(kw: vec4<u32>, i: u32) -> f32 {
    return dot(q_sh[2u * i], vec4<f32>(unpack2x16float(kw.x), unpack2x16float(kw.y))) +
           dot(q_sh[2u * i + 1u], vec4<f32>(unpack2x16float(kw.z), unpack2x16float(kw.w)));
}

fn vload(base: u32, pos: u32, w: u32) -> vec2<f32> {
    return unpack2x16float(v_cache[base + (pos % CAP) * (HD / 2u) + w]);
}

// p_i * v, with positions outside the window (p = 0) contributing exactly nothing even when
// their stale cache slot holds inf or NaN.
fn pv(i: u32, v: vec2<f32>) -> vec2<f32> {
    return p_sh[i] * select(vec2<f32>(0.0), v, p_sh[i] != 0.0);
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let h = wg.x;
    let split = wg.y;
    let kvh = h / (NH / NKV);
    let end = step.pos0 + 1u;
    var start = 0u;
    if (WINDOW > 0u && end > WINDOW) {
        start = end - WINDOW;
    }
    // Splits sit on absolute positions, so the merge step can find them from the position alone.
    let c0 = split * CH;
    let words = HD / 2u;
    let slot = (h * ((CTX + CH - 1u) / CH) + split) * (HD + 2u);
    // One key per invocation (the upper half of the workgroup idles while scoring). Its first
    // four 16-byte pieces are requested before q is staged, so the two round trips overlap, and
    // the rest four at a time: a loop that consumes each load right away waits one memory
    // latency per iteration (that made this kernel ~13 us at 640 keys).
    let j = c0 + tid;
    let live = tid < CH && j >= start && j < end;
    let kb = (kvh * CAP + j % CAP) * (words / 4u);
    let early = words / 4u >= 4u;
    var k0 = vec4<u32>(0u);
    var k1 = vec4<u32>(0u);
    var k2 = vec4<u32>(0u);
    var k3 = vec4<u32>(0u);
    if (live && early) {
        k0 = k_cache[kb];
        k1 = k_cache[kb + 1u];
        k2 = k_cache[kb + 2u];
        k3 = k_cache[kb + 3u];
    }
    if (tid < HD / 4u) {
        let i = h * HD + 4u * tid;
        q_sh[tid] = vec4<f32>(q[i], q[i + 1u], q[i + 2u], q[i + 3u]) * SCALE;
    }
    workgroupBarrier();

    var s = -3.0e38;
    if (live) {
        var d = 0.0;
        var i = 0u;
        if (early) {
            d = kdot(k0, 0u) + kdot(k1, 1u) + kdot(k2, 2u) + kdot(k3, 3u);
            i = 4u;
        }
        for (; i + 4u <= words / 4u; i += 4u) {
            let a0 = k_cache[kb + i];
            let a1 = k_cache[kb + i + 1u];
            let a2 = k_cache[kb + i + 2u];
            let a3 = k_cache[kb + i + 3u];
            d += kdot(a0, i) + kdot(a1, i + 1u) + kdot(a2, i + 2u) + kdot(a3, i + 3u);
        }
        for (; i < words / 4u; i++) {
            d += kdot(k_cache[kb + i], i);
        }
        if (SOFTCAP > 0.0) {
            d = SOFTCAP * tanh(d / SOFTCAP);
        }
        s = d;
    }
    let m = reduce_wg(s, tid, true);
    var p = 0.0;
    if (s > -1.0e38) {
        p = exp(s - m);
    }
    if (tid < CH) {
        p_sh[tid] = p;
    }
    let l = reduce_wg(p, tid, false);   // its barriers also publish p_sh

    // Weighted V: invocation (w, g) sums value word w over keys g, g + kg, ... with a fixed trip
    // count (positions past `end` have p = 0) so the compiler can unroll and overlap the loads.
    let v_base = (NKV + kvh) * CAP * words;
    // HD <= 256 gives at most 128 words: one pass covers every word. No loop around the barrier
    // below: WGSL requires barriers in uniform control flow (browsers reject the shader).
    let lanes = words;
    let kg = WG / lanes;
    let g = tid / lanes;
    let w = tid % lanes;
    var acc = vec2<f32>(0.0);
    var i = g;
    for (; i + 7u * kg < CH; i += 8u * kg) {
        let v0 = vload(v_base, c0 + i, w);
        let v1 = vload(v_base, c0 + i + kg, w);
        let v2 = vload(v_base, c0 + i + 2u * kg, w);
        let v3 = vload(v_base, c0 + i + 3u * kg, w);
        let v4 = vload(v_base, c0 + i + 4u * kg, w);
        let v5 = vload(v_base, c0 + i + 5u * kg, w);
        let v6 = vload(v_base, c0 + i + 6u * kg, w);
        let v7 = vload(v_base, c0 + i + 7u * kg, w);
        acc += pv(i, v0) + pv(i + kg, v1) + pv(i + 2u * kg, v2) + pv(i + 3u * kg, v3) + pv(i + 4u * kg, v4) +
               pv(i + 5u * kg, v5) + pv(i + 6u * kg, v6) + pv(i + 7u * kg, v7);
    }
    for (; i < CH; i += kg) {
        acc += pv(i, vload(v_base, c0 + i, w));
    }
    acc_sh[tid] = acc;
    workgroupBarrier();
    if (g == 0u) {
        var total = acc;
        for (var k = 1u; k < kg; k++) {
            total += acc_sh[tid + k * lanes];
        }
        part[slot + 2u * w] = total.x;
        part[slot + 2u * w + 1u] = total.y;
    }
    if (tid == 0u) {
        part[slot + HD] = m;
        part[slot + HD + 1u] = l;
    }
}
