//! Prefill matrix products, c (+)= a · Wᵀ (+ bias), over output tiles of weight rows × tokens:
//! in f32 on any adapter (matmul.wgsl), or on matrix units (matmul_coop.wgsl, 64×64 tiles;
//! matmul_coop_wide.wgsl, 128×128) after to_f16.wgsl converts a to f16 once.

use super::{flag, Grid, Recorder};
use crate::gpu::Kernel;
use crate::model::weights::GpuMatrix;

/// The prefill matmul's output tile (matmul.wgsl, matmul_coop.wgsl BN x BM): weight rows x tokens.
pub const MATMUL_TILE_N: u32 = 64;
pub const MATMUL_TILE_M: u32 = 64;
/// The wide matrix-unit matmul's tile (matmul_coop_wide.wgsl WM = WN).
pub const WIDE_TILE: u32 = 128;
/// Weight matrices with at least this many rows take the wide tile on matrix units; narrower
/// ones keep 64x64 tiles, which give the GPU more workgroups. H100, 512 tokens: rows of 2,048
/// (Llama-3.2-1B's down and o) ran 45% slower wide (64 workgroups), rows of 3,072 (Phi-3's down)
/// 32% faster. Measured again with A read in f16 from memory (session 9, 1B pp512): thresholds
/// of 1,024 / 2,048 / 3,072 rows gave 20.5k / 20.2k / 21.4k tok/s.
pub const WIDE_MIN_ROWS: usize = 3072;

/// Elements of the f16 input buffer the matrix-unit kernels need for inputs of up to `width`
/// values a token and `max_tokens` tokens: whole 128-token tiles, which they read whole.
pub fn a16_elems(width: usize, max_tokens: usize) -> usize {
    max_tokens.next_multiple_of(WIDE_TILE as usize) * width
}

/// Which kernel a prefill matmul takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tile {
    /// matmul.wgsl, f32.
    F32,
    /// matmul_coop.wgsl, 64x64 on matrix units.
    Coop,
    /// matmul_coop_wide.wgsl, 128x128 on matrix units.
    Wide,
}

pub struct MatMul<'a> {
    pub label: &'static str,
    pub w: &'a GpuMatrix,
    pub a: &'a wgpu::Buffer,
    pub c: &'a wgpu::Buffer,
    pub vecs: &'a wgpu::Buffer,
    /// Bias at this word of vecs.
    pub bias: Option<usize>,
    /// c += a · Wᵀ (the residual).
    pub accumulate: bool,
    /// The f16 copy of `a` the matrix-unit kernels read (`a16_elems` long).
    pub a16: &'a wgpu::Buffer,
    /// The kernel to take (tests); `None`: as the adapter and the matrix's shape suggest.
    pub tile: Option<Tile>,
}

/// The kernel for `w`: matrix units where offered and rows are whole 32-element blocks.
pub fn tile_for(r: &Recorder, w: &GpuMatrix) -> Tile {
    if !r.caps.matrix_units || !w.cols.is_multiple_of(32) {
        Tile::F32
    } else if w.rows >= WIDE_MIN_ROWS {
        Tile::Wide
    } else {
        Tile::Coop
    }
}

pub fn matmul(r: &mut Recorder, m: MatMul) {
    let w = m.w;
    let [l0, l1, l2] = w.layout_constants();
    let consts = [
        l0,
        l1,
        l2,
        ("K", w.cols as f64),
        ("N", w.rows as f64),
        ("ACCUMULATE", flag(m.accumulate)),
        ("HAS_BIAS", flag(m.bias.is_some())),
        ("BIAS_OFF", m.bias.unwrap_or(0) as f64),
    ];
    let n = w.rows as u32;
    let tiles = |tile_n: u32, tile_m: u32| Grid::Tiles { n, tile_n, tile_m };
    let tile = m.tile.unwrap_or_else(|| tile_for(r, w));
    let (kernel, grid, a) = match tile {
        Tile::F32 => (Kernel::MatMul, tiles(MATMUL_TILE_N, MATMUL_TILE_M), m.a),
        Tile::Coop => (Kernel::MatMulCoop, tiles(MATMUL_TILE_N, MATMUL_TILE_M), m.a16),
        Tile::Wide => (Kernel::MatMulWide, tiles(WIDE_TILE, WIDE_TILE), m.a16),
    };
    if tile != Tile::F32 {
        let grid = Grid::Elems(w.cols.div_ceil(4) as u32);
        r.push("to f16", Kernel::ToF16, &[("N", w.cols as f64)], &[(0, m.a), (1, m.a16)], grid);
    }
    r.push(m.label, kernel, &consts, &[(0, &w.words), (1, &w.meta), (2, a), (3, m.c), (4, m.vecs)], grid);
}
