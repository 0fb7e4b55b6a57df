// Decode attention, second half: merge the per-split softmax states of `attn_decode` into the
// attention output of each head: out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s.

struct Step {
    n_tokens: u32,
    pos0: u32,
    _p0: u32,
    _p1: u32,
}

override HD: u32;
override CTX: u32;

const CH: u32 = 64u;

@group(0) @binding(0) var<storage, read> part: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<uniform> step: Step;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    let h = wg.x;
    let n_splits = (step.pos0 + 1u + CH - 1u) / CH;
    let base = h * ((CTX + CH - 1u) / CH) * (HD + 2u);
    var big_m = -3.0e38;
    for (var s = 0u; s < n_splits; s++) {
        big_m = max(big_m, part[base + s * (HD + 2u) + HD]);
    }
    var l = 0.0;
    var acc = array<f32, 4>(0.0, 0.0, 0.0, 0.0);
    for (var s = 0u; s < n_splits; s++) {
        let b = base + s * (HD + 2u);
        let m = part[b + HD];
        if (m < -1.0e38) {
            continue;   // a split wholly outside the sliding window
        }
        let w = exp(m - big_m);
        l += w * part[b + HD + 1u];
        for (var i = 0u; i < 4u; i++) {
            let d = tid + 64u * i;
            if (d < HD) {
                acc[i] += w * part[b + d];
            }
        }
    }
    for (var i = 0u; i < 4u; i++) {
        let d = tid + 64u * i;
        if (d < HD) {
            out[h * HD + d] = acc[i] / l;
        }
    }
}
