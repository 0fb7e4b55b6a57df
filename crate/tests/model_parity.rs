//! Whole-model parity with the reference on the adapter's fastest kernels (common/parity.rs): the
//! default model, and a real llama.cpp Q4_K_M file whose narrow rows hold Q5_0 and Q8_0 fallback
//! tensors beside Q4_K and Q6_K and whose embedding needs more than one 128 MiB binding.

mod common;

#[test]
fn logits_and_greedy_tokens_match_reference() {
    common::parity::check_model_parity(common::parity::FULL_STEPS);
}

#[test]
fn real_q4_k_m_mix_matches_reference() {
    if let Some(path) = common::parity::gemma3_path() {
        // Every quant type's matmul (prefill) and matvec (decode) is in each case's first steps.
        common::parity::check_parity(path, common::parity::GEMMA3_Q4KM, 8);
    }
}
