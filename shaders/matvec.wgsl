// Decode matrix-vector product, y = W · x for one token, with optional fusions:
//   NORM: x is RMS-normalized on the fly (x / rms(x) * (nw + NW_OFFSET)); the sum of squares
//         is reduced alongside the dot products, so the norm costs no extra dispatch.
//   EPI 0: y[n] = v (+ bias)         EPI 1: y[n] += v (residual add)
//   EPI 2: GLU: y[j] = act(gate_j) * up_j with gate rows [0, N/2) and up rows [N/2, N).
// R dot rows per workgroup, 32 threads per row (`row_dot`, rowdot.wgsl), reduced by `reduce`
// (reduce_*.wgsl).

struct Step {
    n_tokens: u32,
    pos0: u32,
    _p0: u32,
    _p1: u32,
}

override K: u32;
override N: u32;
override EPI: u32 = 0u;
override NORM: bool = false;
override EPS: f32 = 1e-5;
override NW_OFFSET: f32 = 0.0;
override NW_OFF: u32 = 0u;       // norm weight offset in `vecs`
override HAS_BIAS: bool = false;
override BIAS_OFF: u32 = 0u;     // bias offset in `vecs`
override GELU: bool = false;
override SOFTCAP: f32 = 0.0;    // EPI 0: y = SOFTCAP * tanh(v / SOFTCAP) (Gemma 2's final logits)

const TPR: u32 = 32u;
override R: u32 = 8u;          // rows per workgroup (2..8), 32 invocations each

@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> vecs: array<f32>;
@group(0) @binding(5) var<uniform> step: Step;

var<workgroup> rows_out: array<f32, 8>;

// Which matrix row dot-row `d` (0..R) of workgroup `wg` computes, and whether it exists.
fn row_of(wg: u32, d: u32) -> u32 {
    if (EPI == 2u) {
        let j = wg * (R / 2u) + d % (R / 2u);
        return j + (d / (R / 2u)) * (N / 2u);
    }
    return wg * R + d;
}

fn row_valid(wg: u32, d: u32) -> bool {
    if (EPI == 2u) {
        return wg * (R / 2u) + d % (R / 2u) < N / 2u;
    }
    return wg * R + d < N;
}

@compute @workgroup_size(R * 32u)
fn main(@builtin(workgroup_id) wgid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let wg = wgid.x + wgid.y * nwg.x;
    let d = lid / TPR;
    let t = lid % TPR;
    let valid = row_valid(wg, d);
    let row = row_of(wg, d);
    var part = vec2<f32>(0.0);
    if (valid) {
        part = row_dot(row, t, NORM);
    }
    let s = reduce(part, lid);
    var v = s.x;
    if (NORM) {
        v *= 1.0 / sqrt(s.y / f32(K) + EPS);
    }
    if (HAS_BIAS) {
        v += vecs[BIAS_OFF + row];
    }
    if (EPI == 2u) {
        if (t == 0u) {
            rows_out[d] = v;
        }
        workgroupBarrier();
        if (t == 0u && d < R / 2u && valid) {
            let g = rows_out[d];
            let u = rows_out[d + R / 2u];
            var a: f32;
            if (GELU) {
                a = 0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
            } else {
                a = g / (1.0 + exp(-g));
            }
            y[row] = a * u;
        }
        return;
    }
    if (t == 0u && valid) {
        if (EPI == 1u) {
            v += y[row];
        }
        if (SOFTCAP > 0.0) {
            v = SOFTCAP * tanh(v / SOFTCAP);
        }
        y[row] = v;
    }
}
