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

/// A store to one component of a vector in workgroup or storage memory may be compiled as a
/// rewrite of the whole vector (gpuweb#2112: Metal and D3D do), so two invocations storing
/// different components of one vector race there, though never on Vulkan, where every test
/// here runs. Each such store in the kernels is listed with why no other invocation writes that
/// vector before the next barrier; a new one fails this test until it is looked at and listed.
#[test]
fn component_stores_are_reviewed() {
    const REVIEWED: &[(&str, &str, &str)] = &[
        ("attention.wgsl", "q_sh[qi][2u * half] = o.x;", "write_i8: the two halves in two rounds"),
        ("attention.wgsl", "q_sh[qi][2u * half + 1u] = o.y;", "write_i8: the two halves in two rounds"),
        ("attn_merge.wgsl", "r4_sh[tid].x = v;", "the invocation's own element"),
        ("attn_merge.wgsl", "r4_sh[tid].x = max(r4_sh[tid].x, r4_sh[tid + k].x);", "its own element"),
        ("attn_merge.wgsl", "r4_sh[tid].x += r4_sh[tid + k].x;", "its own element"),
    ];
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shaders");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        for line in std::fs::read_to_string(&path).unwrap().lines() {
            let code = line.split("//").next().unwrap().trim();
            if is_component_store(code) {
                found.push((name.clone(), code.to_string()));
            }
        }
    }
    let unreviewed: Vec<_> =
        found.iter().filter(|(f, c)| !REVIEWED.iter().any(|(rf, rc, _)| rf == f && rc == c)).collect();
    assert!(unreviewed.is_empty(), "component stores not reviewed for whole-vector rewrites: {unreviewed:#?}");
    // The list stays current, and a copy of a listed line elsewhere in its file needs a review
    // of its own: every entry names exactly one store in the kernels.
    for (f, c, why) in REVIEWED {
        let n = found.iter().filter(|(ff, cc)| ff == f && cc == c).count();
        assert!(n == 1, "{f}: `{c}` ({why}) occurs {n} times: list each store once, drop those gone");
    }
}

/// Whether a line of WGSL stores to a component of an indexed vector: `a[i].x = …`,
/// `a[i][j] += …` (not a comparison).
fn is_component_store(code: &str) -> bool {
    let b = code.as_bytes();
    let Some(eq) =
        (0..b.len()).find(|&i| b[i] == b'=' && b.get(i + 1) != Some(&b'=') && (i == 0 || !b"=!<>".contains(&b[i - 1])))
    else {
        return false;
    };
    let lhs = code[..eq].trim_end().trim_end_matches(['+', '-', '*', '/', '%', '&', '|', '^']).trim_end();
    if lhs.starts_with("let ") || lhs.starts_with("var ") || lhs.starts_with("const ") {
        return false;
    }
    // `…].x`, `…].xy` or `…][j]`: a component of an array element.
    let swizzle =
        lhs.rsplit_once("].").is_some_and(|(_, s)| !s.is_empty() && s.chars().all(|c| "xyzwrgba".contains(c)));
    swizzle || (lhs.ends_with(']') && lhs.contains("]["))
}
