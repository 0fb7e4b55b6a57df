// Prefill attention's key splits merged (attention_coop.wgsl with several splits): for each
// token, head and dimension, the splits' unnormalized outputs weighed by exp(max_s - max) and
// divided by the weighed sums. Splits past a query's last key carry a max of -3e38 and weigh 0;
// split 0 always holds the query's first key, so the maximum is finite.
// Bindings: 0 the splits' outputs and (max, sum) pairs (attention_coop.wgsl `part`), 3 out.
// Dispatch: Elems(NH * HD) when the step has more than one split (ops::attention).

override HD: u32;
override NH: u32;
override KSPL: u32;
override PSTATS: u32;

@group(0) @binding(0) var<storage, read> part: array<f32>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    let n = step.n_tokens;
    if (i >= n * NH * HD) {
        return;
    }
    let th = i / HD;   // token * NH + head
    let splits = (step.pos0 + n + KSPL - 1u) / KSPL;
    var mx = -3.0e38;
    for (var z = 0u; z < splits; z++) {
        mx = max(mx, part[PSTATS + 2u * (z * n * NH + th)]);
    }
    var sum = 0.0;
    var acc = 0.0;
    for (var z = 0u; z < splits; z++) {
        let at = PSTATS + 2u * (z * n * NH + th);
        let w = exp(part[at] - mx);
        sum += part[at + 1u] * w;
        acc += part[z * n * NH * HD + i] * w;
    }
    out[i] = acc / sum;
}
