// Gated DeltaNet's output norm (Qwen3.5), token-parallel after the recurrence: each value
// head's o RMS-normalized over its DV values with the norm's plain weight, times silu(z).
// Workgroups (value head, token), in place on the recurrence's output.

override NV: u32;
override DV: u32;         // <= 256
override STRIDE: u32;     // floats between tokens' rows of the input projection
override CONV_DIM: u32;   // where z starts in a row
override GN_OFF: u32;
override EPS: f32;

@group(0) @binding(0) var<storage, read> proj: array<f32>;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;   // [token][NV DV]
@group(0) @binding(3) var<storage, read> vecs: array<f32>;

var<workgroup> red: array<f32, 128>;

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let h = wg.x;
    let t = wg.y;
    if (t >= step.n_tokens) {
        return;
    }
    let base = t * NV * DV + h * DV;
    var o0 = 0.0;
    var o1 = 0.0;
    if (tid < DV) {
        o0 = out[base + tid];
    }
    if (tid + 128u < DV) {
        o1 = out[base + tid + 128u];
    }
    red[tid] = o0 * o0 + o1 * o1;
    workgroupBarrier();
    for (var s = 64u; s > 0u; s >>= 1u) {
        if (tid < s) {
            red[tid] += red[tid + s];
        }
        workgroupBarrier();
    }
    let inv = 1.0 / sqrt(red[0] / f32(DV) + EPS);
    let zrow = t * STRIDE + CONV_DIM + h * DV;
    if (tid < DV) {
        let z = proj[zrow + tid];
        out[base + tid] = o0 * inv * vecs[GN_OFF + tid] * (z / (1.0 + exp(-z)));
    }
    if (tid + 128u < DV) {
        let z = proj[zrow + tid + 128u];
        out[base + tid + 128u] = o1 * inv * vecs[GN_OFF + tid + 128u] * (z / (1.0 + exp(-z)));
    }
}
