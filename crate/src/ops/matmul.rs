//! Prefill matrix products, c (+)= a · Wᵀ (+ bias), over output tiles of weight rows × tokens:
//! in f32 on any adapter (matmul.wgsl), or on matrix units (matmul_coop.wgsl, 64×64 tiles;
//! matmul_coop_wide.wgsl, 128×128, split in ranges of K where rows are long and tiles few) from
//! a in f16, as its producer (rmsnorm, ffn_act: `Ready`) or to_f16.wgsl leaves it; or, in
//! browsers with 8-bit subgroup matrices, quantized weights times a in 8 bits (matmul_i8.wgsl),
//! as its producer or quant_rows.wgsl leaves it.

use super::matvec::Act;
use super::{flag, Grid, Recorder};
use crate::gpu::Kernel;
use crate::model::weights::GpuMatrix;
use crate::weights::pack::Layout;

/// The prefill matmul's output tile (matmul.wgsl, matmul_coop.wgsl BN x BM): weight rows x tokens.
pub const MATMUL_TILE_N: u32 = 64;
pub const MATMUL_TILE_M: u32 = 64;
/// The wide matrix-unit matmul's tile (matmul_coop_wide.wgsl WM = WN).
pub const WIDE_TILE: u32 = 128;
/// Weight matrices with at least this many rows take the wide tile on matrix units; narrower
/// ones keep 64x64 tiles, which give the GPU more workgroups. H100, 512 tokens: rows of 2,048
/// (Llama-3.2-1B's down and o) ran 45% slower wide (64 workgroups), rows of 3,072 (Phi-3's down)
/// 32% faster. Measured again with A read in f16 from memory (session 9, 1B pp512): thresholds
/// of 1,024 / 2,048 / 3,072 rows gave 20.5k / 20.2k / 21.4k tok/s. With both kernels in K steps
/// of 64 (session 14, 1B pp512): 2,048 rows (its o projection, 64 workgroups) 1.15 -> 1.07 ms
/// wide; 4,096 rows put 3,072-row matrices on 64x64 tiles: 1B qkv 1.16 -> 1.57 ms, Phi-3 o
/// 2.98 -> 4.15.
pub const WIDE_MIN_ROWS: usize = 2048;

/// A K step of the matmul kernels (matmul_tile.wgsl BK).
const BK: u32 = 32;
/// A K step of the wide matrix-unit matmul (matmul_coop_wide.wgsl WK): it takes matrices whose
/// rows, and each split range of them, are whole steps.
pub const WIDE_K_STEP: usize = 64;

/// Split K where that makes a wide matmul's grid for `SPLIT_TOKENS` tokens at least
/// `MIN_SPLITS` times larger and no larger than `SPLIT_GRID` workgroups...
pub const SPLIT_GRID: u32 = 256;
pub const SPLIT_TOKENS: u32 = 512;
pub const MIN_SPLITS: u32 = 4;
/// ... with each range of K at least this long. H100, 512 tokens: Llama-3.2-1B's down projection
/// (2,048 x 8,192, 64 workgroups unsplit) 5.2 ms on 64x64 tiles, 3.4 ms wide split in four; its o
/// and qkv projections (K = 2,048) and Phi-3's down projection (96 workgroups, split in two: 11.6
/// vs 9.9 ms) ran slower split.
pub const MIN_SPLIT_K: u32 = 2048;

/// How many ranges of K a wide matmul of `n` rows and `k` columns splits into (matmul_coop_wide.wgsl
/// KSPLIT): long rows over few 128-row tiles. Only where N is a multiple of 4 (matmul_sum.wgsl).
pub fn k_splits(n: u32, k: u32) -> u32 {
    let tiles = n.div_ceil(WIDE_TILE) * SPLIT_TOKENS.div_ceil(WIDE_TILE);
    let mut s = 1;
    while n.is_multiple_of(4)
        && tiles * s * 2 <= SPLIT_GRID
        && k.is_multiple_of(2 * s * BK)
        && k / (2 * s) >= MIN_SPLIT_K
    {
        s *= 2;
    }
    if s < MIN_SPLITS || !(k / s).is_multiple_of(WIDE_K_STEP as u32) {
        1
    } else {
        s
    }
}

/// Elements of the partial-product buffer the split-K matmuls of these `(rows, cols)` matrices
/// need for up to `max_tokens` tokens.
pub fn part_elems(mats: &[(usize, usize)], max_tokens: usize) -> usize {
    let parts = |&(n, k): &(usize, usize)| match k_splits(n as u32, k as u32) {
        1 => 0,
        s => s as usize * max_tokens * n,
    };
    mats.iter().map(parts).max().unwrap_or(0)
}

/// Elements of the f16 input buffer the matrix-unit kernels need for inputs of up to `width`
/// values a token and `max_tokens` tokens: whole 128-token tiles, which they read whole.
pub fn a16_elems(width: usize, max_tokens: usize) -> usize {
    max_tokens.next_multiple_of(WIDE_TILE as usize) * width
}

/// Bytes of the 8-bit input buffer (`MatMul::a8`: two planes of bytes) and of its per-block
/// pairs of f32 (`MatMul::a8s`) for inputs of up to `width` values a token.
pub fn a8_bytes(width: usize, max_tokens: usize) -> (u64, u64) {
    ((2 * max_tokens * width) as u64, (max_tokens * width.div_ceil(32) * 8) as u64)
}

/// Workgroup memory of matmul_i8.wgsl: the staged A (two planes) and W, their blocks' pairs
/// (16 KiB) and the products of one block, 16 rows of `i8_scratch_row` words each.
pub fn i8_workgroup_storage(scratch_row: u32) -> usize {
    16 * 1024 + 4 * 4 * 16 * 4 * scratch_row as usize
}

/// The row stride (i32 words) of matmul_i8.wgsl's block products in workgroup memory: 24 where
/// the kernel fits with it (rows four apart no longer share banks when the matrices store two
/// words a lane), else 16. `i8_workgroup_storage` of 16 is the least the kernel takes.
pub fn i8_scratch_row(workgroup_storage: usize) -> u32 {
    if workgroup_storage >= i8_workgroup_storage(24) {
        24
    } else {
        16
    }
}

/// The form a prefill matmul's producer (rmsnorm.wgsl, ffn_act.wgsl) also writes its output in
/// for the matmul's kernel, which then needs no conversion pass: f16 for matrix units, the two
/// 8-bit planes and their blocks' pairs for matmul_i8.wgsl.
#[derive(Clone, Copy)]
pub enum Ready<'a> {
    F16(&'a wgpu::Buffer),
    I8(&'a wgpu::Buffer, &'a wgpu::Buffer),
}

impl Ready<'_> {
    /// What the producer binds for it: (slot 3 or 2 of its kernel, slot 6), the recorder's
    /// placeholders where none.
    pub fn buffers(r: Option<Self>, unused: &[wgpu::Buffer; 2]) -> (wgpu::Buffer, wgpu::Buffer) {
        match r {
            Some(Ready::F16(b)) => (b.clone(), unused[1].clone()),
            Some(Ready::I8(q, s)) => (q.clone(), s.clone()),
            None => (unused[0].clone(), unused[1].clone()),
        }
    }

    /// The values a row's length must be a whole number of: f16 pairs, 32-value blocks.
    pub fn granule(r: Option<Self>) -> usize {
        match r {
            Some(Ready::F16(_)) => 2,
            Some(Ready::I8(..)) => 32,
            None => 1,
        }
    }

    /// The producer's (F16_OUT, I8_OUT) flags.
    pub fn flags(r: Option<Self>) -> [f64; 2] {
        [flag(matches!(r, Some(Ready::F16(_)))), flag(matches!(r, Some(Ready::I8(..))))]
    }
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
    /// matmul_i8.wgsl, 64x64 on 8-bit integers (subgroup matrices where `Caps::i8_prefill`,
    /// packed dot products in the kernel tests).
    I8,
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
    /// a · Wᵀ (+ bias) times this before it is stored or added (Granite's residual multiplier).
    pub scale: f32,
    /// The f16 copy of `a` the matrix-unit kernels read (`a16_elems` long).
    pub a16: &'a wgpu::Buffer,
    /// `a16`, or `a8` and `a8s` for the 8-bit kernel, already hold `a` (written by the kernel
    /// that produced it: rmsnorm, glu, as `Ready` asked them).
    pub a_ready: bool,
    /// Split-K partial products (`part_elems` long).
    pub part: &'a wgpu::Buffer,
    /// `a` in 8 bits and its blocks' (scale, scaled sum) for the 8-bit kernel (`a8_bytes`).
    pub a8: &'a wgpu::Buffer,
    pub a8s: &'a wgpu::Buffer,
    /// The kernel to take (tests); `None`: as the adapter and the matrix's shape suggest.
    pub tile: Option<Tile>,
    /// W = [gate; up] (whole 32-unit blocks) on the 8-bit kernel: instead of C, glu(gate, up)
    /// as the next 8-bit matmul reads it (`Ready::I8`), with this activation.
    pub glu: Option<(Act, Ready<'a>)>,
}

/// Whether the 8-bit kernel can take `w`: Q4 or Q8 blocks of whole 32-element steps, and rows
/// of whole 64-element K steps.
pub fn i8_fits(w: &GpuMatrix) -> bool {
    let block = match w.layout {
        Layout::Q4 { block } | Layout::Q8 { block } => block,
        _ => return false,
    };
    block.is_multiple_of(32) && w.cols.is_multiple_of(64)
}

/// The kernel for `w`: matrix units where offered and rows are whole 32-element blocks; the
/// wide tile where rows are also whole 64-element steps.
pub fn tile_for(r: &Recorder, w: &GpuMatrix) -> Tile {
    if r.caps.i8_prefill && i8_fits(w) && r.caps.workgroup_storage >= i8_workgroup_storage(16) {
        Tile::I8
    } else if !r.caps.matrix_units || !w.cols.is_multiple_of(32) {
        Tile::F32
    } else if w.cols.is_multiple_of(WIDE_K_STEP)
        && (w.rows >= WIDE_MIN_ROWS || k_splits(w.rows as u32, w.cols as u32) > 1)
    {
        Tile::Wide
    } else {
        Tile::Coop
    }
}

/// Rows of `k` f32 values (a multiple of 32) of `a` into the 8-bit kernel's planes `a8` and the
/// blocks' pairs `a8s` (quant_rows.wgsl: four values an invocation).
pub fn quant_rows(r: &mut Recorder, k: usize, a: &wgpu::Buffer, a8: &wgpu::Buffer, a8s: &wgpu::Buffer) {
    let bufs = [(0, a), (1, a8), (2, a8s)];
    r.push("to 8 bits", Kernel::QuantRows, &[("K", k as f64)], &bufs, Grid::Elems(k as u32 / 4));
}

pub fn matmul(r: &mut Recorder, m: MatMul) {
    let w = m.w;
    let [l0, l1, l2] = w.layout_constants();
    let mut consts = vec![
        l0,
        l1,
        l2,
        ("K", w.cols as f64),
        ("N", w.rows as f64),
        ("ACCUMULATE", flag(m.accumulate)),
        ("HAS_BIAS", flag(m.bias.is_some())),
        ("BIAS_OFF", m.bias.unwrap_or(0) as f64),
    ];
    // Only where it scales: every other model keeps its pipelines (and their cache keys).
    if m.scale != 1.0 {
        consts.push(("SCALE", m.scale as f64));
    }
    let n = w.rows as u32;
    let tiles = |tile_n: u32, tile_m: u32| Grid::Tiles { n, tile_n, tile_m };
    let tile = m.tile.unwrap_or_else(|| tile_for(r, w));
    assert!(tile != Tile::Wide || w.cols.is_multiple_of(WIDE_K_STEP), "the wide matmul takes whole K steps");
    let splits = k_splits(n, w.cols as u32);
    let (kernel, grid, a) = match tile {
        Tile::F32 => (Kernel::MatMul, tiles(MATMUL_TILE_N, MATMUL_TILE_M), m.a),
        Tile::Coop => (Kernel::MatMulCoop, tiles(MATMUL_TILE_N, MATMUL_TILE_M), m.a16),
        Tile::Wide => (Kernel::MatMulWide, Grid::SplitTiles { n, splits }, m.a16),
        Tile::I8 => (Kernel::MatMulI8, tiles(MATMUL_TILE_N, MATMUL_TILE_M), m.a8),
    };
    assert!(
        m.glu.is_none_or(|(_, h)| tile == Tile::I8 && matches!(h, Ready::I8(..)) && w.rows.is_multiple_of(64)),
        "the GLU epilogue: the 8-bit kernel, [gate; up] of whole 32-unit blocks, 8-bit output"
    );
    if tile == Tile::I8 {
        r.workgroup_bytes(i8_workgroup_storage(r.gpu.pipelines.i8_scratch_row));
        if !m.a_ready {
            quant_rows(r, w.cols, m.a, m.a8, m.a8s);
        }
        let act = m.glu.map(|(a, _)| a).unwrap_or_default();
        let consts = [&consts[..], &[("GLU", flag(m.glu.is_some()))], &act.consts()].concat();
        let (h8, h8s) = Ready::buffers(m.glu.map(|(_, h)| h), &r.unused);
        let bufs = [(0, &w.words), (1, &w.meta), (2, m.a8), (3, m.c), (4, m.vecs), (6, m.a8s), (7, &h8), (8, &h8s)];
        r.push(m.label, kernel, &consts, &bufs, grid);
        return;
    }
    if tile != Tile::F32 && !m.a_ready {
        let grid = Grid::Elems(w.cols.div_ceil(4) as u32);
        r.push("to f16", Kernel::ToF16, &[("N", w.cols as f64)], &[(0, m.a), (1, m.a16)], grid);
    }
    let bufs = [(0, &w.words), (1, &w.meta), (2, a), (3, m.c), (4, m.vecs), (6, m.part)];
    match tile {
        Tile::Wide => {
            let split = [("KSPLIT", splits as f64)];
            r.push(m.label, kernel, &[&consts[..], &split].concat(), &bufs, grid);
            if splits > 1 {
                let consts = [&consts[4..], &split].concat();
                r.push(
                    "matmul sum",
                    Kernel::MatMulSum,
                    &consts,
                    &[(3, m.c), (4, m.vecs), (6, m.part)],
                    Grid::Elems(n / 4),
                );
            }
        }
        _ => r.push(m.label, kernel, &consts, &bufs[..5], grid),
    }
}
