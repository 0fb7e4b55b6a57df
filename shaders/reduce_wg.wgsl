// Row reduction over 32 consecutive invocations through workgroup memory: the portable path.
// Every invocation of the workgroup must call it (it has barriers).

var<workgroup> red: array<vec2<f32>, 256>;

fn reduce(v: vec2<f32>, lid: u32) -> vec2<f32> {
    red[lid] = v;
    workgroupBarrier();
    for (var s = 16u; s > 0u; s >>= 1u) {
        if (lid % 32u < s) {
            red[lid] += red[lid + s];
        }
        workgroupBarrier();
    }
    return red[lid - lid % 32u];
}
