// Prefill activations to f16 for the matrix-unit matmuls (matmul_f16.wgsl), which load their A
// operand straight from memory: one conversion per input instead of one per output tile.
// Magnitudes past f16's range saturate at its largest finite value rather than becoming
// infinities. Four elements an invocation (one was twice as slow: the dispatches are short).
// Dispatch: Elems(ceil(N / 4)).

override N: u32;   // elements per token

@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f16>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i0 = 4u * (gid.x + gid.y * nwg.x * 256u);
    let n = step.n_tokens * N;
    for (var i = i0; i < min(i0 + 4u, n); i++) {
        y[i] = f16(clamp(x[i], -65504.0, 65504.0));
    }
}
