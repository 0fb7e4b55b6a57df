// Two activations as f16 in one word (rmsnorm.wgsl and ffn_act.wgsl F16_OUT), for the
// matrix-unit matmuls' f16 input; magnitudes past f16's range saturate rather than become
// infinities, as in to_f16.wgsl. pack2x16float needs no `enable f16`.

fn pack_h2(v: vec2<f32>) -> u32 {
    return pack2x16float(clamp(v, vec2<f32>(-65504.0), vec2<f32>(65504.0)));
}
