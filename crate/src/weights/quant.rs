//! ggml tensor types: block geometry, and a CPU reference dequantizer for every type we load.
//! The CPU path is the oracle the GPU kernels are tested against, so it follows ggml-quants.c
//! literally rather than cleverly.

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
            Self::F32 | Self::F16 | Self::BF16 | Self::Q8_0 | Self::Q4_0 | Self::Q4_1 | Self::Q4_K | Self::Q5_K | Self::Q6_K
        )
    }

    /// Bytes for `n` elements, `None` if `n` is not a whole number of blocks or overflows.
    pub fn bytes_for(self, n: u64) -> Option<u64> {
        if n % self.block_size() != 0 {
            return None;
        }
        (n / self.block_size()).checked_mul(self.type_size())
    }
}

/// Dequantize `data` (whole blocks of `ty`) into `out` (exactly the element count).
pub fn dequantize(ty: GgmlType, data: &[u8], out: &mut [f32]) -> Result<()> {
    let need = ty.bytes_for(out.len() as u64).ok_or_else(|| {
        Error::Quant(format!("{} elements is not a whole number of {} blocks", out.len(), ty.name()))
    })?;
    if need != data.len() as u64 {
        return Err(Error::Quant(format!(
            "{} data for {} elements must be {need} bytes, got {}",
            ty.name(),
            out.len(),
            data.len()
        )));
    }
    if !ty.is_supported() {
        return Err(Error::Quant(format!("tensor type {} is not supported", ty.name())));
    }
    Err(Error::Quant(format!("dequantize {} not written yet", ty.name())))
}
