//! Every kernel as the device would compile it, for every combination of the adapter-dependent
//! variants (subgroup reductions, integer dot products, self-merging attention, matrix units,
//! 8-bit prefill and its workgroup layout: natively its packed-dot-product form; the subgroup-matrix form is Chromium's
//! dialect, which naga does not parse, and is checked in Chromium on the GPU machine),
//! parses and validates with naga here, including variants this machine's adapter does not
//! offer (lavapipe has no cooperative matrices; their results are checked on the GPU machine by
//! tests/kernels.rs, which runs whatever the adapter selects).

use ferrolm::gpu::{Kernel, Pipelines};

#[test]
fn every_kernel_variant_validates() {
    let mut checked = 0;
    for bits in 0..64u32 {
        // Bit 5: matmul_i8.wgsl's product rows 24 words apart in workgroup memory, else 16.
        let scratch_row = if bits & 32 != 0 { 24 } else { 16 };
        let p = Pipelines::new(bits & 1 != 0, bits & 2 != 0, bits & 4 != 0, bits & 8 != 0, bits & 16 != 0, scratch_row);
        for k in Kernel::ALL {
            let code = p.wgsl(k);
            let module = naga::front::wgsl::parse_str(&code).unwrap_or_else(|e| {
                panic!("{k:?} (variant bits {bits:06b}) does not parse:\n{}", e.emit_to_string(&code))
            });
            naga::valid::Validator::new(naga::valid::ValidationFlags::all(), naga::valid::Capabilities::all())
                .validate(&module)
                .unwrap_or_else(|e| panic!("{k:?} (variant bits {bits:06b}) is invalid:\n{}", e.emit_to_string(&code)));
            checked += 1;
        }
    }
    assert_eq!(checked, 64 * Kernel::ALL.len());
}
