// The rotary embedding of one (2i, 2i + 1) pair of a head by its table entry (cos, sin): shared
// by qkv_rope.wgsl (decode, as rows come out of the matvec) and rope_kv.wgsl (prefill).

// Llama 4's attention temperature (Ministral 3): the rotated query at position p times
// 1 + Q_BETA * ln(1 + floor(p / Q_ORIG)) (1 while Q_BETA is 0).
override Q_BETA: f32 = 0.0;
override Q_ORIG: f32 = 1.0;

fn q_temperature(pos: u32) -> f32 {
    return 1.0 + Q_BETA * log(1.0 + floor(f32(pos) / Q_ORIG));
}

fn rotate(a: f32, b: f32, cs: vec2<f32>) -> vec2<f32> {
    return vec2<f32>(a * cs.x - b * cs.y, b * cs.x + a * cs.y);
}
