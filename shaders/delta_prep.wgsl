// Gated DeltaNet, before the recurrence (Qwen3.5), every token of the step at once: q and k of
// each key head L2-normalized in place in the convolution's output (q also scaled by
// 1/sqrt(DK)), and per value head the state's decay exp(-exp(A_log) * softplus(a + dt_bias))
// and the update strength beta = sigmoid(b). Token-parallel, so the sequential recurrence
// (delta_rule.wgsl) is left with the state update alone. Workgroups (x, t): x < NK the query of
// key head x, x < 2 NK the key of key head x - NK, x = 2 NK the gates of every value head.

override NK: u32;
override NV: u32;
override DK: u32;         // <= 128
override DV: u32;
override STRIDE: u32;     // floats between tokens' rows of the input projection [q k v | z | b | a]
override CONV_DIM: u32;   // 2 NK DK + NV DV: where z starts in a row
override DT_OFF: u32;     // dt_bias and -exp(A_log) in vecs
override A_OFF: u32;

@group(0) @binding(0) var<storage, read_write> conv: array<f32>;  // [token][CONV_DIM]
@group(0) @binding(1) var<storage, read> proj: array<f32>;
@group(0) @binding(2) var<storage, read_write> gates: array<f32>; // [token][NV][decay, beta]
@group(0) @binding(3) var<storage, read> vecs: array<f32>;

var<workgroup> red: array<f32, 128>;

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let t = wg.y;
    if (t >= step.n_tokens) {
        return;
    }
    if (wg.x == 2u * NK) {
        let prow = t * STRIDE + CONV_DIM + NV * DV;
        for (var h = tid; h < NV; h += 128u) {
            let a = proj[prow + NV + h] + vecs[DT_OFF + h];
            // torch's softplus returns x itself past 20.
            let sp = select(log(1.0 + exp(a)), a, a > 20.0);
            gates[(t * NV + h) * 2u] = exp(vecs[A_OFF + h] * sp);
            gates[(t * NV + h) * 2u + 1u] = 1.0 / (1.0 + exp(-proj[prow + h]));
        }
        return;
    }
    let at = t * CONV_DIM + wg.x * DK + tid;
    var x = 0.0;
    if (tid < DK) {
        x = conv[at];
    }
    red[tid] = x * x;
    workgroupBarrier();
    for (var s = 64u; s > 0u; s >>= 1u) {
        if (tid < s) {
            red[tid] += red[tid + s];
        }
        workgroupBarrier();
    }
    var scale = 1.0 / sqrt(red[0] + 1e-6);
    if (wg.x < NK) {
        scale /= sqrt(f32(DK));
    }
    if (tid < DK) {
        conv[at] = x * scale;
    }
}
