// Decode: q, k and v of one token in one dispatch. RMS-norm of x on the fly, the concatenated
// [q; k; v] matrix times x (+ bias), rotary embedding on (2i, 2i+1) row pairs (the loader
// permutes NeoX-style weights into this order), q stored for attention, k and v appended to this
// layer's KV cache as packed f16 pairs. Four rows (two pairs) per block of S 32-invocation row
// groups (`dot4`, rowdot.wgsl).

override K: u32;
override QD: u32;
override KVD: u32;
override HD: u32;
override ROT: u32;
override CAP: u32;            // cache slots per KV head: position p lives in slot p % CAP
override EPS: f32 = 1e-5;
override NW_OFFSET: f32 = 0.0;
override NW_OFF: u32 = 0u;
override HAS_BIAS: bool = false;
override BIAS_OFF: u32 = 0u;

override WG: u32 = 64u;         // invocations per workgroup: 32 to 512 (256 without subgroups), a multiple of 32 * S

@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;

// x as rowdot.wgsl reads it.
fn xv(v: u32) -> vec4<f32> {
    return x[v];
}

@group(0) @binding(3) var<storage, read_write> q: array<f32>;
@group(0) @binding(4) var<storage, read> vecs: array<f32>;
@group(0) @binding(6) var<storage, read_write> kv: array<u32>;   // [2][NKV][CAP][HD/2]
@group(0) @binding(7) var<storage, read> rope: array<vec2<f32>>; // [pos][ROT/2] (cos, sin)

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wgid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let n = QD + 2u * KVD;
    let grp = lid / 32u;
    let g = wgid.x * (WG / 32u / S) + grp / S;
    let slice = grp % S;
    let t = lid % 32u;
    let first = 4u * g;
    let rows = min(vec4<u32>(first) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(n - 1u));
    // Bias and rotation are requested before the dot products, not after the reduction: each
    // dependent memory round trip adds its latency to the step.
    let pos = step.pos0;
    let row = first + 2u * min(t, 1u);
    let dim = row % HD;
    var cs = vec2<f32>(1.0, 0.0);
    if (dim < ROT) {
        cs = rope[pos * (ROT / 2u) + dim / 2u];
    }
    var bias = vec4<f32>(0.0);
    if (HAS_BIAS) {
        bias = vec4<f32>(vecs[BIAS_OFF + rows.x], vecs[BIAS_OFF + rows.y], vecs[BIAS_OFF + rows.z],
                         vecs[BIAS_OFF + rows.w]);
    }
    let d = dot4(rows, lid, slice, true);
    let v = join_slices(reduce4(d.v, lid), lid) * (1.0 / sqrt(d.ss / f32(K) + EPS)) + bias;
    // Invocations 0 and 1 finish the group's two row pairs: rotate (q, k) and store.
    if (slice != 0u || t >= 2u || row >= n) {
        return;
    }
    var a = v[2u * t];
    var b = v[2u * t + 1u];
    let is_v = row >= QD + KVD;
    if (!is_v && dim < ROT) {
        let p = rotate(a, b, cs);
        a = p.x;
        b = p.y;
    }
    if (row < QD) {
        let s = q_temperature(pos);
        q[row] = a * s;
        q[row + 1u] = b * s;
        return;
    }
    var r = row - QD;
    var region = 0u;
    if (is_v) {
        r = row - QD - KVD;
        region = 1u;
    }
    let head = r / HD;
    let nkv = KVD / HD;
    kv[((region * nkv + head) * CAP + pos % CAP) * (HD / 2u) + (r % HD) / 2u] = pack2x16float(vec2<f32>(a, b));
}
