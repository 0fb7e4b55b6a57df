//! Whole-model parity with the reference on the adapter's fastest kernels (common/parity.rs).

mod common;

#[test]
fn logits_and_greedy_tokens_match_reference() {
    common::parity::check_model_parity();
}
