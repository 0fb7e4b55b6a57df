// The prefill matmul's output (every matmul kernel and matmul_sum.wgsl): C's shape and epilogue
// (bias, residual add) and the bounds of the last tiles.
// Bindings: 3 C, 4 vecs (biases).

override N: u32;
override ACCUMULATE: bool = false;
override HAS_BIAS: bool = false;
override BIAS_OFF: u32 = 0u;   // bias offset in `vecs`
override SCALE: f32 = 1.0;     // v (+ bias) scaled before the residual add (Granite)

@group(0) @binding(3) var<storage, read_write> c: array<f32>;
@group(0) @binding(4) var<storage, read> vecs: array<f32>;

// Four outputs of row m from column n on, with bias and residual as configured.
fn store(m: u32, n: u32, v4: vec4<f32>) {
    if (m >= step.n_tokens) {
        return;
    }
    for (var j = 0u; j < 4u; j++) {
        if (n + j >= N) {
            return;
        }
        var v = v4[j];
        if (HAS_BIAS) {
            v += vecs[BIAS_OFF + n + j];
        }
        if (SCALE != 1.0) {
            v *= SCALE;
        }
        let o = m * N + n + j;
        if (ACCUMULATE) {
            v += c[o];
        }
        c[o] = v;
    }
}
