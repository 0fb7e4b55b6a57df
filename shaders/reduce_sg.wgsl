// Sum over a row group of 32 consecutive invocations with one subgroup operation. Chosen only on
// adapters whose subgroups are exactly 32 wide, so a subgroup is exactly one row group.
// (Naga takes subgroup builtins without `enable subgroups;` once the device has the feature,
// and rejects the directive; browsers would want it, but wgpu's WebGPU backend has no
// subgroups yet, so this file is only used natively.)

fn reduce4(v: vec4<f32>, lid: u32) -> vec4<f32> {
    return subgroupAdd(v);
}

// Max over the aligned quad of invocations lid & ~3 .. (lid & ~3) + 3.
fn quad_max(v: f32, lid: u32) -> f32 {
    let a = max(v, subgroupShuffleXor(v, 1u));
    return max(a, subgroupShuffleXor(a, 2u));
}

// Sum over the aligned pair of invocations lid & ~1, (lid & ~1) + 1.
fn pair_add(v: f32, lid: u32) -> f32 {
    return v + subgroupShuffleXor(v, 1u);
}
