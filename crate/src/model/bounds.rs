//! What the numbers in a model file may be. Both config readers (GGUF metadata, config.json)
//! check every number as they read it, before anything is sized from it, so a hostile or broken
//! file ends in an error naming the key and the allowed range, never in a huge allocation, a
//! division by zero or a panic. The ranges are generous (every released model of the supported
//! families fits well inside) and the kernels' own limits are checked later
//! (`ModelConfig::validate`).

use crate::error::{Error, Result};

/// An inclusive range of integers.
pub type Ints = (u64, u64);

pub const LAYERS: Ints = (1, 1024);
pub const HIDDEN: Ints = (8, 1 << 16);
pub const HEADS: Ints = (1, 1024);
pub const HEAD_DIM: Ints = (8, 1024);
pub const FFN: Ints = (8, 1 << 20);
pub const VOCAB: Ints = (1, 1 << 22);
/// Positions: training context, sliding windows, rope's original context.
pub const POSITIONS: Ints = (1, 1 << 24);
pub const WINDOW: Ints = (0, 1 << 24);
/// Layers per sliding-window period (Gemma 3), and the first sliding layer (Qwen2).
pub const PATTERN: Ints = (1, 1024);
/// Taps of a linear-attention layer's causal convolution.
pub const CONV: Ints = (1, 16);
/// Rotated dimensions of a head: every supported family rotates some (0 would drop positions).
pub const ROPE_DIM: Ints = (2, 1024);

/// `v` of `key` as a count inside `range`.
pub fn int(file: &str, key: &str, v: u64, range: Ints) -> Result<usize> {
    if v < range.0 || v > range.1 {
        return Err(Error::Model(format!("{file}: {key} = {v} is outside {}..={}", range.0, range.1)));
    }
    Ok(v as usize)
}

/// A real number that must be finite and inside (lo, hi] or [lo, hi] (`lo_open`).
pub fn real(file: &str, key: &str, v: f64, lo: f64, hi: f64, lo_open: bool) -> Result<f64> {
    let above = if lo_open { v > lo } else { v >= lo };
    if !(v.is_finite() && above && v <= hi) {
        let open = if lo_open { "(" } else { "[" };
        return Err(Error::Model(format!("{file}: {key} = {} is outside {open}{}, {}]", num(v), num(lo), num(hi))));
    }
    Ok(v)
}

/// Plain for everyday magnitudes, scientific beyond.
fn num(v: f64) -> String {
    if v != 0.0 && v.is_finite() && !(1e-4..1e6).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// A rotary base or scaling factor: finite and positive (and not astronomically large).
pub fn positive(file: &str, key: &str, v: f64) -> Result<f64> {
    real(file, key, v, 0.0, 1e15, true)
}

/// A soft-capping value or similar: finite and not negative (0 means off).
pub fn non_negative(file: &str, key: &str, v: f64) -> Result<f64> {
    real(file, key, v, 0.0, 1e15, false)
}

/// A share in (0, 1] (partial_rotary_factor).
pub fn fraction(file: &str, key: &str, v: f64) -> Result<f64> {
    real(file, key, v, 0.0, 1.0, true)
}

/// RMS norm epsilon.
pub fn epsilon(file: &str, key: &str, v: f64) -> Result<f64> {
    real(file, key, v, 0.0, 1.0, false)
}
