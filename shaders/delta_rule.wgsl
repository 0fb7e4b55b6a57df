// Gated DeltaNet's recurrence (Qwen3.5), one workgroup per value head, over the step's tokens in
// order (prefill is a sequential scan, not yet the chunked form). Per token: q and k of the
// head's key head are L2-normalized (q also scaled by 1/sqrt(DK)); decay = exp(-exp(A_log) *
// softplus(a + dt_bias)) and beta = sigmoid(b); the state S (DK x DV) decays, takes the delta
// rule update S += k (beta (v - S^T k))^T, and gives o = S^T q; o is RMS-normalized over the
// head (the gated norm's plain weight) and multiplied by silu(z). Invocation j keeps columns j
// and j + 128 of S in registers for the whole step; between steps S lives in the layer's state
// buffer (treated as zero for a step at position 0).

override NK: u32;
override NV: u32;
override DK: u32;         // <= 128
override DV: u32;         // <= 256
override STRIDE: u32;     // floats between tokens' rows of the input projection [q k v | z | b | a]
override CONV_DIM: u32;   // 2 NK DK + NV DV: where z starts in a row
override DT_OFF: u32;     // dt_bias, -exp(A_log) and the gated norm's weight in vecs
override A_OFF: u32;
override GN_OFF: u32;
override EPS: f32;
override TILED: bool = false;  // value head h reads key head h % NK (llama.cpp's order), not h / (NV / NK)

@group(0) @binding(0) var<storage, read> conv: array<f32>;          // [token][CONV_DIM]: q | k | v
@group(0) @binding(1) var<storage, read> proj: array<f32>;          // z, b, a
@group(0) @binding(2) var<storage, read_write> state: array<f32>;   // [head][DK][DV]
@group(0) @binding(3) var<storage, read> vecs: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;     // [token][NV DV]

var<workgroup> q_sh: array<f32, 128>;
var<workgroup> k_sh: array<f32, 128>;
var<workgroup> red_a: array<f32, 128>;
var<workgroup> red_b: array<f32, 128>;

// Sums of red_a and red_b over the workgroup (left in element 0).
fn reduce2(tid: u32) {
    workgroupBarrier();
    for (var s = 64u; s > 0u; s >>= 1u) {
        if (tid < s) {
            red_a[tid] += red_a[tid + s];
            red_b[tid] += red_b[tid + s];
        }
        workgroupBarrier();
    }
}

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let h = wg.x;
    let kh = select(h / (NV / NK), h % NK, TILED);
    let j0 = tid;
    let j1 = tid + 128u;
    var s0: array<f32, 128>;
    var s1: array<f32, 128>;
    let fresh = step.pos0 == 0u;
    for (var i = 0u; i < DK; i++) {
        if (j0 < DV) {
            s0[i] = select(state[(h * DK + i) * DV + j0], 0.0, fresh);
        }
        if (j1 < DV) {
            s1[i] = select(state[(h * DK + i) * DV + j1], 0.0, fresh);
        }
    }
    let dt = vecs[DT_OFF + h];
    let a_neg = vecs[A_OFF + h];
    let qscale = 1.0 / sqrt(f32(DK));
    for (var t = 0u; t < step.n_tokens; t++) {
        let row = t * CONV_DIM;
        var qv = 0.0;
        var kv = 0.0;
        if (tid < DK) {
            qv = conv[row + kh * DK + tid];
            kv = conv[row + NK * DK + kh * DK + tid];
        }
        red_a[tid] = qv * qv;
        red_b[tid] = kv * kv;
        reduce2(tid);
        if (tid < DK) {
            q_sh[tid] = qv / sqrt(red_a[0] + 1e-6) * qscale;
            k_sh[tid] = kv / sqrt(red_b[0] + 1e-6);
        }
        let prow = t * STRIDE + CONV_DIM;
        let b = proj[prow + NV * DV + h];
        let a = proj[prow + NV * DV + NV + h] + dt;
        // torch's softplus returns x itself past 20.
        let sp = select(log(1.0 + exp(a)), a, a > 20.0);
        let decay = exp(a_neg * sp);
        let beta = 1.0 / (1.0 + exp(-b));
        workgroupBarrier();
        var o0 = 0.0;
        var o1 = 0.0;
        if (j0 < DV) {
            var mem = 0.0;
            for (var i = 0u; i < DK; i++) {
                s0[i] *= decay;
                mem += s0[i] * k_sh[i];
            }
            let d = (conv[row + 2u * NK * DK + h * DV + j0] - mem) * beta;
            for (var i = 0u; i < DK; i++) {
                s0[i] += k_sh[i] * d;
                o0 += s0[i] * q_sh[i];
            }
        }
        if (j1 < DV) {
            var mem = 0.0;
            for (var i = 0u; i < DK; i++) {
                s1[i] *= decay;
                mem += s1[i] * k_sh[i];
            }
            let d = (conv[row + 2u * NK * DK + h * DV + j1] - mem) * beta;
            for (var i = 0u; i < DK; i++) {
                s1[i] += k_sh[i] * d;
                o1 += s1[i] * q_sh[i];
            }
        }
        red_a[tid] = o0 * o0 + o1 * o1;
        red_b[tid] = 0.0;
        reduce2(tid);
        let inv = 1.0 / sqrt(red_a[0] / f32(DV) + EPS);
        let orow = t * NV * DV + h * DV;
        if (j0 < DV) {
            let z = proj[prow + h * DV + j0];
            out[orow + j0] = o0 * inv * vecs[GN_OFF + j0] * (z / (1.0 + exp(-z)));
        }
        if (j1 < DV) {
            let z = proj[prow + h * DV + j1];
            out[orow + j1] = o1 * inv * vecs[GN_OFF + j1] * (z / (1.0 + exp(-z)));
        }
        // The next token overwrites q_sh, k_sh and red_*: everyone must be done reading them.
        workgroupBarrier();
    }
    for (var i = 0u; i < DK; i++) {
        if (j0 < DV) {
            state[(h * DK + i) * DV + j0] = s0[i];
        }
        if (j1 < DV) {
            state[(h * DK + i) * DV + j1] = s1[i];
        }
    }
}
