//! GPU weight layouts. At load, every supported ggml type is repacked into one of a few layouts the
//! WGSL kernels read with aligned 32-bit loads (GGUF blocks of 18, 34 or 210 bytes are not 4-byte
//! aligned). Repacking is exact: each layout stores the block's effective f32 scale and offset,
//! so the GPU computes bit-for-bit the values the CPU reference dequantizer does.
//!
//! Layouts (a matrix of `rows` x `cols`, row-major, blocks run along `cols`):
//! - `F32`:  `words[i]` = f32 bits of element i.
//! - `F16`:  `words[i]` = element 2i in the low half, 2i+1 in the high half (`unpack2x16float`).
//! - `BF16`: as F16 with bf16 halves.
//! - `Q4 { block: 32 }`: per block 4 words; nibble n (bits 4n..4n+3) of word w is the unsigned
//!   quant of element 8w+n. `meta[2b]` = scale, `meta[2b+1]` = offset: x = scale*q + offset.
//! - `Q8 { block: 16 | 32 }`: per block block/4 words; byte k (bits 8k..8k+7) of word w is the
//!   signed (two's complement) quant of element 4w+k. Same `meta` as Q4.
//!
//! Block index b = row * (cols / block) + j.
//!
//! Details the list above leaves open, fixed here:
//! - F16/BF16 pack the whole matrix as one flat sequence (element i = row * cols + col); when
//!   `rows * cols` is odd the last word's high half is zero.
//! - Types map as: Q4_0 -> Q4{32} (d, -8d); Q4_1 -> Q4{32} (d, m); Q4_K -> Q4{32} per sub-block
//!   (d*sc, -(dmin*m)); Q8_0 -> Q8{32} (d, -0.0); Q5_K -> Q8{32} with quants 0..31 (d*sc, -(dmin*m));
//!   Q6_K -> Q8{16} with quants q-32 (d*sc, -0.0); Q5_0 -> Q8{32} with quants q-16 (d, -0.0);
//!   Q5_1 -> Q8{32} with quants 0..31 (d, m); Q2_K -> Q8{16} with quants 0..3 (d*sc, -(dmin*m));
//!   Q3_K -> Q8{16} with quants -4..3 (d*(sc-32), -0.0); IQ4_NL, IQ4_XS, MXFP4 -> Q8{32} with
//!   the table's values as quants (d, d*(ls-32) resp. 2^(e-128), -0.0); TQ1_0, TQ2_0 -> Q8{32}
//!   with quants -1..1 (d, -0.0).
//! - Memory: the Q8 layouts spend 8 bits a weight plus 32 (f16 pairs) or 64 bits a block, so
//!   the low-bit types grow on the GPU: Q5_0/Q5_1/IQ4_NL 9 bits a weight (5.5-6 in the file),
//!   IQ4_XS and MXFP4 10 (4.25), Q3_K and Q2_K 12 (3.4 and 2.6), TQ2_0 9 (2.06). Exactness was
//!   worth more than a kernel per type; `model::load::check_fits` sizes each binding packed.
//! - Exactness: every `scale * q` product is exact in f32 (an f16 significand times at most
//!   6+5 bits of integers stays under 24 bits), so one rounding at most happens, in the add, and
//!   fused or unfused multiply-add give the same result. Offsets of -0.0 (rather than +0.0) keep the
//!   sign of zero products, as `d * q` has in ggml. The one inexact spot: Q4_0 at q = 8 with d < 0,
//!   where ggml gives -0.0 and `d*8 + (-8d)` gives +0.0 — equal as numbers.

use super::quant::GgmlType;
use super::{codebook, kquants};
use crate::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Layout {
    F32,
    F16,
    BF16,
    Q4 { block: u32 },
    Q8 { block: u32 },
}

#[derive(Clone, Debug)]
pub struct Packed {
    pub layout: Layout,
    pub rows: usize,
    pub cols: usize,
    pub words: Vec<u32>,
    /// Interleaved (scale, offset) per block; empty for float layouts.
    pub meta: Vec<f32>,
}

impl Layout {
    /// The layout `pack` produces for `ty`, `None` for types we cannot run.
    pub fn for_type(ty: GgmlType) -> Option<Layout> {
        Some(match ty {
            GgmlType::F32 => Layout::F32,
            GgmlType::F16 => Layout::F16,
            GgmlType::BF16 => Layout::BF16,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q4_K => Layout::Q4 { block: 32 },
            GgmlType::Q8_0
            | GgmlType::Q5_K
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::IQ4_NL
            | GgmlType::IQ4_XS
            | GgmlType::MXFP4
            | GgmlType::TQ1_0
            | GgmlType::TQ2_0
            | GgmlType::I2_S => Layout::Q8 { block: 32 },
            GgmlType::Q6_K | GgmlType::Q2_K | GgmlType::Q3_K => Layout::Q8 { block: 16 },
            _ => return None,
        })
    }

    /// Elements per (scale, offset) pair; 1 for float layouts.
    pub fn block(self) -> usize {
        match self {
            Layout::F32 | Layout::F16 | Layout::BF16 => 1,
            Layout::Q4 { block } | Layout::Q8 { block } => block as usize,
        }
    }

    /// 32-bit words holding `n` elements (`n` a multiple of `block()` for quantized layouts).
    pub fn words_for(self, n: usize) -> usize {
        match self {
            Layout::F32 => n,
            Layout::F16 | Layout::BF16 => n.div_ceil(2),
            Layout::Q4 { .. } => n / 8,
            Layout::Q8 { .. } => n / 4,
        }
    }
}

/// Repack `raw` (a row-major `rows` x `cols` tensor of `ty`, as stored in GGUF) into its GPU layout.
pub fn pack(ty: GgmlType, rows: usize, cols: usize, raw: &[u8]) -> Result<Packed> {
    let name = ty.name();
    let layout = Layout::for_type(ty).ok_or_else(|| Error::Quant(format!("tensor type {name} is not supported")))?;
    let bs = ty.block_size() as usize;
    if !cols.is_multiple_of(bs) {
        return Err(Error::Quant(format!("{name} row length {cols} is not a multiple of its block size {bs}")));
    }
    let n = rows
        .checked_mul(cols)
        .ok_or_else(|| Error::Quant(format!("{name} tensor of {rows} x {cols} elements is too large")))?;
    let need = ty.bytes_for(n as u64).unwrap_or(u64::MAX);
    if need != raw.len() as u64 {
        return Err(Error::Quant(format!("{name} tensor of {rows} x {cols} must be {need} bytes, got {}", raw.len())));
    }
    let n_meta = if layout.block() > 1 { 2 * n / layout.block() } else { 0 };
    let mut p =
        Packed { layout, rows, cols, words: Vec::with_capacity(layout.words_for(n)), meta: Vec::with_capacity(n_meta) };
    if ty == GgmlType::I2_S {
        // Ternary codes as 8-bit quants under the tensor's one scale: exact.
        let scale = super::quant::i2s_scale(raw);
        let q: Vec<u8> = (0..n).map(|i| super::quant::i2s_code(raw, i) as u8).collect();
        (0..n / 32).for_each(|_| p.meta.extend([scale, -0.0]));
        p.push_q8(&q);
        return Ok(p);
    }
    let ts = ty.type_size() as usize;
    let blocks = raw.chunks_exact(ts);
    match ty {
        GgmlType::F32 => p.words.extend(blocks.map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
        GgmlType::F16 | GgmlType::BF16 => {
            // Little-endian halves already sit in the order the layout wants: two per word.
            let pairs = raw.chunks_exact(4);
            let tail = pairs.remainder();
            p.words.extend(pairs.map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])));
            if !tail.is_empty() {
                p.words.push(u16::from_le_bytes([tail[0], tail[1]]) as u32);
            }
        }
        GgmlType::Q8_0 => {
            for b in blocks {
                p.meta.extend([f16_le(b, 0), -0.0]);
                p.push_q8(&b[2..34]);
            }
        }
        GgmlType::Q4_0 | GgmlType::Q4_1 => {
            let mut q = [0u8; 32];
            for b in blocks {
                let d = f16_le(b, 0);
                let (offset, qs) = if ty == GgmlType::Q4_0 { (-8.0 * d, &b[2..18]) } else { (f16_le(b, 2), &b[4..20]) };
                p.meta.extend([d, offset]);
                // ggml puts elements 0..15 in the low nibbles and 16..31 in the high ones.
                for j in 0..16 {
                    q[j] = qs[j] & 0xF;
                    q[j + 16] = qs[j] >> 4;
                }
                p.push_q4(&q);
            }
        }
        GgmlType::Q4_K | GgmlType::Q5_K => {
            for b in blocks {
                let dec = if ty == GgmlType::Q4_K { kquants::decode_q4_k(b) } else { kquants::decode_q5_k(b) };
                for s in 0..8 {
                    p.meta.extend([dec.scale[s], dec.offset[s]]);
                }
                if ty == GgmlType::Q4_K {
                    p.push_q4(&dec.q);
                } else {
                    p.push_q8(&dec.q);
                }
            }
        }
        GgmlType::Q6_K | GgmlType::Q2_K | GgmlType::Q3_K => {
            for b in blocks {
                let dec = match ty {
                    GgmlType::Q6_K => kquants::decode_q6_k(b),
                    GgmlType::Q2_K => kquants::decode_q2_k(b),
                    _ => kquants::decode_q3_k(b),
                };
                for g in 0..16 {
                    p.meta.extend([dec.scale[g], dec.offset[g]]);
                }
                p.push_q8(&dec.q);
            }
        }
        GgmlType::Q5_0 | GgmlType::Q5_1 => {
            let (q_off, m) = if ty == GgmlType::Q5_0 { (6, None) } else { (8, Some(2)) };
            let mut q = [0u8; 32];
            for b in blocks {
                let qh = u32::from_le_bytes([b[q_off - 4], b[q_off - 3], b[q_off - 2], b[q_off - 1]]);
                for j in 0..16 {
                    let lo = b[q_off + j] & 0xF | (((qh >> j) & 1) << 4) as u8;
                    let hi = b[q_off + j] >> 4 | (((qh >> (j + 16)) & 1) << 4) as u8;
                    // Q5_0's quants are q - 16 (signed); Q5_1 keeps 0..31 and an offset.
                    let shift = if m.is_none() { 16 } else { 0 };
                    q[j] = (lo as i8 - shift) as u8;
                    q[j + 16] = (hi as i8 - shift) as u8;
                }
                p.meta.extend([f16_le(b, 0), m.map_or(-0.0, |o| f16_le(b, o))]);
                p.push_q8(&q);
            }
        }
        GgmlType::IQ4_NL | GgmlType::MXFP4 => {
            for b in blocks {
                let dec = if ty == GgmlType::IQ4_NL { codebook::decode_iq4_nl(b) } else { codebook::decode_mxfp4(b) };
                p.meta.extend([dec.scale[0], -0.0]);
                p.push_q8(bytemuck::cast_slice(&dec.q));
            }
        }
        GgmlType::IQ4_XS | GgmlType::TQ1_0 | GgmlType::TQ2_0 => {
            for b in blocks {
                let dec = match ty {
                    GgmlType::IQ4_XS => codebook::decode_iq4_xs(b),
                    t => codebook::decode_ternary(b, t == GgmlType::TQ1_0),
                };
                dec.scale.iter().for_each(|&s| p.meta.extend([s, -0.0]));
                p.push_q8(bytemuck::cast_slice(&dec.q));
            }
        }
        _ => unreachable!("Layout::for_type admitted {name}"),
    }
    debug_assert_eq!(p.words.len(), layout.words_for(n));
    debug_assert_eq!(p.meta.len(), n_meta);
    Ok(p)
}

fn f16_le(b: &[u8], off: usize) -> f32 {
    super::quant::f16_le(b, off)
}

impl Packed {
    /// Index of the first value that is not finite (NaN or infinite), if any: a float weight, or
    /// a block's scale or offset (meta index / 2 * block is then the block's first element).
    pub fn first_non_finite(&self) -> Option<usize> {
        if let Some(i) = self.meta.iter().position(|x| !x.is_finite()) {
            return Some(i / 2 * self.layout.block());
        }
        // An all-ones exponent is infinite or NaN in each float format (a half word: two values).
        let (mask, per_word): (u32, usize) = match self.layout {
            Layout::F32 => (0x7F80_0000, 1),
            Layout::F16 => (0x7C00, 2),
            Layout::BF16 => (0x7F80, 2),
            Layout::Q4 { .. } | Layout::Q8 { .. } => return None,
        };
        let hi = if per_word == 2 { mask << 16 } else { mask };
        let w = self.words.iter().position(|&x| x & mask == mask || x & hi == hi)?;
        Some(w * per_word + usize::from(per_word == 2 && self.words[w] & mask != mask))
    }

    /// Appends quants (each < 16) in element order: nibble n of word w is element 8w+n.
    fn push_q4(&mut self, q: &[u8]) {
        self.words.extend(
            q.chunks_exact(8).map(|c| c.iter().enumerate().fold(0u32, |w, (n, &v)| w | ((v as u32 & 0xF) << (4 * n)))),
        );
    }

    /// Appends byte quants in element order: byte k of word w is element 4w+k.
    fn push_q8(&mut self, q: &[u8]) {
        self.words.extend(q.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])));
    }

    pub fn len(&self) -> usize {
        self.rows * self.cols
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the GPU buffers take: words plus meta.
    pub fn gpu_bytes(&self) -> usize {
        4 * (self.words.len() + self.meta.len())
    }

    pub fn words_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.words)
    }

    pub fn meta_bytes(&self) -> &[u8] {
        bytemuck::cast_slice(&self.meta)
    }

    /// The (scale, offset) pairs as f16 pairs in one word each (scale in the low half), when
    /// every value converts exactly (sign of zero included): the `GgmlType::f16_scales` types
    /// store f16 scales, so their pairs always do (short of a Q4_0 scale beyond 65504 / 8). K-quant
    /// products do not, and keep f32 pairs. Decode kernels then read 4 bytes per block, not 8.
    pub fn meta_f16(&self) -> Option<Vec<u32>> {
        let exact = |v: f32| {
            let h = half::f16::from_f32(v);
            (h.to_f32().to_bits() == v.to_bits()).then_some(h.to_bits() as u32)
        };
        if self.meta.is_empty() {
            return None;
        }
        self.meta.chunks_exact(2).map(|p| Some(exact(p[0])? | exact(p[1])? << 16)).collect()
    }

    /// Element `i` (flat index) decoded the way a kernel reads it: `scale * q + offset`, unfused.
    pub fn get(&self, i: usize) -> f32 {
        let w = &self.words;
        match self.layout {
            Layout::F32 => f32::from_bits(w[i]),
            Layout::F16 => half::f16::from_bits((w[i / 2] >> (16 * (i % 2))) as u16).to_f32(),
            Layout::BF16 => super::quant::bf16_to_f32((w[i / 2] >> (16 * (i % 2))) as u16),
            Layout::Q4 { block } => {
                let b = i / block as usize;
                let q = (w[i / 8] >> (4 * (i % 8))) & 0xF;
                self.meta[2 * b] * q as f32 + self.meta[2 * b + 1]
            }
            Layout::Q8 { block } => {
                let b = i / block as usize;
                let q = (w[i / 4] >> (8 * (i % 4))) as u8 as i8;
                self.meta[2 * b] * q as f32 + self.meta[2 * b + 1]
            }
        }
    }

    /// CPU decode of the whole packed tensor, row-major: the reference the GPU kernels must match.
    pub fn dequantize(&self) -> Vec<f32> {
        (0..self.len()).map(|i| self.get(i)).collect()
    }

    /// Row `r` decoded; panics if `r >= rows`.
    pub fn row(&self, r: usize) -> Vec<f32> {
        assert!(r < self.rows, "row {r} of a {}-row tensor", self.rows);
        (r * self.cols..(r + 1) * self.cols).map(|i| self.get(i)).collect()
    }
}
