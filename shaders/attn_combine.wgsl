// Decode attention, second half, as a dispatch of its own: one workgroup per head merges the
// per-split softmax states of `attn_decode` (attn_merge.wgsl). Used where the splits cannot merge
// themselves (attn_decode's FUSED tail needs Vulkan's device-scope barriers).

override HD: u32;
override CTX: u32;

const WG: u32 = 256u;

@group(0) @binding(0) var<storage, read> part: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read_write> out: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) tid: u32) {
    // The decode step wrote splits 0 .. n - 1 of every head (64 positions each).
    merge_head(wg.x, tid, (step.pos0 + CH) / CH);
}
