// Decode attention, second half: merge the per-split softmax states of `attn_decode` into each
// head's output: out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s.
// One workgroup per head; the split weights are computed once, in parallel, into workgroup memory.

struct Step {
    n_tokens: u32,
    pos0: u32,
    _p0: u32,
    _p1: u32,
}

override HD: u32;
override CTX: u32;

const CH: u32 = 64u;
const MAX_SPLITS: u32 = 1024u;   // contexts up to 65536 positions

@group(0) @binding(0) var<storage, read> part: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<uniform> step: Step;

var<workgroup> w_sh: array<f32, 1024>;
var<workgroup> r_sh: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let h = wg.x;
    let n_splits = min((step.pos0 + CH) / CH, MAX_SPLITS);
    let base = h * ((CTX + CH - 1u) / CH) * (HD + 2u);
    var mx = -3.0e38;
    for (var s = tid; s < n_splits; s += 64u) {
        mx = max(mx, part[base + s * (HD + 2u) + HD]);
    }
    r_sh[tid] = mx;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (tid < k) {
            r_sh[tid] = max(r_sh[tid], r_sh[tid + k]);
        }
        workgroupBarrier();
    }
    let big_m = r_sh[0];
    workgroupBarrier();
    var l = 0.0;
    for (var s = tid; s < n_splits; s += 64u) {
        let b = base + s * (HD + 2u);
        let m = part[b + HD];
        var w = 0.0;
        if (m > -1.0e38) {   // splits wholly outside a sliding window carry nothing
            w = exp(m - big_m);
        }
        w_sh[s] = w;
        l += w * part[b + HD + 1u];
    }
    r_sh[tid] = l;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k >>= 1u) {
        if (tid < k) {
            r_sh[tid] += r_sh[tid + k];
        }
        workgroupBarrier();
    }
    let inv = 1.0 / r_sh[0];
    for (var d = tid; d < HD; d += 64u) {
        var acc = 0.0;
        for (var s = 0u; s < n_splits; s++) {
            acc += w_sh[s] * part[base + s * (HD + 2u) + d];
        }
        out[h * HD + d] = acc * inv;
    }
}
