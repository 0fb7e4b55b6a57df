//! ggml tensor types: block geometry, and a CPU reference dequantizer for every type we load.
//! The CPU path is the oracle the GPU kernels are tested against, so it follows ggml-quants.c
//! literally rather than cleverly.

use super::{codebook, kquants};
use crate::error::{Error, Result};

/// Every ggml type a GGUF file may hold. Each row of `TYPES` is the one place its on-disk id,
/// name and block geometry are written; types without a dequantizer here are still known, so a
/// file holding them parses and is refused with the type's name (see `unsupported_hint`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2_K,
    Q3_K,
    Q4_K,
    Q5_K,
    Q6_K,
    Q8_K,
    IQ2_XXS,
    IQ2_XS,
    IQ3_XXS,
    IQ1_S,
    IQ4_NL,
    IQ3_S,
    IQ2_S,
    IQ4_XS,
    I8,
    I16,
    I32,
    I64,
    F64,
    IQ1_M,
    BF16,
    TQ1_0,
    TQ2_0,
    /// BitNet b1.58's ternary type (bitnet.cpp): 128-element blocks of 2-bit codes in 32 bytes,
    /// one f32 scale for the whole tensor in a 32-byte trailer.
    I2_S,
    MXFP4,
    NVFP4,
}

/// (type, ggml id, name, elements per block, bytes per block), in declaration order.
const TYPES: [(GgmlType, u32, &str, u64, u64); 34] = {
    use GgmlType::*;
    [
        (F32, 0, "F32", 1, 4),
        (F16, 1, "F16", 1, 2),
        (Q4_0, 2, "Q4_0", 32, 18),
        (Q4_1, 3, "Q4_1", 32, 20),
        (Q5_0, 6, "Q5_0", 32, 22),
        (Q5_1, 7, "Q5_1", 32, 24),
        (Q8_0, 8, "Q8_0", 32, 34),
        (Q8_1, 9, "Q8_1", 32, 36),
        (Q2_K, 10, "Q2_K", 256, 84),
        (Q3_K, 11, "Q3_K", 256, 110),
        (Q4_K, 12, "Q4_K", 256, 144),
        (Q5_K, 13, "Q5_K", 256, 176),
        (Q6_K, 14, "Q6_K", 256, 210),
        (Q8_K, 15, "Q8_K", 256, 292),
        (IQ2_XXS, 16, "IQ2_XXS", 256, 66),
        (IQ2_XS, 17, "IQ2_XS", 256, 74),
        (IQ3_XXS, 18, "IQ3_XXS", 256, 98),
        (IQ1_S, 19, "IQ1_S", 256, 50),
        (IQ4_NL, 20, "IQ4_NL", 32, 18),
        (IQ3_S, 21, "IQ3_S", 256, 110),
        (IQ2_S, 22, "IQ2_S", 256, 82),
        (IQ4_XS, 23, "IQ4_XS", 256, 136),
        (I8, 24, "I8", 1, 1),
        (I16, 25, "I16", 1, 2),
        (I32, 26, "I32", 1, 4),
        (I64, 27, "I64", 1, 8),
        (F64, 28, "F64", 1, 8),
        (IQ1_M, 29, "IQ1_M", 256, 56),
        (BF16, 30, "BF16", 1, 2),
        (TQ1_0, 34, "TQ1_0", 256, 54),
        (TQ2_0, 35, "TQ2_0", 256, 66),
        (I2_S, 36, "I2_S", 128, 32),
        (MXFP4, 39, "MXFP4", 32, 17),
        (NVFP4, 40, "NVFP4", 64, 36),
    ]
};

impl GgmlType {
    fn row(self) -> &'static (GgmlType, u32, &'static str, u64, u64) {
        let r = &TYPES[self as usize];
        debug_assert_eq!(r.0, self);
        r
    }

    /// Every type, in id order.
    pub fn all() -> impl Iterator<Item = GgmlType> {
        TYPES.iter().map(|r| r.0)
    }

    /// Maps the on-disk `ggml_type` id; `None` for ids we do not know (including the removed 4/5).
    pub fn from_u32(v: u32) -> Option<Self> {
        TYPES.iter().find(|r| r.1 == v).map(|r| r.0)
    }

    /// Parses a type name as llama.cpp writes it (`q4_k`, `IQ4_XS`, ...; any case).
    pub fn from_name(s: &str) -> Option<Self> {
        TYPES.iter().find(|r| r.2.eq_ignore_ascii_case(s)).map(|r| r.0)
    }

    pub fn id(self) -> u32 {
        self.row().1
    }

    pub fn name(self) -> &'static str {
        self.row().2
    }

    /// Elements per block.
    pub fn block_size(self) -> u64 {
        self.row().3
    }

    /// Bytes per block.
    pub fn type_size(self) -> u64 {
        self.row().4
    }

    /// Types the engine can load and run (CPU reference and GPU kernels exist).
    pub fn is_supported(self) -> bool {
        use GgmlType::*;
        matches!(
            self,
            F32 | F16
                | BF16
                | Q8_0
                | Q4_0
                | Q4_1
                | Q5_0
                | Q5_1
                | Q2_K
                | Q3_K
                | Q4_K
                | Q5_K
                | Q6_K
                | IQ4_NL
                | IQ4_XS
                | TQ1_0
                | TQ2_0
                | I2_S
                | MXFP4
        )
    }

    /// Whether every block's scale and offset are f16 values (or -0.0), so the GPU may keep them
    /// as f16 pairs (`Packed::meta_f16`). K-quant sub-block scales are products and are not.
    pub fn f16_scales(self) -> bool {
        use GgmlType::*;
        matches!(self, Q4_0 | Q4_1 | Q8_0 | Q5_0 | Q5_1 | IQ4_NL | TQ1_0 | TQ2_0)
    }

    /// For a type we cannot run: what to use instead, for the error message.
    pub fn unsupported_hint(self) -> &'static str {
        use GgmlType::*;
        match self {
            IQ1_S | IQ1_M | IQ2_XXS | IQ2_XS | IQ2_S => {
                "the i-quant grid types are not supported; the nearest supported presets are Q2_K and Q3_K_S"
            }
            IQ3_XXS | IQ3_S => {
                "the i-quant grid types are not supported; the nearest supported presets are Q3_K_M and IQ4_XS"
            }
            NVFP4 => "NVFP4 is not supported; MXFP4 and Q4_K_M are",
            Q8_1 | Q8_K => "this is an activation type of ggml's, not a weight type",
            I8 | I16 | I32 | I64 | F64 => "integer and F64 tensors are not model weights ferrolm knows",
            _ => "",
        }
    }

    /// Bytes for `n` elements, `None` if `n` is not a whole number of blocks or overflows.
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        if !n.is_multiple_of(self.block_size()) {
            return None;
        }
        let trailer = if self == GgmlType::I2_S { I2S_TRAILER } else { 0 };
        (n / self.block_size()).checked_mul(self.type_size())?.checked_add(trailer)
    }
}

/// Dequantize `data` (whole blocks of `ty`) into `out` (exactly the element count).
pub fn dequantize(ty: GgmlType, data: &[u8], out: &mut [f32]) -> Result<()> {
    let need = ty
        .bytes_for(out.len() as u64)
        .ok_or_else(|| Error::Quant(format!("{} elements is not a whole number of {} blocks", out.len(), ty.name())))?;
    if need != data.len() as u64 {
        return Err(Error::Quant(format!(
            "{} data for {} elements must be {need} bytes, got {}",
            ty.name(),
            out.len(),
            data.len()
        )));
    }
    if ty == GgmlType::I2_S {
        let scale = i2s_scale(data);
        for (i, y) in out.iter_mut().enumerate() {
            *y = i2s_code(data, i) as f32 * scale;
        }
        return Ok(());
    }
    let ts = ty.type_size() as usize;
    let bs = ty.block_size() as usize;
    let f: fn(&[u8], &mut [f32]) = match ty {
        GgmlType::F32 => |b, y| y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        GgmlType::F16 => |b, y| y[0] = f16_le(b, 0),
        GgmlType::BF16 => |b, y| y[0] = bf16_to_f32(u16::from_le_bytes([b[0], b[1]])),
        GgmlType::Q8_0 => dequantize_block_q8_0,
        GgmlType::Q4_0 => dequantize_block_q4_0,
        GgmlType::Q4_1 => dequantize_block_q4_1,
        GgmlType::Q5_0 => dequantize_block_q5_0,
        GgmlType::Q5_1 => dequantize_block_q5_1,
        GgmlType::Q2_K => kquants::dequantize_block_q2_k,
        GgmlType::Q3_K => kquants::dequantize_block_q3_k,
        GgmlType::Q4_K => kquants::dequantize_block_q4_k,
        GgmlType::Q5_K => kquants::dequantize_block_q5_k,
        GgmlType::Q6_K => kquants::dequantize_block_q6_k,
        GgmlType::IQ4_NL => codebook::dequantize_block_iq4_nl,
        GgmlType::IQ4_XS => codebook::dequantize_block_iq4_xs,
        GgmlType::MXFP4 => codebook::dequantize_block_mxfp4,
        GgmlType::TQ1_0 => codebook::dequantize_block_tq1_0,
        GgmlType::TQ2_0 => codebook::dequantize_block_tq2_0,
        _ => return Err(Error::Quant(format!("tensor type {} is not supported", ty.name()))),
    };
    for (b, y) in data.chunks_exact(ts).zip(out.chunks_exact_mut(bs)) {
        f(b, y);
    }
    Ok(())
}

/// Bytes after an I2_S tensor's packed codes: its f32 scale, padded to 32.
pub const I2S_TRAILER: u64 = 32;

/// The scale of an I2_S tensor (`data`: the whole tensor, trailer included).
pub fn i2s_scale(data: &[u8]) -> f32 {
    let at = data.len() - I2S_TRAILER as usize;
    f32::from_le_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]])
}

/// Element `i` of an I2_S tensor as -1, 0 or +1 (bitnet.cpp's quantize_i2_s: byte g of a
/// 128-element block holds elements g, g + 32, g + 64, g + 96 in bits 7-6, 5-4, 3-2, 1-0; code c
/// means c - 1, and the unused code 3 reads as 2 as its dequantizer does).
#[inline]
pub fn i2s_code(data: &[u8], i: usize) -> i8 {
    let (block, pos) = (i / 128, i % 128);
    let byte = data[block * 32 + pos % 32];
    ((byte >> (6 - 2 * (pos / 32))) & 3) as i8 - 1
}

pub(crate) use super::kquants::f16_le;

/// ggml's GGML_BF16_TO_FP32: a plain shift, so NaN payloads survive unchanged.
#[inline]
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// ggml's GGML_FP32_TO_BF16: round to nearest even, NaN forced quiet (half's rounding differs on NaN).
pub fn f32_to_bf16(x: f32) -> u16 {
    let u = x.to_bits();
    if u & 0x7fff_ffff > 0x7f80_0000 {
        return ((u >> 16) | 64) as u16;
    }
    ((u + (0x7fff + ((u >> 16) & 1))) >> 16) as u16
}

fn dequantize_block_q8_0(b: &[u8], y: &mut [f32]) {
    let d = f16_le(b, 0);
    for j in 0..32 {
        y[j] = (b[2 + j] as i8) as f32 * d;
    }
}

fn dequantize_block_q4_0(b: &[u8], y: &mut [f32]) {
    let d = f16_le(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        let x0 = (qs[j] & 0x0F) as i32 - 8;
        let x1 = (qs[j] >> 4) as i32 - 8;
        y[j] = x0 as f32 * d;
        y[j + 16] = x1 as f32 * d;
    }
}

fn dequantize_block_q4_1(b: &[u8], y: &mut [f32]) {
    let d = f16_le(b, 0);
    let m = f16_le(b, 2);
    let qs = &b[4..20];
    for j in 0..16 {
        let x0 = (qs[j] & 0x0F) as i32;
        let x1 = (qs[j] >> 4) as i32;
        y[j] = x0 as f32 * d + m;
        y[j + 16] = x1 as f32 * d + m;
    }
}

/// The five high bits of a Q5_0/Q5_1 block, as ggml reads them (`memcpy` into a u32).
fn q5_high_bits(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn dequantize_block_q5_0(b: &[u8], y: &mut [f32]) {
    let d = f16_le(b, 0);
    let qh = q5_high_bits(b, 2);
    let qs = &b[6..22];
    for j in 0..16 {
        let xh_0 = (((qh >> j) << 4) & 0x10) as u8;
        let xh_1 = ((qh >> (j + 12)) & 0x10) as u8;
        let x0 = ((qs[j] & 0x0F) | xh_0) as i32 - 16;
        let x1 = ((qs[j] >> 4) | xh_1) as i32 - 16;
        y[j] = x0 as f32 * d;
        y[j + 16] = x1 as f32 * d;
    }
}

fn dequantize_block_q5_1(b: &[u8], y: &mut [f32]) {
    let d = f16_le(b, 0);
    let m = f16_le(b, 2);
    let qh = q5_high_bits(b, 4);
    let qs = &b[8..24];
    for j in 0..16 {
        let xh_0 = (((qh >> j) << 4) & 0x10) as u8;
        let xh_1 = ((qh >> (j + 12)) & 0x10) as u8;
        let x0 = (qs[j] & 0x0F) | xh_0;
        let x1 = (qs[j] >> 4) | xh_1;
        y[j] = x0 as f32 * d + m;
        y[j + 16] = x1 as f32 * d + m;
    }
}

/// Quantize `x` into `ty` blocks the way ggml's `quantize_row_*_ref` does (no importance matrix).
/// Covers the float types and the simple block types; K-quants need ggml's search-based quantizers,
/// which we do not reproduce.
pub fn quantize(ty: GgmlType, x: &[f32]) -> Result<Vec<u8>> {
    let bs = ty.block_size() as usize;
    if !x.len().is_multiple_of(bs) {
        return Err(Error::Quant(format!("{} elements is not a whole number of {} blocks", x.len(), ty.name())));
    }
    // A value that is not finite, or one whose block scale would not fit in f16, would quantize
    // to finite junk or to an infinite scale (whose error then blames the file's values).
    let limit = match ty {
        // Q4_1 stores its minimum in f16 (its scale, the range / 15, then fits too).
        GgmlType::F16 | GgmlType::Q4_1 => F16_MAX,
        GgmlType::Q8_0 => F16_MAX * 127.0,
        GgmlType::Q4_0 => F16_MAX * 8.0,
        _ => f32::MAX,
    };
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        return Err(Error::Quant(format!("value {i} is not finite ({})", x[i])));
    }
    if let Some(i) = x.iter().position(|v| v.abs() > limit) {
        return Err(Error::Quant(format!(
            "value {i} ({:e}) is too large for {} (its scale would not fit in f16)",
            x[i],
            ty.name()
        )));
    }
    let mut out = Vec::with_capacity(x.len() / bs * ty.type_size() as usize);
    match ty {
        GgmlType::F32 => x.iter().for_each(|v| out.extend_from_slice(&v.to_le_bytes())),
        GgmlType::F16 => x.iter().for_each(|v| out.extend_from_slice(&half::f16::from_f32(*v).to_le_bytes())),
        GgmlType::BF16 => x.iter().for_each(|v| out.extend_from_slice(&f32_to_bf16(*v).to_le_bytes())),
        GgmlType::Q8_0 => x.chunks_exact(32).for_each(|b| quantize_block_q8_0(b, &mut out)),
        GgmlType::Q4_0 => x.chunks_exact(32).for_each(|b| quantize_block_q4_0(b, &mut out)),
        GgmlType::Q4_1 => x.chunks_exact(32).for_each(|b| quantize_block_q4_1(b, &mut out)),
        _ => return Err(Error::Quant(format!("quantizing to {} is not supported", ty.name()))),
    }
    Ok(out)
}

pub fn quantize_q8_0(x: &[f32]) -> Result<Vec<u8>> {
    quantize(GgmlType::Q8_0, x)
}

pub fn quantize_q4_0(x: &[f32]) -> Result<Vec<u8>> {
    quantize(GgmlType::Q4_0, x)
}

pub fn quantize_q4_1(x: &[f32]) -> Result<Vec<u8>> {
    quantize(GgmlType::Q4_1, x)
}

/// The largest finite f16.
const F16_MAX: f32 = 65504.0;

fn push_f16(out: &mut Vec<u8>, v: f32) {
    out.extend_from_slice(&half::f16::from_f32(v).to_le_bytes());
}

fn quantize_block_q8_0(x: &[f32], out: &mut Vec<u8>) {
    let amax = x.iter().fold(0.0f32, |a, v| a.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    push_f16(out, d);
    // `as i8` saturates like the C cast does for in-range values; roundf is half-away-from-zero.
    out.extend(x.iter().map(|v| (v * id).round() as i8 as u8));
}

fn quantize_block_q4_0(x: &[f32], out: &mut Vec<u8>) {
    // The sign of the element with the largest magnitude is kept so that it maps to quant 0 (-8d).
    let (mut amax, mut max) = (0.0f32, 0.0f32);
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    let d = max / -8.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    push_f16(out, d);
    for j in 0..16 {
        let xi0 = ((x[j] * id + 8.5) as i8).min(15) as u8;
        let xi1 = ((x[j + 16] * id + 8.5) as i8).min(15) as u8;
        out.push(xi0 | (xi1 << 4));
    }
}

fn quantize_block_q4_1(x: &[f32], out: &mut Vec<u8>) {
    let (mut min, mut max) = (f32::MAX, -f32::MAX);
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    let d = (max - min) / 15.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    push_f16(out, d);
    push_f16(out, min);
    for j in 0..16 {
        let xi0 = (((x[j] - min) * id + 0.5) as i8).min(15) as u8;
        let xi1 = (((x[j + 16] - min) * id + 0.5) as i8).min(15) as u8;
        out.push(xi0 | (xi1 << 4));
    }
}

/// SplitMix64: tiny, seedable, and good enough to fill test blocks.
#[derive(Clone, Debug)]
pub struct SplitMix64(pub u64);

impl SplitMix64 {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    pub fn next_f32(&mut self) -> f32 {
        ((self.next_u64() >> 40) as f32 / (1u64 << 23) as f32) - 1.0
    }

    /// Roughly normal (Irwin-Hall of 4), mean 0, standard deviation about `std`.
    pub fn next_normal(&mut self, std: f32) -> f32 {
        let s: f32 = (0..4).map(|_| self.next_f32()).sum();
        s * std * 0.866
    }
}

/// `n_blocks` valid random blocks of `ty`: random quant bits, with every f16 scale field set to a
/// finite value of either sign (about 0.01 in size; MXFP4's power-of-two scale 2^-16 .. 2^-1) so
/// that the block decodes to sane numbers.
/// Float types get normally distributed values. Used by tests and to write random-weight models.
pub fn random_blocks(ty: GgmlType, n_blocks: usize, rng: &mut SplitMix64) -> Result<Vec<u8>> {
    let ts = ty.type_size() as usize;
    // Byte offsets of the f16 scale fields inside one block.
    let f16_fields: &[usize] = match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
            let x: Vec<f32> = (0..n_blocks).map(|_| rng.next_normal(1.0)).collect();
            return quantize(ty, &x);
        }
        GgmlType::Q8_0 | GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::IQ4_NL | GgmlType::IQ4_XS => &[0],
        GgmlType::Q4_1 | GgmlType::Q5_1 | GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q2_K => &[80, 82],
        GgmlType::Q3_K => &[108],
        GgmlType::Q6_K => &[208],
        GgmlType::TQ1_0 => &[52],
        GgmlType::TQ2_0 => &[64],
        GgmlType::MXFP4 => &[],
        _ => return Err(Error::Quant(format!("random blocks of {} are not supported", ty.name()))),
    };
    let mut out = vec![0u8; n_blocks * ts];
    for block in out.chunks_exact_mut(ts) {
        for b in block.iter_mut() {
            *b = rng.next_u64() as u8;
        }
        for &off in f16_fields {
            let v = half::f16::from_f32(rng.next_normal(0.01));
            block[off..off + 2].copy_from_slice(&v.to_le_bytes());
        }
        if ty == GgmlType::MXFP4 {
            block[0] = 112 + (rng.next_u64() % 16) as u8; // E8M0 scales 2^-16 .. 2^-1
        }
    }
    Ok(out)
}
