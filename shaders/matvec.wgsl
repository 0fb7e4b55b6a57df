// y[m, n] (+)= sum_k x[m, k] * W[n, k] (+ bias[n]) for a few activation rows (decode).
// ROWS output rows per workgroup, each reduced by 64 threads; weights come through load8.

struct Step {
    n_tokens: u32,
    pos0: u32,
    _p0: u32,
    _p1: u32,
}

override K: u32;
override N: u32;
override ACCUMULATE: bool = false;
override HAS_BIAS: bool = false;

const WG: u32 = 256u;
const TPR: u32 = 64u;
const ROWS: u32 = WG / TPR;

@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> bias: array<f32>;
@group(0) @binding(5) var<uniform> step: Step;

var<workgroup> partial: array<f32, WG>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row = wg.x * ROWS + lid / TPR;
    let t = lid % TPR;
    let m = wg.y;
    var acc = 0.0;
    if (row < N && m < step.n_tokens) {
        let xbase = m * (K / 4u);
        for (var k8 = t; k8 < K / 8u; k8 += TPR) {
            let w = load8(row * K + k8 * 8u);
            acc += dot(w.lo, x[xbase + 2u * k8]) + dot(w.hi, x[xbase + 2u * k8 + 1u]);
        }
    }
    partial[lid] = acc;
    workgroupBarrier();
    for (var s = TPR / 2u; s > 0u; s >>= 1u) {
        if (t < s) {
            partial[lid] += partial[lid + s];
        }
        workgroupBarrier();
    }
    if (t == 0u && row < N && m < step.n_tokens) {
        var v = partial[lid];
        if (HAS_BIAS) {
            v += bias[row];
        }
        let o = m * N + row;
        if (ACCUMULATE) {
            v += y[o];
        }
        y[o] = v;
    }
}
