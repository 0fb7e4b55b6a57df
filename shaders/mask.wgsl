// Constrained decoding on the GPU: the logits of the tokens a constraint (JSON schema, grammar)
// forbids become -3e38 before the sampler picks (it also does the greedy choice then): as good
// as -infinity there (exp underflows to 0), and WGSL cannot spell an infinite constant (Tint
// refuses bitcast<f32>(0xff800000u)).
// `allowed` holds one bit per token, written by the CPU before each step: a constraint's next
// mask depends on the token just chosen, so these steps are not queued ahead.
// Bindings: 0 logits (rw), 1 allowed bits; 5 step (unused). Dispatch: Elems(V).

override V: u32;

@group(0) @binding(0) var<storage, read_write> logits: array<f32>;
@group(0) @binding(1) var<storage, read> allowed: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= V) {
        return;
    }
    if (((allowed[i / 32u] >> (i % 32u)) & 1u) == 0u) {
        logits[i] = -3.0e38;
    }
}
