// Sum over a row group of 32 consecutive invocations through workgroup memory: the portable
// path. Every invocation of the workgroup must call it (it has barriers).

var<workgroup> red: array<vec4<f32>, 256>;

fn reduce4(v: vec4<f32>, lid: u32) -> vec4<f32> {
    red[lid] = v;
    workgroupBarrier();
    for (var s = 16u; s > 0u; s >>= 1u) {
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
