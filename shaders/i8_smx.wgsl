enable subgroups;
enable chromium_experimental_subgroup_matrix;
diagnostic(off, chromium.subgroup_matrix_uniformity);
// matmul_i8.wgsl's block products on Chromium's 8-bit subgroup matrices (browsers only: naga
// does not know the extension; i8_dot.wgsl is the same products for the kernel tests). The
// subgroup's 32 tokens x 32 rows of block j: two 16x32 matrices of A (row-major, K along the
// row), coarse and fine planes each, times two 32x16 of W (column-major: a weight row is a
// column); each product 254 (c . w) + f . w stored row-major to its 16 rows of TS words in
// `scratch`. Offsets and strides count the arrays' i32 words (four bytes each). The offsets vary by subgroup, which the extension's uniformity check rejects
// although every invocation of a subgroup agrees on them: hence the diagnostic.
fn products(sg_in: u32, lane: u32, sm_in: u32, sn_in: u32, j_in: u32) {
    // Ranges stated for the browser's bounds checks of the matrix loads and stores (see put_a).
    let sg = min(sg_in, 3u);
    let sm = min(sm_in, 32u);
    let sn = min(sn_in, 32u);
    let j = min(j_in, KB - 1u);
    let k = j * 16u;
    let c0 = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>, row_major>(&a_sh, sm * RSA + k, RSA);
    let c1 = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>, row_major>(&a_sh, (sm + 16u) * RSA + k, RSA);
    let f0 = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>, row_major>(&a_sh, sm * RSA + k + 8u, RSA);
    let f1 = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>, row_major>(&a_sh, (sm + 16u) * RSA + k + 8u, RSA);
    let r0 = subgroupMatrixLoad<subgroup_matrix_right<i8, 16, 32>, col_major>(&w_sh, sn * RS + j * 8u, RS);
    let r1 = subgroupMatrixLoad<subgroup_matrix_right<i8, 16, 32>, col_major>(&w_sh, (sn + 16u) * RS + j * 8u, RS);
    let z = subgroup_matrix_result<i32, 16, 16>();
    let o = sg * 4u * TILE;
    subgroupMatrixStore<row_major>(&scratch, o, both(c0, f0, r0, z), TS);
    subgroupMatrixStore<row_major>(&scratch, o + TILE, both(c0, f0, r1, z), TS);
    subgroupMatrixStore<row_major>(&scratch, o + 2u * TILE, both(c1, f1, r0, z), TS);
    subgroupMatrixStore<row_major>(&scratch, o + 3u * TILE, both(c1, f1, r1, z), TS);
}

// 254 (c . w) + f . w
fn both(c: subgroup_matrix_left<i8, 32, 16>, f: subgroup_matrix_left<i8, 32, 16>,
        w: subgroup_matrix_right<i8, 16, 32>, z: subgroup_matrix_result<i32, 16, 16>)
        -> subgroup_matrix_result<i32, 16, 16> {
    let coarse = subgroupMatrixScalarMultiply(subgroupMatrixMultiplyAccumulate(c, w, z), 254);
    return subgroupMatrixMultiplyAccumulate(f, w, coarse);
}
