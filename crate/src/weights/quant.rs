//! ggml tensor types: block geometry, and a CPU reference dequantizer for every type we load.
//! The CPU path is the oracle the GPU kernels are tested against, so it follows ggml-quants.c
//! literally rather than cleverly.

use super::kquants;
use crate::error::{Error, Result};

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
    BF16,
}

impl GgmlType {
    /// Maps the on-disk `ggml_type` id; `None` for ids we do not know (including the removed 4/5).
    pub fn from_u32(v: u32) -> Option<Self> {
        Some(match v {
            0 => Self::F32,
            1 => Self::F16,
            2 => Self::Q4_0,
            3 => Self::Q4_1,
            6 => Self::Q5_0,
            7 => Self::Q5_1,
            8 => Self::Q8_0,
            9 => Self::Q8_1,
            10 => Self::Q2_K,
            11 => Self::Q3_K,
            12 => Self::Q4_K,
            13 => Self::Q5_K,
            14 => Self::Q6_K,
            15 => Self::Q8_K,
            30 => Self::BF16,
            _ => return None,
        })
    }

    pub fn id(self) -> u32 {
        match self {
            Self::F32 => 0,
            Self::F16 => 1,
            Self::Q4_0 => 2,
            Self::Q4_1 => 3,
            Self::Q5_0 => 6,
            Self::Q5_1 => 7,
            Self::Q8_0 => 8,
            Self::Q8_1 => 9,
            Self::Q2_K => 10,
            Self::Q3_K => 11,
            Self::Q4_K => 12,
            Self::Q5_K => 13,
            Self::Q6_K => 14,
            Self::Q8_K => 15,
            Self::BF16 => 30,
        }
    }

    /// Elements per block.
    pub fn block_size(self) -> u64 {
        match self {
            Self::F32 | Self::F16 | Self::BF16 => 1,
            Self::Q4_0 | Self::Q4_1 | Self::Q5_0 | Self::Q5_1 | Self::Q8_0 | Self::Q8_1 => 32,
            Self::Q2_K | Self::Q3_K | Self::Q4_K | Self::Q5_K | Self::Q6_K | Self::Q8_K => 256,
        }
    }

    /// Bytes per block.
    pub fn type_size(self) -> u64 {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::BF16 => 2,
            Self::Q4_0 => 18,
            Self::Q4_1 => 20,
            Self::Q5_0 => 22,
            Self::Q5_1 => 24,
            Self::Q8_0 => 34,
            Self::Q8_1 => 36,
            Self::Q2_K => 84,
            Self::Q3_K => 110,
            Self::Q4_K => 144,
            Self::Q5_K => 176,
            Self::Q6_K => 210,
            Self::Q8_K => 292,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::Q4_0 => "Q4_0",
            Self::Q4_1 => "Q4_1",
            Self::Q5_0 => "Q5_0",
            Self::Q5_1 => "Q5_1",
            Self::Q8_0 => "Q8_0",
            Self::Q8_1 => "Q8_1",
            Self::Q2_K => "Q2_K",
            Self::Q3_K => "Q3_K",
            Self::Q4_K => "Q4_K",
            Self::Q5_K => "Q5_K",
            Self::Q6_K => "Q6_K",
            Self::Q8_K => "Q8_K",
            Self::BF16 => "BF16",
        }
    }

    /// Types the engine can load and run (CPU reference and GPU kernels exist).
    pub fn is_supported(self) -> bool {
        matches!(
            self,
            Self::F32
                | Self::F16
                | Self::BF16
                | Self::Q8_0
                | Self::Q4_0
                | Self::Q4_1
                | Self::Q4_K
                | Self::Q5_K
                | Self::Q6_K
        )
    }

    /// Bytes for `n` elements, `None` if `n` is not a whole number of blocks or overflows.
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        if !n.is_multiple_of(self.block_size()) {
            return None;
        }
        (n / self.block_size()).checked_mul(self.type_size())
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
    let ts = ty.type_size() as usize;
    let bs = ty.block_size() as usize;
    let f: fn(&[u8], &mut [f32]) = match ty {
        GgmlType::F32 => |b, y| y[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        GgmlType::F16 => |b, y| y[0] = f16_le(b, 0),
        GgmlType::BF16 => |b, y| y[0] = bf16_to_f32(u16::from_le_bytes([b[0], b[1]])),
        GgmlType::Q8_0 => dequantize_block_q8_0,
        GgmlType::Q4_0 => dequantize_block_q4_0,
        GgmlType::Q4_1 => dequantize_block_q4_1,
        GgmlType::Q4_K => kquants::dequantize_block_q4_k,
        GgmlType::Q5_K => kquants::dequantize_block_q5_k,
        GgmlType::Q6_K => kquants::dequantize_block_q6_k,
        _ => return Err(Error::Quant(format!("tensor type {} is not supported", ty.name()))),
    };
    for (b, y) in data.chunks_exact(ts).zip(out.chunks_exact_mut(bs)) {
        f(b, y);
    }
    Ok(())
}

/// Reads the little-endian f16 at `off` as f32 (exact: every f16 is an f32).
#[inline]
pub(crate) fn f16_le(b: &[u8], off: usize) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[off], b[off + 1]])).to_f32()
}

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

/// Quantize `x` into `ty` blocks the way ggml's `quantize_row_*_ref` does (no importance matrix).
/// Covers the float types and the simple block types; K-quants need ggml's search-based quantizers,
/// which we do not reproduce.
pub fn quantize(ty: GgmlType, x: &[f32]) -> Result<Vec<u8>> {
    let bs = ty.block_size() as usize;
    if !x.len().is_multiple_of(bs) {
        return Err(Error::Quant(format!("{} elements is not a whole number of {} blocks", x.len(), ty.name())));
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
/// finite value of either sign (about 0.01 in size) so that the block decodes to sane numbers.
/// Float types get normally distributed values. Used by tests and to write random-weight models.
pub fn random_blocks(ty: GgmlType, n_blocks: usize, rng: &mut SplitMix64) -> Result<Vec<u8>> {
    let ts = ty.type_size() as usize;
    // Byte offsets of the f16 scale fields inside one block.
    let f16_fields: &[usize] = match ty {
        GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => {
            let x: Vec<f32> = (0..n_blocks).map(|_| rng.next_normal(1.0)).collect();
            return quantize(ty, &x);
        }
        GgmlType::Q8_0 | GgmlType::Q4_0 => &[0],
        GgmlType::Q4_1 => &[0, 2],
        GgmlType::Q4_K | GgmlType::Q5_K => &[0, 2],
        GgmlType::Q6_K => &[208],
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
    }
    Ok(out)
}
