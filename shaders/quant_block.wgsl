// One 32-element block of prefill activations in 8 bits for matmul_i8.wgsl (quant_rows.wgsl
// explains the two planes): the block scaled by 127 / max|x| to s, coarse bytes c = round(s),
// fine bytes f = round((s - c) * 254), and (d, sum x) with d = max|x| / (127 * 254). Shared by
// quant_rows.wgsl and the kernels that produce a matmul's input (rmsnorm.wgsl, ffn_act.wgsl
// I8_OUT), so the planes are the same whoever writes them.

struct QBlock {
    c: array<u32, 8>,
    f: array<u32, 8>,
    ds: vec2<f32>,
}

fn quant_block(v: array<vec4<f32>, 8>) -> QBlock {
    var amax = 0.0;
    var sum = 0.0;
    for (var i = 0u; i < 8u; i++) {
        let a = abs(v[i]);
        amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
        sum += v[i].x + v[i].y + v[i].z + v[i].w;
    }
    let inv = select(0.0, 127.0 / amax, amax > 0.0);
    var q: QBlock;
    for (var i = 0u; i < 8u; i++) {
        let sc = v[i] * inv;
        let r = round(sc);
        q.c[i] = pack4xI8(vec4<i32>(r));
        q.f[i] = pack4xI8(vec4<i32>(round((sc - r) * 254.0)));
    }
    q.ds = vec2<f32>(amax / (127.0 * 254.0), sum);
    return q;
}
