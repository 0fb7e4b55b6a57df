// One matrix row times the activation vector for the decode kernels (matvec, qkv_rope): the
// 32 invocations of a row stride over 8-weight chunks, two independent chunks per step so their
// loads are in flight together. With `norm`, x is RMS-normalized on the fly: it is scaled by the
// norm weight (vecs[NW_OFF..] + NW_OFFSET) here and the sum of squares comes back for the caller
// to finish 1/rms after the row reduction. Returns (partial dot, partial sum of squares).
// Expects the kernel to declare K, NW_OFF, NW_OFFSET, `x` (binding 2) and `vecs` (binding 4).

fn chunk(row: u32, k8: u32, norm: bool) -> vec2<f32> {
    var a0 = x[2u * k8];
    var a1 = x[2u * k8 + 1u];
    var ss = 0.0;
    if (norm) {
        ss = dot(a0, a0) + dot(a1, a1);
        let b = NW_OFF + k8 * 8u;
        a0 *= vec4<f32>(vecs[b], vecs[b + 1u], vecs[b + 2u], vecs[b + 3u]) + NW_OFFSET;
        a1 *= vec4<f32>(vecs[b + 4u], vecs[b + 5u], vecs[b + 6u], vecs[b + 7u]) + NW_OFFSET;
    }
    let w = load8(row * K + k8 * 8u);
    return vec2<f32>(dot(w.lo, a0) + dot(w.hi, a1), ss);
}

fn row_dot(row: u32, t: u32, norm: bool) -> vec2<f32> {
    var acc = vec2<f32>(0.0);
    var k8 = t;
    for (; k8 + 32u < K / 8u; k8 += 64u) {
        acc += chunk(row, k8, norm) + chunk(row, k8 + 32u, norm);
    }
    if (k8 < K / 8u) {
        acc += chunk(row, k8, norm);
    }
    return acc;
}
