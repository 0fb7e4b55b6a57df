// Merging the per-split softmax states of decode attention into a head's output:
// out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s. Shared by `attn_combine` (a dispatch of
// its own) and `attn_decode`'s fused tail (the head's last split to finish merges them). The
// including kernel declares `part` (vec4s), `out`, HD, CTX and its workgroup size WG (128 or 256).
// Split weights are computed once, in parallel, into workgroup memory; then invocation (l, g)
// sums dimensions 4l .. 4l + 3 over splits g, g + GROUPS, ... (GROUPS = WG / (HD / 4)), with its
// first four splits requested up front: up to 4 x GROUPS splits (32 for 64-wide heads in 128
// invocations) cost one memory round trip.

const CH: u32 = 64u;             // positions per split
override LANES: u32 = HD / 4u;   // HD is a multiple of 4, at most 4 x WG
override GROUPS: u32 = WG / LANES;

// Workgroup memory is kept small (sized by the context; one array for both reductions): attn_decode
// carries these arrays even where its merge is off, and a larger footprint measured 2.5% slower at
// 4096 positions.
// At most 2048 splits (the host refuses longer contexts: MAX_ATTENTION_SPLITS).
override W_LEN: u32 = max(WG, (CTX + CH - 1u) / CH);
var<workgroup> w_sh: array<f32, W_LEN>;
var<workgroup> r4_sh: array<vec4<f32>, WG>;
var<workgroup> ml_sh: array<vec2<f32>, 64>;

fn merge_reduce(v: f32, tid: u32, max_op: bool) -> f32 {
    r4_sh[tid].x = v;
    workgroupBarrier();
    for (var k = WG / 2u; k > 0u; k >>= 1u) {
        if (tid < k) {
            if (max_op) {
                r4_sh[tid].x = max(r4_sh[tid].x, r4_sh[tid + k].x);
            } else {
                r4_sh[tid].x += r4_sh[tid + k].x;
            }
        }
        workgroupBarrier();
    }
    let r = r4_sh[0].x;
    workgroupBarrier();
    return r;
}

// Dimensions 4l .. 4l + 3 of split s (0 past the last split). `part` is read as vec4: lanes then
// take consecutive 16-byte pieces (four scalar loads 16 bytes apart cost 2% at 4096 positions).
fn split_vals(base: u32, stride: u32, s: u32, n_splits: u32, l: u32) -> vec4<f32> {
    if (s < n_splits) {
        return part[base + s * stride + l];
    }
    return vec4<f32>(0.0);
}

// Split s's weight times its values (nothing past the last split, whose w_sh is not written).
fn weighted(s: u32, n_splits: u32, v: vec4<f32>) -> vec4<f32> {
    if (s < n_splits) {
        return w_sh[s] * v;
    }
    return vec4<f32>(0.0);
}

// Merge head h's first n_splits splits (uniform).
fn merge_head(h: u32, tid: u32, n_splits: u32) {
    // In vec4s: acc[HD], then (max, sum, 2 pad).
    let stride = HD / 4u + 1u;
    let base = h * ((CTX + CH - 1u) / CH) * stride;
    let ml = HD / 4u;
    // This invocation's first reads are all requested at once (a split's (max, sum), and the
    // values it sums first), so one memory round trip precedes the reductions, not several.
    let g = tid / LANES;
    let l4 = tid % LANES;
    let live = g < GROUPS;
    var m_own = -3.0e38;
    var l_own = 0.0;
    if (tid < n_splits) {
        let v = part[base + tid * stride + ml];
        m_own = v.x;
        l_own = v.y;
    }
    var p0 = vec4<f32>(0.0);
    var p1 = vec4<f32>(0.0);
    var p2 = vec4<f32>(0.0);
    var p3 = vec4<f32>(0.0);
    if (live) {
        p0 = split_vals(base, stride, g, n_splits, l4);
        p1 = split_vals(base, stride, g + GROUPS, n_splits, l4);
        p2 = split_vals(base, stride, g + 2u * GROUPS, n_splits, l4);
        p3 = split_vals(base, stride, g + 3u * GROUPS, n_splits, l4);
    }
    var big_m: f32;
    var inv: f32;
    if (n_splits <= 64u) {
        // Few splits (up to 4096 positions): after one barrier every invocation folds all the
        // (max, sum) pairs itself, instead of two reduction trees of several barriers each.
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
            let p = ml_sh[s];
            if (p.x > -1.0e38) {   // splits wholly outside a sliding window carry nothing
                l += exp(p.x - big_m) * p.y;
            }
        }
        inv = 1.0 / l;
        w_sh[tid] = select(0.0, exp(m_own - big_m), m_own > -1.0e38);
        workgroupBarrier();
    } else {
        var mx = m_own;
        for (var s = tid + WG; s < n_splits; s += WG) {
            mx = max(mx, part[base + s * stride + ml].x);
        }
        big_m = merge_reduce(mx, tid, true);
        // Splits wholly outside a sliding window carry nothing.
        var w_own = 0.0;
        if (m_own > -1.0e38) {
            w_own = exp(m_own - big_m);
        }
        w_sh[tid] = w_own;
        var l = w_own * l_own;
        for (var s = tid + WG; s < n_splits; s += WG) {
            let v = part[base + s * stride + ml];
            var w = 0.0;
            if (v.x > -1.0e38) {
                w = exp(v.x - big_m);
            }
            w_sh[s] = w;
            l += w * v.y;
        }
        inv = 1.0 / merge_reduce(l, tid, false);   // its barriers also publish w_sh
    }
    var acc = vec4<f32>(0.0);
    if (live) {
        acc = weighted(g, n_splits, p0) + weighted(g + GROUPS, n_splits, p1) +
              weighted(g + 2u * GROUPS, n_splits, p2) + weighted(g + 3u * GROUPS, n_splits, p3);
        var s = g + 4u * GROUPS;
        for (; s + 3u * GROUPS < n_splits; s += 4u * GROUPS) {
            let a0 = split_vals(base, stride, s, n_splits, l4);
            let a1 = split_vals(base, stride, s + GROUPS, n_splits, l4);
            let a2 = split_vals(base, stride, s + 2u * GROUPS, n_splits, l4);
            let a3 = split_vals(base, stride, s + 3u * GROUPS, n_splits, l4);
            acc += w_sh[s] * a0 + w_sh[s + GROUPS] * a1 + w_sh[s + 2u * GROUPS] * a2 + w_sh[s + 3u * GROUPS] * a3;
        }
        for (; s < n_splits; s += GROUPS) {
            acc += w_sh[s] * split_vals(base, stride, s, n_splits, l4);
        }
    }
    r4_sh[tid] = acc;
    workgroupBarrier();
    if (g == 0u) {
        var tot = acc;
        for (var q = 1u; q < GROUPS; q++) {
            tot += r4_sh[tid + q * LANES];
        }
        let o = h * HD + 4u * l4;
        let r = tot * inv;
        out[o] = r.x;
        out[o + 1u] = r.y;
        out[o + 2u] = r.z;
        out[o + 3u] = r.w;
    }
}
