// Shared weight access, prepended to every kernel that reads a weight matrix.
// Layouts are documented in crate/src/weights/pack.rs. For every layout, element e of the
// row-major matrix lives in word e / (32 / bits) and its block's (scale, offset) in
// w_meta[2 * (e / QBLOCK)], so addressing needs no per-layout row strides.

const LAYOUT_F32: u32 = 0u;
const LAYOUT_F16: u32 = 1u;
const LAYOUT_BF16: u32 = 2u;
const LAYOUT_Q4: u32 = 3u;
const LAYOUT_Q8: u32 = 4u;

override LAYOUT: u32 = 0u;
override QBLOCK: u32 = 32u;

// Words are read as vec4<u32> so a whole 32-element quant block (or eight f32s, sixteen f16s)
// arrives in one 128-bit load; weight buffers are padded to 16 bytes.
@group(0) @binding(0) var<storage, read> w_words: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> w_meta: array<f32>;

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

fn word(i: u32) -> u32 {
    return w_words[i / 4u][i % 4u];
}

// Eight consecutive weights starting at element e (a multiple of 8), dequantized to f32.
fn load8(e: u32) -> W8 {
    var r: W8;
    switch LAYOUT {
        case 0u: {
            r.lo = bitcast<vec4<f32>>(w_words[e / 4u]);
            r.hi = bitcast<vec4<f32>>(w_words[e / 4u + 1u]);
        }
        case 1u: {
            let v = w_words[e / 8u];
            r.lo = vec4<f32>(unpack2x16float(v.x), unpack2x16float(v.y));
            r.hi = vec4<f32>(unpack2x16float(v.z), unpack2x16float(v.w));
        }
        case 2u: {
            let v = w_words[e / 8u];
            r.lo = vec4<f32>(unpack_bf16x2(v.x), unpack_bf16x2(v.y));
            r.hi = vec4<f32>(unpack_bf16x2(v.z), unpack_bf16x2(v.w));
        }
        case 3u: {
            let w = word(e / 8u);
            let b = 2u * (e / QBLOCK);
            let s = w_meta[b];
            let o = w_meta[b + 1u];
            r.lo = nib4(w, 0u) * s + o;
            r.hi = nib4(w, 16u) * s + o;
        }
        default: {
            let i = e / 4u;
            let b = 2u * (e / QBLOCK);
            let s = w_meta[b];
            let o = w_meta[b + 1u];
            r.lo = sbyte4(word(i)) * s + o;
            r.hi = sbyte4(word(i + 1u)) * s + o;
        }
    }
    return r;
}
