// Qwen3.5's gated attention output: attn[t, i] *= sigmoid(gate[t, i]), the gates being the rows
// of the fused projection after [q; k; v] (the loader moves them there from q_proj, where they
// sit beside each head's query rows).

override N: u32;          // q_dim
override STRIDE: u32;     // floats between tokens' rows of the projection
override GATE_OFF: u32;   // where the gates start in a row

@group(0) @binding(0) var<storage, read> proj: array<f32>;
@group(0) @binding(1) var<storage, read_write> attn: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let e = gid.x + gid.y * nwg.x * 256u;
    if (e >= step.n_tokens * N) {
        return;
    }
    let t = e / N;
    let g = proj[t * STRIDE + GATE_OFF + e % N];
    attn[e] = attn[e] / (1.0 + exp(-g));
}
