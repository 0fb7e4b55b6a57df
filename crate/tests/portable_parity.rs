//! Whole-model parity with the reference (common/parity.rs) on the kernels browsers run: f32
//! activations, workgroup-memory reductions, and attention splits merged by the output
//! projection (no self-merging attention; the fixtures stay below the depth where `attn_combine`
//! takes over, which kernels.rs checks on its own).

mod common;

#[test]
fn browser_kernels_match_reference() {
    // This test binary is its own process, so the switches reach only its GPU.
    std::env::set_var("FERROLM_NO_SUBGROUPS", "1");
    std::env::set_var("FERROLM_NO_IDOT", "1");
    std::env::set_var("FERROLM_NO_FUSED_ATTENTION", "1");
    common::parity::check_model_parity(8);
}
