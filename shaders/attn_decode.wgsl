// Decode attention, split over the KV length (flash-decoding): workgroup (head, split) scores
// CH consecutive cached positions against the single query and writes its partial softmax
// state (max, sum, weighted V) for `attn_combine` to merge. Splitting keeps the GPU busy at
// any depth (heads x depth/64 workgroups), and every loop below issues independent loads so
// the memory latency overlaps instead of adding up.
// FUSED: each head's last split to finish merges them all (attn_merge.wgsl) instead of a
// dispatch of its own (~4 us a layer on the H100). Splits count themselves on an atomic and
// publish their partials with storageBarrier(); only Vulkan (naga) makes that barrier
// device-scope acquire/release, which with `part` Coherent is what lets the last split see the
// others' partials. WGSL promises it only within a workgroup, so the host sets FUSED on Vulkan alone.

override HD: u32;
override NH: u32;
override NKV: u32;
override CTX: u32;
override CAP: u32;            // cache slots per KV head: position p lives in slot p % CAP
override SCALE: f32;
override SOFTCAP: f32 = 0.0;
override WINDOW: u32 = 0u;
override FUSED: bool = false;

const WG: u32 = 128u;  // invocations: one key each while scoring, (word, key group) for V

@group(0) @binding(0) var<storage, read> q: array<f32>;
@group(0) @binding(1) var<storage, read> k_cache: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> v_cache: array<u32>;
// Coherent natively (the host turns the marker into naga's @coherent): the merging split reads
// the other splits' partials.
@group(0) @binding(3) /*COHERENT*/ var<storage, read_write> part: array<vec4<f32>>;   // [NH][splits][HD / 4 + 1]
@group(0) @binding(4) var<storage, read_write> out: array<f32>;   // FUSED: [NH][HD]
@group(0) @binding(6) var<storage, read_write> done: array<atomic<u32>>;   // FUSED: splits finished, per head

// Workgroup memory is kept small: a smaller footprint measured up to 3% faster at 4096 positions
// on the H100. The softmax tree and the value sums use the merge's r4_sh (attn_merge.wgsl), one
// after the other (barriers apart).
var<workgroup> q_sh: array<vec4<f32>, HD / 4u>;
var<workgroup> p_sh: array<f32, CH>;
var<workgroup> pd_sh: array<f32, WG>;
var<workgroup> last_sh: u32;

// (max, sum of e^(s - max)) over the split's keys (invocations below CH) in one tree: pairs merge
// as in online softmax.
fn softmax_stats(s: f32, live: bool, tid: u32) -> vec2<f32> {
    if (tid < CH) {
        r4_sh[tid] = vec4<f32>(s, select(0.0, 1.0, live), 0.0, 0.0);
    }
    workgroupBarrier();
    for (var i = 1u; i <= countTrailingZeros(CH); i++) {
        let k = CH >> i;
        if (tid < k) {
            let a = r4_sh[tid].xy;
            let b = r4_sh[tid + k].xy;
            let m = max(a.x, b.x);
            r4_sh[tid] = vec4<f32>(m, a.y * exp(a.x - m) + b.y * exp(b.x - m), 0.0, 0.0);
        }
        workgroupBarrier();
    }
    return r4_sh[0].xy;
}

// Piece i of a key (0 past its n4 pieces: they contribute nothing).
fn kpiece(kb: u32, i: u32, n4: u32) -> vec4<u32> {
    if (i < n4) {
        return k_cache[kb + i];
    }
    return vec4<u32>(0u);
}

// q (pieces 2i, 2i + 1 of q_sh) against piece i of a key.
fn kdot(kw: vec4<u32>, i: u32) -> f32 {
    return dot(q_sh[2u * i], vec4<f32>(unpack2x16float(kw.x), unpack2x16float(kw.y))) +
           dot(q_sh[2u * i + 1u], vec4<f32>(unpack2x16float(kw.z), unpack2x16float(kw.w)));
}

// kdot for pieces that may lie past the key's n4 (q_sh there is not written: never read it).
fn kdg(kw: vec4<u32>, i: u32, n4: u32) -> f32 {
    if (i < n4) {
        return kdot(kw, i);
    }
    return 0.0;
}

fn vraw(base: u32, pos: u32, w: u32) -> u32 {
    return v_cache[base + (pos % CAP) * (HD / 2u) + w];
}

// p_i * v, with positions outside the window (p = 0) contributing exactly nothing even when
// their stale cache slot holds inf or NaN.
fn pv(i: u32, v: vec2<f32>) -> vec2<f32> {
    return p_sh[i] * select(vec2<f32>(0.0), v, p_sh[i] != 0.0);
}

// The value word of key i of the split (0 past it).
fn vr(base: u32, c0: u32, i: u32, w: u32) -> u32 {
    if (i < CH) {
        return vraw(base, c0 + i, w);
    }
    return 0u;
}

// The value words of keys i0 + n * kg, n = 0..3 (spelled out: a vector indexed in a loop may
// be placed in slow local memory).
fn vraw4(base: u32, c0: u32, i0: u32, kg: u32, w: u32) -> vec4<u32> {
    return vec4<u32>(vr(base, c0, i0, w), vr(base, c0, i0 + kg, w), vr(base, c0, i0 + 2u * kg, w),
                     vr(base, c0, i0 + 3u * kg, w));
}

fn pvr(i: u32, raw: u32) -> vec2<f32> {
    if (i < CH) {
        return pv(i, unpack2x16float(raw));
    }
    return vec2<f32>(0.0);
}

fn pv4(i0: u32, kg: u32, v: vec4<u32>) -> vec2<f32> {
    return pvr(i0, v.x) + pvr(i0 + kg, v.y) + pvr(i0 + 2u * kg, v.z) + pvr(i0 + 3u * kg, v.w);
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) grid: vec3<u32>,
        @builtin(local_invocation_index) tid: u32) {
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
    let slot = (h * ((CTX + CH - 1u) / CH) + split) * (HD / 4u + 1u);
    // Every load that needs neither q nor the softmax is requested first, so their round trips
    // overlap instead of adding up (a loop that consumes each load right away waits one memory
    // latency per iteration: that made this kernel ~13 us at 640 keys). Keys: two invocations
    // each, taking alternate 16-byte pieces (a pair reads whole 32-byte sectors, and each
    // invocation's scoring is half as long); the first 8 pieces of each early (HD <= 128).
    let j = c0 + tid / 2u;
    let half = tid % 2u;
    let live = j >= start && j < end;
    let kb = (kvh * CAP + j % CAP) * (words / 4u);
    let n4 = words / 4u;
    var k0 = vec4<u32>(0u);
    var k1 = vec4<u32>(0u);
    var k2 = vec4<u32>(0u);
    var k3 = vec4<u32>(0u);
    var k4 = vec4<u32>(0u);
    var k5 = vec4<u32>(0u);
    var k6 = vec4<u32>(0u);
    var k7 = vec4<u32>(0u);
    if (live) {
        k0 = kpiece(kb, half, n4);
        k1 = kpiece(kb, half + 2u, n4);
        k2 = kpiece(kb, half + 4u, n4);
        k3 = kpiece(kb, half + 6u, n4);
        k4 = kpiece(kb, half + 8u, n4);
        k5 = kpiece(kb, half + 10u, n4);
        k6 = kpiece(kb, half + 12u, n4);
        k7 = kpiece(kb, half + 14u, n4);
    }
    // Values: invocation (w, g) sums value word w over keys g, g + kg, ...; the first 32 early
    // (all of them for HD up to 128: with one round trip per later load, HD 96 and 128 spent
    // ~4 extra memory latencies here).
    // HD <= 256 gives at most 128 words: one pass covers every word (no loop around barriers:
    // WGSL requires them in uniform control flow, and browsers enforce it).
    let v_base = (NKV + kvh) * CAP * words;
    let lanes = words;
    let kg = WG / lanes;
    let g = tid / lanes;
    let w = tid % lanes;
    let vlive = g < kg;
    var va = vec4<u32>(0u);
    var vb = vec4<u32>(0u);
    var vc = vec4<u32>(0u);
    var vd = vec4<u32>(0u);
    var ve = vec4<u32>(0u);
    var vf = vec4<u32>(0u);
    var vg = vec4<u32>(0u);
    var vh = vec4<u32>(0u);
    if (vlive) {
        va = vraw4(v_base, c0, g, kg, w);
        vb = vraw4(v_base, c0, g + 4u * kg, kg, w);
        vc = vraw4(v_base, c0, g + 8u * kg, kg, w);
        vd = vraw4(v_base, c0, g + 12u * kg, kg, w);
    }
    if (vlive && g + 16u * kg < CH) {
        ve = vraw4(v_base, c0, g + 16u * kg, kg, w);
        vf = vraw4(v_base, c0, g + 20u * kg, kg, w);
        vg = vraw4(v_base, c0, g + 24u * kg, kg, w);
        vh = vraw4(v_base, c0, g + 28u * kg, kg, w);
    }
    if (tid < HD / 4u) {
        let i = h * HD + 4u * tid;
        q_sh[tid] = vec4<f32>(q[i], q[i + 1u], q[i + 2u], q[i + 3u]) * SCALE;
    }
    workgroupBarrier();

    var d = 0.0;
    if (live) {
        d = kdg(k0, half, n4) + kdg(k1, half + 2u, n4) + kdg(k2, half + 4u, n4) + kdg(k3, half + 6u, n4) +
            kdg(k4, half + 8u, n4) + kdg(k5, half + 10u, n4) + kdg(k6, half + 12u, n4) + kdg(k7, half + 14u, n4);
        for (var j = 0u; j < HD / 16u; j++) {
            let i = half + 16u + 2u * j;
            if (i >= n4) {
                break;
            }
            d += kdot(k_cache[kb + i], i);
        }
    }
    pd_sh[tid] = d;
    workgroupBarrier();
    // Invocation i < CH scores key c0 + i from its pair's halves.
    let key_live = tid < CH && c0 + tid >= start && c0 + tid < end;
    var s = -3.0e38;
    if (key_live) {
        var dd = pd_sh[2u * tid] + pd_sh[2u * tid + 1u];
        if (SOFTCAP > 0.0) {
            dd = SOFTCAP * tanh(dd / SOFTCAP);
        }
        s = dd;
    }
    let ml = softmax_stats(s, key_live, tid);
    let m = ml.x;
    var p = 0.0;
    if (key_live) {
        p = exp(s - m);
    }
    if (tid < CH) {
        p_sh[tid] = p;
    }
    workgroupBarrier();

    // Weighted V: positions past `end` have p = 0; later keys (small HD) four at a time.
    var acc = vec2<f32>(0.0);
    if (vlive) {
        acc = pv4(g, kg, va) + pv4(g + 4u * kg, kg, vb) + pv4(g + 8u * kg, kg, vc) + pv4(g + 12u * kg, kg, vd);
        if (g + 16u * kg < CH) {
            acc += pv4(g + 16u * kg, kg, ve) + pv4(g + 20u * kg, kg, vf) + pv4(g + 24u * kg, kg, vg) +
                   pv4(g + 28u * kg, kg, vh);
        }
        for (var j = 0u; j < CH; j++) {
            let i = g + 32u * kg + 4u * kg * j;
            if (i >= CH) {
                break;
            }
            acc += pv4(i, kg, vraw4(v_base, c0, i, kg, w));
        }
    }
    r4_sh[tid] = vec4<f32>(acc, 0.0, 0.0);   // every invocation read the softmax tree's root above
    workgroupBarrier();
    // Invocation i < HD / 4 writes dimensions 4i .. 4i + 3 (words 2i, 2i + 1) as one vec4.
    if (tid < HD / 4u) {
        var total = vec4<f32>(0.0);
        for (var k = 0u; k < WG / (HD / 2u); k++) {
            total += vec4<f32>(r4_sh[2u * tid + k * lanes].xy, r4_sh[2u * tid + 1u + k * lanes].xy);
        }
        part[slot + tid] = total;
    }
    if (tid == 0u) {
        part[slot + HD / 4u] = vec4<f32>(m, ml.y, 0.0, 0.0);
    }
    if (FUSED) {
        storageBarrier();   // release: this split's partial before its count
        if (tid == 0u) {
            // The grid's split count, not one derived from the position: whatever the host
            // launched, the last of them merges and the count returns to 0.
            last_sh = select(0u, 1u, atomicAdd(&done[h], 1u) + 1u == grid.y);
        }
        if (workgroupUniformLoad(&last_sh) == 1u) {
            storageBarrier();   // acquire: the other splits' partials after their counts
            merge_head(h, tid, grid.y);
            if (tid == 0u) {
                atomicStore(&done[h], 0u);   // ready for the next layer's dispatch
            }
        }
    }
}
