//! The embedding and LM head: matrices streamed to the GPU in row chunks (never whole in memory),
//! kept as consecutive row ranges that each fit one storage binding. Most models need one range;
//! a wide vocabulary (Gemma's 262,144 rows) outgrows the 128 MiB that WebGPU guarantees, and
//! then the embedding lookup and the LM head run one dispatch per range (embed.wgsl ID0/ID1,
//! matvec.wgsl ROW0/WG0).

use super::weights::GpuMatrix;
use crate::error::{Error, Result};
use crate::gpu::Gpu;
use crate::weights::pack::Layout;

/// Ranges are whole multiples of this many rows, so half-precision rows of odd length never
/// share a word across two ranges.
const RANGE_ROWS: usize = 256;

pub struct StreamedMatrix {
    /// Row ranges in order; `parts[i]` holds rows `first_row(i) ..`.
    pub parts: Vec<GpuMatrix>,
    pub rows: usize,
    pub cols: usize,
    pub layout: Layout,
    pub bytes: u64,
}

/// One write: rows `first .. first + n` of the whole matrix, which go to `part` at its row `local`.
pub struct Chunk {
    pub part: usize,
    pub local: usize,
    pub first: usize,
    pub n: usize,
}

impl StreamedMatrix {
    /// Rows a range may hold under the adapter's binding limit (all of them when they fit).
    pub fn rows_per_range(gpu: &Gpu, label: &str, layout: Layout, (rows, cols): (usize, usize)) -> Result<usize> {
        let limit = gpu.limits.max_storage_buffer_binding_size.min(gpu.limits.max_buffer_size);
        // Words of one row (meta is at most 8 bytes a block, never more than the words).
        let row_bytes = (layout.words_for(cols * RANGE_ROWS) as u64 * 4).div_ceil(RANGE_ROWS as u64).max(1);
        if layout.words_for(rows * cols) as u64 * 4 <= limit {
            return Ok(rows.max(1));
        }
        let n = (limit / row_bytes) as usize / RANGE_ROWS * RANGE_ROWS;
        if n == 0 {
            return Err(Error::Limits(format!(
                "{label} needs {} MiB for {RANGE_ROWS} of its rows in one GPU buffer binding; the adapter allows {} MiB \
                 (maxStorageBufferBindingSize)",
                (row_bytes * RANGE_ROWS as u64) >> 20,
                limit >> 20
            )));
        }
        Ok(n)
    }

    pub(crate) fn alloc(
        gpu: &Gpu,
        label: &str,
        layout: Layout,
        meta16: bool,
        (rows, cols): (usize, usize),
    ) -> Result<StreamedMatrix> {
        let per = Self::rows_per_range(gpu, label, layout, (rows, cols))?;
        let mut parts = Vec::new();
        for first in (0..rows.max(1)).step_by(per) {
            let n = per.min(rows - first);
            let name = if per >= rows { label.to_string() } else { format!("{label}[{first}..{}]", first + n) };
            parts.push(GpuMatrix::alloc_streamed(gpu, &name, layout, meta16, (n, cols))?);
        }
        let bytes = parts.iter().map(|p| p.bytes).sum();
        Ok(StreamedMatrix { parts, rows, cols, layout, bytes })
    }

    /// Each range with the index of its first row.
    pub fn ranges(&self) -> impl Iterator<Item = (usize, &GpuMatrix)> {
        self.parts.iter().scan(0, |first, p| {
            let r = (*first, p);
            *first += p.rows;
            Some(r)
        })
    }

    /// The writes that fill the matrix from a file whose rows take `row_bytes` each, at most
    /// `max_bytes` a read, none crossing a range.
    pub fn chunks(&self, row_bytes: u64, max_bytes: u64) -> Vec<Chunk> {
        let mut out = Vec::new();
        for (part, (first, m)) in self.ranges().enumerate() {
            let step = m.rows_per_write(row_bytes, max_bytes);
            let mut local = 0;
            while local < m.rows {
                let n = step.min(m.rows - local);
                out.push(Chunk { part, local, first: first + local, n });
                local += n;
            }
        }
        out
    }
}
