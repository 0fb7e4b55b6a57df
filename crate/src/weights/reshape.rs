//! Row-level surgery on packed matrices at load time: fusing matrices that one kernel reads
//! together ([q; k; v], [gate; up]), converting between layouts so fused parts agree, and
//! reordering rows (NeoX-style rotary halves into adjacent pairs).
//! Every operation is exact: values decode to the same f32 before and after.

use super::pack::{Layout, Packed};
use crate::error::{Error, Result};

/// The layout that can hold both exactly: the same layout, else Q8{16} for two quantized
/// layouts (4- and 8-bit quants both fit an i8 with a per-16 scale), else F32.
pub fn common_layout(a: Layout, b: Layout) -> Layout {
    let quant = |l: Layout| matches!(l, Layout::Q4 { .. } | Layout::Q8 { .. });
    if a == b {
        a
    } else if quant(a) && quant(b) {
        Layout::Q8 { block: 16 }
    } else {
        Layout::F32
    }
}

fn words_per_row(p: &Packed) -> usize {
    p.layout.words_for(p.cols)
}

fn meta_per_row(p: &Packed) -> usize {
    match p.layout {
        Layout::Q4 { .. } | Layout::Q8 { .. } => 2 * p.cols / p.layout.block(),
        _ => 0,
    }
}

/// Re-express `p` in layout `to` (which must be `common_layout(p.layout, to)`).
pub fn convert(p: &Packed, to: Layout) -> Result<Packed> {
    if p.layout == to {
        return Ok(p.clone());
    }
    match (p.layout, to) {
        (_, Layout::F32) => Ok(Packed {
            layout: Layout::F32,
            rows: p.rows,
            cols: p.cols,
            words: p.dequantize().iter().map(|v| v.to_bits()).collect(),
            meta: vec![],
        }),
        (Layout::Q4 { block } | Layout::Q8 { block }, Layout::Q8 { block: 16 }) if block % 16 == 0 => {
            let n = p.rows * p.cols;
            let mut q = Vec::with_capacity(n);
            for i in 0..n {
                q.push(match p.layout {
                    Layout::Q4 { .. } => ((p.words[i / 8] >> (4 * (i % 8))) & 0xF) as u8,
                    _ => (p.words[i / 4] >> (8 * (i % 4))) as u8,
                });
            }
            let words = q.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
            let split = block as usize / 16;
            let meta =
                p.meta.chunks_exact(2).flat_map(|sm| std::iter::repeat_n([sm[0], sm[1]], split).flatten()).collect();
            Ok(Packed { layout: to, rows: p.rows, cols: p.cols, words, meta })
        }
        (from, to) => Err(Error::Quant(format!("cannot convert layout {from:?} to {to:?} exactly"))),
    }
}

/// Stack matrices with the same column count into one (rows of the first, then the second, ...),
/// converting to a common layout when they differ.
pub fn concat_rows(parts: &[Packed]) -> Result<Packed> {
    let first = parts.first().ok_or_else(|| Error::Quant("nothing to concatenate".into()))?;
    if let Some(p) = parts.iter().find(|p| p.cols != first.cols) {
        return Err(Error::Model(format!("cannot fuse matrices with {} and {} columns", first.cols, p.cols)));
    }
    let layout = parts.iter().skip(1).fold(first.layout, |l, p| common_layout(l, p.layout));
    let mut out = Packed { layout, rows: 0, cols: first.cols, words: Vec::new(), meta: Vec::new() };
    for p in parts {
        let p = convert(p, layout)?;
        out.rows += p.rows;
        out.words.extend_from_slice(&p.words);
        out.meta.extend_from_slice(&p.meta);
    }
    Ok(out)
}

/// New row i = old row perm[i].
pub fn permute_rows(p: &Packed, perm: &[usize]) -> Packed {
    let (w, m) = (words_per_row(p), meta_per_row(p));
    let mut out = Packed {
        layout: p.layout,
        rows: p.rows,
        cols: p.cols,
        words: Vec::with_capacity(p.words.len()),
        meta: Vec::with_capacity(p.meta.len()),
    };
    for &r in perm {
        out.words.extend_from_slice(&p.words[r * w..(r + 1) * w]);
        out.meta.extend_from_slice(&p.meta[r * m..(r + 1) * m]);
    }
    out
}

/// The row order that turns NeoX rotary halves (i, i + rot/2) of each head into adjacent pairs
/// (2i, 2i + 1); dimensions past `rot` keep their place.
pub fn neox_to_pairs(n_heads: usize, head_dim: usize, rot: usize) -> Vec<usize> {
    let mut perm = Vec::with_capacity(n_heads * head_dim);
    for h in 0..n_heads {
        let base = h * head_dim;
        for i in 0..rot / 2 {
            perm.push(base + i);
            perm.push(base + i + rot / 2);
        }
        perm.extend(base + rot..base + head_dim);
    }
    perm
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::pack::pack;
    use crate::weights::quant::{random_blocks, GgmlType, SplitMix64};

    fn packed(ty: GgmlType, rows: usize, cols: usize, seed: u64) -> Packed {
        let blocks = rows * cols / ty.block_size() as usize;
        let raw = random_blocks(ty, blocks, &mut SplitMix64(seed)).unwrap();
        pack(ty, rows, cols, &raw).unwrap()
    }

    #[test]
    fn concat_mixed_quant_layouts_is_exact() {
        let a = packed(GgmlType::Q4_1, 3, 256, 1);
        let b = packed(GgmlType::Q6_K, 2, 256, 2);
        let c = packed(GgmlType::Q8_0, 1, 256, 3);
        let f = concat_rows(&[a.clone(), b.clone(), c.clone()]).unwrap();
        assert_eq!(f.layout, Layout::Q8 { block: 16 });
        let want: Vec<f32> = [a.dequantize(), b.dequantize(), c.dequantize()].concat();
        let got = f.dequantize();
        assert!(got.iter().zip(&want).all(|(g, w)| g.to_bits() == w.to_bits() || g == w));
    }

    #[test]
    fn concat_float_and_quant_goes_f32() {
        let a = packed(GgmlType::F16, 2, 64, 4);
        let b = packed(GgmlType::Q4_0, 2, 64, 5);
        let f = concat_rows(&[a.clone(), b.clone()]).unwrap();
        assert_eq!(f.layout, Layout::F32);
        assert_eq!(f.dequantize(), [a.dequantize(), b.dequantize()].concat());
    }

    #[test]
    fn permutation_moves_whole_rows() {
        let a = packed(GgmlType::Q4_K, 8, 256, 6);
        let perm = neox_to_pairs(2, 4, 4);
        assert_eq!(perm, vec![0, 2, 1, 3, 4, 6, 5, 7]);
        let p = permute_rows(&a, &perm);
        for (i, &r) in perm.iter().enumerate() {
            assert_eq!(p.row(i), a.row(r));
        }
        assert_eq!(neox_to_pairs(1, 6, 4), vec![0, 2, 1, 3, 4, 5]);
    }
}
