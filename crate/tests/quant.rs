//! CPU dequantizer vs gguf-py fixtures, GPU packing vs the dequantizer, and the reference quantizers.
//! Random cases draw a fresh seed each run (printed); rerun one with `FERROLM_SEED=<seed>`.

use ferrolm::weights::pack::{pack, Layout};
use ferrolm::weights::quant::{dequantize, quantize, random_blocks, GgmlType, SplitMix64};
use ferrolm::Error;
use std::path::PathBuf;

const SUPPORTED: [GgmlType; 19] = {
    use GgmlType::*;
    [
        F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, MXFP4, TQ1_0,
        TQ2_0, I2_S,
    ]
};

fn seed() -> u64 {
    let s = match std::env::var("FERROLM_SEED") {
        Ok(v) => v.trim().parse().expect("FERROLM_SEED must be a u64"),
        Err(_) => std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64,
    };
    eprintln!("seed {s} (rerun with FERROLM_SEED={s})");
    s
}

fn fixture(name: &str) -> serde_json::Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/quant").join(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap()
}

fn hex(v: &serde_json::Value) -> Vec<u8> {
    let s = v.as_str().unwrap().as_bytes();
    s.chunks(2).map(|c| u8::from_str_radix(std::str::from_utf8(c).unwrap(), 16).unwrap()).collect()
}

fn f32s(bytes: &[u8]) -> Vec<f32> {
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn ty_of(fx: &serde_json::Value) -> GgmlType {
    let ty = GgmlType::from_u32(fx["type_id"].as_u64().unwrap() as u32).unwrap();
    assert_eq!(ty.name(), fx["type"].as_str().unwrap());
    ty
}

#[test]
fn type_table_is_consistent() {
    let supported: Vec<GgmlType> = GgmlType::all().filter(|t| t.is_supported()).collect();
    let mut want = SUPPORTED.to_vec();
    want.sort_by_key(|t| t.id());
    assert_eq!(supported, want);
    for t in GgmlType::all() {
        assert_eq!(GgmlType::from_u32(t.id()), Some(t));
        assert_eq!(GgmlType::from_name(&t.name().to_ascii_lowercase()), Some(t));
        assert_eq!(Layout::for_type(t).is_some(), t.is_supported(), "{}", t.name());
        assert_eq!(t.unsupported_hint().is_empty(), t.is_supported(), "{}", t.name());
    }
    assert_eq!(GgmlType::from_u32(4), None);
}

#[test]
fn dequantize_matches_gguf_py_bit_exact() {
    // gguf-py knows no I2_S (bitnet.cpp's type): `i2s_layout` below checks it.
    for ty in SUPPORTED.into_iter().filter(|t| *t != GgmlType::I2_S) {
        let fx = fixture(&format!("{}.json", ty.name()));
        assert_eq!(ty_of(&fx), ty);
        let raw = hex(&fx["raw_hex"]);
        let want = f32s(&hex(&fx["expected_hex"]));
        assert_eq!(want.len() as u64, fx["n_elements"].as_u64().unwrap());
        let mut got = vec![0f32; want.len()];
        dequantize(ty, &raw, &mut got).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.to_bits(), w.to_bits(), "{} element {i}: got {g:e}, gguf-py {w:e}", ty.name());
        }
    }
}

#[test]
fn quantize_matches_gguf_py_bytes() {
    for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1] {
        let fx = fixture(&format!("quantize_{}.json", ty.name()));
        assert_eq!(ty_of(&fx), ty);
        let x = f32s(&hex(&fx["input_hex"]));
        let want = hex(&fx["expected_hex"]);
        let got = quantize(ty, &x).unwrap();
        assert_eq!(got.len(), want.len());
        let ts = ty.type_size() as usize;
        for (b, (g, w)) in got.chunks(ts).zip(want.chunks(ts)).enumerate() {
            assert_eq!(g, w, "{} block {b} differs from gguf-py", ty.name());
        }
    }
}

/// Compares pack -> Packed::dequantize (and a fused-multiply-add decode, as a GPU may do) with the
/// CPU reference. Everything must agree in every bit, except Q4_0's documented signed zero.
fn check_pack(ty: GgmlType, rows: usize, cols: usize, rng: &mut SplitMix64) -> usize {
    let n = rows * cols;
    let raw = random_blocks(ty, n / ty.block_size() as usize, rng).unwrap();
    let mut want = vec![0f32; n];
    dequantize(ty, &raw, &mut want).unwrap();
    assert!(want.iter().all(|v| v.is_finite()), "random_blocks({}) decodes to non-finite values", ty.name());
    let p = pack(ty, rows, cols, &raw).unwrap();
    assert_eq!(Some(p.layout), Layout::for_type(ty));
    assert_eq!((p.rows, p.cols), (rows, cols));
    assert_eq!(p.words.len(), p.layout.words_for(n));
    assert_eq!(p.gpu_bytes(), 4 * (p.words.len() + p.meta.len()));
    let got = p.dequantize();
    assert_eq!(got.len(), n);
    let mut signed_zeros = 0;
    for i in 0..n {
        let (g, w) = (got[i], want[i]);
        let fused = match p.layout {
            Layout::Q4 { block } | Layout::Q8 { block } => {
                let b = i / block as usize;
                let (scale, offset) = (p.meta[2 * b], p.meta[2 * b + 1]);
                // Recover q from the unfused value's inputs rather than re-reading bits.
                let q = if let Layout::Q4 { .. } = p.layout {
                    ((p.words[i / 8] >> (4 * (i % 8))) & 0xF) as f32
                } else {
                    ((p.words[i / 4] >> (8 * (i % 4))) as u8 as i8) as f32
                };
                scale.mul_add(q, offset)
            }
            _ => g,
        };
        let ctx = || format!("{} {rows}x{cols} element {i} (row {}, col {})", ty.name(), i / cols, i % cols);
        if g.to_bits() != w.to_bits() {
            assert!(ty == GgmlType::Q4_0 && g == 0.0 && w == 0.0, "{}: packed {g:e}, reference {w:e}", ctx());
            signed_zeros += 1;
        }
        assert_eq!(fused.to_bits(), g.to_bits(), "{}: fused {fused:e}, unfused {g:e}", ctx());
    }
    for r in [0, rows - 1] {
        assert_eq!(p.row(r), got[r * cols..(r + 1) * cols].to_vec());
    }
    // f16 metadata: taken exactly when the block scales are f16 (`f16_scales`), and then it
    // holds the very same (scale, offset) bits.
    let m16 = p.meta_f16();
    let want_m16 = ty.f16_scales();
    if want_m16 || m16.is_some() {
        let m16 = m16.unwrap_or_else(|| panic!("{}: no exact f16 metadata", ty.name()));
        assert_eq!(m16.len() * 2, p.meta.len());
        for (b, w) in m16.iter().enumerate() {
            let h = |x: u32| half::f16::from_bits(x as u16).to_f32().to_bits();
            assert_eq!((h(w & 0xffff), h(w >> 16)), (p.meta[2 * b].to_bits(), p.meta[2 * b + 1].to_bits()));
        }
    }
    signed_zeros
}

#[test]
fn pack_matches_dequantize_random() {
    let mut rng = SplitMix64(seed());
    for ty in SUPPORTED.into_iter().filter(|t| *t != GgmlType::I2_S) {
        let bs = ty.block_size() as usize;
        let col_blocks: &[usize] = if bs == 1 { &[1, 7, 64, 255] } else { &[1, 2, 5] };
        let mut signed_zeros = 0;
        for &k in col_blocks {
            for rows in [1, 3, 8] {
                signed_zeros += check_pack(ty, rows, k * bs.max(1), &mut rng);
            }
        }
        eprintln!("{}: bit-exact; {signed_zeros} elements differ only in the sign of zero", ty.name());
    }
}

/// bitnet.cpp's I2_S: 128-element blocks of 32 bytes, byte g holding elements g, g + 32,
/// g + 64 and g + 96 in bits 7-6, 5-4, 3-2 and 1-0 as codes value + 1, then the tensor's f32
/// scale in a 32-byte trailer. Built here element by element from that description.
#[test]
fn i2s_layout() {
    let (rows, cols, scale) = (3usize, 256usize, 0.375f32);
    let value = |i: usize| [-1i8, 0, 1][(i * 7 + i / 5) % 3];
    let n = rows * cols;
    let mut raw = vec![0u8; n / 4 + 32];
    for i in 0..n {
        let (block, pos) = (i / 128, i % 128);
        raw[block * 32 + pos % 32] |= ((value(i) + 1) as u8) << (6 - 2 * (pos / 32));
    }
    raw[n / 4..n / 4 + 4].copy_from_slice(&scale.to_le_bytes());
    assert_eq!(GgmlType::I2_S.bytes_for(n as u64), Some(raw.len() as u64));
    let mut got = vec![0f32; n];
    dequantize(GgmlType::I2_S, &raw, &mut got).unwrap();
    for (i, g) in got.iter().enumerate() {
        assert_eq!(*g, value(i) as f32 * scale, "element {i}");
    }
    let p = pack(GgmlType::I2_S, rows, cols, &raw).unwrap();
    assert_eq!(p.layout, Layout::Q8 { block: 32 });
    assert_eq!(p.dequantize(), got);
    // The embedding and LM head path reads whole tensors only (the scale is at the end).
    assert!(pack(GgmlType::I2_S, rows, cols, &raw[..raw.len() - 1]).is_err());
}

#[test]
fn odd_f16_count_pads_last_word() {
    let x = [1.5f32, -2.0, 3.25];
    for ty in [GgmlType::F16, GgmlType::BF16] {
        let p = pack(ty, 1, 3, &quantize(ty, &x).unwrap()).unwrap();
        assert_eq!(p.words.len(), 2);
        assert_eq!(p.words[1] >> 16, 0);
        assert_eq!(p.dequantize(), x.to_vec());
    }
}

/// Q4_0's `scale*q + offset` = `d*q + (-8d)` against ggml's `d*(q-8)`, for every finite f16 d.
#[test]
fn q4_0_affine_form_exhaustive() {
    let mut zero_sign = 0;
    for bits in 0..=u16::MAX {
        let d = half::f16::from_bits(bits).to_f32();
        if !d.is_finite() {
            continue;
        }
        for q in 0..16 {
            let want = d * (q - 8) as f32;
            let got = d * q as f32 + -8.0 * d;
            let fused = d.mul_add(q as f32, -8.0 * d);
            assert_eq!(got, want, "d={d:e} q={q}");
            assert_eq!(fused.to_bits(), got.to_bits(), "d={d:e} q={q}");
            if got.to_bits() != want.to_bits() {
                // Exact cancellation rounds to +0, while ggml's product keeps the sign of d*(q-8).
                assert!(want == 0.0 && (q == 8 || d == 0.0), "d={d:e} q={q}");
                zero_sign += 1;
            }
        }
    }
    eprintln!("Q4_0: equal for all f16 d and q; {zero_sign} cases give +0 where ggml gives -0 (q=8 with d<0, or d=±0)");
}

fn is_quant<T>(r: Result<T, Error>) -> bool {
    matches!(r, Err(Error::Quant(_)))
}

#[test]
fn bad_inputs_are_errors() {
    let raw = vec![0u8; 18 * 4];
    assert!(pack(GgmlType::Q4_0, 2, 64, &raw).is_ok());
    assert!(is_quant(pack(GgmlType::Q4_0, 2, 64, &raw[..raw.len() - 1])));
    assert!(is_quant(pack(GgmlType::Q4_0, 3, 64, &raw)));
    assert!(is_quant(pack(GgmlType::Q4_0, 4, 16, &raw)), "cols not a multiple of 32");
    assert!(is_quant(pack(GgmlType::Q4_K, 1, 128, &[0u8; 72])), "cols not a multiple of 256");
    assert!(is_quant(pack(GgmlType::IQ2_XXS, 1, 256, &[0u8; 66])), "unsupported type");
    assert!(is_quant(pack(GgmlType::F32, usize::MAX, 2, &[])), "overflow");
    let msg = pack(GgmlType::Q4_0, 4, 16, &raw).unwrap_err().to_string();
    assert!(msg.contains("Q4_0") && msg.contains("16"), "{msg}");

    let mut out = vec![0f32; 32];
    assert!(is_quant(dequantize(GgmlType::Q8_0, &[0u8; 33], &mut out)));
    assert!(is_quant(dequantize(GgmlType::Q8_0, &[0u8; 34], &mut out[..31])));
    assert!(is_quant(dequantize(GgmlType::IQ4_NL, &[0u8; 17], &mut out)));
    assert!(is_quant(dequantize(GgmlType::IQ3_S, &[0u8; 110], &mut vec![0f32; 256])));
    assert!(is_quant(dequantize(GgmlType::Q8_K, &[0u8; 292], &mut vec![0f32; 256])));
    assert!(is_quant(quantize(GgmlType::Q4_0, &[0.0; 31])));
    assert!(is_quant(quantize(GgmlType::Q4_K, &[0.0; 256])));
}

/// Per-element error of quantize -> dequantize against each format's rounding bound; the f16
/// rounding of d (and of Q4_1's min) adds up to |q| * ulp(d) on top of half a quant step.
#[test]
fn quantize_error_bounds() {
    let mut rng = SplitMix64(seed());
    for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1] {
        let n = 32 * 64;
        let x: Vec<f32> = (0..n).map(|i| rng.next_normal(0.02 * (1 + i / 32) as f32)).collect();
        let q = quantize(ty, &x).unwrap();
        assert_eq!(q.len() as u64, ty.bytes_for(n as u64).unwrap());
        let mut y = vec![0f32; n];
        dequantize(ty, &q, &mut y).unwrap();
        let mut worst = 0f32;
        for (b, (xb, yb)) in x.chunks(32).zip(y.chunks(32)).enumerate() {
            let amax = xb.iter().fold(0f32, |a, v| a.max(v.abs()));
            let (lo, hi) = xb.iter().fold((f32::MAX, f32::MIN), |(l, h), &v| (l.min(v), h.max(v)));
            let eps = 2f32.powi(-10);
            // Q4_0 maps the largest magnitude to -8d, so the opposite extreme may clamp at 7d: one step.
            let bound = match ty {
                GgmlType::Q8_0 => amax / 127.0 * (0.5 + 127.0 * eps),
                GgmlType::Q4_0 => amax / 8.0 * (1.0 + 8.0 * eps),
                _ => (hi - lo) / 15.0 * (0.5 + 15.0 * eps) + lo.abs() * eps,
            } * 1.0001;
            for (j, (a, c)) in xb.iter().zip(yb).enumerate() {
                let err = (a - c).abs();
                assert!(err <= bound, "{} block {b} element {j}: {a} -> {c}, error {err:e} > {bound:e}", ty.name());
                worst = worst.max(err / bound);
            }
        }
        eprintln!("{}: worst error {:.3} of the bound", ty.name(), worst);
    }
}

/// Quantizing at load (`--quantize`) refuses what the block types cannot hold: a NaN became a
/// finite quant, and a value past the f16 scale's range an infinite scale (then reported as a
/// non-finite value of the file).
#[test]
fn quantize_refuses_values_it_cannot_hold() {
    for ty in [GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::F16, GgmlType::BF16] {
        for bad in [f32::NAN, f32::INFINITY] {
            let mut x = vec![0.5f32; 64];
            x[40] = bad;
            let e = quantize(ty, &x).expect_err("a non-finite value was quantized").to_string();
            assert!(e.contains("value 40 is not finite"), "{ty:?}: {e}");
        }
        assert!(quantize(ty, &[0.5f32; 64]).is_ok());
    }
    for (ty, big, fits) in [
        (GgmlType::Q8_0, 1e10f32, 65504.0 * 100.0),
        (GgmlType::Q4_0, 1e7, 65504.0 * 7.0),
        (GgmlType::Q4_1, 7e4, 6e4),
        (GgmlType::F16, 7e4, 6e4),
    ] {
        let mut x = vec![0.5f32; 64];
        x[3] = big;
        let e = quantize(ty, &x).expect_err("a value past the scale's range was quantized").to_string();
        assert!(e.contains("value 3") && e.contains("too large"), "{ty:?}: {e}");
        x[3] = fits;
        let q = quantize(ty, &x).unwrap();
        let mut back = vec![0f32; 64];
        dequantize(ty, &q, &mut back).unwrap();
        assert!(back.iter().all(|v| v.is_finite()), "{ty:?}: {back:?}");
    }
}
