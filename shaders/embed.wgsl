// x[t, :] = SCALE * W[ids[t], :]: the embedding lookup, for any weight layout (via load8).

struct Step {
    n_tokens: u32,
    pos0: u32,
    _p0: u32,
    _p1: u32,
}

override H: u32;
override SCALE: f32 = 1.0;

@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> x: array<vec4<f32>>;
@group(0) @binding(5) var<uniform> step: Step;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.y;
    let k8 = gid.x;
    if (t >= step.n_tokens || k8 >= H / 8u) {
        return;
    }
    let w = load8(ids[t] * H + k8 * 8u);
    let o = (t * H) / 4u + 2u * k8;
    x[o] = w.lo * SCALE;
    x[o + 1u] = w.hi * SCALE;
}
