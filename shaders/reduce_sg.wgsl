// Sum over a row group of 32 consecutive invocations with one subgroup operation. Chosen only on
// adapters whose subgroups are exactly 32 wide and laid out in order (lid % 32 is the subgroup
// lane, which the xor shuffles below rely on; gpu/mod.rs checks it with subgroup_layout.wgsl
// when the device opens), so a subgroup is exactly one row group. Browsers get an
// `enable subgroups;` before this file; naga natively rejects the directive (pipelines.rs).

fn reduce4(v: vec4<f32>, lid: u32) -> vec4<f32> {
    return subgroupAdd(v);
}

// Max over the aligned quad of invocations lid & ~3 .. (lid & ~3) + 3.
fn quad_max(v: f32, lid: u32) -> f32 {
    let a = max(v, subgroupShuffleXor(v, 1u));
    return max(a, subgroupShuffleXor(a, 2u));
}

// (w of invocation lid ^ 1, then the bits of the sums of s over this invocation's aligned pair
// and over the other pair of its aligned quad): what rowdot.wgsl's `stage_q` trades so that
// each staged vector has one writer.
fn stage_words(w: vec2<u32>, s: f32, lid: u32) -> vec4<u32> {
    let pair = s + subgroupShuffleXor(s, 1u);
    let other = subgroupShuffleXor(pair, 2u);
    return vec4<u32>(subgroupShuffleXor(w, 1u), bitcast<u32>(pair), bitcast<u32>(other));
}
