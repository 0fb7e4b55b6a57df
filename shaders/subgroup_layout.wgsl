// How this adapter lays subgroups over a 1-D workgroup. The kernels with subgroup operations
// (reduce_sg.wgsl, i8_smx.wgsl) assume each subgroup is `subgroup_size` consecutive invocations
// in order, so that lid % size is the lane: true on every adapter measured, promised by no API
// (WGSL leaves the mapping to the implementation). gpu/mod.rs runs this once where it would pick
// those kernels and keeps the portable ones where the layout differs.
// out[lid] = the subgroup size, or 0 where invocation lid breaks the layout.
// Bindings: 0 out (256 words). Dispatch: Fixed(1).

@group(0) @binding(0) var<storage, read_write> out: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(subgroup_invocation_id) lane: u32,
        @builtin(subgroup_size) size: u32) {
    // Every subgroup operation first, in uniform control flow (&& would branch around them).
    let first = subgroupBroadcastFirst(lid);
    let partner = subgroupShuffleXor(lid, 1u);
    let count = subgroupAdd(1u);
    let ok = lane == lid % size && first == lid - lane && partner == (lid ^ 1u) && count == size;
    out[lid] = select(0u, size, ok);
}
