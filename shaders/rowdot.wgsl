// One matrix row times the activation vector x, split over the 32 invocations of a row, for the
// decode kernels. Quantized layouts go a whole 32-element block per step: one 128-bit load of
// quants, one (scale, offset) pair, and scale * sum(q x) + offset * sum(x), so each invocation
// issues few, wide, independent loads. Returns (partial dot, partial sum of squares of x·nw).

@group(0) @binding(2) var<storage, read> x: array<vec4<f32>>;

fn nw4(off: u32, k: u32) -> vec4<f32> {
    let b = off + k;
    return vec4<f32>(vecs[b], vecs[b + 1u], vecs[b + 2u], vecs[b + 3u]) + NW_OFFSET;
}

fn row_dot(row: u32, t: u32, norm: bool, nw_off: u32) -> vec2<f32> {
    var acc = 0.0;
    var ss = 0.0;
    if (LAYOUT >= 3u && K % 32u == 0u) {
        for (var blk = t; blk < K / 32u; blk += 32u) {
            var xs: array<vec4<f32>, 8>;
            var sx = vec4<f32>(0.0);
            for (var j = 0u; j < 8u; j++) {
                var a = x[blk * 8u + j];
                if (norm) {
                    ss += dot(a, a);
                    a *= nw4(nw_off, blk * 32u + 4u * j);
                }
                xs[j] = a;
                sx += a;
            }
            let e = row * K + blk * 32u;
            if (LAYOUT == 3u) {
                let v = w_words[e / 32u];
                let b = 2u * (e / 32u);
                let qx = dot(nib4(v.x, 0u), xs[0]) + dot(nib4(v.x, 16u), xs[1])
                       + dot(nib4(v.y, 0u), xs[2]) + dot(nib4(v.y, 16u), xs[3])
                       + dot(nib4(v.z, 0u), xs[4]) + dot(nib4(v.z, 16u), xs[5])
                       + dot(nib4(v.w, 0u), xs[6]) + dot(nib4(v.w, 16u), xs[7]);
                acc += w_meta[b] * qx + w_meta[b + 1u] * dot(sx, vec4<f32>(1.0));
            } else {
                let v0 = w_words[e / 16u];
                let v1 = w_words[e / 16u + 1u];
                let q0 = dot(sbyte4(v0.x), xs[0]) + dot(sbyte4(v0.y), xs[1]) + dot(sbyte4(v0.z), xs[2]) + dot(sbyte4(v0.w), xs[3]);
                let q1 = dot(sbyte4(v1.x), xs[4]) + dot(sbyte4(v1.y), xs[5]) + dot(sbyte4(v1.z), xs[6]) + dot(sbyte4(v1.w), xs[7]);
                let s0 = dot(xs[0] + xs[1] + xs[2] + xs[3], vec4<f32>(1.0));
                let s1 = dot(xs[4] + xs[5] + xs[6] + xs[7], vec4<f32>(1.0));
                let b0 = 2u * (e / QBLOCK);
                let b1 = 2u * ((e + 16u) / QBLOCK);
                acc += w_meta[b0] * q0 + w_meta[b0 + 1u] * s0 + w_meta[b1] * q1 + w_meta[b1 + 1u] * s1;
            }
        }
    } else {
        for (var k8 = t; k8 < K / 8u; k8 += 32u) {
            var a0 = x[2u * k8];
            var a1 = x[2u * k8 + 1u];
            if (norm) {
                ss += dot(a0, a0) + dot(a1, a1);
                a0 *= nw4(nw_off, k8 * 8u);
                a1 *= nw4(nw_off, k8 * 8u + 4u);
            }
            let w = load8(row * K + k8 * 8u);
            acc += dot(w.lo, a0) + dot(w.hi, a1);
        }
    }
    return vec2<f32>(acc, ss);
}
