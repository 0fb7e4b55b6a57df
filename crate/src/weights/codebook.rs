//! Types whose quants index a fixed table rather than scaling linearly: IQ4_NL and IQ4_XS (a
//! 16-entry non-uniform grid), MXFP4 (E2M1 values under a power-of-two E8M0 scale), and the
//! ternary TQ1_0 (base-3 packed) and TQ2_0 (2-bit). CPU reference dequantizers that follow
//! ggml-quants.c loop for loop, plus per-block decoders into (signed byte quant, f32 scale) that
//! the GPU packer uses; tests check the two agree element for element.
//!
//! Block layouts (little-endian):
//! - IQ4_NL (32 elements, 18 bytes): d: f16, qs: [u8; 16] (element j low nibble, j+16 high)
//! - IQ4_XS (256, 136): d: f16, scales_h: u16, scales_l: [u8; 4], qs: [u8; 128]; eight 32-element
//!   sub-blocks with 6-bit scales (ls - 32)
//! - MXFP4 (32, 17): e: u8 (E8M0), qs: [u8; 16] (nibble order as IQ4_NL)
//! - TQ1_0 (256, 54): qs: [u8; 48], qh: [u8; 4] (five resp. four base-3 digits per byte), d: f16
//! - TQ2_0 (256, 66): qs: [u8; 64] (four 2-bit quants per byte), d: f16

use super::kquants::f16_le;

/// ggml's `kvalues_iq4nl`.
pub const KVALUES_IQ4NL: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// ggml's `kvalues_mxfp4`: the E2M1 values doubled, so the scale is halved (`e8m0_to_f32_half`).
pub const KVALUES_MXFP4: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// ggml's `GGML_E8M0_TO_FP32_HALF`: 2^(e - 128), with the two smallest exponents subnormal.
pub fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 { 0x0020_0000u32 << e } else { ((e as u32) - 1) << 23 };
    f32::from_bits(bits)
}

/// IQ4_XS sub-block `ib`'s 6-bit scale minus 32.
fn iq4_xs_scale(b: &[u8], ib: usize) -> i32 {
    let scales_h = u16::from_le_bytes([b[2], b[3]]) as i32;
    let ls = ((b[4 + ib / 2] as i32 >> (4 * (ib % 2))) & 0xf) | (((scales_h >> (2 * ib)) & 3) << 4);
    ls - 32
}

/// TQ1_0's base-3 digit: ggml multiplies the byte by 3^n (wrapping in u8) and reads the top.
fn tq1_digit(byte: u8, n: usize) -> i32 {
    const POW3: [u8; 6] = [1, 3, 9, 27, 81, 243];
    let q = byte.wrapping_mul(POW3[n]);
    ((q as u16 * 3) >> 8) as i32
}

pub(crate) fn dequantize_block_iq4_nl(b: &[u8], y: &mut [f32]) {
    let d = f16_le(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        y[j] = d * KVALUES_IQ4NL[(qs[j] & 0xf) as usize] as f32;
        y[j + 16] = d * KVALUES_IQ4NL[(qs[j] >> 4) as usize] as f32;
    }
}

pub(crate) fn dequantize_block_iq4_xs(b: &[u8], y: &mut [f32]) {
    let d = f16_le(b, 0);
    let mut qs = &b[8..136];
    let mut y = &mut y[..];
    for ib in 0..8 {
        let dl = d * iq4_xs_scale(b, ib) as f32;
        for j in 0..16 {
            y[j] = dl * KVALUES_IQ4NL[(qs[j] & 0xf) as usize] as f32;
            y[j + 16] = dl * KVALUES_IQ4NL[(qs[j] >> 4) as usize] as f32;
        }
        y = &mut y[32..];
        qs = &qs[16..];
    }
}

pub(crate) fn dequantize_block_mxfp4(b: &[u8], y: &mut [f32]) {
    let d = e8m0_to_f32_half(b[0]);
    let qs = &b[1..17];
    for j in 0..16 {
        let x0 = KVALUES_MXFP4[(qs[j] & 0x0F) as usize];
        let x1 = KVALUES_MXFP4[(qs[j] >> 4) as usize];
        y[j] = x0 as f32 * d;
        y[j + 16] = x1 as f32 * d;
    }
}

pub(crate) fn dequantize_block_tq1_0(b: &[u8], y: &mut [f32]) {
    let (qs, qh) = (&b[0..48], &b[48..52]);
    let d = f16_le(b, 52);
    let mut k = 0;
    let mut put = |xi: i32| {
        y[k] = (xi - 1) as f32 * d;
        k += 1;
    };
    // 32 bytes of five digits, then 16 bytes of five, then the 4 qh bytes' four.
    for n in 0..5 {
        (0..32).for_each(|m| put(tq1_digit(qs[m], n)));
    }
    for n in 0..5 {
        (0..16).for_each(|m| put(tq1_digit(qs[32 + m], n)));
    }
    for n in 0..4 {
        (0..4).for_each(|j| put(tq1_digit(qh[j], n)));
    }
}

pub(crate) fn dequantize_block_tq2_0(b: &[u8], y: &mut [f32]) {
    let d = f16_le(b, 64);
    let mut k = 0;
    for j in (0..64).step_by(32) {
        for l in 0..4 {
            for m in 0..32 {
                let q = ((b[j + m] >> (l * 2)) & 3) as i32;
                y[k] = (q - 1) as f32 * d;
                k += 1;
            }
        }
    }
}

/// One block decoded for the GPU's Q8 layout: element e is `scale[e / 32] * q[e] + offset`,
/// `q` a signed byte. The offset is -0.0 for every type here, so products keep ggml's signed zeros.
pub(crate) struct Decoded32<const N: usize, const S: usize> {
    pub q: [i8; N],
    pub scale: [f32; S],
}

/// IQ4_NL and MXFP4 share the nibble order; only the table and the scale differ.
fn decode_nibbles(qs: &[u8], table: &[i8; 16], q: &mut [i8]) {
    for j in 0..16 {
        q[j] = table[(qs[j] & 0xf) as usize];
        q[j + 16] = table[(qs[j] >> 4) as usize];
    }
}

pub(crate) fn decode_iq4_nl(b: &[u8]) -> Decoded32<32, 1> {
    let mut out = Decoded32 { q: [0; 32], scale: [f16_le(b, 0)] };
    decode_nibbles(&b[2..18], &KVALUES_IQ4NL, &mut out.q);
    out
}

pub(crate) fn decode_mxfp4(b: &[u8]) -> Decoded32<32, 1> {
    let mut out = Decoded32 { q: [0; 32], scale: [e8m0_to_f32_half(b[0])] };
    decode_nibbles(&b[1..17], &KVALUES_MXFP4, &mut out.q);
    out
}

pub(crate) fn decode_iq4_xs(b: &[u8]) -> Decoded32<256, 8> {
    let d = f16_le(b, 0);
    let mut out = Decoded32 { q: [0; 256], scale: [0.0; 8] };
    for ib in 0..8 {
        // An f16 times a 6-bit integer: exact in f32, as ggml's `d * (ls - 32)` is.
        out.scale[ib] = d * iq4_xs_scale(b, ib) as f32;
        decode_nibbles(&b[8 + 16 * ib..24 + 16 * ib], &KVALUES_IQ4NL, &mut out.q[32 * ib..32 * ib + 32]);
    }
    out
}

/// TQ1_0 / TQ2_0: one f16 scale for all 256 ternary quants (stored as q - 1).
pub(crate) fn decode_ternary(b: &[u8], tq1: bool) -> Decoded32<256, 8> {
    let mut out = Decoded32 { q: [0; 256], scale: [f16_le(b, if tq1 { 52 } else { 64 }); 8] };
    let mut k = 0;
    let mut put = |xi: i32| {
        out.q[k] = (xi - 1) as i8;
        k += 1;
    };
    if tq1 {
        for (bytes, digits) in [(&b[0..32], 5), (&b[32..48], 5), (&b[48..52], 4)] {
            for n in 0..digits {
                bytes.iter().for_each(|&byte| put(tq1_digit(byte, n)));
            }
        }
    } else {
        for half in b[0..64].chunks_exact(32) {
            for l in 0..4 {
                half.iter().for_each(|&byte| put(((byte >> (2 * l)) & 3) as i32));
            }
        }
    }
    out
}
