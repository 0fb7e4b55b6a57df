// matmul_i8.wgsl's block products with packed 4x8-bit dot products: what i8_smx.wgsl computes on
// subgroup matrices (254 (c . w) + f . w), element by element, in the same layout of `scratch`
// (product p = 2 mi + ni, 16 rows of TS words). Adapters without the matrices run the kernel this way in the kernel tests,
// so everything around the three matrix operations is checked everywhere.
fn products(sg: u32, lane: u32, sm: u32, sn: u32, j: u32) {
    for (var p = 0u; p < 4u; p++) {
        for (var i = 0u; i < 8u; i++) {
            let e = lane + 32u * i;
            let m = sm + (p / 2u) * 16u + e / 16u;
            let n = sn + (p % 2u) * 16u + e % 16u;
            var c = 0;
            var f = 0;
            for (var w = 0u; w < 8u; w++) {
                let q = bitcast<u32>(w_sh[n * RS + j * 8u + w]);
                c += dot4I8Packed(bitcast<u32>(a_sh[m * RSA + j * 16u + w]), q);
                f += dot4I8Packed(bitcast<u32>(a_sh[m * RSA + j * 16u + 8u + w]), q);
            }
            scratch[(sg * 4u + p) * TILE + (e / 16u) * TS + e % 16u] = 254 * c + f;
        }
    }
}
