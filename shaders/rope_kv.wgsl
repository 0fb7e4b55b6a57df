// Rotary embedding for q and k of every token, then k and v appended to this layer's KV cache
// (f16 pairs packed in u32, layout [kv_head][position][HD / 2]). One workgroup per (head, token):
// heads 0..NH are query heads, NH..NH+NKV are key/value heads.
// cos/sin come from a table made on the CPU in f64 (GPU sin/cos are too coarse at large angles).

struct Step {
    n_tokens: u32,
    pos0: u32,
    _p0: u32,
    _p1: u32,
}

override HD: u32;          // head dimension
override ROT: u32;         // rotated dimensions (<= HD)
override NH: u32;
override NKV: u32;
override CTX: u32;         // positions in the cache
override NEOX: bool;       // pairs (i, i + ROT/2) instead of (2i, 2i + 1)

@group(0) @binding(0) var<storage, read_write> q: array<f32>;
@group(0) @binding(1) var<storage, read_write> k: array<f32>;
@group(0) @binding(2) var<storage, read> v: array<f32>;
@group(0) @binding(3) var<storage, read_write> k_cache: array<u32>;
@group(0) @binding(4) var<storage, read_write> v_cache: array<u32>;
@group(0) @binding(5) var<uniform> step: Step;
@group(0) @binding(6) var<storage, read> rope: array<vec2<f32>>;  // [pos][ROT / 2] (cos, sin)

fn rotated(base: u32, e: u32, pos: u32, is_q: bool) -> f32 {
    var x: f32;
    if (is_q) { x = q[base + e]; } else { x = k[base + e]; }
    if (e >= ROT) {
        return x;
    }
    var i: u32;
    var partner: u32;
    var sign: f32;
    if (NEOX) {
        let half = ROT / 2u;
        i = e % half;
        if (e < half) { partner = e + half; sign = -1.0; } else { partner = e - half; sign = 1.0; }
    } else {
        i = e / 2u;
        if (e % 2u == 0u) { partner = e + 1u; sign = -1.0; } else { partner = e - 1u; sign = 1.0; }
    }
    var y: f32;
    if (is_q) { y = q[base + partner]; } else { y = k[base + partner]; }
    let cs = rope[pos * (ROT / 2u) + i];
    return x * cs.x + sign * y * cs.y;
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) w: u32) {
    let head = wg.x;
    let t = wg.y;
    if (t >= step.n_tokens) {
        return;
    }
    let pos = step.pos0 + t;
    let live = w < HD / 2u;
    let is_q = head < NH;
    var base: u32;
    if (is_q) { base = (t * NH + head) * HD; } else { base = (t * NKV + head - NH) * HD; }
    var r = vec2<f32>(0.0);
    if (live) {
        r = vec2<f32>(rotated(base, 2u * w, pos, is_q), rotated(base, 2u * w + 1u, pos, is_q));
    }
    // Everyone reads its partners before anyone writes in place.
    workgroupBarrier();
    if (!live) {
        return;
    }
    if (is_q) {
        q[base + 2u * w] = r.x;
        q[base + 2u * w + 1u] = r.y;
    } else {
        let c = ((head - NH) * CTX + pos) * (HD / 2u) + w;
        k_cache[c] = pack2x16float(r);
        v_cache[c] = pack2x16float(vec2<f32>(v[base + 2u * w], v[base + 2u * w + 1u]));
    }
}
