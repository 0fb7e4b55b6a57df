//! K-quant super-blocks (256 elements): CPU reference dequantizers that follow ggml-quants.c's
//! `dequantize_row_q{4,5,6}_K` loop for loop, plus per-block decoders that yield the quants and the
//! per-sub-block f32 scale/offset, which the GPU packer uses. The two are written independently
//! on purpose: tests check that they agree element for element.
//!
//! Block layouts (little-endian, `QK_K` = 256):
//! - Q2_K (84 bytes): scales: [u8; 16] (scale low nibble, min high), qs: [u8; 64], d: f16, dmin: f16
//! - Q3_K (110 bytes): hmask: [u8; 32], qs: [u8; 64], scales: [u8; 12] (sixteen 6-bit), d: f16
//! - Q4_K (144 bytes): d: f16, dmin: f16, scales: [u8; 12], qs: [u8; 128]
//! - Q5_K (176 bytes): d: f16, dmin: f16, scales: [u8; 12], qh: [u8; 32], qs: [u8; 128]
//! - Q6_K (210 bytes): ql: [u8; 128], qh: [u8; 64], scales: [i8; 16], d: f16

pub const QK_K: usize = 256;

/// ggml's `get_scale_min_k4`: eight 6-bit (scale, min) pairs packed into 12 bytes. Pairs 0..3
/// sit in the low 6 bits of bytes 0..3 / 4..7; pairs 4..7 keep their low 4 bits in bytes 8..11 and
/// their top 2 bits in the spare high bits of bytes 0..7.
#[inline]
pub fn get_scale_min_k4(j: usize, q: &[u8]) -> (u8, u8) {
    if j < 4 {
        (q[j] & 63, q[j + 4] & 63)
    } else {
        ((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4), (q[j + 4] >> 4) | ((q[j] >> 6) << 4))
    }
}

pub(crate) fn dequantize_block_q2_k(b: &[u8], y: &mut [f32]) {
    let scales = &b[0..16];
    let mut q = &b[16..80];
    let d = f16_le(b, 80);
    let min = f16_le(b, 82);
    let mut is = 0;
    let mut y = &mut y[..];
    for _ in (0..QK_K).step_by(128) {
        let mut shift = 0;
        for _ in 0..4 {
            for part in 0..2 {
                let sc = scales[is];
                is += 1;
                let dl = d * (sc & 0xF) as f32;
                let ml = min * (sc >> 4) as f32;
                for l in 0..16 {
                    y[l] = dl * ((q[l + 16 * part] >> shift) & 3) as i8 as f32 - ml;
                }
                y = &mut y[16..];
            }
            shift += 2;
        }
        q = &q[32..];
    }
}

/// Q3_K's sixteen 6-bit scales, unpacked as ggml's `kmask` shuffle does: scale i keeps its low
/// nibble in byte i % 8 (low half for i < 8, high half after) and its top two bits in byte
/// 8 + i % 4 (bit pair i / 4).
fn q3_k_scales(packed: &[u8]) -> [i8; 16] {
    std::array::from_fn(|i| {
        let low = (packed[i % 8] >> (4 * (i / 8))) & 0xF;
        let high = (packed[8 + i % 4] >> (2 * (i / 4))) & 3;
        (low | (high << 4)) as i8 - 32
    })
}

#[allow(clippy::needless_range_loop)] // ggml's loop, index for index
pub(crate) fn dequantize_block_q3_k(b: &[u8], y: &mut [f32]) {
    let hm = &b[0..32];
    let mut q = &b[32..96];
    let scales = q3_k_scales(&b[96..108]);
    let d_all = f16_le(b, 108);
    let mut m = 1u8;
    let mut is = 0;
    let mut y = &mut y[..];
    for _ in (0..QK_K).step_by(128) {
        let mut shift = 0;
        for _ in 0..4 {
            for part in 0..2 {
                let dl = d_all * scales[is] as f32;
                is += 1;
                for l in 0..16 {
                    let k = l + 16 * part;
                    let low = ((q[k] >> shift) & 3) as i8;
                    let x = low - if hm[k] & m != 0 { 0 } else { 4 };
                    y[l] = dl * x as f32;
                }
                y = &mut y[16..];
            }
            shift += 2;
            m <<= 1;
        }
        q = &q[32..];
    }
}

/// Q4_K / Q5_K: the scale and min of sub-blocks `is` and `is + 1`, as (d1, m1, d2, m2).
fn scales_mins(d: f32, min: f32, scales: &[u8], is: usize) -> [f32; 4] {
    let (sc1, m1) = get_scale_min_k4(is, scales);
    let (sc2, m2) = get_scale_min_k4(is + 1, scales);
    [d * sc1 as f32, min * m1 as f32, d * sc2 as f32, min * m2 as f32]
}

/// Reads the little-endian f16 at `off` as f32 (exact: every f16 is an f32). Here rather than in
/// quant.rs (which re-exports it) so that this module does not import the one that imports it.
#[inline]
pub(crate) fn f16_le(b: &[u8], off: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[off], b[off + 1]])).to_f32()
}

pub(crate) fn dequantize_block_q4_k(b: &[u8], y: &mut [f32]) {
    let d = f16_le(b, 0);
    let min = f16_le(b, 2);
    let scales = &b[4..16];
    let mut q = &b[16..144];
    let mut is = 0;
    let mut y = &mut y[..];
    for _ in (0..QK_K).step_by(64) {
        let [d1, m1, d2, m2] = scales_mins(d, min, scales, is);
        for l in 0..32 {
            y[l] = d1 * (q[l] & 0xF) as f32 - m1;
        }
        for l in 0..32 {
            y[32 + l] = d2 * (q[l] >> 4) as f32 - m2;
        }
        y = &mut y[64..];
        q = &q[32..];
        is += 2;
    }
}

pub(crate) fn dequantize_block_q5_k(b: &[u8], y: &mut [f32]) {
    let d = f16_le(b, 0);
    let min = f16_le(b, 2);
    let scales = &b[4..16];
    let qh = &b[16..48];
    let mut ql = &b[48..176];
    let mut is = 0;
    let (mut u1, mut u2) = (1u8, 2u8);
    let mut y = &mut y[..];
    for _ in (0..QK_K).step_by(64) {
        let [d1, m1, d2, m2] = scales_mins(d, min, scales, is);
        for l in 0..32 {
            let hi = if qh[l] & u1 != 0 { 16 } else { 0 };
            y[l] = d1 * ((ql[l] & 0xF) + hi) as f32 - m1;
        }
        for l in 0..32 {
            let hi = if qh[l] & u2 != 0 { 16 } else { 0 };
            y[32 + l] = d2 * ((ql[l] >> 4) + hi) as f32 - m2;
        }
        y = &mut y[64..];
        ql = &ql[32..];
        is += 2;
        u1 <<= 2;
        u2 <<= 2;
    }
}

pub(crate) fn dequantize_block_q6_k(b: &[u8], y: &mut [f32]) {
    let d = f16_le(b, 208);
    let mut ql = &b[0..128];
    let mut qh = &b[128..192];
    let mut sc = &b[192..208];
    let mut y = &mut y[..];
    for _ in (0..QK_K).step_by(128) {
        for l in 0..32 {
            let is = l / 16;
            let q1 = ((ql[l] & 0xF) | ((qh[l] & 3) << 4)) as i8 - 32;
            let q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) as i8 - 32;
            let q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) as i8 - 32;
            let q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) as i8 - 32;
            // C evaluates `d * sc[is] * q1` left to right in float: (d*sc)*q.
            y[l] = d * (sc[is] as i8) as f32 * q1 as f32;
            y[l + 32] = d * (sc[is + 2] as i8) as f32 * q2 as f32;
            y[l + 64] = d * (sc[is + 4] as i8) as f32 * q3 as f32;
            y[l + 96] = d * (sc[is + 6] as i8) as f32 * q4 as f32;
        }
        y = &mut y[128..];
        ql = &ql[64..];
        qh = &qh[32..];
        sc = &sc[8..];
    }
}

/// One super-block decoded for the GPU layouts: `q[e]` is element e's quant as stored on the GPU,
/// and sub-block s (of `QK_K / scale.len()` elements) decodes as `scale[s] * q + offset[s]`.
pub(crate) struct Decoded<const S: usize> {
    pub q: [u8; QK_K],
    pub scale: [f32; S],
    pub offset: [f32; S],
}

/// Q4_K / Q5_K: eight 32-element sub-blocks. `offset = -(dmin * m)`: negating the product keeps
/// `d1*q + offset` identical to ggml's `d1*q - m1` in every bit, signed zeros included.
fn decode_q45_k(b: &[u8], high_bits: Option<&[u8]>, qs: &[u8]) -> Decoded<8> {
    let d = f16_le(b, 0);
    let dmin = f16_le(b, 2);
    let mut out = Decoded { q: [0; QK_K], scale: [0.0; 8], offset: [0.0; 8] };
    for s in 0..8 {
        let (sc, m) = get_scale_min_k4(s, &b[4..16]);
        out.scale[s] = d * sc as f32;
        out.offset[s] = -(dmin * m as f32);
        // Sub-blocks 2k and 2k+1 share the 32 bytes qs[32k..32k+32]: low nibbles, then high.
        let bytes = &qs[32 * (s / 2)..32 * (s / 2) + 32];
        let shift = 4 * (s % 2);
        for l in 0..32 {
            let mut q = (bytes[l] >> shift) & 0xF;
            if let Some(qh) = high_bits {
                q |= ((qh[l] >> s) & 1) << 4;
            }
            out.q[32 * s + l] = q;
        }
    }
    out
}

pub(crate) fn decode_q4_k(b: &[u8]) -> Decoded<8> {
    decode_q45_k(b, None, &b[16..144])
}

pub(crate) fn decode_q5_k(b: &[u8]) -> Decoded<8> {
    decode_q45_k(b, Some(&b[16..48]), &b[48..176])
}

/// Q2_K: sixteen 16-element groups, quants 0..3, `offset = -(dmin * m)` as for Q4_K.
pub(crate) fn decode_q2_k(b: &[u8]) -> Decoded<16> {
    let d = f16_le(b, 80);
    let dmin = f16_le(b, 82);
    let mut out = Decoded { q: [0; QK_K], scale: [0.0; 16], offset: [0.0; 16] };
    for (g, &sc) in b[..16].iter().enumerate() {
        out.scale[g] = d * (sc & 0xF) as f32;
        out.offset[g] = -(dmin * (sc >> 4) as f32);
    }
    // Element e = 128h + 32j + l takes bits 2j of qs[32h + l].
    for (e, q) in out.q.iter_mut().enumerate() {
        let (h, j, l) = (e / 128, (e / 32) % 4, e % 32);
        *q = (b[16 + 32 * h + l] >> (2 * j)) & 3;
    }
    out
}

/// Q3_K: sixteen 16-element groups, signed quants -4..3 (the hmask bit set means no -4).
pub(crate) fn decode_q3_k(b: &[u8]) -> Decoded<16> {
    let d = f16_le(b, 108);
    let mut out = Decoded { q: [0; QK_K], scale: [0.0; 16], offset: [-0.0; 16] };
    for (g, sc) in q3_k_scales(&b[96..108]).into_iter().enumerate() {
        out.scale[g] = d * sc as f32;
    }
    for (e, q) in out.q.iter_mut().enumerate() {
        let (h, j, l) = (e / 128, (e / 32) % 4, e % 32);
        let low = ((b[32 + 32 * h + l] >> (2 * j)) & 3) as i8;
        let high = (b[l] >> (e / 32)) & 1;
        *q = (low - 4 * (1 - high as i8)) as u8;
    }
    out
}

/// Q6_K: sixteen 16-element groups; `q` holds the signed quant (q - 32) as two's-complement bytes.
pub(crate) fn decode_q6_k(b: &[u8]) -> Decoded<16> {
    let d = f16_le(b, 208);
    let mut out = Decoded { q: [0; QK_K], scale: [0.0; 16], offset: [-0.0; 16] };
    for g in 0..16 {
        out.scale[g] = d * (b[192 + g] as i8) as f32;
    }
    // Each 128-element half takes 64 bytes of ql (low nibbles, then high) and 32 of qh (2 bits
    // per 32-element quarter).
    for half in 0..2 {
        let ql = &b[64 * half..64 * half + 64];
        let qh = &b[128 + 32 * half..128 + 32 * half + 32];
        for part in 0..4 {
            let low = &ql[32 * (part % 2)..32 * (part % 2) + 32];
            let shift = 4 * (part / 2);
            let dst = &mut out.q[128 * half + 32 * part..128 * half + 32 * part + 32];
            for l in 0..32 {
                let q = ((low[l] >> shift) & 0xF) | (((qh[l] >> (2 * part)) & 3) << 4);
                dst[l] = (q as i8 - 32) as u8;
            }
        }
    }
    out
}
