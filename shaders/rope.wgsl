// The rotary embedding of one (2i, 2i + 1) pair of a head by its table entry (cos, sin): shared
// by qkv_rope.wgsl (decode, as rows come out of the matvec) and rope_kv.wgsl (prefill).

fn rotate(a: f32, b: f32, cs: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(a * cs.x - b * cs.y, b * cs.x + a * cs.y);
}
