//! Whole-model parity with the reference (common/parity.rs) with the prefill matmuls of
//! quantized weights on 8-bit activations (matmul_i8.wgsl after quant_rows.wgsl): what Chromium
//! runs on 8-bit subgroup matrices, here with packed dot products, whose integer products are
//! the same. The kernel tests check the kernel; this checks that its rounding of the activations
//! (two bytes a value) keeps a real model's logits and greedy tokens.

mod common;

#[test]
fn i8_prefill_matches_reference() {
    // This test binary is its own process, so the switch reaches only its GPU.
    std::env::set_var("FERROLM_I8_PREFILL", "1");
    // The switch changes the prefill only: every case's prompt logits, and enough steps to read
    // the cache it wrote (the decode kernels are model_parity.rs's).
    common::parity::check_model_parity(4);
}
