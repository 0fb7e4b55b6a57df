// Gated DeltaNet's recurrence (Qwen3.5) over the step's tokens in order, after delta_prep.wgsl
// normalized q and k and computed each value head's decay and beta. Per token the state S
// (DK x DV) of a value head decays, takes the delta rule update S += k (beta (v - S^T k))^T and
// gives o = S^T q, written raw (gated_norm.wgsl normalizes it). The columns of S are
// independent, so each workgroup takes CB columns of one head (workgroups (head, column
// block)): invocation (c, r) keeps column c's rows r RS .. (r + 1) RS in registers for the whole
// step, and the R = 128 / CB row slices of a column add their partial sums in workgroup memory.
// Between steps S lives in the layer's state buffer (treated as zero for a step at position 0).
// Prefill still walks the tokens one by one (not yet the chunked form).

override NK: u32;
override NV: u32;
override DK: u32;
override DV: u32;
override CB: u32;         // columns per workgroup: 128 / CB row slices, RS = DK / (128 / CB) rows each (<= 32)
override CONV_DIM: u32;   // floats per token of the convolution's output: q | k | v
override TILED: bool = false;  // value head h reads key head h % NK (llama.cpp's order), not h / (NV / NK)

@group(0) @binding(0) var<storage, read> conv: array<f32>;          // [token][CONV_DIM], q and k normalized
@group(0) @binding(1) var<storage, read> gates: array<f32>;         // [token][NV][decay, beta]
@group(0) @binding(2) var<storage, read_write> state: array<f32>;   // [head][DK][DV]
@group(0) @binding(4) var<storage, read_write> out: array<f32>;     // [token][NV DV]

var<workgroup> q_sh: array<f32, 256>;
var<workgroup> k_sh: array<f32, 256>;
var<workgroup> red_a: array<f32, 128>;
var<workgroup> red_b: array<f32, 128>;

@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let h = wg.x;
    let kh = select(h / (NV / NK), h % NK, TILED);
    let r_slices = 128u / CB;
    let rs = (DK + r_slices - 1u) / r_slices;
    let c = tid % CB;
    let r = tid / CB;
    let j = wg.y * CB + c;
    let i0 = r * rs;
    var s: array<f32, 32>;
    let fresh = step.pos0 == 0u;
    for (var ii = 0u; ii < rs; ii++) {
        let i = i0 + ii;
        if (i < DK) {
            s[ii] = select(state[(h * DK + i) * DV + j], 0.0, fresh);
        }
    }
    for (var t = 0u; t < step.n_tokens; t++) {
        let row = t * CONV_DIM;
        for (var i = tid; i < DK; i += 128u) {
            q_sh[i] = conv[row + kh * DK + i];
            k_sh[i] = conv[row + NK * DK + kh * DK + i];
        }
        let decay = gates[(t * NV + h) * 2u];
        let beta = gates[(t * NV + h) * 2u + 1u];
        workgroupBarrier();
        var mem = 0.0;
        for (var ii = 0u; ii < rs; ii++) {
            let i = i0 + ii;
            if (i < DK) {
                s[ii] *= decay;
                mem += s[ii] * k_sh[i];
            }
        }
        red_a[tid] = mem;
        workgroupBarrier();
        mem = 0.0;
        for (var p = 0u; p < r_slices; p++) {
            mem += red_a[p * CB + c];
        }
        let d = (conv[row + 2u * NK * DK + h * DV + j] - mem) * beta;
        var o = 0.0;
        for (var ii = 0u; ii < rs; ii++) {
            let i = i0 + ii;
            if (i < DK) {
                s[ii] += k_sh[i] * d;
                o += s[ii] * q_sh[i];
            }
        }
        red_b[tid] = o;
        workgroupBarrier();
        if (r == 0u) {
            var sum = 0.0;
            for (var p = 0u; p < r_slices; p++) {
                sum += red_b[p * CB + c];
            }
            out[t * NV * DV + h * DV + j] = sum;
        }
        // The next token overwrites q_sh, k_sh and red_*: everyone must be done reading them.
        workgroupBarrier();
    }
    for (var ii = 0u; ii < rs; ii++) {
        let i = i0 + ii;
        if (i < DK) {
            state[(h * DK + i) * DV + j] = s[ii];
        }
    }
}
