// Sum over a row group of 32 consecutive invocations through workgroup memory: the portable
// path. Every invocation of the workgroup must call it (it has barriers).
// u32 because `stage_words` passes packed bytes through it: a bit pattern that reads as a NaN
// need not survive a trip through an f32. Floats are stored as their bits.

var<workgroup> red: array<vec4<u32>, 256>;

fn reduce4(v: vec4<f32>, lid: u32) -> vec4<f32> {
    red[lid] = bitcast<vec4<u32>>(v);
    workgroupBarrier();
    for (var i = 0u; i < 5u; i++) {
        let s = 16u >> i;
        if (lid % 32u < s) {
            red[lid] = bitcast<vec4<u32>>(bitcast<vec4<f32>>(red[lid]) + bitcast<vec4<f32>>(red[lid + s]));
        }
        workgroupBarrier();
    }
    let r = bitcast<vec4<f32>>(red[lid - lid % 32u]);
    // The next call reuses `red`: nobody may write it before everyone has read.
    workgroupBarrier();
    return r;
}

// Max over the aligned quad of invocations lid & ~3 .. (lid & ~3) + 3 (every invocation calls it).
fn quad_max(v: f32, lid: u32) -> f32 {
    red[lid] = vec4<u32>(bitcast<u32>(v), 0u, 0u, 0u);
    workgroupBarrier();
    let b = lid & ~3u;
    let r = max(max(bitcast<f32>(red[b].x), bitcast<f32>(red[b + 1u].x)),
                max(bitcast<f32>(red[b + 2u].x), bitcast<f32>(red[b + 3u].x)));
    workgroupBarrier();
    return r;
}

// (w of invocation lid ^ 1, then the bits of the sums of s over this invocation's aligned pair
// and over the other pair of its aligned quad): what rowdot.wgsl's `stage_q` trades so that
// each staged vector has one writer (every invocation calls it). The sums add in the subgroup
// version's order, so both paths stage the same bits.
fn stage_words(w: vec2<u32>, s: f32, lid: u32) -> vec4<u32> {
    red[lid] = vec4<u32>(w, bitcast<u32>(s), 0u);
    workgroupBarrier();
    let o = lid ^ 2u;
    let pair = s + bitcast<f32>(red[lid ^ 1u].z);
    let other = bitcast<f32>(red[o].z) + bitcast<f32>(red[o ^ 1u].z);
    let r = vec4<u32>(red[lid ^ 1u].xy, bitcast<u32>(pair), bitcast<u32>(other));
    workgroupBarrier();
    return r;
}
