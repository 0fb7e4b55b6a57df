// x[t, :] = SCALE * W[ids[t], :]: the embedding lookup, for any weight layout (via load8).
// An embedding too large for one binding is looked up by one dispatch per row range: W holds
// rows ID0 .. ID1, and each dispatch fills the tokens whose ids fall in its range.

override H: u32;
override SCALE: f32 = 1.0;
override ID0: u32 = 0u;
override ID1: u32 = 0xffffffffu;

@group(0) @binding(2) var<storage, read> ids: array<u32>;
@group(0) @binding(3) var<storage, read_write> x: array<vec4<f32>>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let t = gid.y;
    let k8 = gid.x;
    if (t >= step.n_tokens || k8 >= H / 8u) {
        return;
    }
    let id = ids[t];
    if (id < ID0 || id >= ID1) {
        return;
    }
    let w = load8((id - ID0) * H + k8 * 8u);
    let o = (t * H) / 4u + 2u * k8;
    x[o] = w.lo * SCALE;
    x[o + 1u] = w.hi * SCALE;
}
