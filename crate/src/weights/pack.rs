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
//! Block index b = row * (cols / block) + j.

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

/// TEMPORARY (the real packer lands from the `quant` branch): F32 only.
pub fn pack(ty: super::quant::GgmlType, rows: usize, cols: usize, raw: &[u8]) -> crate::Result<Packed> {
    assert_eq!(ty, super::quant::GgmlType::F32);
    Ok(Packed { layout: Layout::F32, rows, cols, words: bytemuck::pod_collect_to_vec(raw), meta: vec![] })
}
