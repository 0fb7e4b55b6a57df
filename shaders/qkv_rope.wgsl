// Decode: q, k and v of one token in one dispatch. RMS-norm of x on the fly, the concatenated
// [q; k; v] matrix times x (+ bias), rotary embedding on (2i, 2i+1) row pairs (the loader
// permutes NeoX-style weights into this order), q stored for attention, k and v appended to this
// layer's KV cache as packed f16 pairs. R rows (R/2 pairs) per workgroup, 32 threads a row.

struct Step {
    n_tokens: u32,
    pos0: u32,
    _p0: u32,
    _p1: u32,
}

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

const TPR: u32 = 32u;
override R: u32 = 8u;          // rows per workgroup (2..8), 32 invocations each

@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> q: array<f32>;
@group(0) @binding(4) var<storage, read> vecs: array<f32>;
@group(0) @binding(5) var<uniform> step: Step;
@group(0) @binding(6) var<storage, read_write> kv: array<u32>;   // [2][NKV][CAP][HD/2]
@group(0) @binding(7) var<storage, read> rope: array<vec2<f32>>; // [pos][ROT/2] (cos, sin)

var<workgroup> rows_out: array<f32, 8>;

@compute @workgroup_size(R * 32u)
fn main(@builtin(workgroup_id) wgid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let n = QD + 2u * KVD;
    let d = lid / TPR;
    let t = lid % TPR;
    let row = wgid.x * R + d;
    let valid = row < n;
    var part = vec2<f32>(0.0);
    if (valid) {
        part = row_dot(row, t, true);
    }
    let s = reduce(part, lid);
    var v = s.x * (1.0 / sqrt(s.y / f32(K) + EPS));
    if (HAS_BIAS && valid) {
        v += vecs[BIAS_OFF + row];
    }
    if (t == 0u) {
        rows_out[d] = v;
    }
    workgroupBarrier();
    // One thread per row pair finishes: rotate (q, k) and store.
    if (t != 0u || d % 2u != 0u || !valid) {
        return;
    }
    let pos = step.pos0;
    var a = rows_out[d];
    var b = rows_out[d + 1u];
    let is_v = row >= QD + KVD;
    let dim = row % HD;
    if (!is_v && dim < ROT) {
        let cs = rope[pos * (ROT / 2u) + dim / 2u];
        let ra = a * cs.x - b * cs.y;
        let rb = b * cs.x + a * cs.y;
        a = ra;
        b = rb;
    }
    if (row < QD) {
        q[row] = a;
        q[row + 1u] = b;
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
