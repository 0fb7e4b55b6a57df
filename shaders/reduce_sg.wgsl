// Sum over a row group of 32 consecutive invocations with one subgroup operation. Chosen only on
// adapters whose subgroups are exactly 32 wide, so a subgroup is exactly one row group.
// (Naga takes subgroup builtins without `enable subgroups;` once the device has the feature,
// and rejects the directive; browsers would want it, but wgpu's WebGPU backend has no
// subgroups yet, so this file is only used natively.)

fn reduce4(v: vec4<f32>, lid: u32) -> vec4<f32> {
    return subgroupAdd(v);
}
