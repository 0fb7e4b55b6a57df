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


// Eight consecutive weights starting at element e (a multiple of 8) as stored: the words
// (F32 fills lo and hi, F16/BF16 lo, Q8 lo.xy, Q4 lo.x) and the block's (scale, offset).
// Separate from the arithmetic so a kernel can issue the loads one step ahead and convert
// after the work in between: a value used right after its load stalls the invocation there.
struct Raw8 {
    lo: vec4<u32>,
    hi: vec4<u32>,
    m: vec2<f32>,
}

fn load_raw8(e: u32) -> Raw8 {
    var r: Raw8;
    switch LAYOUT {
        case 0u: {
            r.lo = vec4<u32>(w_words[e], w_words[e + 1u], w_words[e + 2u], w_words[e + 3u]);
            r.hi = vec4<u32>(w_words[e + 4u], w_words[e + 5u], w_words[e + 6u], w_words[e + 7u]);
        }
        case 1u, 2u: {
            let i = e / 2u;
            r.lo = vec4<u32>(w_words[i], w_words[i + 1u], w_words[i + 2u], w_words[i + 3u]);
        }
        case 3u: {
            r.lo.x = w_words[e / 8u];
            r.m = block_meta(e / QBLOCK);
        }
        default: {
            let i = e / 4u;
            r.lo.x = w_words[i];
            r.lo.y = w_words[i + 1u];
            r.m = block_meta(e / QBLOCK);
        }
    }
    return r;
}

fn dequant8(w: Raw8) -> W8 {
    var r: W8;
    switch LAYOUT {
        case 0u: {
            r.lo = bitcast<vec4<f32>>(w.lo);
            r.hi = bitcast<vec4<f32>>(w.hi);
        }
        case 1u: {
            r.lo = vec4<f32>(unpack2x16float(w.lo.x), unpack2x16float(w.lo.y));
            r.hi = vec4<f32>(unpack2x16float(w.lo.z), unpack2x16float(w.lo.w));
        }
        case 2u: {
            r.lo = vec4<f32>(unpack_bf16x2(w.lo.x), unpack_bf16x2(w.lo.y));
            r.hi = vec4<f32>(unpack_bf16x2(w.lo.z), unpack_bf16x2(w.lo.w));
        }
        case 3u: {
            r.lo = nib4(w.lo.x, 0u) * w.m.x + w.m.y;
            r.hi = nib4(w.lo.x, 16u) * w.m.x + w.m.y;
        }
        default: {
            r.lo = sbyte4(w.lo.x) * w.m.x + w.m.y;
            r.hi = sbyte4(w.lo.y) * w.m.x + w.m.y;
        }
    }
    return r;
}

// Eight consecutive weights starting at element e (a multiple of 8), dequantized to f32.
fn load8(e: u32) -> W8 {
    return dequant8(load_raw8(e));
}
