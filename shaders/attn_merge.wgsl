// Merging the per-split softmax states of decode attention into a head's output:
// out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s. Shared by `attn_combine` (a dispatch of
// its own) and `attn_decode`'s fused tail (the head's last split to finish merges them). The
// including kernel declares `part`, `out`, HD, CTX and its workgroup size WG (128 or 256).
// Split weights are computed once, in parallel, into workgroup memory; then invocation (d, g)
// sums dimension d over splits g, g + GROUPS, ... four at a time, so deep contexts (64 splits at
// 4096 positions) cost a few overlapped loads per invocation.

const CH: u32 = 64u;             // positions per split
const MAX_SPLITS: u32 = 1024u;   // contexts up to 65536 positions
// Dimensions per pass: 128 for head dims 65..128 (one pass; a second one waited a memory round
// trip: Phi-3 shape +0.9%), 64 for smaller heads (more split groups: SmolLM2 at depth 4096 lost
// 2.5% with 128). GROUPS split groups of DW invocations. (The host sets both: GROUPS = WG / DW.)
override DW: u32 = 64u;
override GROUPS: u32 = 4u;

var<workgroup> w_sh: array<f32, 1024>;
var<workgroup> r_sh: array<f32, WG>;
var<workgroup> ml_sh: array<vec2<f32>, 64>;

fn merge_reduce(v: f32, tid: u32, max_op: bool) -> f32 {
    r_sh[tid] = v;
    workgroupBarrier();
    for (var k = WG / 2u; k > 0u; k >>= 1u) {
        if (tid < k) {
            if (max_op) {
                r_sh[tid] = max(r_sh[tid], r_sh[tid + k]);
            } else {
                r_sh[tid] += r_sh[tid + k];
            }
        }
        workgroupBarrier();
    }
    let r = r_sh[0];
    workgroupBarrier();
    return r;
}

// Dimension d of split s (0 past the last split).
fn first_val(base: u32, stride: u32, s: u32, n_splits: u32, d: u32) -> f32 {
    if (s < n_splits) {
        return part[base + s * stride + d];
    }
    return 0.0;
}

// Decode steps write splits 0 .. n_splits - 1 of every head (64 positions each).
fn merge_splits() -> u32 {
    return min((step.pos0 + CH) / CH, MAX_SPLITS);
}

fn merge_head(h: u32, tid: u32) {
    let n_splits = merge_splits();
    let stride = HD + 4u;   // acc[HD], max, sum, 2 pad (vec4-aligned for rowdot.wgsl's merge)
    let base = h * ((CTX + CH - 1u) / CH) * stride;
    // This invocation's first reads are all requested at once (a split's (max, sum), and the
    // values it sums first), so one memory round trip precedes the reductions, not three.
    let g = tid / DW;
    let d1 = tid % DW;
    var m_own = -3.0e38;
    var l_own = 0.0;
    if (tid < n_splits) {
        m_own = part[base + tid * stride + HD];
        l_own = part[base + tid * stride + HD + 1u];
    }
    var pre = vec4<f32>(0.0);
    if (d1 < HD) {
        pre = vec4<f32>(first_val(base, stride, g, n_splits, d1), first_val(base, stride, g + GROUPS, n_splits, d1),
                        first_val(base, stride, g + 2u * GROUPS, n_splits, d1),
                        first_val(base, stride, g + 3u * GROUPS, n_splits, d1));
    }
    var big_m: f32;
    var inv: f32;
    if (n_splits <= 64u) {
        // Few splits (up to 4096 positions): after one barrier every invocation folds all the
        // (max, sum) pairs itself, instead of two reduction trees of eight barriers each.
        if (tid < 64u) {
            ml_sh[tid] = vec2<f32>(m_own, l_own);
        }
        workgroupBarrier();
        big_m = -3.0e38;
        for (var s = 0u; s < n_splits; s++) {
            big_m = max(big_m, ml_sh[s].x);
        }
        var l = 0.0;
        for (var s = 0u; s < n_splits; s++) {
            let ml = ml_sh[s];
            if (ml.x > -1.0e38) {   // splits wholly outside a sliding window carry nothing
                l += exp(ml.x - big_m) * ml.y;
            }
        }
        inv = 1.0 / l;
        w_sh[tid] = select(0.0, exp(m_own - big_m), m_own > -1.0e38);
        workgroupBarrier();
    } else {
        var mx = m_own;
        for (var s = tid + WG; s < n_splits; s += WG) {
            mx = max(mx, part[base + s * stride + HD]);
        }
        big_m = merge_reduce(mx, tid, true);
        // Splits wholly outside a sliding window carry nothing; w_sh is 0 past the last split.
        var w_own = 0.0;
        if (m_own > -1.0e38) {
            w_own = exp(m_own - big_m);
        }
        w_sh[tid] = w_own;
        var l = w_own * l_own;
        for (var s = tid + WG; s < n_splits; s += WG) {
            let b = base + s * stride;
            let m = part[b + HD];
            var w = 0.0;
            if (m > -1.0e38) {
                w = exp(m - big_m);
            }
            w_sh[s] = w;
            l += w * part[b + HD + 1u];
        }
        inv = 1.0 / merge_reduce(l, tid, false);   // its barriers also publish w_sh
    }
    for (var d0 = 0u; d0 < HD; d0 += DW) {
        let d = d0 + d1;
        var acc = 0.0;
        if (d < HD) {
            var s = g;
            if (d0 == 0u) {
                acc = dot(pre, vec4<f32>(w_sh[g], w_sh[g + GROUPS], w_sh[g + 2u * GROUPS], w_sh[g + 3u * GROUPS]));
                s = g + 4u * GROUPS;
            }
            for (; s + 3u * GROUPS < n_splits; s += 4u * GROUPS) {
                let a0 = part[base + s * stride + d];
                let a1 = part[base + (s + GROUPS) * stride + d];
                let a2 = part[base + (s + 2u * GROUPS) * stride + d];
                let a3 = part[base + (s + 3u * GROUPS) * stride + d];
                acc += w_sh[s] * a0 + w_sh[s + GROUPS] * a1 + w_sh[s + 2u * GROUPS] * a2 + w_sh[s + 3u * GROUPS] * a3;
            }
            for (; s < n_splits; s += GROUPS) {
                acc += w_sh[s] * part[base + s * stride + d];
            }
        }
        r_sh[tid] = acc;
        workgroupBarrier();
        if (g == 0u && d < HD) {
            var tot = 0.0;
            for (var q = 0u; q < GROUPS; q++) {
                tot += r_sh[tid + q * DW];
            }
            out[h * HD + d] = tot * inv;
        }
        workgroupBarrier();
    }
}
