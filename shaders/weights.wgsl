// Weight access by 32-bit word for the prefill matmul and the embedding (after layout.wgsl).
// For every layout, element e of the row-major matrix lives in word e / (32 / bits) and its
// block's (scale, offset) is block_meta(e / QBLOCK), so addressing needs no per-layout row
// strides.

@group(0) @binding(0) var<storage, read> w_words: array<u32>;

struct W8 {
    lo: vec4<f32>,
    hi: vec4<f32>,
}

fn unpack_bf16x2(w: u32) -> vec2<f32> {
    return vec2<f32>(bitcast<f32>(w << 16u), bitcast<f32>(w & 0xffff0000u));
}

fn nib4(w: u32, shift: u32) -> vec4<f32> {
    return vec4<f32>(f32((w >> shift) & 15u), f32((w >> (shift + 4u)) & 15u),
                     f32((w >> (shift + 8u)) & 15u), f32((w >> (shift + 12u)) & 15u));
}

fn sbyte4(w: u32) -> vec4<f32> {
    return vec4<f32>(f32(bitcast<i32>(w << 24u) >> 24u), f32(bitcast<i32>(w << 16u) >> 24u),
                     f32(bitcast<i32>(w << 8u) >> 24u), f32(bitcast<i32>(w) >> 24u));
}


// Eight consecutive weights starting at element e (a multiple of 8), dequantized to f32.
fn load8(e: u32) -> W8 {
    var r: W8;
    switch LAYOUT {
        case 0u: {
            r.lo = vec4<f32>(bitcast<f32>(w_words[e]), bitcast<f32>(w_words[e + 1u]),
                             bitcast<f32>(w_words[e + 2u]), bitcast<f32>(w_words[e + 3u]));
            r.hi = vec4<f32>(bitcast<f32>(w_words[e + 4u]), bitcast<f32>(w_words[e + 5u]),
                             bitcast<f32>(w_words[e + 6u]), bitcast<f32>(w_words[e + 7u]));
        }
        case 1u: {
            let i = e / 2u;
            r.lo = vec4<f32>(unpack2x16float(w_words[i]), unpack2x16float(w_words[i + 1u]));
            r.hi = vec4<f32>(unpack2x16float(w_words[i + 2u]), unpack2x16float(w_words[i + 3u]));
        }
        case 2u: {
            let i = e / 2u;
            r.lo = vec4<f32>(unpack_bf16x2(w_words[i]), unpack_bf16x2(w_words[i + 1u]));
            r.hi = vec4<f32>(unpack_bf16x2(w_words[i + 2u]), unpack_bf16x2(w_words[i + 3u]));
        }
        case 3u: {
            let w = w_words[e / 8u];
            let m = block_meta(e / QBLOCK);
            r.lo = nib4(w, 0u) * m.x + m.y;
            r.hi = nib4(w, 16u) * m.x + m.y;
        }
        default: {
            let i = e / 4u;
            let m = block_meta(e / QBLOCK);
            r.lo = sbyte4(w_words[i]) * m.x + m.y;
            r.hi = sbyte4(w_words[i + 1u]) * m.x + m.y;
        }
    }
    return r;
}
