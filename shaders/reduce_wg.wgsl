// Sum over a row group of 32 consecutive invocations through workgroup memory: the portable
// path. Every invocation of the workgroup must call it (it has barriers).

var<workgroup> red: array<vec4<f32>, 256>;

fn reduce4(v: vec4<f32>, lid: u32) -> vec4<f32> {
    red[lid] = v;
    workgroupBarrier();
    for (var i = 0u; i < 5u; i++) {
        let s = 16u >> i;
        if (lid % 32u < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    let r = red[lid - lid % 32u];
    // The next call reuses `red`: nobody may write it before everyone has read.
    workgroupBarrier();
    return r;
}

// Max over the aligned quad of invocations lid & ~3 .. (lid & ~3) + 3 (every invocation calls it).
fn quad_max(v: f32, lid: u32) -> f32 {
    red[lid].x = v;
    workgroupBarrier();
    let b = lid & ~3u;
    let r = max(max(red[b].x, red[b + 1u].x), max(red[b + 2u].x, red[b + 3u].x));
    workgroupBarrier();
    return r;
}

// Sum over the aligned pair of invocations lid & ~1, (lid & ~1) + 1 (every invocation calls it).
fn pair_add(v: f32, lid: u32) -> f32 {
    red[lid].x = v;
    workgroupBarrier();
    let r = red[lid & ~1u].x + red[lid | 1u].x;
    workgroupBarrier();
    return r;
}
