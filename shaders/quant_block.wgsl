// One 32-element block of prefill activations in 8 bits for matmul_i8.wgsl (quant_rows.wgsl
// explains the two planes): the block scaled by 127 / max|x| to s, coarse bytes c = round(s),
// fine bytes f = round((s - c) * 254), and (d, sum x) with d = max|x| / (127 * 254). Shared by
// quant_rows.wgsl and the kernels that produce a matmul's input (rmsnorm.wgsl, ffn_act.wgsl
// I8_OUT), so the planes are the same whoever writes them.
//
// Eight invocations take a block, four values each: invocation `lid` holds part lid % 8 (values
// 4 (lid % 8) .. + 3) of its workgroup's block lid / 8, and gets that part's coarse and fine
// words (words lid % 8 of each plane; a block is 16 words, c0..c7 then f0..f7) and the block's
// (d, sum), the sum taken over the parts in order. Neighbouring invocations read neighbouring
// values (one invocation a block read them 128 bytes apart and cost more than the pass it
// saved). Every invocation of the workgroup (at most 256) must call it (barriers).
// matmul_i8.wgsl keeps its blocks' pairs in qpart_sh while its K loop runs (its GLU epilogue
// calls quant_part after): one array of 2 KiB for both, within 32 KiB adapters' limit.
var<workgroup> qpart_sh: array<vec2<f32>, 256>;

struct QPart {
    c: u32,
    f: u32,
    ds: vec2<f32>,
}

// The words of a block's planes that part `part` (0..7) of block `b` writes: (coarse, fine).
fn plane_words(b: u32, part: u32) -> vec2<u32> {
    return vec2<u32>(16u * b + part, 16u * b + 8u + part);
}

fn quant_part(v: vec4<f32>, lid: u32) -> QPart {
    let a = abs(v);
    qpart_sh[lid] = vec2<f32>(max(max(a.x, a.y), max(a.z, a.w)), v.x + v.y + v.z + v.w);
    workgroupBarrier();
    let b0 = lid - lid % 8u;
    var amax = 0.0;
    var sum = 0.0;
    for (var i = 0u; i < 8u; i++) {
        let p = qpart_sh[b0 + i];
        amax = max(amax, p.x);
        sum += p.y;
    }
    workgroupBarrier();   // the next call's writes after every read of this one
    let inv = select(0.0, 127.0 / amax, amax > 0.0);
    let sc = v * inv;
    let r = round(sc);
    return QPart(pack4xI8(vec4<i32>(r)), pack4xI8(vec4<i32>(round((sc - r) * 254.0))),
                 vec2<f32>(amax / (127.0 * 254.0), sum));
}
